"""``tlaloc.misc``: autograd's ``autograd.misc`` helpers, so its programs port by changing imports.

* ``flatten(tree) -> (flat, unflatten)``: a pytree of arrays as one 1-D vector
  (``tlaloc.misc.flatten``; also ``tl.ravel_pytree``, JAX's name);
* ``flatten.flatten_func(func, example)``: a function of a pytree as one of a vector;
* ``optimizers.sgd`` / ``rmsprop`` / ``adam``: autograd's loop-style optimizers over pytrees;
* ``fixed_points.fixed_point``: a fixed-point iteration differentiated implicitly.

Both flattening functions differentiate: called inside a transformed function they
build the same ``concatenate``/``reshape`` graph as written by hand.
"""
from .flatten import flatten, flatten_func, ravel_pytree

__all__ = ["flatten", "flatten_func", "ravel_pytree", "optimizers", "fixed_points"]


def __getattr__(name):
    if name in ("optimizers", "fixed_points"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tlaloc.misc' has no attribute {name!r}")
