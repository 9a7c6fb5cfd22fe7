"""autograd's ``fixed_point`` (``autograd.misc.fixed_points``), differentiated implicitly.

    def newton_sqrt_iter(a):
        return lambda x: 0.5 * (x + a / x)

    def sqrt(a):
        return fixed_point(newton_sqrt_iter, a, 1.0, lambda x, y: np.abs(x - y), 1e-10)

    tl.grad(sqrt)(2.0)           # 1 / (2 sqrt(2)), by the implicit function theorem
    tl.grad(tl.grad(sqrt))(2.0)  # the rule applied again to its own adjoint iteration

``fixed_point(f, a, x0, distance, tol)`` iterates ``x <- f(a)(x)`` from ``x0`` until
``distance(x_new, x_old) <= tol``. Inside ``tl.grad``/``tl.vjp`` its derivative is the
fixed point of the adjoint iteration (see ``tlaloc._frontend.fixed_point``), not the
derivative of the iterations, so it costs one extra fixed-point solve and no memory
per iteration. ``f`` and ``distance`` must be functions defined with ``def`` at module
level; ``a`` may be an array or a pytree of arrays. Forward mode, ``vmap`` and
``tl.jit`` are refused by name.
"""
from __future__ import annotations

from .._frontend.fixed_point import iterate_user, lower_fixed_point

__all__ = ["fixed_point"]


class _FixedPoint:
    """The callable ``fixed_point``: plain iteration when called on arrays, one ``fixed_point``
    node (with its implicit VJP) when called inside a transformed function."""
    __name__ = __qualname__ = "fixed_point"
    __doc__ = __doc__

    @property
    def __tlaloc_custom__(self):
        return self

    def lower_call(self, lowerer, args, kwargs, node):
        return lower_fixed_point(lowerer, args, kwargs, node)

    def __call__(self, f, a, x0, distance, tol):
        return iterate_user(f, a, x0, distance, tol)

    def __repr__(self):
        return "<tlaloc.misc.fixed_points.fixed_point>"


fixed_point = _FixedPoint()
