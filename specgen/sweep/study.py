"""The sweep's Optuna study: the sampler and pruner it asks with, and what counts toward the budget (the checked
plan, and what defines the study, are plan.py's).

Each worker thread (driver.py) has its own Study object: its sampler is made anew for each trial with `seed + n`,
n the trial's place among the trials that were not interrupted (`ordinal`), so a sweep draws the same values
whether it ran in one go or was resumed, and processes sharing a study do not draw the same values from one seed.
A grid keeps one shuffle (its seed's) and takes the n-th point of it when unvisited (pick_grid).
An interrupted trial (its sweep process gone) does not count toward the budget, and its values are queued again
(`retry`). Which sweeps may join a study, and which folder is whose, is membership.py's.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen.sweep import datafiles
from specgen.sweep import storage as stores
from specgen.sweep.membership import check_folder, folder_attr, refuse_another, upgraded_note
from specgen.sweep.plan import Plan
from specgen.sweep.spec import MedianPruner, Sweep

if TYPE_CHECKING:
    import optuna
    from optuna.samplers import BaseSampler
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial


def sweep_folder(given: Path) -> Path:
    """The sweep folder -o names, absolute (each trial's `--set checkpoint.dir=` and the study record it, and a
    relative checkpoint.dir would count from the spec's folder) and resolved: joined to the working directory only,
    `-o ../x` was recorded and printed as `/cwd/../x`, and `..` after a link is the link target's parent, as the file
    system reads it. The default folder (run_folder's) is resolved the same way. Plan.shown prints it as given."""
    return given.resolve()


def quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def _sampler(plan: Plan, seed: int) -> BaseSampler:
    import optuna

    if plan.sweep.sampler == "grid":
        from specgen.sweep.space import grid_space

        return optuna.samplers.GridSampler(grid_space(plan.params), seed=seed)
    if plan.sweep.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # constant_liar: trials still running count as bad guesses, so parallel workers spread out
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def pruner(sweep: Sweep) -> optuna.pruners.BasePruner:
    import optuna

    if sweep.pruner == "none":
        return optuna.pruners.NopPruner()
    settings = sweep.pruner if isinstance(sweep.pruner, MedianPruner) else MedianPruner(kind="median")
    return optuna.pruners.MedianPruner(n_startup_trials=settings.startup_trials, n_warmup_steps=settings.warmup_steps)


def seeded(plan: Plan) -> BaseSampler:
    from optuna.samplers import BaseSampler

    by_key = {p.key: p for p in plan.params}

    def on_grid(name: str, value: Any) -> Any:
        """A stepped float range's draw as its grid point (space.Param.on_grid): 0.3, not 0.30000000000000004."""
        return by_key[name].on_grid(value) if name in by_key else value

    class Seeded(BaseSampler):
        """The sweep's sampler made anew for each trial with seed + trial number (see the module's docstring)."""

        def __init__(self) -> None:
            self.inner = _sampler(plan, plan.sweep.seed)

        def before_trial(self, study: Any, trial: Any) -> None:
            n = ordinal(study.get_trials(deepcopy=False), trial.number)
            if plan.sweep.sampler == "grid":  # one grid (its seed's shuffle), the point picked by n: pick_grid
                pick_grid(self.inner, study, trial, n)
                return
            self.inner = _sampler(plan, plan.sweep.seed + n)
            self.inner.before_trial(study, trial)

        def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
            return self.inner.infer_relative_search_space(study, trial)

        def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
            drawn = self.inner.sample_relative(study, trial, search_space)
            return {name: on_grid(name, value) for name, value in drawn.items()}

        def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
            return on_grid(name, self.inner.sample_independent(study, trial, name, distribution))

        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            try:
                self.inner.after_trial(study, trial, state, values)
            except RuntimeError:  # GridSampler stops an optimize() loop when the grid is done: there is none here
                pass

    return Seeded()


def pick_grid(grid: Any, study: Any, trial: Any, n: int) -> None:
    """Give trial `trial` (its ordinal `n`) the grid point with id n (ids are places in the seed's shuffle of the
    grid), or, when that one was visited or is running, the (n mod count)-th of the unvisited ids, sorted.

    Optuna's GridSampler gives id = trial number, and past the grid's size a random unvisited one from the
    sampler's own generator: both depend on the process (a resumed sweep's numbers count the interrupted trials,
    and its generator starts over), so a resumed sweep drew other points than one run in one go. The ordinal and
    the study's unvisited ids are the same in both. Parallel workers have distinct ordinals, so two that see the
    same unvisited ids pick different ones. Optuna's grid_id and search_space attributes are written as its own
    before_trial writes them, so its sample_independent and after_trial (the grid is done) read them."""
    if "grid_id" in trial.system_attrs or "fixed_params" in trial.system_attrs:
        return  # a queued retry: its values are fixed (enqueue_trial)
    unvisited = sorted(grid._get_unvisited_grid_ids(study)) or list(range(len(grid._all_grids)))  # all done: any
    grid_id = n if n in unvisited else unvisited[n % len(unvisited)]
    study._storage.set_trial_system_attr(trial._trial_id, "search_space", grid._search_space)
    study._storage.set_trial_system_attr(trial._trial_id, "grid_id", grid_id)


def check_own_folder(plan: Plan) -> None:
    """The sweep folder's own study.db, when the study lives in another storage (--storage): a sweep that kept its
    study there ran in this folder (check_folder). Called once the folder is checked (not a link, which would be
    followed), before the storage opens."""
    own = stores.default_url(plan.folder)
    if _sqlite_file(plan.url) == plan.folder / "study.db" or not (plan.folder / "study.db").is_file():
        return
    check_folder(plan, stores.open_storage(own, retry), own)


def _sqlite_file(url: str) -> Path | None:
    """The file a `sqlite:///PATH` URL names, resolved (a relative PATH counts from the working directory)."""
    return Path(url.removeprefix("sqlite:///")).resolve() if url.startswith("sqlite:///") else None


def open_study(plan: Plan, storage: BaseStorage, say: Callable[[str], None] = lambda line: None) -> optuna.Study:
    """The study, made on first use with the sweep's definition and data; a study of another definition, or whose
    trials read other data, is refused. `say` gets a note when a study of an older specgen is made to record this
    spec or its data."""
    import optuna

    study = optuna.create_study(study_name=plan.study_name, storage=storage, direction=plan.sweep.direction,
                                load_if_exists=True, sampler=seeded(plan), pruner=pruner(plan.sweep))
    attrs = study.user_attrs
    refuse_another(plan, attrs)
    stored = attrs.get("specgen")
    if stored is None or "spec" not in stored:  # a new study, or one of an older specgen: record the whole spec
        study.set_user_attr("specgen", plan.definition())
    if attrs.get(datafiles.ATTR) is None:  # likewise the data its trials read
        study.set_user_attr(datafiles.ATTR, plan.data)
    study.set_user_attr(folder_attr(plan.folder), str(plan.folder))
    if stored is not None:
        note = upgraded_note(plan, "spec" not in stored, attrs.get(datafiles.ATTR) is None)
        if note:
            say(note)
    return study


def ordinal(trials: list[FrozenTrial], number: int) -> int:
    """The trial's place among the study's trials that were not interrupted: its number in a sweep that ran in one
    go, so a resumed sweep draws what an uninterrupted one would have."""
    lost = interrupted(trials)
    return sum(1 for t in trials if t.number < number and t.number not in lost)


def interrupted(trials: list[FrozenTrial]) -> set[int]:
    """The trials marked by a sweep (its process gone, or stopped), or failed by Optuna's heartbeat check and
    queued again."""
    return {t.number for t in trials if "interrupted" in t.user_attrs} | {
        t.user_attrs["retry_of"] for t in trials if "retry_of" in t.user_attrs}


def counted(trials: list[FrozenTrial]) -> tuple[int, list[FrozenTrial]]:
    """(finished trials that count toward the budget, running trials): an interrupted trial does not count."""
    from optuna.trial import TrialState

    lost = interrupted(trials)
    done = sum(1 for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
               or (t.state == TrialState.FAIL and t.number not in lost))
    return done, [t for t in trials if t.state == TrialState.RUNNING]


def retry(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue an interrupted trial's values again (also Optuna's callback for a trial whose heartbeat stopped)."""
    study.enqueue_trial(dict(trial.params), user_attrs={"retry_of": trial.number})
