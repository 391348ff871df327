"""Taking a trial from the study with its owner attached, and deciding which running trials are lost.

Optuna's `study.ask()` commits a RUNNING trial, and an owner written after it is a second transaction: a sweep
killed between the two (kill -9, the OOM killer, power loss) would leave a running trial that names no process.
So a new trial is made with its owner in one storage call (`create_new_trial` with a template trial, the call
`ask()` itself makes without one). A queued trial (a retry, Optuna's WAITING) is claimed first, by the move to
RUNNING that exactly one process wins, and only the winner writes itself in as its owner: a process that lost the
claim never names itself (an owner written before the claim could land after another process had won it, and the
loser's reap would then fail the winner's live trial). Only a kill between those two writes leaves a trial without
an owner, a window of one storage write.

A running trial is lost (its sweep gone) when:
- its owner is a process of this machine that no longer runs (stores.gone), or is this process while this
  process never started it (it won the claim and then failed before running it);
- it has no owner and no heartbeat, and this process has seen it so for `ownerless_grace()` seconds (OWNERLESS, or
  the environment's SPECGEN_SWEEP_OWNERLESS): made by a program that writes no owner (an older specgen, a plain
  Optuna ask() or optimize() on the same study, whose heartbeats are opt-in) which may have died. The grace is long
  because such a trial may be live, and measured on this process's own clock because the trial's start is in the
  clock (and time zone) of the machine that made it.
Trials whose heartbeat stopped (RDB storages) are Optuna's `fail_stale_trials`, after stores.GRACE.
"""

from __future__ import annotations

import math
import os
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from specgen.errors import UsageError
from specgen.sweep import storage as stores

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

OWNERLESS = 600.0  # seconds a running trial may lack an owner and a heartbeat before a sweep counts it as lost:
# long, since another program's live trial looks the same (its trials may run for minutes), and the user is told
OWNERLESS_VARIABLE = "SPECGEN_SWEEP_OWNERLESS"  # sets that grace (seconds), as the tests and an impatient user do


def ownerless_grace() -> float:
    """OWNERLESS, or the seconds the environment's SPECGEN_SWEEP_OWNERLESS gives (a bad value: one usage line)."""
    text = os.environ.get(OWNERLESS_VARIABLE)
    if text is None:
        return OWNERLESS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= 10**7:  # NaN too
        raise UsageError("sweep", f"{OWNERLESS_VARIABLE}: received {text[:40]!r}; expected seconds from 0 to "
                                  "10,000,000 (how long a running trial without an owner is waited for)")
    return seconds


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
            if not storage.set_trial_state_values(waiting._trial_id, TrialState.RUNNING):
                continue  # another process claimed it first: this one writes nothing on it
            storage.set_trial_user_attr(waiting._trial_id, "owner", me)  # won: the owner, one write later
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


def lost(trial: FrozenTrial, storage: BaseStorage, me: dict[str, Any], started: list[int],
         unowned: dict[int, float], grace: float) -> str | None:
    """Why a running trial is lost (see the module's docstring), or None while it may still be running.
    `unowned`: trial id -> when (time.monotonic) this process first saw it without an owner and a heartbeat."""
    if trial.number in started:
        return None
    owner = trial.user_attrs.get("owner")
    if owner == me:
        return "its sweep process failed while taking it"
    if stores.gone(owner):
        return "its sweep process is gone"
    if owner is not None or _beating(storage, trial._trial_id):
        unowned.pop(trial._trial_id, None)
        return None
    if time.monotonic() - unowned.setdefault(trial._trial_id, time.monotonic()) >= grace:
        return f"it had no owner and no heartbeat for {grace:g} s"
    return None


def left(trial_id: int, unowned: dict[int, float], grace: float) -> float | None:
    """Seconds until an ownerless trial counts as lost (None: it has an owner or a heartbeat)."""
    first = unowned.get(trial_id)
    return None if first is None else max(0.0, grace - (time.monotonic() - first))


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
