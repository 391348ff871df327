"""What generated model.py and train.py import: ops, initializers, losses, metrics, optimizers, schedules,
and the interface (Protocols) the commands in specgen/runtime/commands/ use them through."""
