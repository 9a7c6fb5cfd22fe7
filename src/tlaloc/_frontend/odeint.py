"""``scipy.integrate.odeint`` inside a differentiated function: SciPy's solver, and its
gradient by the adjoint method.

Called with arrays computed from the arguments, ``odeint(func, y0, t, args=(...), rtol=...)``
becomes one ``odeint`` node. Its ``dynamics`` region is ``func`` lowered for
``(y, t, *args)``; the node runs SciPy's LSODA on the host with that region as the
right-hand side, so the values are SciPy's own (same solver, same tolerances).

Reverse mode uses the adjoint method (Chen, Rubanova, Bettencourt & Duvenaud,
"Neural Ordinary Differential Equations", NeurIPS 2018, §2 and Appendix B; the
form with observation times is Froehlich et al. 2017, §2.4.2). For a result
``y(t_0..t_{T-1})`` and its cotangent ``g``, the augmented state
``[y, a, a_t, a_θ]`` starts at ``t_{T-1}`` from ``[y_{T-1}, g_{T-1}, -g_{T-1}·f, 0]``
and is integrated backwards, interval by interval, under

    dy/dt = f(y, t, θ),   da/dt = -a ∂f/∂y,   da_t/dt = -a ∂f/∂t,   da_θ/dt = -a ∂f/∂θ,

with ``g_i`` added to ``a`` (and ``-g_i·f(y_i, t_i)`` to ``a_t``) at each observation
time. The cotangents are ``a`` for ``y0``, ``a_θ`` for the arguments in ``args``,
``g_i·f(y_i, t_i)`` for ``t_i`` (i > 0) and ``a_t`` for ``t_0``. The products
``a ∂f/∂·`` are the reverse-mode graph of the ``dynamics`` region. The backward
solve uses the forward call's solver options, so with a loose ``rtol`` the gradient
is exactly as approximate as autograd's, which integrates the same system.

Decisions, each refused by name rather than approximated: forward mode, batching,
``tl.jit`` (SciPy's solver runs on the host; StableHLO has no such op) and second
derivatives (the adjoint node has no derivative rule). ``func`` must be a function
defined with ``def`` at module level or in a class (a ``lambda`` or nested ``def``
in the differentiated function would close over its arrays: pass them in
``args=``). Options SciPy offers that change what is returned (``full_output``),
take a Jacobian (``Dfun``) or switch argument order (``tfirst``) are refused.
Arrays ``func`` reads from globals or closures are constants of the rule.
"""
from __future__ import annotations

import inspect

import numpy as np

from .. import _pytree
from .._core import aval as _aval
from .._core.primitive import Primitive
from .regions import as_callable, lower_region, refusal, reverse_region
from .values import is_symbolic

#: SciPy's solver options passed through (numbers only); the others are refused by name.
_OPTIONS = ("rtol", "atol", "h0", "hmax", "hmin", "ixpr", "mxstep", "mxhnil", "mxordn", "mxords")
_DEFAULTS = {"Dfun": None, "col_deriv": 0, "full_output": 0, "ml": None, "mu": None, "tcrit": None,
             "printmessg": 0, "tfirst": False}


# -- running the solver on the host ----------------------------------------------------------------

def _solve(rhs, y0, t, options):
    import scipy.integrate
    return scipy.integrate.odeint(rhs, y0, t, **options)


def _options(params):
    return {k: params[k] for k in _OPTIONS if params.get(k) is not None}


# -- the forward node ---------------------------------------------------------------------------

def _odeint_impl(y0, t, *operands, dynamics, n_args, **params):
    f = as_callable(dynamics)

    def rhs(y, tt):
        return np.asarray(f(y, np.float64(tt), *operands)[0], np.float64)
    return np.asarray(_solve(rhs, np.asarray(y0, np.float64), np.asarray(t, np.float64), _options(params)))


def _odeint_shape(y0, t, *operands, **params):
    n = None if y0.shape is None else y0.shape[0]
    T = None if t.shape is None else t.shape[0]
    return (T, n)


odeint_p = Primitive("odeint", impl=_odeint_impl, hlo=None, shape_rule=_odeint_shape,
                     dtype_rule=lambda *avals, **params: np.dtype(np.float64))
odeint_p.function_params = ("dynamics",)


def _odeint_vjp(g, y0, t, *operands, out, dynamics, n_args, **params):
    """Cotangents of ``(y0, t, *args leaves, *closure)`` by the adjoint method."""
    bars = adjoint_p.bind(out, t, g, *operands, dynamics=dynamics, dynamics_vjp=reverse_region(dynamics),
                          n_args=n_args, **params)
    y0_bar, t_bar, *arg_bars = bars
    n_closure = len(operands) - n_args
    arg_bars = [b if _is_float(o) else None for b, o in zip(arg_bars, operands)]
    return (y0_bar, t_bar, *arg_bars, *([None] * n_closure))


odeint_p.vjp = _odeint_vjp


def _is_float(x):
    """Whether ``x`` may carry a cotangent: a floating dtype, or one not known yet."""
    dt = x.aval.dtype if hasattr(x, "aval") else np.result_type(x)
    return dt is None or np.dtype(dt).kind == "f"


# -- the adjoint node -----------------------------------------------------------------------------

def _adjoint_impl(ys, t, g, *operands, dynamics, dynamics_vjp, n_args, **params):
    """Integrate the augmented system backwards over each interval (see the module docstring)."""
    f, vjp = as_callable(dynamics), as_callable(dynamics_vjp)
    ys, t, g = (np.asarray(v, np.float64) for v in (ys, t, g))
    T, D = ys.shape
    sizes = [int(np.size(o)) for o in operands]
    shapes = [np.shape(o) for o in operands]
    options = _options(params)

    def augmented(state, tt):
        y, a = state[:D], state[D:2 * D]
        dy, y_bar, t_bar, *op_bars = vjp(y, np.float64(tt), *operands, -a)
        return np.concatenate([np.ravel(dy), np.ravel(y_bar), np.ravel(t_bar)]
                              + [np.ravel(np.asarray(x, np.float64)) for x in op_bars])

    a_y, a_t0, a_ops = g[-1].copy(), 0.0, np.zeros(sum(sizes))
    time_bars = []
    for i in range(T - 1, 0, -1):
        moved = float(np.dot(np.ravel(f(ys[i], t[i], *operands)[0]), g[i]))   # moving observation time i
        time_bars.append(moved)
        a_t0 -= moved
        state = np.concatenate([ys[i], a_y, [a_t0], a_ops])
        state = _solve(augmented, state, np.array([t[i], t[i - 1]]), options)[1]
        a_y, a_t0, a_ops = state[D:2 * D] + g[i - 1], state[2 * D], state[2 * D + 1:]
    time_bars.append(a_t0)
    op_bars, start = [], 0
    for size, shape in zip(sizes, shapes):
        op_bars.append(a_ops[start:start + size].reshape(shape))
        start += size
    return (a_y, np.array(time_bars[::-1]), *op_bars)


def _adjoint_shape(ys, t, g, *operands, **params):
    return ((None if ys.shape is None else ys.shape[1],), t.shape, *(o.shape for o in operands))


def _adjoint_dtype(ys, t, g, *operands, **params):
    return tuple(np.dtype(np.float64) for _ in range(2 + len(operands)))


adjoint_p = Primitive("odeint_adjoint", impl=_adjoint_impl, hlo=None, multiple_results=True,
                      shape_rule=_adjoint_shape, dtype_rule=_adjoint_dtype)
adjoint_p.function_params = ("dynamics", "dynamics_vjp")


# -- refusals (decisions; tests/core/test_rule_table.py lists them) --------------------------------

_HOST = "SciPy's LSODA runs on the host"
odeint_p.jvp = refusal("JVP", "odeint", "the adjoint method is a reverse-mode rule; forward mode through "
                                         "odeint is not implemented (use tl.grad / tl.vjp)")
odeint_p.batch = refusal("batching", "odeint", f"{_HOST}, one solve per call; call it per example")
adjoint_p.vjp = refusal("VJP", "odeint_adjoint", "second derivatives through odeint (the derivative of "
                                                  "its adjoint solve) are not implemented")
adjoint_p.jvp = refusal("JVP", "odeint_adjoint", "second derivatives through odeint are not implemented")
adjoint_p.batch = refusal("batching", "odeint_adjoint", f"{_HOST}, one solve per call")


# -- the front end's call -------------------------------------------------------------------------

def is_odeint(fn) -> bool:
    import sys
    integrate = sys.modules.get("scipy.integrate")
    return integrate is not None and fn is getattr(integrate, "odeint", None)


def lower_odeint(lowerer, args, kwargs, node):
    """``scipy.integrate.odeint(func, y0, t, args=(), **options)`` with array operands: one node."""
    import scipy.integrate
    from .. import numpy as tnp
    src = lowerer.src
    try:
        bound = inspect.signature(scipy.integrate.odeint).bind(*args, **kwargs)
    except TypeError as e:
        raise src.error(node, f"odeint: {e}") from None
    given = bound.arguments
    for name, default in _DEFAULTS.items():
        if name in given and not (given[name] is default or (isinstance(given[name], (int, bool))
                                                              and given[name] == default)):
            raise src.error(node, f"odeint: `{name}=` is not supported in a differentiated function "
                                  f"(only the solver options {', '.join(_OPTIONS)}); leave it out")
    func = given["func"]
    options = {}
    for name in _OPTIONS:
        if name in given:
            value = given[name]
            if is_symbolic(value) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise src.error(node, f"odeint: `{name}=` must be a Python number here, got "
                                      f"{type(value).__name__}")
            options[name] = float(value) if name in ("rtol", "atol", "h0", "hmax", "hmin") else int(value)
    extra = given.get("args", ())
    if not isinstance(extra, tuple):
        extra = (extra,)
    y0 = tnp.ravel(tnp.asarray(given["y0"], dtype=np.float64))
    t = tnp.asarray(given["t"], dtype=np.float64)
    n = _static_size(y0)
    leaves, trees = [], []
    for a in extra:
        ls, tree = _pytree.flatten(a)
        leaves += ls
        trees.append(tree)
    leaf = _pytree.TreeDef("leaf")
    avals = [_aval.AbstractValue(np.dtype(np.float64), (n,)), _aval.AbstractValue(np.dtype(np.float64), ())]
    avals += [x.aval if is_symbolic(x) else _aval.of(np.asarray(x)) for x in leaves]
    lowered, closure = lower_region(lowerer, func, [leaf, leaf, *trees], avals, node, "odeint's `func`")
    lowered = _stacked_output(lowered)
    if lowered.out_tree != leaf:
        raise src.error(node, f"odeint: `{func.__name__}` must return one array dy/dt, got {lowered.out_tree!r}")
    return odeint_p.bind(y0, t, *leaves, *closure, dynamics=lowered.graph, n_args=len(leaves), **options)


def _stacked_output(lowered):
    """A right-hand side returning a list or tuple of numbers (``return [dx, dy]``, the SciPy
    cookbook's style) as one returning their stack, as ``scipy.integrate.odeint`` reads it.
    (Regression: refused, "must return one array dy/dt, got list".)"""
    import dataclasses
    from .. import numpy as tnp
    from .._core.builder import Builder
    from .._core.passes import inline
    tree = lowered.out_tree
    if tree is None or tree.kind not in ("list", "tuple") or any(c.kind != "leaf" for c in tree.children):
        return lowered
    g = lowered.graph
    b = Builder(name=g.name)
    with b.active():
        ins = [b.new_input(v.aval, v.hint) for v in g.inputs]
        outs = inline(g, ins)
        stacked = tnp.stack([tnp.asarray(o).astype(np.float64) for o in outs])
        new = b.finish([stacked], g.name)
    return dataclasses.replace(lowered, graph=new, out_tree=_pytree.TreeDef("leaf"))


def _static_size(y0) -> int:
    from ..errors import ShapeError
    shape = y0.aval.shape if is_symbolic(y0) else np.shape(y0)
    if shape is None or any(type(d) is not int for d in shape):
        raise ShapeError("odeint: the size of y0 is not known yet")
    return int(shape[0])
