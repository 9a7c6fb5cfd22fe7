"""A small pytree library: tuples, lists, dicts, dataclasses and None.

A pytree is a nested container whose leaves are arrays or scalars. ``flatten``
returns the leaves in a deterministic order (dict keys sorted, like JAX) and a
``TreeDef`` that ``unflatten`` uses to rebuild the same structure.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

_CUSTOM: dict[type, tuple[Callable, Callable]] = {}


def register(cls: type, flatten: Callable, unflatten: Callable) -> None:
    """Register ``cls`` as a node: ``flatten(obj) -> (children, aux)``,
    ``unflatten(aux, children) -> obj``."""
    _CUSTOM[cls] = (flatten, unflatten)


@dataclasses.dataclass(frozen=True)
class TreeDef:
    kind: str            # "leaf", "none", "tuple", "list", "dict", "dataclass", "custom", "namedtuple"
    aux: Any = None
    children: tuple = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(map(repr, self.children))
        return f"{self.kind}({inner})"


def _node(obj):
    """(kind, aux, children) for a container, else None."""
    t = type(obj)
    if t in _CUSTOM:
        children, aux = _CUSTOM[t][0](obj)
        return "custom", (t, aux), list(children)
    if obj is None:
        return "none", None, []
    if t is tuple:
        return "tuple", None, list(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return "namedtuple", t, list(obj)
    if t is list:
        return "list", None, list(obj)
    if isinstance(obj, dict):
        keys = sorted(obj.keys(), key=repr) if not all(isinstance(k, str) for k in obj) else sorted(obj)
        return "dict", (t, tuple(keys)), [obj[k] for k in keys]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = tuple(f.name for f in dataclasses.fields(obj) if f.metadata.get("static") is not True)
        static = tuple((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)
                       if f.metadata.get("static") is True)
        return "dataclass", (t, names, static), [getattr(obj, n) for n in names]
    return None


def flatten(tree) -> tuple[list, TreeDef]:
    """Leaves of ``tree`` in order, and its structure."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(obj, leaves) -> TreeDef:
    node = _node(obj)
    if node is None:
        leaves.append(obj)
        return TreeDef("leaf")
    kind, aux, children = node
    return TreeDef(kind, aux, tuple(_flatten(c, leaves) for c in children))


def unflatten(treedef: TreeDef, leaves) -> Any:
    """Inverse of ``flatten``."""
    it = iter(leaves)
    out = _unflatten(treedef, it)
    rest = list(it)
    if rest:
        raise ValueError(f"unflatten: {len(rest)} leaves left over for {treedef!r}")
    return out


def _unflatten(td: TreeDef, it):
    if td.kind == "leaf":
        return next(it)
    children = [_unflatten(c, it) for c in td.children]
    if td.kind == "none":
        return None
    if td.kind == "tuple":
        return tuple(children)
    if td.kind == "namedtuple":
        return td.aux(*children)
    if td.kind == "list":
        return children
    if td.kind == "dict":
        cls, keys = td.aux
        d = dict(zip(keys, children))
        return d if cls is dict else cls(d)
    if td.kind == "dataclass":
        cls, names, static = td.aux
        obj = object.__new__(cls)
        for n, v in list(zip(names, children)) + list(static):
            object.__setattr__(obj, n, v)
        return obj
    if td.kind == "custom":
        cls, aux = td.aux
        return _CUSTOM[cls][1](aux, children)
    raise AssertionError(td.kind)


def unflattener(treedef: TreeDef) -> Callable[[list], Any]:
    """``unflatten(treedef, leaves)`` as a function of ``leaves`` alone, with the walk over
    ``treedef`` done once (for a structure rebuilt many times: ``tl.jit``'s results).
    It takes exactly ``treedef.num_leaves`` leaves (a list or tuple)."""
    n = treedef.num_leaves
    build = _builder(treedef, [0])

    def unflatten_leaves(leaves):
        if len(leaves) != n:
            raise ValueError(f"unflatten: {len(leaves)} leaves for {treedef!r}, which has {n}")
        return build(leaves)
    return unflatten_leaves


def _builder(td: TreeDef, at: list) -> Callable[[list], Any]:
    """A function of the flat leaves that builds ``td``, whose first leaf is ``leaves[at[0]]``."""
    if td.kind == "leaf":
        k = at[0]
        at[0] += 1

        def leaf(leaves):
            return leaves[k]
        leaf.leaf_index = k
        return leaf
    if td.kind == "none":
        return lambda leaves: None
    parts = [_builder(c, at) for c in td.children]
    if td.kind == "tuple":
        return lambda leaves: tuple([p(leaves) for p in parts])
    if td.kind == "namedtuple":
        cls = td.aux
        return lambda leaves: cls(*[p(leaves) for p in parts])
    if td.kind == "list":
        return lambda leaves: [p(leaves) for p in parts]
    if td.kind == "dict":
        cls, keys = td.aux
        if cls is dict:
            return lambda leaves: dict(zip(keys, [p(leaves) for p in parts]))
        return lambda leaves: cls(dict(zip(keys, [p(leaves) for p in parts])))
    if td.kind == "dataclass":
        cls, names, static = td.aux
        # a leaf field is read by index, without a call
        items = [(name, getattr(p, "leaf_index", None), p) for name, p in zip(names, parts)]
        new, setattr_ = object.__new__, object.__setattr__

        def build(leaves):
            obj = new(cls)
            for name, k, p in items:
                setattr_(obj, name, p(leaves) if k is None else leaves[k])
            for name, v in static:
                setattr_(obj, name, v)
            return obj
        return build
    if td.kind == "custom":
        cls, aux = td.aux
        return lambda leaves: _CUSTOM[cls][1](aux, [p(leaves) for p in parts])
    raise AssertionError(td.kind)


def tree_map(fn, tree, *rest):
    leaves, td = flatten(tree)
    others = [flatten(r)[0] for r in rest]
    return unflatten(td, [fn(x, *xs) for x, *xs in zip(leaves, *others)])


def leaves(tree) -> list:
    return flatten(tree)[0]
