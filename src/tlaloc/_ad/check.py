"""Derivative checks against central differences.

* ``check_grads(f, args, order, modes)``: ``tl.jvp`` and ``tl.vjp`` of ``f``
  against central differences of ``f``; for ``order >= 2`` the same checks on the
  derivative functions themselves (``(x, v) -> ∂f(x)·v`` and ``(x, w) -> wᵀ∂f(x)``),
  built by nesting the DXIR transforms. JAX's ``check_grads`` convention.
* ``check_custom_vjp(f, at)`` / ``check_custom_jvp(f, at)``: a custom rule
  against central differences of the plain function, element by element. A
  rule that is deliberately not the derivative (a stop-gradient, a clipped
  gradient) fails, by design.

Each raises ``AssertionError`` naming the function, the mode and order, the
argument, and the largest disagreement.
"""
from __future__ import annotations

import numpy as np

from .._core import aval as _aval
from .._core.builder import Builder
from .._core.interpreter import eval_graph
from .._core.passes import inline
from .._frontend.lower import lower_function
from ..errors import ArgumentError
from .forward import jvp_graph
from .reverse import vjp_graph

_DEFAULTS = {  # dtype -> (eps, atol, rtol)
    np.dtype(np.float64): (1e-5, 1e-6, 1e-6),
    np.dtype(np.float32): (1e-3, 2e-2, 2e-2),
}


def _defaults(args, eps, atol, rtol):
    floats = [np.asarray(a).dtype for a in args if np.asarray(a).dtype.kind == "f"]
    key = np.dtype(np.float32) if any(d.itemsize < 8 for d in floats) else np.dtype(np.float64)
    e, a, r = _DEFAULTS[key]
    return (e if eps is None else eps), (a if atol is None else atol), (r if rtol is None else rtol)


def _name(f) -> str:
    t = getattr(f, "__tlaloc_transformed__", None)
    return t.name if t is not None else getattr(f, "__name__", "f")


def _as_args(args):
    if not isinstance(args, (tuple, list)):
        args = (args,)
    out = []
    for k, a in enumerate(args):
        arr = np.asarray(a)
        if arr.dtype == object:
            raise ArgumentError(f"check: argument {k} must be an array or a number, got {type(a).__name__}")
        out.append(arr)
    return tuple(out)


# -- a function as a closed DXIR graph -------------------------------------------------------------

class _GraphFn:
    """``graph(*args, *consts)`` as a function of ``args``; its derivative functions are graphs too."""

    def __init__(self, graph, n_args, consts, label):
        self.graph, self.n_args, self.consts, self.label = graph, n_args, list(consts), label

    @classmethod
    def of(cls, f, n_args, args=None):
        t = getattr(f, "__tlaloc_transformed__", None)
        if t is not None:
            lowered = t.as_lowered(None)
            if lowered is None:
                raise ArgumentError(f"check_grads: `{t.name}` cannot be nested; pass the function it transforms")
        elif hasattr(f, "__tlaloc_lower__"):
            lowered = f.__tlaloc_lower__(None, None)
        else:       # for the arguments' shapes: code may read them (np.full(x.shape, v))
            avals = None if args is None else [_aval.of(np.asarray(a)) for a in args]
            lowered = lower_function(f, arg_avals=avals)
        if len(lowered.graph.inputs) - len(lowered.closure_getters) != n_args:
            raise ArgumentError(f"check_grads: `{_name(f)}` takes {len(lowered.arg_trees)} array arguments, "
                                f"{n_args} were given (pytree arguments are not supported here)")
        return cls(lowered.graph, n_args, [g() for g in lowered.closure_getters], _name(f))

    def __call__(self, *args):
        return [np.asarray(o) for o in eval_graph(self.graph, *args, *self.consts)]

    def _reordered(self, graph, n_extra, label):
        """``graph`` has inputs (args, consts, extra); return it as a function of (args, extra)."""
        n, c = self.n_args, len(self.consts)
        b = Builder(name=graph.name)
        with b.active():
            ins = [b.new_input(v.aval, v.hint) for v in graph.inputs[:n]]
            extra = [b.new_input(v.aval, v.hint) for v in graph.inputs[n + c:]]
            consts = [b.new_input(v.aval, v.hint) for v in graph.inputs[n:n + c]]
            outs = inline(graph, ins + consts + extra)
            g = b.finish(outs)
        return _GraphFn(g, n + n_extra, self.consts, label)

    def jvp_fn(self):
        """``(x, v) -> ∂f(x)·v``."""
        n, c = self.n_args, len(self.consts)
        g, _ = jvp_graph(self.graph, tangent_mask=[True] * n + [False] * c)
        n_out = len(self.graph.outputs)
        g = type(g)(g.inputs, g.nodes, g.outputs[n_out:], g.name)
        return self._reordered(g, n, f"jvp of {self.label}")

    def vjp_fn(self):
        """``(x, w) -> wᵀ∂f(x)``."""
        n, c = self.n_args, len(self.consts)
        g, _ = vjp_graph(self.graph, wrt=[True] * n + [False] * c, with_primal=False)
        return self._reordered(g, len(self.graph.outputs), f"vjp of {self.label}")


# -- checks ---------------------------------------------------------------------------------------------

def _random_like(rng, arrays):
    return [rng.standard_normal(a.shape).astype(a.dtype) if a.dtype.kind == "f" else np.zeros_like(a)
            for a in arrays]


def _numerical_jvp(fn, args, tangents, eps):
    plus = fn(*[a + eps * t if a.dtype.kind == "f" else a for a, t in zip(args, tangents)])
    minus = fn(*[a - eps * t if a.dtype.kind == "f" else a for a, t in zip(args, tangents)])
    return [(p.astype(np.float64) - m.astype(np.float64)) / (2 * eps) for p, m in zip(plus, minus)]


def _inner(xs, ys) -> float:
    return float(sum(np.sum(np.asarray(x, np.float64) * np.asarray(y, np.float64)) for x, y in zip(xs, ys)))


def _compare(what, got, want, atol, rtol):
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            g = np.broadcast_to(g, w.shape) if g.size in (1, w.size) else g
        if g.shape != w.shape or not np.allclose(g, w, atol=atol, rtol=rtol):
            err = np.max(np.abs(g - w)) if g.shape == w.shape else float("inf")
            raise AssertionError(
                f"{what}: output {k} disagrees with central differences: max |error| {err:.3g} "
                f"(atol {atol:g}, rtol {rtol:g})\n  computed:  {np.array2string(g, threshold=8)}\n"
                f"  numerical: {np.array2string(w, threshold=8)}")


def _check_fwd(fn, args, jvp, order, eps, atol, rtol, rng, what):
    tangents = _random_like(rng, args)
    got = jvp(args, tangents)
    want = _numerical_jvp(fn, args, tangents, eps)
    _compare(f"{what}: forward mode (order {order})", got, want, atol, rtol)


def _check_rev(fn, args, vjp, order, eps, atol, rtol, rng, what):
    tangents = _random_like(rng, args)
    out = fn(*args)
    cts = _random_like(rng, out)
    bars = vjp(args, cts)
    ip = _inner([b for b, a in zip(bars, args) if a.dtype.kind == "f"],
                [t for t, a in zip(tangents, args) if a.dtype.kind == "f"])
    want_dot = _numerical_jvp(fn, args, tangents, eps)
    ip_want = _inner(want_dot, cts)
    if not abs(ip - ip_want) <= atol + rtol * abs(ip_want):
        raise AssertionError(
            f"{what}: reverse mode (order {order}) disagrees with central differences: <vjp(w), v> = "
            f"{ip:.10g} but <w, numerical jvp(v)> = {ip_want:.10g} (difference {abs(ip - ip_want):.3g}, "
            f"atol {atol:g}, rtol {rtol:g})")


def check_grads(f, args=None, order=2, modes=("fwd", "rev"), atol=None, rtol=None, eps=None, seed=0):
    """Check ``f``'s derivatives up to ``order`` against central differences.

    Args:
      f: a function tlaloc can transform (plain, ``custom_vjp``, or a transform such as ``tl.grad(g)``).
      args: tuple of array arguments (floats are perturbed; ints are held fixed). Left out,
        ``check_grads(f, **options)`` returns the checker to call as ``checker(*args)``:
        autograd's curried spelling, so ``autograd.test_util.check_grads`` ports by import.
      order: 1 checks ``tl.jvp``/``tl.vjp``; 2 also checks the derivatives of
        those derivative functions (forward and reverse over each), and so on.
      modes: any of ``"fwd"`` and ``"rev"``.
      atol, rtol, eps: tolerances and step; by default 1e-6, 1e-6, 1e-5 for
        float64 and 2e-2, 2e-2, 1e-3 when an argument is float32 or narrower.
      seed: seeds the random directions.

    Raises:
      AssertionError: naming the mode, the order and the disagreement.
      NoRuleError: a mode ``f`` cannot be differentiated in (e.g. ``"fwd"`` over a vjp-only rule).
    """
    if args is None:
        def checker(*call_args):
            check_grads(f, call_args, order=order, modes=modes, atol=atol, rtol=rtol, eps=eps, seed=seed)
        return checker
    from .api import vjp as _vjp
    from .forward_api import jvp as _jvp
    args = _as_args(args)
    if order < 1:
        raise ArgumentError(f"check_grads: order must be >= 1, got {order}")
    bad = set(modes) - {"fwd", "rev"}
    if bad or not modes:
        raise ArgumentError(f"check_grads: modes are 'fwd' and 'rev', got {modes!r}")
    eps, atol, rtol = _defaults(args, eps, atol, rtol)
    rng = np.random.default_rng(seed)
    label = f"check_grads of `{_name(f)}`"

    def plain(*xs):
        out = f(*xs)
        return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else (out,))]

    def public_jvp(xs, ts):
        _, dot = _jvp(f, tuple(xs), tuple(ts))
        return [np.asarray(o) for o in (dot if isinstance(dot, (tuple, list)) else (dot,))]

    def public_vjp(xs, ws):
        out, pullback = _vjp(f, *xs)
        return [np.asarray(b) for b in pullback(type(out)(ws) if isinstance(out, (tuple, list)) else ws[0])]

    if "fwd" in modes:
        _check_fwd(plain, args, public_jvp, 1, eps, atol, rtol, rng, label)
    if "rev" in modes:
        _check_rev(plain, args, public_vjp, 1, eps, atol, rtol, rng, label)
    if order > 1:
        base = _GraphFn.of(f, len(args), args)
        for mode in modes:
            inner = base.jvp_fn() if mode == "fwd" else base.vjp_fn()
            extra = _random_like(rng, args) if mode == "fwd" else _random_like(rng, base(*args))
            _check_nested(inner, args + tuple(extra), order - 1, modes, eps, atol, rtol, rng, label)


def _check_nested(fn, args, order, modes, eps, atol, rtol, rng, label):
    what = f"{label}, via {fn.label}"
    if "fwd" in modes:
        jfn = fn.jvp_fn()
        _check_fwd(fn, args, lambda xs, ts: jfn(*xs, *ts), order + 1, eps, atol, rtol, rng, what)
    if "rev" in modes:
        vfn = fn.vjp_fn()
        _check_rev(fn, args, lambda xs, ws: vfn(*xs, *ws), order + 1, eps, atol, rtol, rng, what)
    if order > 1:
        for mode in modes:
            inner = fn.jvp_fn() if mode == "fwd" else fn.vjp_fn()
            extra = _random_like(rng, args) if mode == "fwd" else _random_like(rng, fn(*args))
            _check_nested(inner, args + tuple(extra), order - 1, modes, eps, atol, rtol, rng, label)


# -- custom rules ----------------------------------------------------------------------------------------

def _custom(f, what):
    custom = getattr(f, "__tlaloc_custom__", None)
    if custom is None:
        raise ArgumentError(f"{what}: `{_name(f)}` is not a tl.custom_vjp / custom_jvp function")
    return custom


def _numerical_jacobian_rows(fun, args, k, eps):
    """d outputs / d args[k], one flat entry per element of args[k]: list of output lists."""
    x = args[k]
    cols = []
    for i in range(x.size):
        e = np.zeros(x.size, x.dtype)
        e[i] = 1
        t = [np.zeros_like(a) for a in args]
        t[k] = e.reshape(x.shape)
        cols.append(_numerical_jvp(fun, args, t, eps))
    return cols


def _plain(custom):
    def fun(*xs):
        out = custom.fun(*xs)
        return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else (out,))]
    return fun


def check_custom_vjp(f, at, atol=None, rtol=None, eps=None, seed=0):
    """Compare ``f``'s custom reverse rule with central differences of ``f`` at ``at``.

    Every element of every float argument's cotangent (for a random output
    cotangent) is compared. Raises AssertionError naming the argument and the
    worst element; a rule that is deliberately not the derivative fails.
    """
    from .api import vjp as _vjp
    custom = _custom(f, "check_custom_vjp")
    if custom.fwd is None:
        raise ArgumentError(f"check_custom_vjp: `{_name(f)}` has no reverse rule (defvjp)")
    args = _as_args(at)
    eps, atol, rtol = _defaults(args, eps, atol, rtol)
    rng = np.random.default_rng(seed)
    fun = _plain(custom)
    out, pullback = _vjp(f, *args)
    outs = fun(*args)
    cts = _random_like(rng, outs)
    bars = pullback(type(out)(cts) if isinstance(out, (tuple, list)) else cts[0])
    for k, x in enumerate(args):
        if x.dtype.kind != "f":
            continue
        want = np.array([_inner(col, cts) for col in _numerical_jacobian_rows(fun, args, k, eps)]).reshape(x.shape)
        got = np.broadcast_to(np.asarray(bars[k], np.float64), x.shape)
        _compare_rule(f"check_custom_vjp of `{_name(f)}`: the cotangent of argument {k}", got, want, atol, rtol)


def check_custom_jvp(f, at, atol=None, rtol=None, eps=None, seed=0):
    """Compare ``f``'s custom forward rule with central differences of ``f`` at ``at``
    (one random tangent per argument, then each argument's basis directions)."""
    from .forward_api import jvp as _jvp
    custom = _custom(f, "check_custom_jvp")
    if custom.jvp is None:
        raise ArgumentError(f"check_custom_jvp: `{_name(f)}` has no forward rule (defjvp)")
    args = _as_args(at)
    eps, atol, rtol = _defaults(args, eps, atol, rtol)
    fun = _plain(custom)
    for k, x in enumerate(args):
        if x.dtype.kind != "f":
            continue
        for i in range(x.size):
            t = [np.zeros_like(a) for a in args]
            t[k] = np.eye(x.size, dtype=x.dtype)[i].reshape(x.shape)
            _, dot = _jvp(f, args, tuple(t))
            got = [np.asarray(d) for d in (dot if isinstance(dot, (tuple, list)) else (dot,))]
            want = _numerical_jvp(fun, args, t, eps)
            for g, w in zip(got, want):
                _compare_rule(f"check_custom_jvp of `{_name(f)}`: the tangent along element {i} of "
                              f"argument {k}", np.asarray(g, np.float64), w, atol, rtol)


def _compare_rule(what, got, want, atol, rtol):
    if np.allclose(got, want, atol=atol, rtol=rtol):
        return
    diff = np.abs(got - want)
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape)) if diff.ndim else ()
    raise AssertionError(
        f"{what} disagrees with central differences: worst at index {idx}: rule gives "
        f"{got[idx] if got.ndim else got:.10g}, central differences {want[idx] if want.ndim else want:.10g} "
        f"(atol {atol:g}, rtol {rtol:g}). A rule that is deliberately not the derivative (a stop-gradient, "
        f"a clipped gradient) fails this check by design")
