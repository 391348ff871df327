"""`specgen train` under tf.distribute: MirroredStrategy on one machine, MultiWorkerMirroredStrategy across machines.

How the spec's semantics survive replicas (docs/distributed.md says the same for users):

- Every worker builds the same global-batch pipeline (same seed, same order) and each replica keeps its
  own contiguous slice of every global batch: tf.data's AutoShardPolicy.DATA, done by hand, so that a
  step sees exactly the examples of the one-process step and the iterator saved with a checkpoint is
  the plain one every worker can restore.
- Except under `multi_worker` for a source with at least one shard per worker (streamed tfrecord): there
  each worker reads its own files (AutoShardPolicy.FILE, by hand: runtime/data.py's `for_worker`) in
  batches of global batch / workers, which its own replicas slice; each worker's iterator differs, so
  each saves its own position into the checkpoint (runtime/placement/positions.py). With equal shards and no
  record shuffle, worker w's n-th batch is global batch n's examples from its shards (docs/training.md).
- The generated step all-reduces the gradients (MEAN of per-replica means = the global batch's
  gradient) before clipping and the updates, so each replica applies the same update.
- Variables are created with an aggregation that makes the generated updates legal in replica context:
  ONLY_FIRST_REPLICA for state that is identical on every replica after that all-reduce (weights, slots,
  learning rates, counters, the global step, accumulators, EMA shadows, anything a later issue adds),
  SUM for metric accumulators (sync-on-read, as Keras' metrics: no communication per step, and the
  printed metrics are global) and MEAN for batch-norm moving statistics.
- Batch-norm moving statistics: the mean over replicas of each replica's update, tf.keras 2's rule (its
  moving variables are ON_READ with MEAN). Keras 3 differs and is not followed: its BatchNormalization makes
  them with `add_weight`'s default aggregation "none" (keras/src/layers/normalization/batch_normalization.py,
  keras/src/layers/layer.py), and its MirroredStrategy fit keeps replica 0's statistics only. The mean uses
  every replica's slice; docs/distributed.md gives the consequence and a measured difference.
- An eval batch need not divide among the replicas: `own_slice` may give a replica 0 rows (a last batch of
  fewer rows than replicas). Every metric accumulates sums and counts (lib/metrics.py), so such a slice adds
  nothing; the loss it returns (0/0) is never read.
- The generated steps run on every replica through `strategy.run`, their Python bodies traced into one
  outer tf.function (see `python_body`); the default strategy never comes here and pays nothing.

`Replicas` is the `Distribution` (runtime/placement/default.py: one interface, one device by default) of a run
under a strategy; `start` makes the one a run uses.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import tensorflow as tf

from specgen.atomic import pid_alive
from specgen.ir.model import ModelIR
from specgen.ir.training import keys
from specgen.ir.training.build import run_folder
from specgen.ir.training.model import TrainIR
from specgen.kinds.features import accumulate, distribute
from specgen.kinds.features.distribute import DistributeIR
from specgen.paths import shown
from specgen.runtime import data
from specgen.runtime.checkpoint import CheckpointFolder
from specgen.runtime.lib import layers
from specgen.runtime.lib.interface import SteppingTrainer
from specgen.runtime.placement.cluster import (
    Role,
    check_one_cpu_replica,
    check_replicas,
    port_in_use,
    read_role,
    rendezvous,
)
from specgen.runtime.placement.default import Distribution
from specgen.runtime.placement.positions import Positions, share_digests
from specgen.runtime.sources.base import Source
from specgen.spec.load import LoadedSpec

PACK_BYTES = 32 * 1024 * 1024  # all-reduce packs (CommunicationOptions.bytes_per_pack)
# What a collective raises when a peer is gone: a timeout, a closed channel, an aborted group.
LOST = (tf.errors.DeadlineExceededError, tf.errors.UnavailableError, tf.errors.CancelledError,
        tf.errors.AbortedError, tf.errors.InternalError, tf.errors.UnknownError)


def _split_cpu(devices: int) -> None:
    """`cpu_devices` logical CPUs (before TensorFlow starts its runtime): replicas on a machine without GPUs.
    A second run in the same process (a notebook, a test driver) with the same count finds the split made:
    TensorFlow refuses to set it again once its runtime has started, even to the same value."""
    if devices > 1 and not tf.config.list_physical_devices("GPU"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        if len(tf.config.get_logical_device_configuration(cpu) or ()) == devices:
            return
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)


def make_strategy(settings: DistributeIR) -> tf.distribute.Strategy | None:
    """The strategy (None for `default`); built first, before any other TensorFlow op, as TensorFlow requires."""
    if settings.strategy == "default":
        return None
    _split_cpu(settings.cpu_devices)
    if settings.strategy == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus or tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    # Gradients all-reduced in packs (one collective for a small model, not one per weight), the same sums.
    # No collective timeout: TensorFlow starts a thread per collective that sleeps for the timeout (thousands
    # at 100 updates/s); a lost worker is found by the coordination service's heartbeats instead (seconds).
    options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=PACK_BYTES)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def aggregation(name: str, update_paths: frozenset[str]) -> tf.VariableAggregation:
    """How replica-context writes to a variable combine (see the module docstring)."""
    if name.startswith(keys.METRICS + "/"):
        return tf.VariableAggregation.SUM
    if name in update_paths:
        return tf.VariableAggregation.MEAN
    return tf.VariableAggregation.ONLY_FIRST_REPLICA


def own_slice(tensor: tf.Tensor, workers: int = 1) -> tf.Tensor:
    """This replica's contiguous share of a global batch (the first rows to replica 0; uneven eval batches too,
    where a replica may get 0 rows: see the module docstring).
    `workers` > 1: the batch is this worker's own (file-sharded data), shared among its local replicas only
    (replica ids run worker by worker: worker w's are w * local ... w * local + local - 1)."""
    context = tf.distribute.get_replica_context()
    count = context.num_replicas_in_sync // workers
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32) % count
    rows = tf.shape(tensor)[0]
    return tensor[rows * replica // count: rows * (replica + 1) // count]


def replica_seed(seed: tf.Tensor) -> tf.Tensor:
    """Dropout seeds differ per replica (replica r folds r into the step's seed), so slices drop different units."""
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    return tf.random.experimental.stateless_fold_in(seed, tf.cast(replica, tf.int64))


def python_body(function: Callable[..., Any]) -> Callable[..., Any]:
    """A generated step's Python body: a tf.function nested in `strategy.run` cannot hold the merge_call of a
    replica-context update, so the replica function traces the body into the outer tf.function instead.
    Marked not to be converted, as the generated step is (`autograph=False`): it has no Python control flow on
    tensors, and the chunk loop's autograph would otherwise rewrite it and everything it calls (seconds a trace)."""
    body: Callable[..., Any] = tf.autograph.experimental.do_not_convert(getattr(function, "python_function", function))
    return body


# A non-chief worker's temporary folder: specgen-<task>-<index>-<run key>-<pid>-<random>. A worker killed by
# SIGKILL (or the machine's OOM killer) cannot remove its own; the next worker of the same run on this machine
# does, once its pid is not a live process (atomic.py's rule for a killed writer's temporary files). /tmp is
# this machine's own, so no age is needed for a writer on another machine (atomic.STALE_AFTER's case).
WORKER_FOLDER = re.compile(r"specgen-(?:chief|worker)-\d+-(?P<run>[0-9a-f]{8})-(?P<pid>\d+)-[^/]+")


def remove_stale_folders(run_key: str, where: Path | None = None) -> list[Path]:
    """Remove the temporary folders that killed workers of the run `run_key` left in `where` (the temp folder)."""
    removed: list[Path] = []
    folder = Path(where or tempfile.gettempdir())
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        found = WORKER_FOLDER.fullmatch(entry.name)
        if found is None or found["run"] != run_key or pid_alive(int(found["pid"])):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


class Replicas(Distribution):
    """The strategy of one run: the generated steps run on every replica, variables mirrored."""

    distributed = True

    def __init__(self, strategy: tf.distribute.Strategy, role: Role, settings: DistributeIR):
        self.strategy, self.role, self.settings = strategy, role, settings
        self.count, self.workers = strategy.num_replicas_in_sync, role.workers
        self.chief = role.chief
        self.lost = LOST
        self._temporary: Path | None = None
        self._steps: Callable[..., Any] | None = None
        self._calls: dict[str, Callable[..., Any]] = {}
        self._sync: Callable[[], Any] | None = None
        self.data_workers = 1  # workers whose batches are their own (file-sharded data): see own_slice
        self._notes: list[str] = []

    def training_data(self, source: Source, batch: int, train: TrainIR, run: Path, name: str = "") -> tuple[Source, int]:
        """Under multi_worker: this worker's share of a sharded source, or all of it (runtime/data.py's for_worker)."""
        if self.settings.strategy != "multi_worker" or self.role.workers < 2:
            return source, batch
        index, workers = self.worker_index(), self.role.workers
        mine = data.for_worker(source, name, index, workers, batch, train.shuffle_buffer, accumulate.of(train))
        self._notes.append(mine.note)
        if mine.share is None:
            self.unsharded = mine.why  # a checkpoint of workers that read shares resumes as a new pass, saying why
            return mine.source, mine.batch
        self.data_workers = workers
        self.positions = Positions(index, workers, run, self.barrier, share_digests(mine.share), mine.share.equal)
        return mine.source, mine.batch

    def worker_index(self) -> int:
        """This worker's place among the training tasks, as TensorFlow numbers them: the chief first, then workers."""
        if self.role.task_type == "chief":
            return 0
        chief = "chief" in self.strategy.cluster_resolver.cluster_spec().jobs
        return self.role.task_id + (1 if chief else 0)

    def barrier(self) -> None:
        """Returns once every worker has called it: one all-reduce of a constant."""
        if self._sync is None:
            strategy = self.strategy

            def sync() -> tf.Tensor:
                context = tf.distribute.get_replica_context
                return strategy.run(lambda: context().all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(1.0)))

            self._sync = tf.function(sync, autograph=False)  # called: tensorflow ships no types
        self._sync()

    def describe(self) -> list[str]:
        local = len(self.strategy.extended.worker_devices)
        where = f"{self.role.workers} worker(s) x {local} device(s)" if self.settings.strategy == "multi_worker" \
            else f"{local} device(s)"
        return [f"{self.settings.strategy}: {self.count} replicas ({where}); this process is {self.role.name}" +
                (" (chief)" if self.role.chief else ""), *self._notes]

    @contextlib.contextmanager
    def scope(self, update_paths: frozenset[str]) -> Iterator[None]:
        """Variables created here are mirrored, each with the aggregation `aggregation()` gives it."""
        def creator(next_creator: Callable[..., Any], **kwargs: Any) -> Any:
            if kwargs.get("aggregation") in (None, tf.VariableAggregation.NONE):
                kwargs["aggregation"] = aggregation(str(kwargs.get("name") or ""), update_paths)
            if kwargs["aggregation"] == tf.VariableAggregation.SUM:
                # Metric accumulators: each replica adds to its own copy (no communication per step);
                # reading one sums the copies, as Keras' metrics do.
                kwargs["synchronization"] = tf.VariableSynchronization.ON_READ
            return next_creator(**kwargs)

        with self.strategy.scope(), tf.variable_creator_scope(creator):
            yield

    def write_folder(self, run: Path) -> Path:
        """The run folder for the chief, a temporary folder (removed by `close`) for the other workers."""
        if self.role.chief:
            return run
        if self._temporary is None:
            run_key = hashlib.sha256(str(run.resolve()).encode()).hexdigest()[:8]
            remove_stale_folders(run_key)
            self._temporary = Path(tempfile.mkdtemp(
                prefix=f"specgen-{self.role.task_type}-{self.role.task_id}-{run_key}-{os.getpid()}-"))
        return self._temporary

    def close(self) -> None:
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)
            self._temporary = None

    def saved(self, checkpoint: Path) -> None:
        """TensorFlow's pattern: every worker writes the checkpoint (the save is collective), only the chief's stays."""
        if not self.role.chief:
            shutil.rmtree(checkpoint)

    def train_steps(self, trainer: SteppingTrainer, iterator: Any, counter: tf.Tensor, steps: tf.Tensor,
                    seed: int) -> tf.Tensor:
        """`steps` updates in one graph; the loss of the last, averaged over replicas (the global batch's mean)."""
        if self._steps is None:
            strategy, workers = self.strategy, self.data_workers

            def replica_step(features: Any, labels: Any, step_seed: tf.Tensor) -> tf.Tensor:
                features, labels = tf.nest.map_structure(lambda t: own_slice(t, workers), (features, labels))
                return python_body(trainer.train_step)(features, labels, replica_seed(step_seed))

            def step_at(i: tf.Tensor, counter: tf.Tensor) -> Any:
                features, labels = next(iterator)
                step_seed = tf.stack([counter + i, tf.constant(seed, tf.int64)])
                return strategy.run(replica_step, args=(features, labels, step_seed))

            def run(iterator: Any, counter: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
                for i in tf.range(steps - 1):
                    step_at(i, counter)
                # Only the last loss is reported: one cross-replica reduce per chunk, not per update.
                return strategy.reduce(tf.distribute.ReduceOp.MEAN, step_at(steps - 1, counter), axis=None)

            self._steps = tf.function(run)
        return self._steps(iterator, counter, steps)

    def run(self, name: str, step: Callable[..., Any], *args: Any) -> Any:
        """`step` on every replica, each with its slice of the batch (and its own seed); losses averaged."""
        cache = self._calls
        if name not in cache:
            strategy, step = self.strategy, python_body(step)
            workers = 1 if name == "eval" else self.data_workers  # eval batches are global: every worker reads all

            def replica(*values: Any) -> Any:
                if not values:
                    return step()
                sliced = list(tf.nest.map_structure(lambda t: own_slice(t, workers), values[:2]))
                extra = [replica_seed(values[2])] if len(values) > 2 else []
                return step(*sliced, *extra)

            def run(*values: Any) -> Any:
                result = strategy.run(replica, args=values)
                return None if result is None else strategy.reduce(tf.distribute.ReduceOp.MEAN, result, axis=None)

            cache[name] = tf.function(run, autograph=False)
        return cache[name](*args)

    def lost_worker(self, loaded: LoadedSpec, exc: Exception) -> SystemExit:
        """One line on stderr for a run that lost a worker (a collective timed out or its peer went away); exit 1.

        Nothing half-written: a checkpoint is published by a rename after its files are whole, so the
        run folder holds only whole ones, and relaunching every worker with --resume continues from the newest.
        """
        newest, _ = CheckpointFolder(run_folder(loaded), 1).newest()
        advice = f"the newest checkpoint is {shown(newest)}. Relaunch every worker with --resume" if newest else \
            "no checkpoint was written yet: start every worker again (without --resume, which would find none)"
        print(f"specgen: error: {self.role.name} of {self.role.workers} stopped: {_reason(exc)}"
              f"{_mismatch(exc, self.role)}; {advice}", file=sys.stderr, flush=True)
        return SystemExit(1)


def start(loaded: LoadedSpec, ir: ModelIR, strategy: str | None = None) -> Distribution:
    """The run's distribution (one device for `default`), checked against the spec: the global batch must divide
    among the replicas. `strategy`: --strategy, which replaces the spec's.

    Called before anything else touches TensorFlow: a strategy configures the runtime it starts.
    """
    settings = settings_of(ir)
    if strategy is not None:
        settings = replace(settings, strategy=strategy)
    role = read_role() if settings.strategy == "multi_worker" else Role()  # MirroredStrategy ignores TF_CONFIG
    if settings.strategy == "multi_worker":
        _before_waiting(loaded, ir, settings, role)
    try:
        made = make_strategy(settings)
    except tf.errors.OpError as exc:  # outside train's `_guarded`: worded here, not a traceback
        raise _not_started(role, exc) from None
    if made is None:
        return Distribution()
    replicas = Replicas(made, role, settings)
    layers.synchronize_batch_norm(settings.sync_batch_norm)
    check_replicas(loaded, settings.strategy, replicas.count, ir)
    return replicas


def _before_waiting(loaded: LoadedSpec, ir: ModelIR, settings: DistributeIR, role: Role) -> None:
    """What can be refused before the strategy's start waits for every worker (as long as they take): this task's
    port, and the global batch on a machine without GPUs (one replica per worker, known here: check_one_cpu_replica;
    with GPUs the count is the strategy's, checked once it started). Then it waits for the others in Python (`rendezvous`),
    where a stop signal is acted on and a line says what it waits for."""
    if not tf.config.list_physical_devices("GPU"):
        check_one_cpu_replica(loaded, ir)
        check_replicas(loaded, settings.strategy, role.workers, ir)
    rendezvous(role)


def _not_started(role: Role, exc: tf.errors.OpError) -> BaseException:
    """One line for a strategy that could not start: the port line for gRPC's bind failure (another process took
    the port after `check_port`), else TensorFlow's reason; exit 1, nothing written (the run folder comes later)."""
    if "Could not start gRPC server" in str(exc.message):
        return port_in_use(role, "gRPC could not start its server there")
    print(f"specgen: error: {role.name} of {role.workers} could not start the multi_worker strategy: {_reason(exc)}",
          file=sys.stderr, flush=True)
    return SystemExit(1)


def settings_of(ir: ModelIR) -> DistributeIR:
    """The spec's `train.distribute`, resolved (the default strategy without a train section)."""
    training = ir.training
    return distribute.of(training.train) if training is not None and training.train is not None else DistributeIR()


def _mismatch(exc: Exception, role: Role) -> str:
    """A collective's group that cannot form: TensorFlow says only "could be from a previous operation" (the cause,
    `joining a group with size 2, but that group has size 3`, is in its log). Workers whose TF_CONFIG clusters differ
    connect (the coordination service counts its own cluster) and fail so at the first collective; TensorFlow gives
    no hook to compare the clusters before, so the line names the likely cause and this worker's count."""
    text = str(exc.message if isinstance(exc, tf.errors.OpError) else exc)
    if isinstance(exc, tf.errors.InternalError) and re.search(r"Collective|group|previous operation", text):
        return (f" (likely cause: the workers' TF_CONFIG clusters differ; this one lists {role.workers} workers, "
                f"{', '.join(role.addresses)}: give every worker the same cluster)")
    return ""


def _reason(exc: Exception) -> str:
    """What TensorFlow's long error says, in a clause: which task went quiet, or that a collective timed out."""
    text = str(exc.message if isinstance(exc, tf.errors.OpError) else exc)
    if found := re.search(r"stopped sending heartbeats\):\s*(\S+)", text):
        return f"{found.group(1)} stopped sending heartbeats"
    if found := re.search(r"(?:remote target|Error reported from) (/job:\w+/(?:replica:\d+/)?task:\d+)", text):
        return f"lost the connection to {found.group(1)}"
    lines = [line for line in text.splitlines() if line.strip() and "Graph execution error" not in line]
    return f"{type(exc).__name__}: {(lines or ['no detail'])[-1].strip()[:200]}"
