"""Shipped block definitions (data only: *.yaml here, read by specgen/spec/shipped.py)."""
