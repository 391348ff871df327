"""The training side of the IR: resolved loss, optimizers, EMA, metrics, data, checkpoint and export."""

from specgen.ir.training.model import (
    CheckpointIR,
    ClipIR,
    DataSourceIR,
    EmaIR,
    ExportIR,
    LossIR,
    OptimizerIR,
    RestoreIR,
    ScheduleIR,
    SlotIR,
    TrainingIR,
    TrainIR,
)

__all__ = ["CheckpointIR", "ClipIR", "DataSourceIR", "EmaIR", "ExportIR", "LossIR", "OptimizerIR", "RestoreIR",
           "ScheduleIR", "SlotIR", "TrainIR", "TrainingIR"]
