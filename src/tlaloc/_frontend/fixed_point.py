"""``fixed_point(f, a, x0, distance, tol)``: iterate ``x <- f(a)(x)`` to convergence, and
differentiate the fixed point implicitly (autograd's ``autograd.misc.fixed_points``).

Forward: ``x_1 = f(a)(x0)``, then ``x_{k+1} = f(a)(x_k)`` while ``distance(x_{k+1}, x_k) > tol``.

Reverse (the implicit function theorem; Christianson 1994, "Reverse accumulation and
attractive fixed points"): at the fixed point ``x* = f(a)(x*)`` the cotangent ``g`` of
``x*`` gives ``a_bar = w ∂f(a)(x*)/∂a`` where ``w`` is the fixed point of
``w <- g + w ∂f(a)(x*)/∂x``, found by the same iteration from zeros, with the same
``distance`` and ``tol``. That inner iteration is again a ``fixed_point`` node, so a
second derivative applies the same rule to it, as autograd does; the values agree
with autograd's to rounding because both make the same iterations.

A ``fixed_point`` node holds the step ``(a..., x) -> f(a)(x)`` and ``distance`` as
regions (``regions.py``) and iterates on the host. Refused by name: forward mode,
batching and ``tl.jit`` (a data-dependent number of iterations on the host), and
``f``/``distance`` defined inside the differentiated function. The cotangent of
``x0`` is zero (a converged fixed point does not depend on where it started).
"""
from __future__ import annotations

import numpy as np

from .. import _pytree
from .._core import aval as _aval
from .._core.primitive import Primitive
from .regions import as_callable, lower_region, refusal, reverse_region
from .values import LocalFunction, is_symbolic


def iterate(step, distance, x0, tol):
    """The forward iteration on concrete values; ``step(x)`` and ``distance(x, y)`` are callables."""
    x, x_prev = step(x0), x0
    while distance(x, x_prev) > tol:
        x, x_prev = step(x), x
    return x


def _impl(*operands, step, distance, tol, n_a):
    a, x0 = operands[:n_a], operands[n_a]
    f, d = as_callable(step), as_callable(distance)
    return np.asarray(iterate(lambda x: f(*a, x)[0], lambda x, y: np.asarray(d(x, y)[0]), x0, tol))


def _shape(*avals, step, n_a, **params):
    """The step's result shape, or (where the step was lowered before shapes were known) x0's."""
    shape = step.outputs[0].aval.shape
    return avals[n_a].shape if shape is None else shape


def _dtype(*avals, step, n_a, **params):
    dtype = step.outputs[0].aval.dtype
    return avals[n_a].dtype if dtype is None else dtype


fixed_point_p = Primitive("fixed_point", impl=_impl, hlo=None, shape_rule=_shape, dtype_rule=_dtype)
fixed_point_p.function_params = ("step", "distance")


def _vjp(g, *operands, out, step, distance, tol, n_a):
    from .._core.builder import Builder
    from .._core.passes import inline
    from .._prims.broadcasting import zeros_like
    from .._prims.elementwise import add
    a = operands[:n_a]
    step_vjp = reverse_region(step)          # (a..., x, w) -> (x', w ∂/∂a..., w ∂/∂x)
    b = Builder(name=f"{step.name}_adjoint")
    with b.active():                         # the adjoint step (a..., x*, g, w) -> g + w ∂f(a)(x*)/∂x
        ins = [b.new_input(v.aval, v.hint) for v in step.inputs]
        g_in = b.new_input(step.outputs[0].aval, "g")
        w_in = b.new_input(step.outputs[0].aval, "w")
        bars = inline(step_vjp, [*ins, w_in])
        adjoint_step = b.finish([add(g_in, bars[-1])], f"{step.name}_adjoint")
    w = fixed_point_p.bind(*a, out, g, zeros_like(out), step=adjoint_step, distance=distance, tol=tol,
                           n_a=n_a + 2)
    a_bars = inline(step_vjp, [*a, out, w])[1:1 + n_a]
    return (*[bar if _is_float(x) else None for bar, x in zip(a_bars, a)], None)


def _is_float(x):
    """Whether ``x`` may carry a cotangent: a floating dtype, or one not known yet."""
    dt = x.aval.dtype if hasattr(x, "aval") else np.result_type(x)
    return dt is None or np.dtype(dt).kind == "f"


fixed_point_p.vjp = _vjp
_WHY = "the fixed point iterates a data-dependent number of times on the host"
fixed_point_p.jvp = refusal("JVP", "fixed_point", "forward mode through fixed_point is not implemented "
                                                   "(use tl.grad / tl.vjp)")
fixed_point_p.batch = refusal("batching", "fixed_point", f"{_WHY}; call it per example")


def _step_function(f):
    def step(a, x):
        return f(a)(x)
    step.__name__ = f"{getattr(f, '__name__', 'f')}_step"
    return step


def lower_fixed_point(lowerer, args, kwargs, node):
    """``fixed_point(f, a, x0, distance, tol)`` inside a function being lowered: one node."""
    import inspect
    src = lowerer.src
    try:
        bound = inspect.signature(iterate_user).bind(*args, **kwargs).arguments
    except TypeError as e:
        raise src.error(node, f"fixed_point: {e}") from None
    f, a, x0, distance, tol = (bound[k] for k in ("f", "a", "x0", "distance", "tol"))
    if is_symbolic(tol) or not isinstance(tol, (int, float, np.integer, np.floating)):
        raise src.error(node, "fixed_point: `tol` must be a Python number")
    a_leaves, a_tree = _pytree.flatten(a)
    leaf = _pytree.TreeDef("leaf")
    x_aval = _aval_of(x0)
    avals = [_aval_of(x) for x in a_leaves]
    step, step_closure = lower_region(lowerer, _user_step(f), [a_tree, leaf], avals + [x_aval], node,
                                      "fixed_point's `f`")
    dist, dist_closure = lower_region(lowerer, distance, [leaf, leaf], [x_aval, x_aval], node,
                                      "fixed_point's `distance`")
    if step_closure or dist_closure:
        raise src.error(node, "fixed_point: `f` and `distance` must not read arrays from globals or closures; "
                              "pass them through `a`")
    return fixed_point_p.bind(*a_leaves, x0, step=step.graph, distance=dist.graph, tol=float(tol),
                              n_a=len(a_leaves))


def _user_step(f):
    if isinstance(f, LocalFunction):
        return f                    # refused by lower_region, naming `f`
    return _step_function(f)


def _aval_of(x):
    return x.aval if hasattr(x, "aval") else _aval.of(np.asarray(x, dtype=np.result_type(x, np.float64)))


def iterate_user(f, a, x0, distance, tol):
    """autograd's ``fixed_point(f, a, x0, distance, tol)`` called on concrete values."""
    step = f(a)
    return iterate(step, distance, x0, tol)
