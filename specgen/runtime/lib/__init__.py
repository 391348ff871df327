"""What generated model.py and train.py import: ops (`layers`), initializers, losses, metrics, optimizers,
schedules, the ONNX layout helper, the loader (`generated`), and the interface (Protocols) the commands in
specgen/runtime/commands/ use generated modules through.

No command logic and no printing here: generated files depend on these names, so the package stays small
and imports nothing from `specgen.runtime.commands` or `specgen.cli` (tests/test_layout.py checks it)."""
