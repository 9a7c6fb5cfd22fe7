"""Shared pieces of the optimizers: leaf plumbing and step-dependent scalars.

Scalars that depend on the step count (learning rate, bias corrections) are
Python floats when the count is a concrete array (eager NumPy): they then
combine with float32 leaves exactly as PyTorch's Python-double scalars do. On
a symbolic count (inside ``tl.jit``) they are 0-d arrays converted to each
leaf's dtype.
"""
from __future__ import annotations

import numpy as np

from .. import _pytree
from .. import numpy as tnp
from .._core.builder import Value
from .._prims.broadcasting import cast_like
from .. import dtypes as _dt
from ..errors import ArgumentError, DTypeError


def is_symbolic(x) -> bool:
    return type(x) is Value


def lr_at(lr, count):
    """The learning rate for the update that follows ``count`` earlier updates."""
    if callable(lr):
        v = lr(count if is_symbolic(count) else int(count))
        return v if is_symbolic(v) else float(v)
    return float(lr)


def like(s, leaf):
    """``s`` (a Python float or a 0-d array) ready to combine with ``leaf``."""
    return cast_like(s, leaf) if is_symbolic(s) else s


def power(base: float, t):
    """``base ** t`` for a Python int ``t`` (a float) or a symbolic count (an array)."""
    if is_symbolic(t):
        return tnp.power(base, tnp.astype(t, tnp.float64))
    return base ** t


def next_count(count):
    """The count after one more update (int32, like ``opt.init``'s)."""
    if is_symbolic(count):
        return count + 1
    return np.asarray(int(count) + 1, np.int32)


def step_number(t):
    """``t`` as a Python int when concrete (so scalars stay Python floats), else as is."""
    return t if is_symbolic(t) else int(t)


def flatten_like(params, grads, who: str):
    """Leaves of params and grads, after checking that the structures agree."""
    p_leaves, p_tree = _pytree.flatten(params)
    g_leaves, g_tree = _pytree.flatten(grads)
    if p_tree != g_tree:
        raise ArgumentError(f"{who}.update: grads must have the structure of params (the gradient of a loss "
                            f"with respect to these params); {tree_difference(p_tree, g_tree, 'params', 'grads')}")
    for k, (p, g) in enumerate(zip(p_leaves, g_leaves)):
        ps, gs = _static_shape(p), _static_shape(g)
        if ps is not None and gs is not None and ps != gs:
            raise ArgumentError(f"{who}.update: the parameter at {leaf_paths(p_tree)[k]} has shape {ps} but its "
                                f"gradient has shape {gs}; each gradient must have its parameter's shape (no "
                                f"broadcasting); were the grads taken with respect to these params?")
        pd, gd = _float_dtype(p), _float_dtype(g)
        if pd is not None and gd is not None and pd != gd:
            path = leaf_paths(p_tree)[k]
            raise DTypeError(f"{who}.update: the parameter at {path} is {pd.name} but its gradient is {gd.name}; "
                             f"float dtypes never mix implicitly (the update would silently become {gd.name} or "
                             f"lose precision). Cast the grads to the params' dtypes first (each leaf "
                             f"g.astype(p.dtype)), or compute the loss in {pd.name}")
    return p_leaves, g_leaves, p_tree


def _static_shape(x):
    """The shape of an array leaf as a tuple of ints, or None (Python numbers, unknown sizes)."""
    if isinstance(x, (float, int)):
        return None
    try:
        shape = tuple(getattr(x, "shape"))
    except Exception:                                   # no shape, or a rank unknown when the graph is built
        return None
    return shape if all(type(d) is int for d in shape) else None


def _float_dtype(x):
    """The float dtype of an array leaf (NumPy, device or symbolic), or None (Python numbers, ints, unknown)."""
    dt = getattr(x, "dtype", None)
    if dt is None or isinstance(x, (float, int)):
        return None
    dt = np.dtype(dt)
    return dt if _dt.is_float(dt) else None


def leaf_paths(treedef) -> list:
    """A readable path per leaf of ``treedef``, in leaf order: ``['w']``, ``.layers[0].weight``, ``<root>``."""
    out: list = []

    def walk(td, prefix):
        if td.kind == "leaf":
            out.append(prefix or "<root>")
            return
        if td.kind == "dict":
            names = [f"[{k!r}]" for k in td.aux[1]]
        elif td.kind == "dataclass":
            names = [f".{n}" for n in td.aux[1]]
        elif td.kind == "namedtuple":
            names = [f".{n}" for n in td.aux._fields]
        else:
            names = [f"[{i}]" for i in range(len(td.children))]
        for name, child in zip(names, td.children):
            walk(child, prefix + name)
    walk(treedef, "")
    return out


def _describe(td) -> str:
    """A short text for one node of a TreeDef: ``Linear(out_features=2, ...)``, ``dict``, ``an array``."""
    if td.kind == "leaf":
        return "an array"
    if td.kind == "none":
        return "None"
    if td.kind == "dataclass":
        cls, _, static = td.aux
        return f"{cls.__qualname__}({', '.join(f'{n}={v!r}' for n, v in static)})"
    if td.kind == "namedtuple":
        return td.aux.__qualname__
    if td.kind == "custom":
        return td.aux[0].__qualname__
    return f"a {td.kind} of {len(td.children)}"


def tree_difference(a, b, name_a: str, name_b: str, prefix: str = "") -> str:
    """Where TreeDefs ``a`` and ``b`` first differ: ``at .layers[2]: params has Linear(in_features=3,
    out_features=2), grads has Linear(in_features=3, out_features=3)``."""
    where = prefix or "<root>"
    if a == b:
        return ""
    same_node = a.kind == b.kind and len(a.children) == len(b.children) and (
        a.kind in ("tuple", "list") or a.aux == b.aux)
    if not same_node:
        if a.kind == "dict" and b.kind == "dict":
            return (f"at {where}: {name_a} has keys {sorted(map(str, a.aux[1]))}, {name_b} has "
                    f"{sorted(map(str, b.aux[1]))}")
        return f"at {where}: {name_a} has {_describe(a)}, {name_b} has {_describe(b)}"
    if a.kind == "dict":
        names = [f"[{k!r}]" for k in a.aux[1]]
    elif a.kind == "dataclass":
        names = [f".{n}" for n in a.aux[1]]
    elif a.kind == "namedtuple":
        names = [f".{n}" for n in a.aux._fields]
    else:
        names = [f"[{i}]" for i in range(len(a.children))]
    for n, x, y in zip(names, a.children, b.children):
        if x != y:
            return tree_difference(x, y, name_a, name_b, prefix + n)
    return f"at {where}: {name_a} has {_describe(a)}, {name_b} has {_describe(b)}"


def leaves_of(tree, p_tree, who: str, what: str, params=None):
    leaves, t = _pytree.flatten(tree)
    if t != p_tree:
        raise ArgumentError(f"{who}.update: state.{what} does not have the structure of params (was the state "
                            f"made by {who}.init for these params?); {tree_difference(p_tree, t, 'params', what)}")
    for k, (leaf, param) in enumerate(zip(leaves, params or ())):
        ls, ps = _static_shape(leaf), _static_shape(param)
        if ls is not None and ps is not None and ls != ps:
            raise ArgumentError(f"{who}.update: state.{what} at {leaf_paths(p_tree)[k]} has shape {ls} but the "
                                f"parameter has shape {ps} (was the state made by {who}.init for these params?)")
    return leaves


def zeros_tree(params):
    return _pytree.tree_map(tnp.zeros_like, params)
