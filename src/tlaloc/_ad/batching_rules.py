"""Batching rules: elementwise, selection, reductions, shapes, misc.

Each rule is ``rule(args, dims, **params) -> (out, out_dim)`` (see ``batching.py``)
and puts the batch axis first (a unary elementwise op leaves it where it is).
Generic builders cover the families:

* ``elementwise``: NumPy broadcasting; batched operands of lower rank get unit
  axes after the batch axis, unbatched operands broadcast from the right as
  they would for one example.
* ``reduction`` / ``axis_param``: shift per-example axes past the batch axis
  (``None`` means every per-example axis, never the batch axis).
* the shape-only helpers of derivative code (``sum_to``, ``dim_size`` ...) are
  composites: ``batching.install_rules`` gives them one rule that batches their
  body (``batching.composite``).

Linear algebra, indexing and control flow live in ``batching_linalg.py``,
``batching_index.py`` and ``batching_control.py``.
"""
from __future__ import annotations

from .._prims import broadcasting as _bc
from .._prims import elementwise as _ew
from .._prims import misc as _misc
from .._prims import reductions as _red
from .._prims import selection as _sel
from .._prims import shape_ops as _sh
from .._prims import rng as _rng
from .._prims import slicing as _slc
from .._prims import special as _special
from .._core.control import stack_ys_p
from .._prims._rules import normalize_axes
from ..errors import NoRuleError
from .batching import (BY_NAME, axis_size, batched, example_rank, example_shape, expand_after_batch,
                       rank, to_front)


# -- generic builders ------------------------------------------------------------------------

def elementwise(prim, weak_scalars_from=None):
    """n-ary elementwise with NumPy broadcasting.

    ``weak_scalars_from``: the first operand whose dtype takes part in NumPy's
    promotion (0; 1 for ``select``'s values), for operations whose Python-scalar
    operands adopt the other operands' dtype (see ``batching._weak_operands``)."""
    def rule(args, dims, **params):
        if len(args) == 1:
            return prim.bind(args[0], **params), dims[0]
        r = max(example_rank(a, d) for a, d in zip(args, dims))
        new = [a if d is None else expand_after_batch(to_front(a, d), r - example_rank(a, d))
               for a, d in zip(args, dims)]
        return prim.bind(*new, **params), 0
    rule.weak_scalars_from = weak_scalars_from
    return rule


def shift_axes(axes, r: int):
    """Per-example ``axes`` (``None``: all of them) as axes of the array batched at 0."""
    if axes is None:
        return tuple(range(1, r + 1))
    return tuple(a + 1 for a in normalize_axes(axes, r))


def shift_axis(axis: int, r: int) -> int:
    return normalize_axes(axis, r)[0] + 1


def reduction(prim):
    """``prim(x, axes=..., keepdims=...)`` (also ``prod_others(x, axes=...)``)."""
    def rule(args, dims, *, axes, **params):
        x = to_front(args[0], dims[0])
        return prim.bind(x, axes=shift_axes(axes, rank(x) - 1), **params), 0
    return rule


def axis_param(prim):
    """``prim(*xs, axis=..., ...)`` whose operands share one per-example shape
    (``cumsum``, ``cumprod_grad(g, x)`` ...): all batched, the axis shifted."""
    def rule(args, dims, *, axis, **params):
        xs = [batched(a, d) for a, d in zip(args, dims)]
        return prim.bind(*xs, axis=shift_axis(axis, rank(xs[0]) - 1), **params), 0
    return rule


def batch_native(prim):
    """Operations that already treat leading axes as a batch (``cholesky``, ``inv`` ...)."""
    def rule(args, dims, **params):
        out = prim.bind(*(batched(a, d) for a, d in zip(args, dims)), **params)
        return (tuple(out), (0,) * len(out)) if prim.multiple_results else (out, 0)
    return rule


def _register(prims, make):
    for p in prims:
        p.batch = make(p)


# -- elementwise and selection ----------------------------------------------------------------

_register(list(_ew.UNARY.values()), elementwise)
_register([_misc.copy_p, _special.polygamma_p, _ew.integer_pow_p, _ew.convert_p, _bc.zeros_like_p,
           _misc.stop_gradient_p], elementwise)
# NumPy's binary operations: a Python-scalar operand adopts the other operands' dtype
_register([_ew.add_p, _ew.sub_p, _ew.mul_p, _ew.div_p, _ew.pow_p, _ew.max_p, _ew.min_p, _ew.atan2_p,
           _ew.rem_p, _ew.floordiv_p, _ew.lt_p, _ew.le_p, _ew.gt_p, _ew.ge_p, _ew.eq_p, _ew.ne_p,
           _ew.and_p, _ew.or_p, _ew.safe_mul_p, _ew.safe_div_p, _sel.clamp_p], lambda p: elementwise(p, 0))
_sel.select_p.batch = elementwise(_sel.select_p, 1)


# -- reductions ------------------------------------------------------------------------------

_register([_red.reduce_sum_p, _red.reduce_max_p, _red.reduce_min_p, _red.reduce_prod_p, _red.reduce_any_p,
           _red.reduce_all_p, _red.prod_others_p], reduction)
_register([_red.cumsum_p, _red.cumprod_p, _red.cummax_p, _red.cumprod_grad_p, _red.cumprod_jvp_p], axis_param)


def _arg_reduction(prim):
    def rule(args, dims, *, axis, keepdims):
        x = to_front(args[0], dims[0])
        r = rank(x) - 1
        if axis is not None:
            return prim.bind(x, axis=shift_axis(axis, r), keepdims=keepdims), 0
        out = prim.bind(_sh.reshape(x, (axis_size(), -1)), axis=1, keepdims=False)   # over each example
        return (_sh.reshape(out, (axis_size(),) + (1,) * r) if keepdims else out), 0
    return rule


_register([_red.argmax_p, _red.argmin_p], _arg_reduction)


# -- shapes ------------------------------------------------------------------------------------

def _reshape(args, dims, *, shape):
    return _sh.reshape(to_front(args[0], dims[0]), (axis_size(),) + tuple(shape)), 0


def _transpose(args, dims, *, axes):
    x = to_front(args[0], dims[0])
    r = rank(x) - 1
    perm = tuple(range(r, 0, -1)) if axes is None else tuple(a % r + 1 for a in axes)
    return _sh.transpose(x, (0,) + perm), 0


def _broadcast_to(args, dims, *, shape):
    x = to_front(args[0], dims[0])
    x = expand_after_batch(x, len(shape) - (rank(x) - 1))
    return _sh.broadcast_to(x, (axis_size(),) + tuple(shape)), 0


def _broadcast_in_dim(args, dims, *, shape, broadcast_dimensions):
    x = to_front(args[0], dims[0])
    return _sh.broadcast_in_dim(x, (axis_size(),) + tuple(shape),
                                (0,) + tuple(d + 1 for d in broadcast_dimensions)), 0


def _expand_dims(args, dims, *, axis):
    x = to_front(args[0], dims[0])
    out_rank = rank(x) - 1 + len(axis)
    return _sh.expand_dims(x, tuple(a % out_rank + 1 for a in axis)), 0


def _squeeze(args, dims, *, axis):
    x = to_front(args[0], dims[0])
    if axis is None:       # every unit axis of one example, never the batch axis
        ax = tuple(i + 1 for i, s in enumerate(example_shape(x, 0)) if s == 1)
    else:
        ax = shift_axes(axis, rank(x) - 1)
    return _sh.squeeze(x, ax), 0


def _concatenate(args, dims, *, axis):
    xs = [batched(a, d) for a, d in zip(args, dims)]
    return _sh.concatenate(xs, shift_axis(axis, rank(xs[0]) - 1)), 0


def _pad(args, dims, *, pad_width, constant):
    x = to_front(args[0], dims[0])
    if len(pad_width) == 1:                              # one pair for every (unbatched) axis
        rank = x.aval.rank
        if rank is None:
            from ..errors import ShapeError
            raise ShapeError("vmap of pad with one (before, after) pair for every axis needs the operand's "
                             "rank; give one pair per axis, or annotate the argument's shape")
        pad_width = tuple(pad_width) * (rank - 1)
    return _sh.pad(x, ((0, 0),) + tuple(pad_width), constant), 0


def _flip(args, dims, *, axes):
    x = to_front(args[0], dims[0])
    return _sh.flip_p.bind(x, axes=shift_axes(axes, rank(x) - 1)), 0


def _swapaxes(args, dims, *, axis1, axis2):
    x = to_front(args[0], dims[0])
    r = rank(x) - 1
    return _sh.swapaxes(x, shift_axis(axis1, r), shift_axis(axis2, r)), 0


def _slice(args, dims, *, start_indices, limit_indices, strides):
    x = to_front(args[0], dims[0])
    return _slc.slice_p.bind(x, start_indices=(0,) + tuple(start_indices),
                             limit_indices=(axis_size(),) + tuple(limit_indices), strides=(1,) + tuple(strides)), 0


def _stack_ys(args, dims):
    return stack_ys_p.bind(args[0]), dims[0]          # the same layout, as one array


def _iota(args, dims, **params):
    return _sh.iota_p.bind(**params), None       # no operands: never batched


for _p, _rule in {_sh.reshape_p: _reshape, _sh.transpose_p: _transpose, _sh.broadcast_to_p: _broadcast_to,
                  _sh.broadcast_in_dim_p: _broadcast_in_dim, _sh.expand_dims_p: _expand_dims,
                  _sh.squeeze_p: _squeeze, _sh.concatenate_p: _concatenate, _sh.pad_p: _pad, _sh.flip_p: _flip,
                  _sh.iota_p: _iota, _sh.swapaxes_p: _swapaxes, _slc.slice_p: _slice,
                  stack_ys_p: _stack_ys}.items():
    _p.batch = _rule


# -- misc --------------------------------------------------------------------------------------

def _name_axes(args, dims, *, names):
    """Axis names belong to one example's axes; the batch axis stays unnamed."""
    from .._core.primitive import REGISTRY
    x = to_front(args[0], dims[0])
    return REGISTRY["name_axes"].bind(x, names=None if names is None else (None,) + tuple(names)), 0


BY_NAME["name_axes"] = _name_axes          # declared by tlaloc.typing



# -- creation with run-time sizes, random numbers: batched only in part -------------------------------

# What these rules refuse, and why (the tests check each refusal names its primitive).
PARTIAL = {
    "arange": "a length that differs per example has no fixed-shape batched form",
    "full": "sizes that differ per example have no fixed-shape batched form",
    "threefry2x32": "per-example keys: the counter-based kernel takes one key (shape (2,))",
    "random_bits": "per-example keys: the counter-based kernel takes one key (shape (2,))",
    "random_uniform": "per-example keys: the counter-based kernel takes one key (shape (2,))",
    "random_normal": "per-example keys: the counter-based kernel takes one key (shape (2,))",
}


def refuse(name, what):
    def rule(args, dims, **params):
        raise NoRuleError(f"no batching rule for `{name}` with {what} ({PARTIAL[name]}); "
                          f"keep them the same for every example (in_axes=None)")
    return rule


_misc.arange_p.batch = refuse("arange", "bounds that differ per example")
_misc.full_p.batch = refuse("full", "sizes that differ per example")


def _keyed(prim, then):
    """Random primitives: one key shared by every example (batched keys are refused)."""
    def rule(args, dims, **params):
        if dims[0] is not None:
            refuse(prim.name, "a key that differs per example")(args, dims)
        return then(args, dims, **params)
    return rule


def _threefry(args, dims):
    (key, x0, x1), (_, d0, d1) = args, dims
    r = max(example_rank(x0, d0), example_rank(x1, d1))
    xs = [x if d is None else expand_after_batch(to_front(x, d), r - example_rank(x, d))
          for x, d in ((x0, d0), (x1, d1))]
    return tuple(_rng.threefry2x32(key, *xs)), (0, 0)


def _uniform(args, dims, *, shape, dtype):
    """Shared key, per-example bounds: every example maps the same unit sample
    ``u`` to ``max(lo, u * (hi - lo) + lo)`` (unfused: within one rounding of
    the fused multiply-add a single example uses)."""
    key, lo, hi = args
    u = _rng.random_uniform_p.bind(key, 0.0, 1.0, shape=shape, dtype=dtype)
    lo, hi = (b if d is None else expand_after_batch(to_front(b, d), len(shape) - example_rank(b, d))
              for b, d in zip(args[1:], dims[1:]))
    val = _ew.add(_ew.multiply(u, _ew.subtract(hi, lo)), lo)
    return batched(_ew.maximum(lo, val), 0), 0


_rng.threefry2x32_p.batch = _keyed(_rng.threefry2x32_p, _threefry)
_rng.random_bits_p.batch = _keyed(_rng.random_bits_p, lambda a, d, **p: (_rng.random_bits_p.bind(*a, **p), None))
_rng.random_uniform_p.batch = _keyed(_rng.random_uniform_p, _uniform)
_rng.random_normal_p.batch = _keyed(_rng.random_normal_p, lambda a, d, **p: (_rng.random_normal_p.bind(*a, **p),
                                                                              None))
