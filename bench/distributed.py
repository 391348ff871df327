"""Distributed training throughput: one process against tf.distribute replicas, with the all-reduce's share.

For the digits CNN and MLP of examples/specs (as written: their optimizers, EMA, batch size; the
batch is the global batch), each configuration runs the real `specgen train` session
(specgen/runtime/commands/session.py, under specgen/runtime/placement/replicas.py) in fresh processes:

  1 process         the default strategy, TensorFlow's own thread pools (both cores)
  1 process, 1 thr  the default strategy, one intra-op and one inter-op thread
  mirrored 2 CPU    MirroredStrategy over two logical CPU devices in one process
  2 workers         MultiWorkerMirroredStrategy, two processes on loopback (TF_CONFIG, free ports),
                    one intra-op and one inter-op thread each

Each process traces and warms up (`--warmup` updates), then times `--steps` updates (the loop
`specgen train` runs, chunks of updates in one graph). The configurations are interleaved: each of
`--repeats` repetitions runs every configuration once, in fresh processes, the order rotating, so
that a shared machine's load falls on all of them alike; figures are medians over the repetitions.
"vs 1 process" is the median of the per-repetition ratios to configuration 0 ("1 process", always
run as the baseline, whatever --configs names). steps/s are global updates per second,
examples/s = steps/s x global batch. The
all-reduce share: the same processes time, under the same strategy, an all-reduce alone of
tensors shaped like the trainable weights (what the generated step reduces each update), and
divide by the step time. On a 2-core machine the two workers share two cores: this measures the
overhead of the distributed path, not a speed-up.

    python bench/distributed.py                    # both models, 4 configurations x 3 repetitions, ~8 min on 2 cores
    python bench/distributed.py --models mlp --steps 200 --configs 3   # 2 workers against 1 process
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ports import reserved_ports

ROOT = Path(__file__).resolve().parents[1]
SPECS = {"cnn": ROOT / "examples" / "specs" / "digits_cnn.yaml", "mlp": ROOT / "examples" / "specs" / "digits_mlp.yaml"}
ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def worker(args: argparse.Namespace) -> None:
    """One process of one configuration: prints a JSON line with its timings."""

    from specgen.pipeline import build
    from specgen.runtime.commands.resume import Options
    from specgen.runtime.commands.session import Session
    from specgen.runtime.placement import replicas as distribute
    from specgen.spec.overrides import load_with_overrides

    with tempfile.TemporaryDirectory() as folder:
        overrides = [f"checkpoint.dir={folder}", "train.distribute.cpu_devices=2"]
        loaded = load_with_overrides(SPECS[args.model], overrides)
        built = build(loaded)
        distribution = distribute.start(loaded, built.ir, args.strategy)
        session = Session(built, Options(overrides=overrides, quiet=True), None, distribution)
        float(session.updates(args.warmup))
        runs = []
        for _ in range(args.repeats):
            begin = time.perf_counter()
            float(session.updates(args.steps))  # the loss read waits for the last update
            runs.append(time.perf_counter() - begin)
        replicas = distribution if isinstance(distribution, distribute.Replicas) else None
        reduce_s = _all_reduce_seconds(replicas, session.trainer.trainable, args) if replicas else 0.0
        distribution.close()
    print(json.dumps({"seconds": statistics.median(runs), "reduce": reduce_s,
                      "batch": session.train_ir.batch_size}), flush=True)


def _all_reduce_seconds(replicas: Any, trainable: list[Any], args: argparse.Namespace) -> float:
    """Median seconds of `--steps` all-reduces (MEAN) of tensors shaped like the trainable weights."""
    import tensorflow as tf

    strategy = replicas.strategy
    shapes = [tuple(v.shape) for v in trainable]

    def reduce_once() -> tf.Tensor:
        context = tf.distribute.get_replica_context()
        reduced = context.all_reduce(tf.distribute.ReduceOp.MEAN, [tf.ones(s) for s in shapes])
        return tf.add_n([tf.reduce_sum(r) for r in reduced])

    @tf.function
    def loop(count: tf.Tensor) -> tf.Tensor:
        total = tf.constant(0.0)
        for _ in tf.range(count):
            # Local results only: one collective per iteration, as the training step has.
            total += tf.add_n(list(strategy.experimental_local_results(strategy.run(reduce_once))))
        return total

    float(loop(tf.constant(args.warmup)))
    runs = []
    for _ in range(args.repeats):
        begin = time.perf_counter()
        float(loop(tf.constant(args.steps)))
        runs.append(time.perf_counter() - begin)
    return statistics.median(runs)


def launch(model: str, strategy: str, processes: int, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    base = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT), **env}
    command = [sys.executable, __file__, "--worker", "--model", model, "--strategy", strategy,
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--repeats", str(args.repeats)]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in reserved_ports(processes)]}  # TF binds them after its imports
    running = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**base, **({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {
                                    "type": "worker", "index": i}})} if processes > 1 else {})})
               for i in range(processes)]
    outputs = [process.communicate(timeout=900) for process in running]
    for index, (process, (_, err)) in enumerate(zip(running, outputs, strict=True)):
        if process.returncode != 0:
            raise SystemExit(f"{model} {strategy}: process {index} failed:\n{err[-3000:]}")
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    chief = results[0]
    return {"steps_s": args.steps / chief["seconds"], "examples_s": args.steps * chief["batch"] / chief["seconds"],
            "reduce_share": chief["reduce"] / chief["seconds"], "batch": chief["batch"]}


CONFIGS = [("1 process", "default", 1, {}), ("1 process, 1 thr", "default", 1, ONE_THREAD),
           ("mirrored 2 CPU", "mirrored", 1, ONE_THREAD), ("2 workers", "multi_worker", 2, ONE_THREAD)]


def arguments(argv: list[str] | None) -> argparse.Namespace:
    top = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    top.add_argument("--models", nargs="+", choices=sorted(SPECS), default=["cnn", "mlp"])
    top.add_argument("--steps", type=int, default=300, help="timed updates per run (default 300)")
    top.add_argument("--warmup", type=int, default=30, help="untimed updates before them (default 30)")
    top.add_argument("--repeats", type=int, default=3, help="interleaved repetitions of every configuration (default 3)")
    top.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    top.add_argument("--model", choices=sorted(SPECS), help=argparse.SUPPRESS)
    top.add_argument("--strategy", default="default", help=argparse.SUPPRESS)
    names = "; ".join(f"{i}: {c[0]}" for i, c in enumerate(CONFIGS))
    top.add_argument("--configs", nargs="+", type=int, choices=range(len(CONFIGS)), default=list(range(len(CONFIGS))),
                     metavar="N", help=f"configurations to run ({names}); 0 is always run, as the baseline")
    args = top.parse_args(argv)
    for name in ("steps", "warmup", "repeats"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            top.error(f"--{name} must be at least {0 if name == 'warmup' else 1}")
    return args


def interleaved(model: str, configs: list[int], args: argparse.Namespace) -> dict[int, list[dict[str, Any]]]:
    """Every configuration once per repetition, in fresh processes, the order rotating each repetition."""
    rows: dict[int, list[dict[str, Any]]] = {i: [] for i in configs}
    single = argparse.Namespace(**{**vars(args), "repeats": 1})  # one timed run per process: repetitions are here
    for rep in range(args.repeats):
        shift = rep % len(configs)
        for i in configs[shift:] + configs[:shift]:
            _, strategy, processes, env = CONFIGS[i]
            rows[i].append(launch(model, strategy, processes, env, single))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.worker:
        worker(args)
        return 0
    configs = sorted({0, *args.configs})  # the baseline the ratio is taken to
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPU cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.warmup} warm-up + "
          f"{args.steps} timed updates per run, {args.repeats} repetitions interleaved (medians)")
    print(f"{'model':6} {'configuration':18} {'batch':>5} {'steps/s':>8} {'examples/s':>10} {'vs 1 process':>12} "
          f"{'all-reduce share':>16}")
    for model in args.models:
        rows = interleaved(model, configs, args)
        for i in configs:
            label, strategy, _, _ = CONFIGS[i]
            runs = rows[i]
            ratio = statistics.median(r["steps_s"] / b["steps_s"] for r, b in zip(runs, rows[0], strict=True))
            share = f"{100 * statistics.median(r['reduce_share'] for r in runs):.0f}%" if strategy != "default" else "-"
            print(f"{model:6} {label:18} {runs[0]['batch']:>5} {statistics.median(r['steps_s'] for r in runs):>8.1f} "
                  f"{statistics.median(r['examples_s'] for r in runs):>10.0f} {ratio:>11.2f}x {share:>16}", flush=True)
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; vs 1 process: median of the ratios to "
          "'1 process' measured in the same repetition")
    return 0


if __name__ == "__main__":
    sys.exit(main())
