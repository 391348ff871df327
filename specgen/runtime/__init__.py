"""Run-time code: the only part of specgen that imports TensorFlow or onnxruntime.

`lib/` is what generated code imports; `commands/` implements train, restore-plan, export and infer;
the modules here are support several commands share (data, checkpoints, integrity, parity, Predictor,
ONNX weights, Triton layout); `placement/` is where training runs (one device, replicas, workers)."""
