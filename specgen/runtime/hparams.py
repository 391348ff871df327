"""A run's hyperparameters for TensorBoard's HParams dashboard: its `--set` values (docs/sweeps.md, "Tracking").

A run's `--set` overrides are what makes it differ from its spec, so they are its hyperparameters: a sweep's
trials get their searched values that way (and `specgen train SPEC --set ...` reproducing one gets the same).
They are written once a run starts (and again on each resume, whose overrides may have changed) into
`RUN/tensorboard/`, beside the train and eval folders whose scalars TensorBoard pairs with them: open
`tensorboard --logdir SWEEP` on a sweep folder and the HParams tab lists the trials with their values and
metrics. `checkpoint.dir` is left out (a folder is not a hyperparameter); a run without overrides writes none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specgen.spec.overrides import parse_override

LEFT_OUT = ("checkpoint.dir",)


def values(overrides: list[str]) -> dict[str, bool | int | float | str]:
    """Key as written -> value, for the HParams plugin's types (bool, int, float, str; other values as YAML)."""
    found: dict[str, Any] = {}
    for text in overrides:
        key = text.partition("=")[0].strip()
        if key in LEFT_OUT:
            continue
        _, value = parse_override(text)
        if not isinstance(value, (bool, int, float, str)):
            import yaml

            value = yaml.safe_dump(value, default_flow_style=True, width=1 << 30).strip()
        found[key] = value
    return found


def write(folder: Path, overrides: list[str]) -> None:
    """The run's hyperparameters as one summary in `folder/tensorboard` (TensorFlow's writer, as the scalars)."""
    hparams = values(overrides)
    if not hparams:
        return
    import tensorflow as tf
    from tensorboard.plugins.hparams import api as hp

    writer = tf.summary.create_file_writer(str(folder / "tensorboard"))
    with writer.as_default():
        hp.hparams(hparams)
    writer.close()
