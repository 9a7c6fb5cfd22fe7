"""``jvp``, ``jacfwd``, ``jacrev`` and ``hessian``: public API.

``jvp`` is forward mode over the same DXIR as reverse mode; ``jacfwd`` batches
the generated JVP over the basis of the input, ``jacrev`` batches the generated
VJP over the basis of the output (``jacobian.py``: one DXIR graph, so they nest),
and ``hessian`` is ``jacfwd(grad(f))`` (forward over reverse).
"""
from __future__ import annotations

import functools

import numpy as np

from .. import _pytree
from ..errors import ArgumentError
from . import forward_rules  # noqa: F401  (registers the control-flow rules)
from .api import _fn_name, grad as _grad
from .call_checks import refuse_array_subclasses
from .forward import jvp_graph
from .jacobian import JacobianTransform
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
        refuse_array_subclasses("jvp", self.fn, primals)
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
        # built per structure, specialised to shapes or integer values where the code reads them
        entry = self._specialised(trees, flat, [np.asarray(x) for x in flat])
        if self.drop_if_stale(entry["lowered"]):    # a folded global changed since: build again
            entry = self._specialised(trees, flat, [np.asarray(x) for x in flat])
        from .._frontend import typing_hooks
        if typing_hooks.check_call is not None:
            typing_hooks.check_call(self.fn, tuple(primals))
        lowered = entry["lowered"]
        closure = [g() for g in lowered.closure_getters]
        outs = entry["fn"](*[np.asarray(x) for x in flat], *closure, *[np.asarray(t) for t in tflat])
        n_out = self._layout[0]
        return (_pytree.unflatten(lowered.out_tree, list(outs[:n_out])),
                _pytree.unflatten(lowered.out_tree, list(outs[n_out:])))


    def lower_jvp_call(self, lowerer, primals, tangents, node):
        """``tl.jvp(f, primals, tangents)`` called inside another function being lowered (under
        ``tl.jit``, ``tl.grad``, ...): this transform's graph inlined at the call, its inputs the
        primals, the closure values, then the tangents. Regression: the eager path ran on the
        symbolic values and refused them ("tangent shape <_SymbolicShape ...> differs")."""
        from .._core.passes import inline
        from .._frontend.structure import ShapeNeeded
        if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
            raise lowerer.src.error(node, "jvp: primals and tangents must be tuples of arguments, e.g. jvp(f, (x,), (v,))")
        if len(primals) != len(tangents):
            raise lowerer.src.error(node, f"jvp: {len(primals)} primals but {len(tangents)} tangents")
        flat, trees, tflat = [], [], []
        for p, t in zip(primals, tangents):
            pl, pt = _pytree.flatten(p)
            tl_, tt = _pytree.flatten(t)
            if pt != tt:
                raise lowerer.src.error(node, f"jvp: a tangent has structure {tt!r} but its primal has {pt!r}")
            for a, b in zip(pl, tl_):
                sa, sb = _known_shape(a), _known_shape(b)
                if (sa is None or sb is None) and lowerer.ctx.specialisable:   # checked at the first call
                    raise lowerer.src.error(node, "jvp: the shapes of the primals and tangents are compared at "
                                                  "the first call", ShapeNeeded)
                if sa is not None and sb is not None and sa != sb:
                    raise lowerer.src.error(node, f"jvp: tangent shape {sb} differs from primal shape {sa}")
            flat += pl
            tflat += tl_
            trees.append(pt)
        entry = self.entry_at_call_site(trees, flat)
        lowered = entry["lowered"]
        outs = inline(entry["graphs"][0][0], flat + self.closure_at_call(lowerer, lowered) + tflat)
        n_out = len(outs) // 2
        return (_pytree.unflatten(lowered.out_tree, list(outs[:n_out])),
                _pytree.unflatten(lowered.out_tree, list(outs[n_out:])))


def _known_shape(x):
    """x's shape where it is known when the function is built (a tuple of ints), else None."""
    aval = getattr(x, "aval", None)
    if aval is None:
        return np.shape(x)
    shape = aval.shape
    return tuple(shape) if shape is not None and all(isinstance(d, int) for d in shape) else None


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


def _lower_jvp(lowerer, args, kwargs, node):
    """``tl.jvp(f, primals, tangents)`` met by the front end inside a function it lowers, with an
    array argument (``_frontend/callsites.py`` calls a function's ``__tlaloc_lower_symbolic__``)."""
    from .._frontend.values import LocalFunction
    if len(args) != 3 or kwargs:
        raise lowerer.src.error(node, "jvp inside a transformed function: call it as jvp(f, primals, tangents)")
    fun = args[0]
    if isinstance(fun, LocalFunction):            # closure-converted (_frontend/local_transform.py)
        from .._frontend.local_transform import LocalCallable
        return _JVPTransform(LocalCallable(fun, lowerer._defaults(fun.node.args, fun))).lower_jvp_call(
            lowerer, args[1], args[2], node)                      # not cached: one per lowering
    return _jvp_of(fun).lower_jvp_call(lowerer, args[1], args[2], node)


jvp.__tlaloc_lower_symbolic__ = _lower_jvp


def jacfwd(fun=None, argnums=0, has_aux=False):
    """Jacobian by forward mode: shape ``f(x).shape + x.shape``. With ``has_aux``, ``fun`` returns
    ``(out, aux)`` and the result is ``(jacobian of out, aux)``, as JAX's."""
    if fun is None:
        return functools.partial(jacfwd, argnums=argnums, has_aux=has_aux)
    return JacobianTransform(fun, argnums, "fwd", has_aux)


def jacrev(fun=None, argnums=0, has_aux=False):
    """Jacobian by reverse mode: shape ``f(x).shape + x.shape``. With ``has_aux``, ``fun`` returns
    ``(out, aux)`` and the result is ``(jacobian of out, aux)``, as JAX's."""
    if fun is None:
        return functools.partial(jacrev, argnums=argnums, has_aux=has_aux)
    return JacobianTransform(fun, argnums, "rev", has_aux)


def hessian(fun=None, argnums=0):
    """Hessian as forward over reverse: ``jacfwd(grad(f))``; shape ``x.shape + x.shape``."""
    if fun is None:
        return functools.partial(hessian, argnums=argnums)
    # argnums=(0, 1): the blocks ((H00, H01), (H10, H11)), as JAX's
    return jacfwd(_grad(fun, argnums=argnums), argnums=argnums)


# a nested def/lambda passed to these inside a function being lowered is closure-converted
# (tlaloc._frontend.local_transform)
jacfwd.__tlaloc_takes_local__ = True
jacrev.__tlaloc_takes_local__ = True
hessian.__tlaloc_takes_local__ = True
