"""Batching rules for indexing: ``getitem``, ``index_set``, ``index_add``,
``dynamic_slice``, ``dynamic_update_slice``, ``gather``, ``scatter_add``.

Two forms of a batched index:

* The index is the same for every example (only ``x``/``v`` batched): a
  leading full slice, ``x[:, idx]``.
* The index differs per example: a leading *batch index* ``iota(B)`` turns the
  read into a gather (``x[arange(B)[:, None], i]``) and the write into a
  scatter, so every example reads and writes its own row; index arrays get unit
  axes after the batch axis so that they broadcast against it.

NumPy places the axes of advanced (array) indices first when they are not
adjacent in the index, and in place otherwise; both forms compute where the
batch axis lands, and a transpose restores "batch first, then one example's
layout" (the value written by ``index_set``/``index_add`` gets the inverse).

Slice bounds that differ per example (``x[i:i + k]`` with a batched ``i``) have
no fixed-shape form and are refused; ``lax.dynamic_slice`` batches.
"""
from __future__ import annotations

import numpy as np

from .._prims import indexing as _ix
from .._prims import shape_ops as _sh
from .._prims.elementwise import add_p
from .._prims.selection import clamp_p
from ..errors import NoRuleError
from .batching import (aval_of, axis_size, batched, emit, example_rank, example_shape,
                       expand_after_batch, is_value, rank, to_front)

_ALL = ("s", None, None, None)
_I64 = np.dtype(np.int64)


# -- the layout of one example's index ---------------------------------------------------------

def _layout(name, spec, x_rank, dyn, ddims):
    """What NumPy does with one example's index.

    Returns a dict: ``arrays`` (any index array), ``adjacent`` (advanced indices
    side by side), ``n_adv`` (rank of the broadcast index arrays), ``pre``
    (result axes before them when adjacent), ``rank`` (rank of the result).
    """
    for j, (v, d) in enumerate(zip(dyn, ddims)):
        if example_rank(v, d) > 0 and aval_of(v).dtype is not None and aval_of(v).dtype.kind == "b":
            raise NoRuleError(f"no batching rule for `{name}` with a boolean mask index (its result size "
                              f"depends on the data); use np.where(mask, x, 0) instead")
    ranks = [example_rank(v, d) for v, d in zip(dyn, ddims)]
    tags = [e[0] for e in spec]
    arrays = [ranks[e[1]] for e in spec if e[0] == "d" and ranks[e[1]] > 0]
    consumed = sum(1 for t in tags if t in ("i", "s", "d"))
    expansion = x_rank - consumed
    adv = [k for k, e in enumerate(spec) if e[0] in ("i", "d")] if arrays else []
    adjacent = bool(adv) and adv == list(range(adv[0], adv[-1] + 1))
    pre = 0
    for e in spec[:adv[0] if adv else 0]:
        pre += expansion if e[0] == "e" else 1
    n_adv = max(arrays, default=0)
    res_rank = tags.count("s") + tags.count("n") + expansion + (n_adv if arrays else 0)
    return dict(arrays=bool(arrays), adjacent=adjacent, n_adv=n_adv, pre=pre, rank=res_rank)


def _shift_spec(spec, k: int):
    """``spec`` with dynamic operand numbers shifted by ``k``."""
    def bound(b):
        return (b[0], b[1] + k) + tuple(b[2:]) if isinstance(b, tuple) else b

    out = []
    for e in spec:
        if e[0] == "d":
            out.append(("d", e[1] + k))
        elif e[0] == "s":
            out.append(("s",) + tuple(bound(b) for b in e[1:]))
        else:
            out.append(e)
    return tuple(out)


def _bounds_batched(spec, ddims) -> bool:
    return any(e[0] == "s" and any(isinstance(b, tuple) and ddims[b[1]] is not None for b in e[1:])
               for e in spec)


def _index_batched(spec, ddims) -> bool:
    return any(e[0] == "d" and ddims[e[1]] is not None for e in spec)


def _plan(name, x, dx, dyn, ddims, spec):
    """The batched index: ``(x_b, dyn', spec', info, fix)``.

    ``x_b[spec'(dyn')]`` is the raw batched result; ``transpose(raw, fix)`` puts
    it batch first, then one example's layout (``fix is None``: already so)."""
    if _bounds_batched(spec, ddims):
        raise NoRuleError(f"no batching rule for `{name}` with slice bounds that differ per example "
                          f"(x[i:j] with a batched i or j); use lax.dynamic_slice(x, starts, sizes)")
    info = _layout(name, spec, example_rank(x, dx), dyn, ddims)
    n, p = info["n_adv"], info["pre"]
    post = info["rank"] - n - p
    xb = batched(x, dx)
    if not _index_batched(spec, ddims):
        fix = None
        if info["arrays"] and not info["adjacent"]:        # raw (adv, B, rest): NumPy puts index axes first
            fix = (n,) + tuple(range(n)) + tuple(range(n + 1, info["rank"] + 1))
        return xb, list(dyn), (_ALL,) + tuple(spec), info, fix
    new_dyn = [emit(_sh.iota_p, shape=(axis_size(),) + (1,) * n, dtype=_I64, dimension=0)]
    for v, d in zip(dyn, ddims):
        new_dyn.append(v if d is None else expand_after_batch(to_front(v, d), n - example_rank(v, d)))
    fix = None
    if info["arrays"] and info["adjacent"] and p > 0:       # raw (B, adv, pre, post)
        fix = (0,) + tuple(1 + n + j for j in range(p)) + tuple(1 + j for j in range(n)) + \
            tuple(1 + n + p + j for j in range(post))
    return xb, new_dyn, (("d", 0),) + _shift_spec(spec, 1), info, fix


def _inverse(perm):
    inv = [0] * len(perm)
    for i, a in enumerate(perm):
        inv[a] = i
    return tuple(inv)


# -- getitem / index_set / index_add ---------------------------------------------------------------

def _getitem(args, dims, *, spec, **params):
    (x, *dyn), (dx, *ddims) = args, dims
    xb, dyn2, spec2, info, fix = _plan("getitem", x, dx, dyn, ddims, spec)
    out = _ix.getitem_p.bind(xb, *dyn2, spec=spec2, **params)
    return (out if fix is None else _sh.transpose(out, fix)), 0


def _arrange_value(v, dv, info, fix):
    """The value written at a batched index, laid out like the raw batched result."""
    if not is_value(v) and np.ndim(v) == 0:
        return v                                     # a scalar broadcasts anywhere
    if dv is None and fix is None:
        return v                                     # broadcasts from the right, as for one example
    vb = to_front(v, dv) if dv is not None else _sh.expand_dims(v, 0)
    vb = expand_after_batch(vb, info["rank"] - example_rank(v, dv))
    return vb if fix is None else _sh.transpose(vb, _inverse(fix))


def _update_rule(prim, name):
    def rule(args, dims, *, spec, **params):
        (x, v, *dyn), (dx, dv, *ddims) = args, dims
        xb, dyn2, spec2, info, fix = _plan(name, x, dx, dyn, ddims, spec)
        return prim.bind(xb, _arrange_value(v, dv, info, fix), *dyn2, spec=spec2, **params), 0
    return rule


_ix.getitem_p.batch = _getitem
_ix.index_set_p.batch = _update_rule(_ix.index_set_p, "index_set")
_ix.index_add_p.batch = _update_rule(_ix.index_add_p, "index_add")


# -- take / scatter along one axis -------------------------------------------------------------------

def _along(axis, x, dx):
    a = axis % example_rank(x, dx)
    return a, (_ALL,) * a + (("d", 0),)


def _gather(args, dims, *, axis):
    (x, i), (dx, di) = args, dims
    if di is None:
        x = to_front(x, dx)
        return _ix.gather(x, i, axis % (rank(x) - 1) + 1), 0
    a, spec = _along(axis, x, dx)
    if dx is None:           # a shared table: the batch axis lands where the index axes go
        return to_front(_ix.gather(x, to_front(i, di), a), a), 0
    return _getitem([x, i], [dx, di], spec=spec)


def _scatter_add(args, dims, *, axis):
    (x, i, u), (dx, di, du) = args, dims
    a, spec = _along(axis, x, dx)
    return _ix.index_add_p.batch([x, u, i], [dx, du, di], spec=spec)


_ix.gather_p.batch = _gather
_ix.scatter_add_p.batch = _scatter_add


# -- dynamic slices ------------------------------------------------------------------------------------

def _window_index(starts, sdims, sizes, dims_of_x):
    """Per-example windows as index arrays: for axis ``a``, ``clamp(start) + arange(size)``
    shaped to broadcast to ``(B, *sizes)``; plus the batch index."""
    n = len(sizes)
    out = [emit(_sh.iota_p, shape=(axis_size(),) + (1,) * n, dtype=_I64, dimension=0)]
    for a, (s, d, size, dim) in enumerate(zip(starts, sdims, sizes, dims_of_x)):
        # StableHLO clamps the start into [0, dim - size]
        s = clamp_p.bind(np.asarray(0, _I64), to_front(s, d), np.asarray(dim - size, _I64))
        if d is not None:
            s = _sh.reshape(s, (axis_size(),) + (1,) * n)
        offs = emit(_sh.iota_p, shape=tuple(size if k == a + 1 else 1 for k in range(n + 1)),
                    dtype=_I64, dimension=a + 1)
        out.append(add_p.bind(s, offs))
    return out, tuple(("d", k) for k in range(n + 1))


def _dynamic_slice(args, dims, *, sizes):
    (x, *starts), (dx, *sdims) = args, dims
    xb = batched(x, dx)
    if all(d is None for d in sdims):
        return _ix.dynamic_slice(xb, [0] + list(starts), (axis_size(),) + tuple(sizes)), 0
    idx, spec = _window_index(starts, sdims, sizes, example_shape(xb, 0))
    return _ix.getitem_p.bind(xb, *idx, spec=spec), 0


def _dynamic_update_slice(args, dims):
    (x, u, *starts), (dx, du, *sdims) = args, dims
    xb, ub = batched(x, dx), batched(u, du)
    if all(d is None for d in sdims):
        return _ix.dynamic_update_slice(xb, ub, [0] + list(starts)), 0
    idx, spec = _window_index(starts, sdims, example_shape(ub, 0), example_shape(xb, 0))
    return _ix.index_set_p.bind(xb, ub, *idx, spec=spec), 0


_ix.dynamic_slice_p.batch = _dynamic_slice
_ix.dynamic_update_slice_p.batch = _dynamic_update_slice
