"""``tlaloc.serving``: running models for users.

For now it holds only the eager reference path, :mod:`tlaloc.serving.generate`
(greedy and seeded sampling on NumPy), the oracle the compiled runtime is tested
against. That module imports ``tlaloc.models``; this package's ``__init__`` imports
nothing, so the compiler-free runtime can live beside it.
"""
