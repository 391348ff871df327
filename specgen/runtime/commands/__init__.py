"""The command implementations: `train` (the loop; `session` is one run's state), `resume`, `restore`
(with `restore_sources`), `export`, `infer` and `tfjob` (`train --emit tfjob`: a manifest; it imports no
TensorFlow). The command line's modules (`specgen/commands/`: flags and printing) call these.

They live under `specgen/runtime/` because they import TensorFlow and onnxruntime, and `specgen.runtime`
is the one package that may: the rest of specgen (spec, ir, render, the command line) stays importable
without them. The library that generated code imports is the sibling `specgen.runtime.lib`, which must
never import from here (tests/test_layout.py)."""
