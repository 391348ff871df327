"""Today's compatibility table of the training features: which pairs specgen allows, which it refuses, and why.

Pure data, the seed of issue 18's compatibility table. `probe.py` writes one small spec per pair and
`tests/test_golden.py` checks this table against `specgen validate` on them; the golden specs must
cover every allowed pair and use no refused one.
"""

from __future__ import annotations

Pair = tuple[str, str]

# The pairwise universe, in table order: the training features issue 18 names, the settings they meet,
# and every optimizer kind (levenberg_marquardt is both). What each means: tests/golden/pairs.py FEATURES.
# opt_lion came with the lion optimizer (issue 18 item 6): a new kind extends the table, and golden specs
# added for it cover its pairs (the earlier specs and their files are unchanged). A new optimizer kind is one name
# here, `opt_<kind>`, at the end: pairs.py and probe.py read the optimizer kinds from these names, REFUSED below
# gives it levenberg_marquardt's refusal and ALLOWED every other pair (docs/extending.md, Optimizers).
FEATURE_NAMES = (
    "ema", "accumulate", "clip", "optimizer_clip", "weight_decay", "loss_terms", "targets", "prune",
    "levenberg_marquardt", "distribute", "probe", "multi_optimizer", "schedule", "metrics", "full_batch", "frozen",
    "restore", "batch_norm", "dropout", "sync_batch_norm", "export_ema",
    "opt_sgd", "opt_adam", "opt_adamw", "opt_rmsprop", "opt_adagrad", "opt_lion",
)
ORDER = {name: i for i, name in enumerate(FEATURE_NAMES)}
# The optimizer kinds that are a name of their own (levenberg_marquardt is a feature).
OPTIMIZER_KINDS = tuple(name.removeprefix("opt_") for name in FEATURE_NAMES if name.startswith("opt_"))


def pair(a: str, b: str) -> Pair:
    """The pair in table order; a name the table lacks is named, with where it goes."""
    unknown = [name for name in (a, b) if name not in ORDER]
    if unknown:
        raise ValueError(f"'{unknown[0]}' is not in FEATURE_NAMES of tests/golden/compat.py: a new optimizer kind adds "
                       "its `opt_<kind>` there, a new feature its table names (docs/extending.md)")
    return (a, b) if ORDER[a] < ORDER[b] else (b, a)


# Pairs `specgen validate` refuses, with the messages it prints for the pair's probe spec (probe.py names the
# optimizers 'first' and 'second'). All of them today are levenberg_marquardt's (specgen/kinds/features/levenberg_marquardt.py,
# and its keys in specgen/kinds/optimizers/levenberg_marquardt.py).
REFUSED: dict[Pair, tuple[str, ...]] = {
    ("accumulate", "levenberg_marquardt"): (
        "levenberg_marquardt optimizer 'first' takes no accumulation: with 'batch_size: full' every iteration already "
        "sees the whole training set; received 2, expected 1 (or leave it out)",
    ),
    ("clip", "levenberg_marquardt"): (
        "levenberg_marquardt optimizer 'first' takes no clip: its step is a damped Gauss-Newton solve, not a gradient "
        "step, and a larger damping already shortens it; remove train.clip",
    ),
    ("optimizer_clip", "levenberg_marquardt"): (
        "clip: levenberg_marquardt takes no clipping: the step is a damped Gauss-Newton solve, not a gradient step; a "
        "larger damping shortens it",
    ),
    ("weight_decay", "levenberg_marquardt"): (
        "weight_decay: levenberg_marquardt takes no weight decay: each step solves the damped normal equations of the "
        "residuals, so a decay outside them would undo the fit; add an L2 term to the model instead",
    ),
    ("loss_terms", "levenberg_marquardt"): (
        "levenberg_marquardt optimizer 'first' needs one squared-error loss term: its step solves for one residual "
        "vector (predictions - labels); received 2 terms",
    ),
    ("targets", "levenberg_marquardt"): (
        "levenberg_marquardt optimizer 'first' takes no target networks: they follow the weights after each gradient "
        "update, which its iterations do not make",
    ),
    ("prune", "levenberg_marquardt"): (
        "levenberg_marquardt optimizer 'first' cannot prune: the masks are applied around each gradient update, and its"
        " trial steps would move masked weights; prune in another run",
    ),
    ("levenberg_marquardt", "multi_optimizer"): (
        "optimizer 'second' cannot train beside levenberg_marquardt optimizer 'first': each of its iterations tries "
        "damped steps until the loss falls, which another update in the same step would confound; train those weights "
        "in another run, or freeze them",
    ),
    ("levenberg_marquardt", "schedule"): (
        "learning_rate: levenberg_marquardt takes no learning rate: the damping sets the step length (the trust-region "
        "rule moves it after every try); set initial_damping instead",
    ),
    ("levenberg_marquardt", "batch_norm"): (
        "layer 'bn': levenberg_marquardt optimizer 'first' cannot train through batch_norm: training mode normalizes "
        "with batch statistics and moves its moving statistics on every trial evaluation; remove the layer or choose "
        "another optimizer",
    ),
    ("levenberg_marquardt", "dropout"): (
        "layer 'drop': levenberg_marquardt optimizer 'first' cannot train through dropout: its random mask changes the "
        "function between the trial evaluations; remove the layer or choose another optimizer",
    ),
    # levenberg_marquardt beside every other optimizer kind: one message, so one entry per `opt_<kind>` name.
    **{("levenberg_marquardt", f"opt_{kind}"): (
        "optimizer 'second' cannot train beside levenberg_marquardt optimizer 'first': each of its iterations tries "
        "damped steps until the loss falls, which another update in the same step would confound; train those weights "
        "in another run, or freeze them",
    ) for kind in OPTIMIZER_KINDS},
}

# Pairs `specgen validate` accepts and `specgen train` refuses when the run starts (specgen/runtime/placement/replicas.py,
# specgen/runtime/commands/probe.py): where, and the message. No golden spec uses them; the test checks that
# validate still accepts them, so a refusal that moves to validate shows up here.
RUNTIME_REFUSED: dict[Pair, tuple[str, str]] = {
    ("levenberg_marquardt", "distribute"): (
        "specgen train, at train.distribute.strategy",
        "levenberg_marquardt solves on the whole batch in one process; train it with the default strategy",
    ),
    ("levenberg_marquardt", "probe"): (
        "specgen train --probe, at the spec",
        "--probe shows one gradient update; a levenberg_marquardt iteration is a damped solve over the whole "
        "training set: train a few epochs and read the loss instead",
    ),
    ("distribute", "full_batch"): (
        "specgen train, at train.batch_size",
        "batch_size: full under the <strategy> strategy: give the global batch as a number that splits evenly among "
        "the <N> replicas",
    ),
}


# Feature -> the features after it in table order that it combines with today: `specgen validate` accepts the
# pair's probe spec (probe.py) and no command refuses it. The golden specs use each of these pairs. Every pair
# that is not refused, so a new name needs no row here (tests/test_golden.py checks validate against both tables).
ALLOWED: dict[str, tuple[str, ...]] = {
    a: tuple(b for b in FEATURE_NAMES[i + 1:] if (a, b) not in REFUSED and (a, b) not in RUNTIME_REFUSED)
    for i, a in enumerate(FEATURE_NAMES)
}


def markdown() -> str:
    """The refusal table of tests/golden/README.md, from the tables above."""
    rows = ["| pair | refused by | message |", "|---|---|---|"]
    rows += [f"| {a} + {b} | specgen validate | {' / '.join(m)} |" for (a, b), m in REFUSED.items()]
    rows += [f"| {a} + {b} | {where} | {m} |" for (a, b), (where, m) in RUNTIME_REFUSED.items()]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # PYTHONPATH=tests python -m golden.compat: the refusal table of tests/golden/README.md
    print(markdown(), end="")
