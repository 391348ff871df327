"""Pictures of a spec: the model graph (graph.py, drawn from the IR alone; no TensorFlow, no system binary)."""
