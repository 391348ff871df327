"""Pictures of a spec and a run: the model graph (graph.py, drawn from the IR alone; no TensorFlow, no system binary)
and the training curves (curves.py, from the run's event files: events.py). The one-page HTML report that shows them
is the report's (specgen/report/html.py)."""
