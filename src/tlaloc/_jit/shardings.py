"""``tl.jit(f, mesh=..., in_shardings=..., out_shardings=...)``: the mesh axes of every program input
and output, resolved from the user's per-argument specs (``tlaloc.sharding``)."""
from __future__ import annotations

from .. import sharding as shd
from ..errors import ArgumentError


def program_shardings(name: str, mesh, in_shardings, out_shardings, src, trees: list, graph, n_flat: int):
    """A ``tlaloc.sharding.Shardings``: per input and output of the specialised ``graph``, the mesh axes
    of each dim.

    ``in_shardings`` is one spec for every argument, or one per positional argument (``trees``:
    a TreeDef per argument, None for a static one); the first ``n_flat`` inputs are argument
    leaves, the rest closure arrays (replicated). ``out_shardings`` follows ``src.out_tree``, or
    is one spec for every output when the result structure is not known before the call.
    Raises ArgumentError naming the option that does not fit.
    """
    if not isinstance(mesh, shd.Mesh):
        raise ArgumentError(f"jit: mesh must be a tl.sharding.Mesh, got {type(mesh).__name__}")
    dyn = [t for t in trees if t is not None]
    spec = in_shardings
    if isinstance(spec, (tuple, list)) and not isinstance(spec, shd.PartitionSpec):
        if len(spec) != len(trees):
            raise ArgumentError(f"jit: in_shardings has {len(spec)} entries but {name} takes "
                                f"{len(trees)} positional arguments")
        spec = [s for s, t in zip(spec, trees) if t is not None]
    else:
        spec = [spec] * len(dyn)
    leaf_specs = []
    for k, (s, t) in enumerate(zip(spec, dyn)):
        leaf_specs.extend(shd.expand(s, t, f"in_shardings[{k}]"))
    names = [v.aval.names for v in src.graph.inputs]
    ins = []
    for k, v in enumerate(graph.inputs):
        s = leaf_specs[k] if k < n_flat else None          # closure arrays: replicated
        dims = shd.resolve(mesh, s, v.aval.shape, names[k] if k < len(names) else None,
                           f"in_shardings (input `{v.hint or k}`)")
        ins.append(tuple(() for _ in v.aval.shape) if dims is None else dims)
    if src.out_tree is not None:
        out_leaf_specs = shd.expand(out_shardings, src.out_tree, "out_shardings")
    elif out_shardings is None or isinstance(out_shardings, (shd.PartitionSpec, shd.AxisRules)):
        out_leaf_specs = [out_shardings] * len(graph.outputs)
    else:
        raise ArgumentError("jit: the result structure of this function is not known before it runs; give "
                            "out_shardings as one PartitionSpec (or None) for every output")
    out_names = [getattr(o.aval, "names", None) for o in src.graph.outputs]
    outs = []
    for k, o in enumerate(graph.outputs):
        shape = tuple(o.aval.shape)
        outs.append(shd.resolve(mesh, out_leaf_specs[k], shape, out_names[k] if k < len(out_names) else None,
                                f"out_shardings (output {k})"))
    return shd.Shardings(mesh, tuple(ins), tuple(outs))


__all__ = ["program_shardings"]
