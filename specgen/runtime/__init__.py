"""Run-time code: the only part of specgen that imports TensorFlow or onnxruntime."""
