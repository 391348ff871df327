"""specgen: declarative TensorFlow training specs rendered to TF 2 code and ONNX graphs."""

__version__ = "0.1.0"
