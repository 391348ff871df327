"""The training side of the IR: resolved loss, optimizers, EMA, metrics, data, checkpoint and export."""

from specgen.ir.training.model import (
    CheckpointIR,
    DataSourceIR,
    ExportIR,
    LossIR,
    OptimizerIR,
    RestoreIR,
    ScheduleIR,
    SlotIR,
    TrainingIR,
    TrainIR,
)
from specgen.kinds.features.clip import ClipIR

__all__ = ["CheckpointIR", "ClipIR", "DataSourceIR", "ExportIR", "LossIR", "OptimizerIR", "RestoreIR",
           "ScheduleIR", "SlotIR", "TrainIR", "TrainingIR"]
