"""`train.distribute`: a mirrored or multi-worker strategy. Nothing in train.py: the runtime places the steps."""

from specgen.kinds.features.base import FeatureDef

FEATURE = FeatureDef(
    name="distribute",
    doc="data-parallel replicas (mirrored, multi_worker) with all-reduced gradients",
    spec_keys=("train.distribute.strategy", "train.distribute.sync_batch_norm"),
    enabled=lambda ir: ir.training.train.distribute.distributed,
    ir="specgen.ir.training.distribute.build_distribute (DistributeIR)",
    runtime=("specgen.runtime.placement.replicas", "specgen.runtime.lib.optimizers.all_reduce"),
    after=("loss_terms",),  # runtime placement around the whole step
)
