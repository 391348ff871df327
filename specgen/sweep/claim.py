"""Taking a trial from the study with its owner attached, and deciding which running trials are lost.

Optuna's `study.ask()` commits a RUNNING trial, and an owner written after it is a second transaction: a sweep
killed between the two (kill -9, the OOM killer, power loss) would leave a running trial that names no process,
that no heartbeat is ever sent for, and that every later sweep would wait for. So a new trial is made with its
owner in one storage call (`create_new_trial` with a template trial, the call `ask()` itself makes without one),
and a queued trial (a retry, Optuna's WAITING) gets this process as its owner before it is claimed and again after
(another process may have written itself in between and lost the claim: its reap then sees a trial "it owns" that
it never started, which is lost, see `lost`).

A running trial is lost (its sweep gone) when:
- its owner is a process of this machine that no longer runs (stores.gone), or is this process while this
  process never started it (another process won the claim, then died before writing itself in);
- it has no owner and no heartbeat and started more than OWNERLESS seconds ago: no specgen sweep leaves a trial
  without an owner for longer than one storage write, so it was made by another program or an older specgen
  that died between its two writes. Its start is the clock of the machine that made it.
Trials whose heartbeat stopped (RDB storages) are Optuna's `fail_stale_trials`, after stores.GRACE.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from specgen.sweep import storage as stores

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

OWNERLESS = 5  # seconds a running trial may lack an owner (and a heartbeat) before it counts as lost: many
# storage writes (the window an older specgen left between its trial and its owner), and short, since a sweep waits it out


def claim(study: optuna.Study, me: dict[str, Any], distributions: dict[str, BaseDistribution]) -> optuna.Trial:
    """A running trial owned by `me`: a queued one (oldest first) when there is one, else a new one; its values
    drawn for `distributions` as `study.ask(distributions)` draws them."""
    import optuna
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import FrozenTrial, TrialState

    storage = study._storage  # the study's own (Optuna wraps an RDB storage in a cache that must see the new trial)
    trial_id = None
    for waiting in storage.get_all_trials(study._study_id, deepcopy=False, states=(TrialState.WAITING,)):
        try:
            storage.set_trial_user_attr(waiting._trial_id, "owner", me)
            if not storage.set_trial_state_values(waiting._trial_id, TrialState.RUNNING):
                continue  # another process claimed it first
            storage.set_trial_user_attr(waiting._trial_id, "owner", me)  # it may have written itself in meanwhile
        except UpdateFinishedTrialError:  # taken and finished, or failed as lost by another process's reap
            continue
        trial_id = waiting._trial_id
        break
    if trial_id is None:
        template = FrozenTrial(number=-1, state=TrialState.RUNNING, value=None, datetime_start=datetime.now(),
                               datetime_complete=None, params={}, distributions={}, user_attrs={"owner": me},
                               system_attrs={}, intermediate_values={}, trial_id=-1)
        trial_id = storage.create_new_trial(study._study_id, template_trial=template)
    study._thread_local.cached_all_trials = None  # as ask() does: the sampler reads the study afresh
    trial = optuna.Trial(study, trial_id)
    for name, distribution in distributions.items():
        trial._suggest(name, distribution)  # ask(fixed_distributions)'s own step; a queued trial's values kept
    return trial


def lost(trial: FrozenTrial, storage: BaseStorage, me: dict[str, Any], started: list[int]) -> str | None:
    """Why a running trial is lost (see the module's docstring), or None while it may still be running."""
    if trial.number in started:
        return None
    owner = trial.user_attrs.get("owner")
    if owner == me:
        return "its sweep process died while taking it"
    if stores.gone(owner):
        return "its sweep process is gone"
    if owner is not None or _beating(storage, trial._trial_id):
        return None
    begun = trial.datetime_start
    if begun is not None and (datetime.now() - begun).total_seconds() > OWNERLESS:
        return f"it has no owner and no heartbeat after {OWNERLESS} s"
    return None


def _beating(storage: BaseStorage, trial_id: int) -> bool:
    """Whether an RDB storage holds a heartbeat of the trial (another program's optimize() sends them); Optuna has
    no public read of it. The journal storage keeps none."""
    session = getattr(storage, "scoped_session", None)
    if session is None:
        return False
    try:
        from optuna.storages._rdb import models

        with session() as open_session:
            found = open_session.query(models.TrialHeartbeatModel).filter(
                models.TrialHeartbeatModel.trial_id == trial_id).first()
            return found is not None
    except Exception:  # another schema: count it as beating, so that a live trial is never taken for lost
        return True
