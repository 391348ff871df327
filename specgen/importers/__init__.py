"""Importers: other frameworks' model descriptions turned into specgen specs.

Each importer reads a model's structure as plain data (never by running the framework's
loader on a user's file) and writes a spec whose `checkpoint.restore` points at the weights.
"""
