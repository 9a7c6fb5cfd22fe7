"""``jvp``, ``jacfwd``, ``jacrev`` and ``hessian``: public API.

``jvp`` is forward mode over the same DXIR as reverse mode; ``jacfwd`` pushes
one basis tangent per input element through the generated JVP, ``jacrev``
pulls one basis cotangent per output element through the generated VJP, and
``hessian`` is ``jacfwd(grad(f))`` (forward over reverse).
"""
from __future__ import annotations

import functools

import numpy as np

from .. import _pytree
from ..errors import ArgumentError
from . import forward_rules  # noqa: F401  (registers the control-flow rules)
from .api import _fn_name, _leaf_ranges, _normalize_argnums, grad as _grad
from .forward import jvp_graph
from .transformed import Transformed


class _JVPTransform(Transformed):
    kind = "jvp"

    def __init__(self, fn):
        super().__init__(fn, name=f"{_fn_name(fn)}_jvp")

    def build(self, lowered):
        graph = lowered.graph
        n_args = sum(t.num_leaves for t in lowered.arg_trees)
        mask = [k < n_args for k in range(len(graph.inputs))]
        g, _ = jvp_graph(graph, tangent_mask=mask, name=self.name)
        names = [v.hint for v in graph.inputs[:n_args]]
        closure_names = [v.hint for v in graph.inputs[n_args:]]
        # graph inputs: primals (args, closure), then tangents of the args
        arg_names = names + closure_names + [f"{n}_dot" for n in names]
        self._layout = (len(graph.outputs), n_args, len(graph.inputs) - n_args)
        doc = f"Forward mode of `{_fn_name(lowered.fn)}`: outputs and their tangents."
        return [(g, self.name, arg_names, doc)], None

    def __call__(self, primals, tangents):
        if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
            raise ArgumentError("jvp: primals and tangents must be tuples of arguments, e.g. jvp(f, (x,), (v,))")
        if len(primals) != len(tangents):
            raise ArgumentError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
        flat, trees, tflat = [], [], []
        for p, t in zip(primals, tangents):
            pl, pt = _pytree.flatten(p)
            tl_, tt = _pytree.flatten(t)
            if pt != tt:
                raise ArgumentError(f"jvp: a tangent has structure {tt!r} but its primal has {pt!r}")
            for a, b in zip(pl, tl_):
                if np.shape(a) != np.shape(b):
                    raise ArgumentError(f"jvp: tangent shape {np.shape(b)} differs from primal shape {np.shape(a)}")
            flat += pl
            tflat += tl_
            trees.append(pt)
        entry = self._entry(trees if any(t.kind != "leaf" for t in trees) else None)
        from .._frontend import typing_hooks
        if typing_hooks.check_call is not None:
            typing_hooks.check_call(self.fn, tuple(primals))
        lowered = entry["lowered"]
        closure = [g() for g in lowered.closure_getters]
        outs = entry["fn"](*[np.asarray(x) for x in flat], *closure, *[np.asarray(t) for t in tflat])
        n_out = self._layout[0]
        return (_pytree.unflatten(lowered.out_tree, list(outs[:n_out])),
                _pytree.unflatten(lowered.out_tree, list(outs[n_out:])))


_JVP_CACHE: dict = {}


def _jvp_of(fun) -> _JVPTransform:
    try:
        hit = _JVP_CACHE.get(fun)
    except TypeError:
        return _JVPTransform(fun)
    if hit is None:
        hit = _JVP_CACHE[fun] = _JVPTransform(fun)
    return hit


def jvp(fun, primals=None, tangents=None):
    """Forward-mode Jacobian-vector product (JAX's convention).

    ``jvp(f, (x, ...), (v, ...)) -> (f(x, ...), ∂f(x)·v)``. With only ``fun``, returns
    the generated forward-mode function ``(primals, tangents) -> (out, out_dot)``,
    whose source ``tl.source`` shows (tangents are named ``x_dot``).

    Raises ArgumentError when tangents do not match the primals' structure or shapes.
    """
    t = _jvp_of(fun)
    if primals is None and tangents is None:
        return t
    return t(primals, tangents)


def _basis(x):
    x = np.asarray(x)
    n = x.size
    eye = np.eye(n, dtype=x.dtype if x.dtype.kind == "f" else np.float64)
    return [eye[k].reshape(x.shape) for k in range(n)]


class _JacobianTransform(Transformed):
    """jacfwd / jacrev: Jacobian of f with respect to argnums, out.shape + in.shape."""

    def __init__(self, fn, argnums, mode):
        self.argnums, self.single = _normalize_argnums(argnums, f"jac{mode}")
        self.mode = mode
        self.kind = f"jac{mode}"
        self.inner = _jvp_of(fn) if mode == "fwd" else None
        self._fn = fn
        Transformed.__init__(self, fn, name=f"jac{mode}_{_fn_name(fn)}")

    def build(self, lowered):
        if self.mode == "fwd":
            return self.inner.build(lowered)
        from .api import _VJPTransform
        self._vjp = _VJPTransform(self._fn, False)
        return self._vjp.build(lowered)

    def __call__(self, *args):
        args = tuple(np.asarray(a) if not isinstance(a, (tuple, list, dict)) else a for a in args)
        for a in self.argnums:
            if not -len(args) <= a < len(args):
                raise ArgumentError(f"{self.kind}: argnums={a} but {len(args)} arguments were given")
        argnums = tuple(a % len(args) for a in self.argnums)
        if self.mode == "fwd":
            jacs = [self._fwd(args, a) for a in argnums]
        else:
            jacs = self._rev(args, argnums)
        return jacs[0] if self.single else tuple(jacs)

    def _fwd(self, args, a):
        x = np.asarray(args[a])
        zeros = [np.zeros_like(np.asarray(v), dtype=np.asarray(v).dtype if np.asarray(v).dtype.kind == "f"
                               else np.float64) for v in args]
        cols = []
        out = None
        for e in _basis(x):
            tangents = list(zeros)
            tangents[a] = e
            out, dout = self.inner(args, tuple(tangents))
            cols.append(np.asarray(dout))
        if not cols:
            out = self._fn(*args) if out is None else out
            return np.zeros(np.shape(out) + x.shape)
        stacked = np.stack(cols, axis=-1)                    # out.shape + (x.size,)
        return stacked.reshape(np.shape(cols[0]) + x.shape)

    def _rev(self, args, argnums):
        from .api import vjp as _vjp
        out, pullback = _vjp(self._fn, *args)
        out = np.asarray(out)
        rows = [[] for _ in argnums]
        for e in _basis(out):
            bars = pullback(e)
            for k, a in enumerate(argnums):
                rows[k].append(np.asarray(bars[a]))
        result = []
        for k, a in enumerate(argnums):
            x = np.asarray(args[a])
            if not rows[k]:
                result.append(np.zeros(out.shape + x.shape))
            else:
                result.append(np.stack(rows[k], axis=0).reshape(out.shape + x.shape))
        return result


def jacfwd(fun=None, argnums=0):
    """Jacobian by forward mode: shape ``f(x).shape + x.shape``."""
    if fun is None:
        return functools.partial(jacfwd, argnums=argnums)
    return _JacobianTransform(fun, argnums, "fwd")


def jacrev(fun=None, argnums=0):
    """Jacobian by reverse mode: shape ``f(x).shape + x.shape``."""
    if fun is None:
        return functools.partial(jacrev, argnums=argnums)
    return _JacobianTransform(fun, argnums, "rev")


def hessian(fun=None, argnums=0):
    """Hessian as forward over reverse: ``jacfwd(grad(f))``; shape ``x.shape + x.shape``."""
    if fun is None:
        return functools.partial(hessian, argnums=argnums)
    if not isinstance(argnums, (int, np.integer)):
        raise ArgumentError(f"hessian: argnums must be one int (got {argnums!r}); for blocks of a "
                            f"Hessian use tl.jacfwd(tl.grad(f, argnums=i), argnums=j)")
    return jacfwd(_grad(fun, argnums=argnums), argnums=argnums)
