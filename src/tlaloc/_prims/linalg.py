"""Contractions and linear algebra: matmul (NumPy semantics, with its two
adjoint maps), einsum, dot_general, cholesky, triangular_solve, solve, inv,
slogdet.

``matmul_t_lhs(g, y, x)`` and ``matmul_t_rhs(g, x, y)`` are the adjoints of
``matmul`` in each argument, handling 1-D operands and batch broadcasting at run
time; the three close under differentiation, so any order of derivative of a
matmul stays in this set.

References: cholesky VJP/JVP — I. Murray, "Differentiation of the Cholesky
decomposition", arXiv:1602.07527 (2016), eq. (10); matrix-calculus identities
for solve/inv/slogdet — M. Giles, "An extended collection of matrix derivative
results for forward and reverse mode AD" (2008), §2.2–2.3.
"""
from __future__ import annotations

import numpy as np

from .._core.primitive import Primitive
from .. import dtypes as _dt
from ..errors import NoRuleError, ShapeError
from . import _eager
from ._rules import broadcast_shapes, refuse_float_mix
from .broadcasting import _sum_to_impl, broadcast_like, float_cast, sum_to
from .elementwise import add, convert, multiply, negative
from .shape_ops import transpose


def _mm_dtype(op):
    def rule(x, y, *rest, **params):
        _dt.check_float_mix(op, {"x1": x.dtype, "x2": y.dtype})
        return _dt.result_dtype(x.dtype, y.dtype)
    return rule


def _mm_adjoint_dtype(op):
    """dtype rule of ``matmul_t_lhs(g, y, x)`` / ``matmul_t_rhs(g, x, y)``: the product's dtype,
    given a real floating ``like`` (the last operand)'s dtype where the widths differ, as
    ``sum_to`` does: ``x @ n`` (float32 x, int n) is float64, and x's cotangent is float32."""
    def rule(g, y, like):
        dt = _dt.result_dtype(g.dtype, y.dtype)       # promoted, never refused: see _contraction
        if dt is not None and _dt.is_float(dt) and like.dtype is None:
            return None
        return float_cast(dt, like.dtype) or dt
    return rule


def _contraction(op, fn, names=("x1", "x2"), promote=False):
    """NumPy contraction ``fn`` as a primitive impl: refuses a float32/float64
    mix eagerly, and computes bfloat16 in float32 rounded once to bfloat16
    (NumPy's einsum has no bfloat16 loop, and its matmul returns float32).
    With ``names`` of three operands (the matmul adjoints) the third is only a
    shape and dtype template, and the two factors promote as NumPy does: the
    cotangent of the int ``n`` in ``x32 @ n`` multiplies a float64 ``g`` (the
    promoted output's) by the float32 ``x``, as derivative code, never user code."""
    if len(names) == 3:
        two = _contraction(op, fn, names[:2], promote=True)

        def adjoint(a, b, like, **params):
            return two(a, b, _like=(like,), **params)
        adjoint.__name__ = getattr(fn, "__name__", op)
        return adjoint

    def impl(*args, _like=(), **params):
        if any(getattr(a, "dtype", None) == _dt.bfloat16 for a in args):
            want = _dt.result_dtype(*(getattr(a, "dtype", None) for a in args))
            args = [np.asarray(a, np.float32) if getattr(a, "dtype", None) == _dt.bfloat16 else a for a in args]
            return np.asarray(fn(*args, *_like, **params)).astype(want)
        return fn(*args, *_like, **params)
    impl.__name__ = getattr(fn, "__name__", op)
    return refuse_float_mix(op, impl, list(names), promote=promote)


def _matmul_shape(x, y):
    if x.shape is None or y.shape is None:
        return None
    xs, ys = x.shape, y.shape
    if len(xs) == 0 or len(ys) == 0:
        raise ShapeError("matmul: operands must have at least one axis; use multiply for scalars")
    kx = xs[-1]
    ky = ys[0] if len(ys) == 1 else ys[-2]
    if type(kx) is int and type(ky) is int and kx != ky:
        raise ShapeError(f"matmul: x1 has {kx} columns (last axis) but x2 has {ky} rows; "
                         f"the contracted sizes must match — transpose an operand or fix its shape")
    if isinstance(kx, str) and isinstance(ky, str) and kx != ky:
        raise ShapeError(f"matmul: contracting axis '{kx}' with axis '{ky}'")
    if len(xs) == 1 and len(ys) == 1:
        return ()
    if len(xs) == 1:
        return tuple(ys[:-2]) + (ys[-1],)
    if len(ys) == 1:
        return tuple(xs[:-1])
    batch = broadcast_shapes("matmul", xs[:-2], ys[:-2])
    return tuple(batch) + (xs[-2], ys[-1])


matmul_p = Primitive("matmul", impl=_contraction("matmul", np.matmul), hlo="stablehlo.dot_general",
                     shape_rule=_matmul_shape,
                     dtype_rule=_mm_dtype("matmul"))


def _mm_lhs_impl(g, y, x):
    if type(g) is np.ndarray and type(y) is np.ndarray and y.ndim >= 2 and np.ndim(x) >= 2:
        return _sum_to_impl(g @ y.swapaxes(-1, -2), x)     # the last branch below, without the dispatch
    g, y = np.asarray(g), np.asarray(y)
    xn, yn = np.ndim(x), y.ndim
    if xn == 1 and yn == 1:
        res = g * y
    elif xn == 1:
        res = (y @ g[..., :, None])[..., 0]
    elif yn == 1:
        res = g[..., :, None] * y
    else:
        res = g @ np.swapaxes(y, -1, -2)
    return _sum_to_impl(res, x)


def _mm_rhs_impl(g, x, y):
    if type(g) is np.ndarray and type(x) is np.ndarray and x.ndim >= 2 and np.ndim(y) >= 2:
        return _sum_to_impl(x.swapaxes(-1, -2) @ g, y)     # the last branch below, without the dispatch
    g, x = np.asarray(g), np.asarray(x)
    xn, yn = x.ndim, np.ndim(y)
    if xn == 1 and yn == 1:
        res = g * x
    elif xn == 1:
        res = x[:, None] * g[..., None, :]
    elif yn == 1:
        res = (np.swapaxes(x, -1, -2) @ g[..., :, None])[..., 0]
    else:
        res = np.swapaxes(x, -1, -2) @ g
    return _sum_to_impl(res, y)


matmul_t_lhs_p = Primitive("matmul_t_lhs", impl=_contraction("matmul_t_lhs", _mm_lhs_impl, ("g", "y", "x")),
                           hlo="stablehlo.dot_general",
                           shape_rule=lambda g, y, x: x.shape, dtype_rule=_mm_adjoint_dtype("matmul_t_lhs"))
matmul_t_rhs_p = Primitive("matmul_t_rhs", impl=_contraction("matmul_t_rhs", _mm_rhs_impl, ("g", "x", "y")),
                           hlo="stablehlo.dot_general",
                           shape_rule=lambda g, x, y: y.shape, dtype_rule=_mm_adjoint_dtype("matmul_t_rhs"))
matmul_p.eager = _eager.contraction(matmul_p, np.matmul)
matmul_t_lhs_p.eager = _eager.contraction(matmul_t_lhs_p, _mm_lhs_impl)
matmul_t_rhs_p.eager = _eager.contraction(matmul_t_rhs_p, _mm_rhs_impl)


def matmul(x, y):
    return matmul_p.bind(x, y)


def matmul_t_lhs(g, y, x):
    """The cotangent of ``x`` in ``z = x @ y`` given ``g = z̄`` (shape of ``x``)."""
    return matmul_t_lhs_p.bind(g, y, x)


def matmul_t_rhs(g, x, y):
    """The cotangent of ``y`` in ``z = x @ y`` given ``g = z̄`` (shape of ``y``)."""
    return matmul_t_rhs_p.bind(g, x, y)


def _sum2(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return add(a, b)


matmul_p.vjp = lambda g, x, y, out: (matmul_t_lhs(g, y, x), matmul_t_rhs(g, x, y))
matmul_p.jvp = lambda t, x, y, out: _sum2(None if t[0] is None else matmul(t[0], y),
                                          None if t[1] is None else matmul(x, t[1]))
matmul_t_lhs_p.vjp = lambda c, g, y, x, out: (broadcast_like(matmul(c, y), g), matmul_t_rhs(g, c, y), None)
matmul_t_lhs_p.jvp = lambda t, g, y, x, out: _sum2(None if t[0] is None else matmul_t_lhs(t[0], y, x),
                                                   None if t[1] is None else matmul_t_lhs(g, t[1], x))
matmul_t_rhs_p.vjp = lambda c, g, x, y, out: (broadcast_like(matmul(x, c), g), matmul_t_lhs(g, c, x), None)
matmul_t_rhs_p.jvp = lambda t, g, x, y, out: _sum2(None if t[0] is None else matmul_t_rhs(t[0], x, y),
                                                   None if t[1] is None else matmul_t_rhs(g, t[1], y))


# -- einsum --------------------------------------------------------------------

def _parse_einsum(spec: str, n: int):
    if "->" not in spec:
        raise ShapeError(f"einsum: write the output explicitly, e.g. 'ij,jk->ik' (got {spec!r})")
    ins, out = spec.replace(" ", "").split("->")
    ins = ins.split(",")
    if len(ins) != n:
        raise ShapeError(f"einsum: {spec!r} names {len(ins)} operands but {n} were given")
    return ins, out


def _einsum_shape(*xs, spec):
    ins, out = _parse_einsum(spec, len(xs))
    if any(x.shape is None for x in xs):
        return None
    if "." in spec:
        return _einsum_ellipsis_shape(xs, ins, out)
    sizes = {}
    for sub, x in zip(ins, xs):
        if len(sub) != len(x.shape):
            raise ShapeError(f"einsum: operand '{sub}' has rank {len(x.shape)}, not {len(sub)}")
        for c, d in zip(sub, x.shape):
            if c in sizes and type(d) is int and type(sizes[c]) is int and sizes[c] != d and 1 not in (d, sizes[c]):
                raise ShapeError(f"einsum: index '{c}' has sizes {sizes[c]} and {d}")
            if c not in sizes or sizes[c] == 1:
                sizes[c] = d
    return tuple(sizes[c] for c in out)


def _einsum_ellipsis_shape(xs, ins, out):
    """The shape of an einsum with ``...``: the named indices' sizes, and the operands' ``...`` axes
    broadcast (right-aligned, as NumPy). (Regression: unknown, so tl.jit refused every ``...``.)"""
    ell, sizes = [], {}
    for sub, x in zip(ins, xs):
        if "..." in sub:
            before, after = sub.split("...")
            k = len(x.shape) - len(before) - len(after)
            if k < 0:
                raise ShapeError(f"einsum: operand '{sub}' has rank {len(x.shape)}, fewer than its indices")
            ell.append(tuple(x.shape[len(before):len(before) + k]))
            named = list(zip(before, x.shape[:len(before)])) + list(zip(after, x.shape[len(before) + k:]))
        else:
            if len(sub) != len(x.shape):
                raise ShapeError(f"einsum: operand '{sub}' has rank {len(x.shape)}, not {len(sub)}")
            named = list(zip(sub, x.shape))
        for c, d in named:
            if c not in sizes or sizes[c] == 1:
                sizes[c] = d
    if any(type(d) is not int for shape in ell for d in shape) or any(type(d) is not int for d in sizes.values()):
        return None
    try:
        broadcast = tuple(np.broadcast_shapes(*ell)) if ell else ()
    except ValueError:
        raise ShapeError(f"einsum: the '...' axes {ell} do not broadcast together") from None
    if "..." in out:
        before, after = out.split("...")
        return tuple(sizes[c] for c in before) + broadcast + tuple(sizes[c] for c in after)
    return tuple(sizes[c] for c in out)


def _einsum_impl(*xs, spec):
    return np.einsum(spec, *xs, optimize=len(xs) > 2)


einsum_p = Primitive("einsum", impl=_contraction("einsum", _einsum_impl, ()),
                     hlo="stablehlo.dot_general", shape_rule=_einsum_shape,
                     dtype_rule=lambda *xs, spec: (_dt.check_float_mix("einsum", {f"operand {i}": x.dtype for i, x in enumerate(xs)}),
                                                   _dt.result_dtype(*(x.dtype for x in xs)))[1])


def einsum(spec, *xs):
    return einsum_p.bind(*xs, spec=spec)


def _einsum_vjp(g, *xs, out, spec):
    ins, o = _parse_einsum(spec, len(xs))
    bars = []
    for i, sub in enumerate(ins):
        if len(set(sub.replace(".", ""))) != len(sub.replace(".", "")):
            raise NoRuleError(f"no VJP rule for `einsum` with a repeated index in one operand ({sub!r}); "
                              f"take the diagonal with tnp.diagonal first")
        others = [s for j, s in enumerate(ins) if j != i]
        avail = set(o + "".join(others))
        missing = [k for k, c in enumerate(sub) if c != "." and c not in avail]
        kept = "".join(c for c in sub if c == "." or c in avail)
        # operands without '...' next to ones with it: keep the broadcast dims, sum_to drops them
        lead = "..." if "..." not in sub and any("..." in s for s in others + [o]) else ""
        if lead and missing:
            raise NoRuleError(f"no VJP rule for `einsum` {spec!r}: operand {sub!r} has an index summed only "
                              f"over itself next to '...' operands; sum it first")
        res = einsum(",".join([o] + others) + "->" + lead + kept, g, *[x for j, x in enumerate(xs) if j != i])
        if missing:
            from .shape_ops import expand_dims
            res = expand_dims(res, tuple(missing))
            res = broadcast_like(res, xs[i])
        bars.append(sum_to(res, xs[i]))
    return tuple(bars)


def _einsum_jvp(t, *xs, out, spec):
    total = None
    for i, ti in enumerate(t):
        if ti is not None:
            args = list(xs)
            args[i] = ti
            total = _sum2(total, einsum(spec, *args))
    return total


einsum_p.vjp, einsum_p.jvp = _einsum_vjp, _einsum_jvp


# -- dot_general ------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _dot_general_spec(xr, yr, contracting, batch):
    (lc, rc), (lb, rb) = contracting, batch
    xs, ys = list(_LETTERS[:xr]), list(_LETTERS[xr:xr + yr])
    for a, b in zip(lc, rc):
        ys[b] = xs[a]
    for a, b in zip(lb, rb):
        ys[b] = xs[a]
    out = [xs[a] for a in lb] + [c for i, c in enumerate(xs) if i not in lc and i not in lb] + \
          [c for i, c in enumerate(ys) if i not in rc and i not in rb]
    return "".join(xs) + "," + "".join(ys) + "->" + "".join(out)


def _dot_general_impl(x, y, *, contracting, batch):
    return np.einsum(_dot_general_spec(np.ndim(x), np.ndim(y), contracting, batch), x, y)


#: operand dtype -> the wider result dtype ``preferred_element_type`` may ask for
_PREFERRED = {np.dtype(np.int8): np.dtype(np.int32), _dt.bfloat16: np.dtype(np.float32)}


def _preferred_impl(x, y, *, contracting, batch, preferred_element_type):
    """int8 x int8 -> int32 exactly; bfloat16 x bfloat16 -> float32 (products exact, sums in float32)."""
    want = np.dtype(preferred_element_type)
    spec = _dot_general_spec(np.ndim(x), np.ndim(y), contracting, batch)
    return np.asarray(np.einsum(spec, np.asarray(x, want), np.asarray(y, want)), want)


def _dot_general_shape(x, y, *, contracting, batch, preferred_element_type=None):
    if x.shape is None or y.shape is None:
        return None
    (lc, rc), (lb, rb) = contracting, batch
    for a, b in list(zip(lc, rc)) + list(zip(lb, rb)):
        dx, dy = x.shape[a], y.shape[b]
        if type(dx) is int and type(dy) is int and dx != dy:
            raise ShapeError(f"dot_general: lhs axis {a} has size {dx} but rhs axis {b} has size {dy}")
    return (tuple(x.shape[a] for a in lb) + tuple(d for i, d in enumerate(x.shape) if i not in lc and i not in lb)
            + tuple(d for i, d in enumerate(y.shape) if i not in rc and i not in rb))


def _check_preferred(xd, yd, preferred_element_type):
    """The result dtype of a ``dot_general`` with ``preferred_element_type``, or ValueError."""
    want = np.dtype(preferred_element_type)
    xd, yd = np.dtype(xd), np.dtype(yd)
    if xd == yd == want:
        return want
    wider = _PREFERRED.get(xd)
    if xd != yd or wider is None or wider != want:      # (np.dtype(None) is float64: test None first)
        pairs = ", ".join(f"{k.name} x {k.name} -> {v.name}" for k, v in _PREFERRED.items())
        raise TypeError(f"dot_general: preferred_element_type={want.name} with operands {xd.name} and {yd.name}; "
                        f"supported: {pairs} (or the operands' own dtype). Convert the operands first")
    return want


def _dot_general_dtype(x, y, *, contracting, batch, preferred_element_type=None):
    if preferred_element_type is None:
        return _mm_dtype("dot_general")(x, y)
    return _check_preferred(x.dtype, y.dtype, preferred_element_type)


_plain_dot_general = _contraction("dot_general", _dot_general_impl, ("lhs", "rhs"))


def _dot_general_any(x, y, *, contracting, batch, preferred_element_type=None):
    if preferred_element_type is None:
        return _plain_dot_general(x, y, contracting=contracting, batch=batch)
    _check_preferred(np.asarray(x).dtype, np.asarray(y).dtype, preferred_element_type)
    return _preferred_impl(x, y, contracting=contracting, batch=batch,
                           preferred_element_type=preferred_element_type)


dot_general_p = Primitive("dot_general", impl=_dot_general_any,
                          hlo="stablehlo.dot_general",
                          shape_rule=_dot_general_shape, dtype_rule=_dot_general_dtype)


def dot_general(x, y, contracting, batch=((), ()), preferred_element_type=None):
    """StableHLO ``dot_general`` (spec §4.8): ``contracting=((lhs axes), (rhs axes))``,
    ``batch`` likewise; output axes are batch, lhs free, rhs free.

    ``preferred_element_type`` (None: the operands' result dtype) asks for a wider result,
    accumulated in that type: int8 x int8 -> int32 (exact) or bfloat16 x bfloat16 -> float32.
    Both operands must have the same dtype; any other pair raises TypeError. Integer dots
    have no derivative; bfloat16 ones differentiate with float32 cotangents rounded to
    bfloat16 for the operands.
    """
    norm = lambda p: (tuple(int(a) for a in p[0]), tuple(int(a) for a in p[1]))
    params = dict(contracting=norm(contracting), batch=norm(batch))
    if preferred_element_type is not None:
        params["preferred_element_type"] = np.dtype(preferred_element_type).name
    return dot_general_p.bind(x, y, **params)


def _rank_dtype(v):
    """(rank, dtype) of a symbolic value or of a constant operand (a NumPy array made in the function,
    ``np.tensordot(x, np.ones(3), 1)``: regression, its missing ``aval`` crashed the rule)."""
    if hasattr(v, "aval"):
        return v.aval.rank, v.aval.dtype
    return np.ndim(v), np.asarray(v).dtype


def _dot_general_vjp(g, x, y, out, contracting, batch, preferred_element_type=None):
    (x_rank, x_dtype), (y_rank, y_dtype) = _rank_dtype(x), _rank_dtype(y)
    if x_rank is None or y_rank is None:
        raise NoRuleError("no VJP rule for `dot_general` with operands of unknown rank; "
                          "use matmul or einsum, or annotate the argument ranks")
    spec = _dot_general_spec(x_rank, y_rank, contracting, batch)
    if preferred_element_type is None:
        return _einsum_vjp(g, x, y, out=out, spec=spec)
    if not np.issubdtype(np.dtype(preferred_element_type), np.floating):
        raise NoRuleError(f"no VJP rule for an integer `dot_general` (preferred_element_type="
                          f"{preferred_element_type}): integer operands have no derivative")
    # the cotangents in float32 (x and y widened exactly), rounded once to the operands' dtype
    want = np.dtype(preferred_element_type)
    gx, gy = _einsum_vjp(g, convert(x, want), convert(y, want), out=out, spec=spec)
    return convert(gx, x_dtype), convert(gy, y_dtype)


def _dot_general_jvp(t, x, y, out, contracting, batch, preferred_element_type=None):
    pref = {} if preferred_element_type is None else {"preferred_element_type": preferred_element_type}
    return _sum2(None if t[0] is None else dot_general(t[0], y, contracting, batch, **pref),
                 None if t[1] is None else dot_general(x, t[1], contracting, batch, **pref))


dot_general_p.vjp = _dot_general_vjp
dot_general_p.jvp = _dot_general_jvp
