"""Call-time refusals of arguments a transform cannot honour, raised as ``ArgumentError``
at the user's call site (``file:line:col``), naming the parameter, what it got, what was
expected and how to fix it.

* ``None`` at a differentiated position (``argnums`` of ``grad``/``jacfwd``/...): there is
  nothing to differentiate. JAX returns None there (None is an empty pytree); tlaloc
  refuses by name, since it is almost always a forgotten array. (A None elsewhere is
  passed through; used as an array inside the function it is refused where it is used.)
* ``np.ma.MaskedArray`` and ``np.matrix``: tlaloc computes on their plain data, so the
  mask would be ignored (``np.sum`` of a masked array skips masked entries) and ``*`` of
  matrices would be elementwise, not a matrix product: silently different results.
"""
from __future__ import annotations

import numpy as np

from .. import _pytree
from ..errors import ArgumentError


def refuse_none_argnums(kind: str, fn, args, argnums) -> None:
    """Raise where an argument in ``argnums`` (ints, possibly negative) is None."""
    for a in argnums:
        if -len(args) <= a < len(args) and args[a] is None:
            raise ArgumentError(
                f"{_where()}{kind}: argument `{_param_name(fn, a % len(args))}` (argnums={a}) is None, but "
                f"{kind} differentiates with respect to it and needs a floating-point array; pass an array "
                f"there (e.g. np.asarray(..., dtype=np.float64)), or leave it out of argnums")


def refuse_none_arguments(kind: str, fn, args) -> None:
    """Raise where any argument is None (``jacfwd``/``jacrev``/``hessian`` take arrays only)."""
    for k, arg in enumerate(args):
        if arg is None:
            name = _param_name(fn, k)
            raise ArgumentError(
                f"{_where()}{kind}: argument `{name}` is None; {kind} takes array arguments only. Bind it "
                f"first, e.g. {kind}(lambda *xs: f(None, *xs)) or functools.partial, or pass an array")


def refuse_array_subclasses(kind: str, fn, args) -> None:
    """Raise where an argument (or a leaf of one) is a masked array or an ``np.matrix``."""
    for k, arg in enumerate(args):
        if type(arg) is np.ndarray:
            continue
        leaves = [arg] if isinstance(arg, np.ndarray) else _pytree.flatten(arg)[0]
        for leaf in leaves:
            if type(leaf) is np.ndarray or not isinstance(leaf, np.ndarray):
                continue
            name = _param_name(fn, k)
            label = f"`{name}`" + ("" if leaf is arg else " (a leaf of it)")
            if isinstance(leaf, np.ma.MaskedArray):
                raise ArgumentError(
                    f"{_where()}{kind}: argument {label} is a masked array (np.ma.MaskedArray); tlaloc "
                    f"computes on plain arrays and would ignore its mask. Pass its data, {name}.data, or "
                    f"{name}.filled(value) with the value masked entries should take (or a separate "
                    f"boolean mask argument used with np.where)")
            if isinstance(leaf, np.matrix):
                raise ArgumentError(
                    f"{_where()}{kind}: argument {label} is an np.matrix; tlaloc computes on plain "
                    f"arrays, where `*` is elementwise (a matrix product for np.matrix). Pass "
                    f"np.asarray({name}) and write matrix products with @")


def _param_name(fn, k: int) -> str:
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    if code is not None and k < code.co_argcount:
        return code.co_varnames[k]
    return str(k)


def _where() -> str:
    from .._frontend.source import user_call_site
    filename, line, col = user_call_site()
    return f"{filename}:{line}:{col}: " if filename else ""
