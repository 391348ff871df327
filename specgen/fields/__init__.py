"""The spec language's field vocabulary: number and name types (base.py), union helpers (unions.py), the
layer base models (layers.py) and the loss terms' shared fields (losses.py).

It sits below the registries (specgen/kinds/, whose kinds' models are built from these types) and below the
section models (specgen/spec/, which assemble the registries' unions into the Spec): it imports nothing
from specgen but diagnostics (tests/test_import_graph.py checks it).
"""
