"""Sharding a compiled program over a device mesh (Shardy + XLA's SPMD partitioner).

    mesh = tl.sharding.Mesh({"data": 4, "model": 2})          # 8 devices
    P = tl.sharding.PartitionSpec
    step = tl.jit(train_step, mesh=mesh,
                  in_shardings=({"w1": P(None, "model"), "w2": P("model", None)},   # params
                                P("data", None), P("data")),                       # batch
                  out_shardings=None)                         # None: XLA decides
    # or map the axis names of typed arguments (F32["batch", "hidden"]) onto mesh axes:
    step = tl.jit(train_step, mesh=mesh, in_shardings=tl.sharding.axis_rules(batch="data", hidden="model"))

A ``PartitionSpec`` has one entry per array axis: ``None`` (not split), a mesh
axis name, or a tuple of mesh axis names (split over their product). A spec
shorter than the array leaves the trailing axes unsplit. ``in_shardings`` and
``out_shardings`` are pytree prefixes of the arguments (a tuple with one entry
per positional argument) and of the result: each leaf a ``PartitionSpec``,
``None`` (replicated for an input; the partitioner's choice for an output), or
``axis_rules(...)``, which maps the named axes of a typed value
(``tl.F32["batch", "hidden"]``) onto mesh axes. A single spec or rules object
applies to every leaf.

The emitter writes them as Shardy attributes (``sdy.mesh`` and
``#sdy.sharding<@mesh, [{"data"}, {}]>`` on ``@main``'s arguments and results);
XLA partitions the program (``use_spmd_partitioning``, ``use_shardy_partitioner``)
and runs one shard per device. Results are global arrays (``np.asarray``
gathers them); sharded results passed back in stay where they are.

Here, tests use 8 virtual CPU devices: ``XLA_FLAGS=--xla_force_host_platform_device_count=8``
set before jax starts its CPU backend.
"""
from __future__ import annotations

import dataclasses
import math

from . import _pytree
from .errors import ArgumentError, ShapeError


class Mesh:
    """A logical device mesh: named axes and their sizes, in order.

    Args:
      axes: ``{"data": 4, "model": 2}`` (insertion order is the mesh order; the
        devices fill it row-major: device ``4 * 0 + ...``).
      devices: optional device ids in mesh order (default ``0 .. size-1``).
    """

    def __init__(self, axes: dict, devices=None):
        if not isinstance(axes, dict) or not axes:
            raise ArgumentError(f"Mesh: axes must be a non-empty dict of name -> size, got {axes!r}")
        for name, size in axes.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ArgumentError(f"Mesh: axis name {name!r} must be an identifier string")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ArgumentError(f"Mesh: axis {name!r} has size {size!r}; give a positive int")
        self.axes = dict(axes)
        self.size = math.prod(self.axes.values())
        ids = list(range(self.size)) if devices is None else [int(d) for d in devices]
        if len(ids) != self.size or len(set(ids)) != len(ids):
            raise ArgumentError(f"Mesh: {self.size} devices needed for {self.axes}, got ids {ids}")
        self.device_ids = tuple(ids)

    @property
    def shape(self) -> tuple:
        return tuple(self.axes.values())

    @property
    def axis_names(self) -> tuple:
        return tuple(self.axes)

    def sdy_text(self, name: str = "mesh") -> str:
        """The ``sdy.mesh`` op declaring this mesh."""
        axes = ", ".join(f'"{a}"={n}' for a, n in self.axes.items())
        ids = "" if self.device_ids == tuple(range(self.size)) else \
            f", device_ids=[{', '.join(map(str, self.device_ids))}]"
        return f"sdy.mesh @{name} = <[{axes}]{ids}>"

    def __eq__(self, other):
        return isinstance(other, Mesh) and (self.axes, self.device_ids) == (other.axes, other.device_ids)

    def __hash__(self):
        return hash((tuple(self.axes.items()), self.device_ids))

    def __repr__(self) -> str:
        return f"Mesh({self.axes})"


class PartitionSpec(tuple):
    """One entry per array axis: ``None``, a mesh axis name, or a tuple of them."""

    def __new__(cls, *entries):
        for e in entries:
            ok = e is None or isinstance(e, str) or (isinstance(e, tuple) and all(isinstance(a, str) for a in e))
            if not ok:
                raise ArgumentError(f"PartitionSpec: entry {e!r} must be None, a mesh axis name or a tuple "
                                    f"of mesh axis names")
        return super().__new__(cls, entries)

    def __repr__(self) -> str:
        return f"PartitionSpec{tuple.__repr__(self)}"


P = PartitionSpec


@dataclasses.dataclass(frozen=True)
class AxisRules:
    """Named array axes -> mesh axes (``axis_rules(batch="data", hidden="model")``)."""
    rules: tuple            # ((array axis name, mesh axis name or tuple), ...)

    def spec_for(self, names) -> PartitionSpec:
        table = dict(self.rules)
        return PartitionSpec(*[table.get(n) if n is not None else None for n in names])


def axis_rules(**rules) -> AxisRules:
    """Map named array axes (from typed annotations) onto mesh axes."""
    for k, v in rules.items():
        PartitionSpec(v)                      # validates the value
    return AxisRules(tuple(rules.items()))


# -- resolving specs to per-leaf dim shardings (used by tl.jit) ------------------------------------

_LEAF = _pytree.TreeDef("leaf")


def _is_spec_leaf(x) -> bool:
    return x is None or isinstance(x, (PartitionSpec, AxisRules))


def expand(spec, tree, where: str) -> list:
    """``spec`` (a pytree prefix of ``tree``) as one spec-leaf per leaf of ``tree``."""
    if _is_spec_leaf(spec):
        return [spec] * tree.num_leaves
    if tree.kind == "leaf":
        raise ArgumentError(f"{where}: {spec!r} is not a PartitionSpec, None or axis_rules(...); "
                            f"wrap a tuple of mesh axes as tl.sharding.PartitionSpec(...)")
    if isinstance(spec, dict):
        if tree.kind != "dict":
            raise ArgumentError(f"{where}: a dict of shardings for an argument of structure {tree!r}")
        keys = tree.aux[1] if isinstance(tree.aux, tuple) else tree.aux
        if set(spec) != set(keys):
            raise ArgumentError(f"{where}: shardings for keys {sorted(spec, key=repr)} but the value has keys "
                                f"{sorted(keys, key=repr)}")
        children = [spec[k] for k in keys]
    elif isinstance(spec, (tuple, list)):
        children = list(spec)
    else:
        node = _pytree._node(spec)       # a dataclass (model) of specs, as tlaloc.distributed.fsdp_shardings builds
        if node is None or node[0] != tree.kind or type(spec) is not _node_class(tree):
            raise ArgumentError(f"{where}: cannot read {spec!r} as shardings for a value of structure {tree!r}")
        children = node[2]
    if len(children) != len(tree.children):
        raise ArgumentError(f"{where}: {len(children)} shardings for a value with {len(tree.children)} parts")
    out = []
    for k, (s, t) in enumerate(zip(children, tree.children)):
        out.extend(expand(s, t, f"{where}[{k}]"))
    return out


def _node_class(tree):
    """The class of a dataclass / namedtuple / custom node of ``tree`` (None for other kinds)."""
    if tree.kind == "dataclass":
        return tree.aux[0]
    if tree.kind == "namedtuple":
        return tree.aux
    if tree.kind == "custom":
        return tree.aux[0]
    return None


def resolve(mesh: Mesh, spec, shape, names, where: str):
    """``spec`` for a value of ``shape`` as per-dim tuples of mesh axes, or ``None`` (unspecified)."""
    if spec is None:
        return None
    if isinstance(spec, AxisRules):
        if names is None:
            raise ArgumentError(f"{where}: axis_rules need named axes, but this value has none; annotate it "
                                f"(tl.F32['batch', 'hidden']) or give a PartitionSpec")
        spec = spec.spec_for(names)
    if len(spec) > len(shape):
        raise ShapeError(f"{where}: PartitionSpec {tuple(spec)} has {len(spec)} entries for a value of rank "
                         f"{len(shape)}")
    dims, used = [], set()
    for k, d in enumerate(shape):
        e = spec[k] if k < len(spec) else None
        axes = () if e is None else ((e,) if isinstance(e, str) else tuple(e))
        for a in axes:
            if a not in mesh.axes:
                raise ArgumentError(f"{where}: mesh axis {a!r} is not in {mesh!r}")
            if a in used:
                raise ArgumentError(f"{where}: mesh axis {a!r} shards two axes of one value")
            used.add(a)
        dims.append(axes)
    return tuple(dims)


@dataclasses.dataclass(frozen=True)
class Shardings:
    """What the emitter writes: a mesh, and per program input / output the mesh
    axes of each dim (``(("data",), ())``) or ``None`` (unspecified)."""
    mesh: Mesh
    inputs: tuple
    outputs: tuple


def sdy_sharding(dims, mesh_name: str = "mesh") -> str:
    """``#sdy.sharding<@mesh, [{"data"}, {}]>`` for per-dim mesh axes."""
    parts = ", ".join("{" + ", ".join(f'"{a}"' for a in axes) + "}" for axes in dims)
    return f"#sdy.sharding<@{mesh_name}, [{parts}]>"


__all__ = ["Mesh", "PartitionSpec", "P", "AxisRules", "axis_rules", "Shardings"]
