"""Which sweeps may join a study, and which sweep folder belongs to which study.

A study is defined by every value of its resolved spec (with the sweep's own --sets) except those MAY_CHANGE lists,
and by the bytes of the data files its trials read (datafiles.py): another sweep is refused before anything is
written, with one line naming the first keys that differ. A sweep folder belongs to the study that opened it (a
user attribute per folder) or whose trials ran in it, since trial run folders (trial-NNNN) are named by their number
in their study. study.py opens the study once these checks pass.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgen.diagnostics import Diagnostic, SpecError
from specgen.sweep import datafiles
from specgen.sweep import storage as stores
from specgen.sweep.errors import SweepUsageError
from specgen.sweep.plan import MAY_CHANGE, Plan, study_keys

if TYPE_CHECKING:
    from optuna.storages import BaseStorage



MAX_SHOWN = 80  # characters of one value in a refusal (around the first difference when two values begin alike)
# A study's user attribute per sweep folder that opened it (the name ends in a digest of the folder, so processes
# recording theirs at once never overwrite each other's): `specgen report --sweep DIR --storage URL` finds the study
# DIR belongs to by it, also before DIR's first trial (each trial records its run folder too).
FOLDER_ATTR = "specgen_folder_"


def check_study(plan: Plan, storage: BaseStorage) -> None:
    """Refuse, before anything is written, a study of this name in `storage` that another sweep made."""
    try:
        study_id = storage.get_study_id_from_name(plan.study_name)
    except KeyError:  # no such study yet: this sweep makes it
        return
    refuse_another(plan, storage.get_study_user_attrs(study_id))


def check_folder(plan: Plan, storage: BaseStorage, url: str) -> None:
    """Refuse, before anything is written, a sweep folder that another study's sweep ran in (its study in `storage`,
    at `url`, recorded the folder, or its trials ran there): trial run folders are named by their number in their
    study (trial-NNNN), so a second study's trials would write into the first one's. This sweep's own study is no
    other study; in a storage other than the sweep's, a study of the same name is (another table of trials)."""
    others = [name for name in owners(storage, plan.folder) if name != plan.study_name or url != plan.url]
    if not others:
        return
    message = (f"the sweep folder {plan.shown(plan.folder)} belongs to the study '{others[0]}' in "
               f"{stores.masked(url)}: its trials' run folders (trial-NNNN) would be written over by the trials of "
               f"the study '{plan.study_name}' in {stores.masked(plan.url)} ({plan.loaded.display}'s 'name'); "
               "expected a folder of this study's own: -o NEW_FOLDER")
    raise SweepUsageError(message)


def owners(storage: BaseStorage, folder: Path) -> list[str]:
    """The studies in `storage` that a sweep in `folder` (resolved) opened, or whose trials ran in it."""
    key = folder_attr(folder)
    found = []
    for study in storage.get_all_studies():
        trials = storage.get_all_trials(study._study_id, deepcopy=False)  # Optuna's storage API names studies by id
        if key in study.user_attrs or any(Path(str(t.user_attrs.get("folder", ""))).parent == folder for t in trials):
            found.append(study.study_name)
    return found


def folder_attr(folder: Path) -> str:
    """The study's user attribute that records a sweep folder (FOLDER_ATTR)."""
    return FOLDER_ATTR + hashlib.sha256(str(folder).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def upgraded_note(plan: Plan, spec: bool, data: bool) -> str:
    """The note for a study of an older specgen that now records the spec (`spec`) or the data (`data`) too."""
    where = f"note: the study '{plan.study_name}' in {stores.masked(plan.url)} was made by an older specgen"
    if spec and data:  # said: from now on this spec, on these files, defines the study
        return (f"{where}, which recorded only its sweep section and --sets; it now records all of "
                f"{plan.loaded.display} (as resolved) and the data files it reads (each file's size and sha256), "
                "and refuses a sweep of any other spec, of this one edited, or on other data, from now on")
    if spec:
        # Said: from now on this spec defines the study, so the spec its trials trained, if another one with the
        # same sweep section, is refused by its own study.
        return (f"{where}, which recorded only its sweep section and --sets; it now records all of "
                f"{plan.loaded.display} (as resolved), and refuses a sweep of any other spec, or of this one edited, "
                "from now on")
    if data:  # the earlier trials' data cannot be checked any more: said, so a changed file is not taken for none
        return (f"{where}, which did not record the data its trials read; it now records the files "
                f"{plan.loaded.display} reads as they are now (each file's size and sha256), and refuses a sweep on "
                "other data from now on (whether its earlier trials read these bytes cannot be checked)")
    return ""


def refuse_another(plan: Plan, attrs: dict[str, Any]) -> None:
    """One line saying what differs between the study's sweep and this one (the spec, the --sets, then the data),
    and how to start a study of its own."""
    stored = attrs.get("specgen")
    if stored is None:
        return
    mine = plan.definition()
    at = None
    if stored.get("base") != mine["base"]:
        what = f"it was made with {_sets(stored.get('base') or [])}, and this sweep has {_sets(mine['base'])}"
        again, why = "the --sets the study was made with", "the trials of one spec"
    elif "spec" not in stored:  # an older specgen's study records the sweep section alone
        parts = ("metric", "direction", "space")
        what = _differences({f"sweep.{k}": stored.get(k) for k in parts}, {f"sweep.{k}": mine[k] for k in parts})
        again, why = "the spec the study was made with", "the trials of one spec"
        if not what:
            return
    elif stored["spec"] != mine["spec"] and _comparable(stored.get("keys")) != mine["keys"]:
        what = _differences(_comparable(stored.get("keys")), mine["keys"], study_keys(plan.loaded, defaults=True),
                            study_keys(plan.loaded, written=True))
        again, why = "the spec the study was made with", "the trials of one spec"
    else:
        differ = datafiles.difference(attrs.get(datafiles.ATTR) or {}, plan.data)
        if differ is None:
            return
        stage, what = differ
        at = ("data", stage, datafiles.key_of(plan.loaded, stage))
        again, why = "the data files the study was made with (as they were)", "trials trained on the same data"
    fix = ("-o NEW_FOLDER (each sweep folder keeps its own study)" if plan.url == stores.default_url(plan.folder)
           # Not `--set name=...`: `specgen report --sweep` takes no --set, and looks the study up by the spec's name
           else "a copy of the spec with another 'name' (the study's name in this storage) or another --storage")
    message = (f"the study '{plan.study_name}' in {stores.masked(plan.url)} belongs to another sweep: {what}; a study "
               f"compares {why}, so this sweep cannot join it: expected {again}, or a new study: {fix}")
    raise SpecError([plan.loaded.diagnostic(at, message) if at else Diagnostic(plan.loaded.display, None, message)])


def _comparable(keys: dict[str, Any] | None) -> dict[str, Any] | None:
    """A study's recorded keys without those MAY_CHANGE now lists: one recorded before a key joined MAY_CHANGE
    holds it, and a sweep that still writes it is the same study."""
    if keys is None:
        return None
    dotted = [".".join(map(str, path)) for path in MAY_CHANGE]
    return {k: v for k, v in keys.items() if not any(k == d or k.startswith((d + ".", d + "[")) for d in dotted)}


def _sets(base: list[str]) -> str:
    return " ".join(f"--set {shlex.quote(text)}" for text in base) if base else "no --set"


def _differences(stored: dict[str, Any] | None, mine: dict[str, Any] | None, full: dict[str, Any] | None = None,
                 written: dict[str, Any] | None = None, shown_at_most: int = 3) -> str:
    """`train.epochs is 1 (the default) here, 2 in the study's; ...` for the first keys that differ (in this
    spec's order); `full`: this spec's values with its defaults; `written`: the values it writes, defaults too."""
    if stored is None or mine is None:
        return "its spec differs from this one (the study records only its hash, the spec being that long)"
    differ = [k for k in [*mine, *(k for k in stored if k not in mine)] if stored.get(k, _UNSET) != mine.get(k, _UNSET)]
    said = [_difference(k, {**(written or {}), **mine}, stored, full or {}) for k in differ[:shown_at_most]]
    more = f" (and {len(differ) - shown_at_most} more key(s))" if len(differ) > shown_at_most else ""
    return "; ".join(said) + more


_UNSET = object()


def _difference(key: str, mine: dict[str, Any], stored: dict[str, Any], defaults: dict[str, Any]) -> str:
    """`KEY is A here, B in the study's`: each value as JSON writes it (a float as the shortest text that reads back
    to it), cut around the first character where they differ when both are long, so two values never read alike;
    a value left out is the default (with this spec's default value where known)."""
    here = _json(mine[key]) if key in mine else _json(defaults[key]) if key in defaults else None
    there = _json(stored[key]) if key in stored else None
    here_text, there_text = _apart(here or "", there or "")
    if key not in mine:
        here_text = f"{here_text} (the default)" if here is not None else "the default"
    if there is None:
        there_text = "the default"
    return f"{key} is {here_text} here, {there_text} in the study's"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))


def _apart(one: str, other: str) -> tuple[str, str]:
    """Both texts at most MAX_SHOWN characters, cut so that they still differ where they do: from a little before
    their first difference when it lies past the cut."""
    if max(len(one), len(other)) <= MAX_SHOWN:
        return one, other
    first = next((i for i, (a, b) in enumerate(zip(one, other, strict=False)) if a != b), min(len(one), len(other)))
    start = 0 if first < MAX_SHOWN - 10 else first - 20
    return _cut(one, start), _cut(other, start)


def _cut(text: str, start: int) -> str:
    part = text[start:start + MAX_SHOWN]
    return ("…" if start else "") + part + ("…" if start + MAX_SHOWN < len(text) else "")
