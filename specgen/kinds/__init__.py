"""Registries, one subpackage per extension axis (issue 18): each kind is one module that holds its facts.

`kinds/initializers`, `kinds/optimizers`, `kinds/schedules`, `kinds/losses`, `kinds/metrics` and `kinds/sources`
(data sources) hold those kinds (docs/extending.md); `kinds/features` holds the training features. The package
imports neither jinja2, TensorFlow nor onnx: `specgen validate` and `build` import it.
"""
