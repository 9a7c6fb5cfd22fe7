"""Custom derivative rules: ``custom_vjp``, ``custom_jvp`` and ``custom_vjp_jvp``.

JAX's conventions::

    @tl.custom_vjp
    def clip_gradient(x):
        return x
    def fwd(x):                  # fwd(*args) -> (out, residuals)
        return x, ()
    def bwd(res, g):             # bwd(residuals, out_bar) -> one cotangent per argument
        return (np.clip(g, -1.0, 1.0),)
    clip_gradient.defvjp(fwd, bwd)

    @tl.custom_jvp
    def f(x): ...
    @f.defjvp
    def f_jvp(primals, tangents):   # -> (out, out_dot)
        ...

Inside a transformed function a call becomes one coarsened DXIR node
(``custom_vjp_call``, ``custom_jvp_call`` or ``custom_vjp_jvp_call``, declared
with their rules in ``custom_call.py``) whose params hold the lowered graphs of
``fun``, ``fwd``, ``bwd`` and ``jvp``. The rule wins over the derivative of ``fun``:

* reverse mode inlines ``fwd`` and, in the backward sweep, ``bwd``. A
  vjp-only rule keeps them as ``custom_vjp_rule`` nodes, which refuse forward
  mode, so ``jvp``/``jacfwd``/``hessian`` over a vjp-only rule raise
  ``NoRuleError`` naming it when the transform is applied. Reverse over reverse
  differentiates the code of ``fwd`` and ``bwd`` (as JAX does).
* forward mode inlines the ``jvp`` rule.
* reverse mode over a jvp-only rule transposes the rule: ``jvp`` is linear in the
  tangents, so its VJP with respect to them (at zero tangents) is the
  cotangent map (JAX linearizes and transposes the same rule).

Generated code stays plain Python: the renderer writes ``fun``'s body inline.
Called eagerly, a custom function just runs ``fun``. Arrays a rule closes over
(globals, closures) are constants: cotangents and tangents cover arguments only.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from .. import _pytree
from .._core.aval import UNKNOWN, AbstractValue
from .._core.builder import Builder, Value
from .._frontend.lower import LoweredFunction, lower_function
from .._frontend.source import read_source
from .custom_call import _ROLES, custom_jvp_call_p, custom_vjp_call_p, custom_vjp_jvp_call_p

# -- the user-facing object -------------------------------------------------------------------------

class CustomDerivative:
    """A function with a user-supplied derivative rule (see the module docstring).

    ``fun`` runs eagerly; inside ``grad``/``jvp``/``jit`` the rules apply.
    ``defvjp(fwd, bwd)`` adds a reverse rule, ``defjvp(rule)`` a forward rule;
    an object may hold both.
    """

    def __init__(self, fun, kind: str):
        if not callable(fun):
            raise TypeError(f"{kind} decorates a function, got {fun!r}")
        functools.update_wrapper(self, fun)
        self.fun, self.kind = fun, kind
        self.fwd = self.bwd = self.jvp = None
        self._lowering = 0

    @property
    def __tlaloc_custom__(self):
        return self

    def defvjp(self, fwd, bwd):
        """Reverse rule: ``fwd(*args) -> (out, residuals)``, ``bwd(residuals, out_bar) -> tuple``
        with one cotangent (or None) per argument. Returns ``self``."""
        if not callable(fwd) or not callable(bwd):
            raise TypeError(f"{self.__name__}.defvjp(fwd, bwd) takes two functions")
        self.fwd, self.bwd = fwd, bwd
        return self

    def defjvp(self, rule):
        """Forward rule: ``rule(primals, tangents) -> (out, out_dot)``, both tuples of
        arguments in. Usable as a decorator; returns ``rule``."""
        if not callable(rule):
            raise TypeError(f"{self.__name__}.defjvp(rule) takes a function")
        self.jvp = rule
        return rule

    def __call__(self, *args, **kwargs):
        return self.fun(*args, **kwargs)

    def __repr__(self) -> str:
        rules = [r for r, f in (("vjp", self.fwd), ("jvp", self.jvp)) if f is not None]
        return f"<{self.kind} {self.__name__} rules={'+'.join(rules) or 'none'}>"

    def where(self) -> str:
        code = getattr(self.fun, "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "?"

    # -- lowering --------------------------------------------------------------------------------
    def lower_call(self, lowerer, args, kwargs, node):
        """A call inside a function being lowered: one coarsened node."""
        if self._lowering:
            # a call from the rule's own code (fwd calling fun, as JAX code often does): plain fun
            return lowerer.inline_call(self.fun, args, kwargs, node)
        if kwargs:
            raise lowerer.src.error(node, f"call the custom-rule function `{self.__name__}` with "
                                          f"positional arguments only")

        def closure(getter, role, k):
            return lowerer._external(getter(), ("custom", id(getter)), getter, f"{self.__name__}_{role}{k}")
        return self._emit(list(args), closure, lambda msg: lowerer.src.error(node, msg))

    def __tlaloc_lower__(self, arg_trees, arg_avals) -> LoweredFunction:
        """``tl.grad(f)`` etc. applied to the custom function itself."""
        return lower_wrapped(self, self.fun, arg_trees, arg_avals, self._emit, annotations=True)

    def _emit(self, args, closure, error):
        """Emit the custom call node into the active builder; returns the output pytree."""
        flat, trees = [], []
        for a in args:
            leaves, tree = _pytree.flatten(a)
            flat.extend(leaves)
            trees.append(tree)
        avals = [x.aval if type(x) is Value else _aval_of(x) for x in flat]
        if self.fwd is None and self.jvp is None:
            raise error(f"`{self.__name__}` is a {self.kind} function without a rule; call "
                        f"`{self.__name__}.defvjp(fwd, bwd)` or `.defjvp(rule)` before transforming it")
        self._lowering += 1
        try:
            graphs, out_tree = _lower_rules(self, trees, avals, error)
        finally:
            self._lowering -= 1
        closures = []
        for role in _ROLES:
            lowered = graphs.get(role)
            for j, g in enumerate(lowered.closure_getters if lowered is not None else []):
                closures.append(closure(g, role, j))
        n_closure = tuple(len(graphs[r].closure_getters) if graphs.get(r) is not None else 0 for r in _ROLES)
        prim = (custom_vjp_jvp_call_p if self.fwd is not None and self.jvp is not None
                else custom_vjp_call_p if self.fwd is not None else custom_jvp_call_p)
        outs = prim.bind(*flat, *closures,
                         **{r: (graphs[r].graph if graphs.get(r) is not None else None) for r in _ROLES},
                         n_args=len(flat), n_closure=n_closure, bwd_mask=graphs.get("bwd_mask"),
                         name=self.__name__, where=self.where())
        return _pytree.unflatten(out_tree, list(outs))


def lower_wrapped(owner, fun, arg_trees, arg_avals, emit, annotations=False) -> LoweredFunction:
    """The graph of ``owner`` (a wrapper of ``fun`` that emits one coarsened node) applied to
    fresh inputs: what ``tl.grad(owner)`` differentiates. ``emit(args, closure, error)`` emits
    the node; ``closure(getter, role, j)`` turns a closed-over array into a graph input."""
    src = read_source(fun)
    params = list(inspect.signature(fun).parameters)
    if arg_trees is None:
        arg_trees = [_pytree.TreeDef("leaf") for _ in params]
    if annotations and arg_avals is None and all(t.kind == "leaf" for t in arg_trees):
        from .._frontend import typing_hooks
        if typing_hooks.avals_from_annotations is not None:
            arg_avals = typing_hooks.avals_from_annotations(fun, params[:len(arg_trees)])
    name = owner.__name__
    root = Builder(name=name)
    getters = []
    with root.active():
        args, k = [], 0
        for pname, tree in zip(params, arg_trees):
            leaves = []
            for j in range(tree.num_leaves):
                aval = arg_avals[k] if arg_avals is not None else UNKNOWN
                leaves.append(root.new_input(aval, pname if tree.kind == "leaf" else f"{pname}_{j}"))
                k += 1
            args.append(_pytree.unflatten(tree, leaves))

        def closure(getter, role, j):
            value = getter()
            v = root.new_input(AbstractValue(np.asarray(value).dtype, None), f"{name}_{role}{j}")
            getters.append(getter)
            return v
        out = emit(args, closure, lambda msg: src.error(src.node, msg))
        leaves, out_tree = _pytree.flatten(out)
    graph = root.finish(leaves, name)
    return LoweredFunction(graph, owner, params, list(arg_trees), getters, out_tree, src)


def _aval_of(x):
    from .._core import aval as _aval
    return _aval.of(x)


def _lower_rules(obj, trees, avals, error):
    """Lower fun and the rules for these argument structures; check what they return."""
    name = obj.__name__
    fun = lower_function(obj.fun, arg_trees=list(trees), arg_avals=list(avals), name=name)
    graphs = {"fun": fun}
    n_out = len(fun.graph.outputs)
    if obj.fwd is not None:
        fwd = lower_function(obj.fwd, arg_trees=list(trees), arg_avals=list(avals), name=f"{name}_fwd")
        t = fwd.out_tree
        if t.kind not in ("tuple", "list") or len(t.children) != 2 or t.children[0] != fun.out_tree:
            raise error(f"the fwd rule of `{name}` must return (out, residuals) with out shaped like "
                        f"`{name}`'s result {fun.out_tree!r}; it returns {t!r}")
        res_tree = t.children[1]
        res_avals = [o.aval for o in fwd.graph.outputs[n_out:]]
        out_avals = [o.aval for o in fun.graph.outputs]
        bwd = lower_function(obj.bwd, arg_trees=[res_tree, fun.out_tree], arg_avals=res_avals + out_avals,
                             name=f"{name}_bwd")
        graphs["fwd"] = fwd
        graphs["bwd"], graphs["bwd_mask"] = _check_bwd(bwd, trees, name, error)
        _check_cotangent_shapes(bwd.graph.outputs, [v for v, m in zip(avals, graphs["bwd_mask"]) if m],
                                name, error)
    if obj.jvp is not None:
        tup = _pytree.TreeDef("tuple", None, tuple(trees))
        jvp = lower_function(obj.jvp, arg_trees=[tup, tup], arg_avals=list(avals) + list(avals),
                             name=f"{name}_jvp")
        t = jvp.out_tree
        if t.kind not in ("tuple", "list") or len(t.children) != 2 or \
                t.children[0] != fun.out_tree or t.children[1] != fun.out_tree:
            raise error(f"the jvp rule of `{name}` must return (out, out_dot), both shaped like "
                        f"`{name}`'s result {fun.out_tree!r}; it returns {t!r}")
        graphs["jvp"] = jvp
    return graphs, fun.out_tree


def _check_bwd(bwd, trees, name, error):
    """bwd returns one cotangent (or None) per argument. Returns the lowering and a
    mask over argument leaves: False where bwd said None (a zero cotangent)."""
    t = bwd.out_tree
    if len(trees) == 1 and t.kind == "leaf" and trees[0].kind == "leaf":
        return bwd, (True,)
    if t.kind not in ("tuple", "list") or len(t.children) != len(trees):
        raise error(f"the bwd rule of `{name}` must return a tuple with one cotangent per argument "
                    f"({len(trees)}), e.g. `return (x_bar,)`; it returns {t!r}")
    mask = []
    for k, (c, want) in enumerate(zip(t.children, trees)):
        if c.kind != "none" and c != want:
            raise error(f"the bwd rule of `{name}`: the cotangent of argument {k} has structure {c!r} but "
                        f"the argument has {want!r}")
        mask += [c.kind != "none"] * want.num_leaves
    return bwd, tuple(mask)


def _check_cotangent_shapes(outs, arg_avals, name, error):
    """Where both shapes are known, a cotangent must have its argument's shape (as JAX requires)."""
    for k, (o, a) in enumerate(zip(outs, arg_avals)):
        got, want = o.aval.shape, a.shape
        if got is None or want is None:
            continue
        if len(got) != len(want) or any(type(g) is int and type(w) is int and g != w for g, w in zip(got, want)):
            from .._annotations import type_str
            raise error(f"the bwd rule of `{name}` returns a cotangent of type {type_str(o.aval)} for an "
                        f"argument of type {type_str(a)}; each cotangent must have its argument's shape "
                        f"(sum over broadcast axes in bwd)")


# -- public constructors ----------------------------------------------------------------------------

def custom_vjp(fun=None, *, fwd=None, bwd=None):
    """Give ``fun`` a reverse-mode rule (JAX's ``jax.custom_vjp`` conventions).

    ``@tl.custom_vjp`` then ``f.defvjp(fwd, bwd)``; or ``tl.custom_vjp(f, fwd=..., bwd=...)``.
    ``f.defjvp(rule)`` adds a forward rule too (the same as ``custom_vjp_jvp``).
    """
    if fun is None:
        return functools.partial(custom_vjp, fwd=fwd, bwd=bwd)
    obj = CustomDerivative(fun, "custom_vjp")
    if fwd is not None or bwd is not None:
        obj.defvjp(fwd, bwd)
    return obj


def custom_jvp(fun=None, *, jvp=None):
    """Give ``fun`` a forward-mode rule (``jax.custom_jvp``): ``@f.defjvp`` a
    ``rule(primals, tangents) -> (out, out_dot)``. Reverse mode transposes it."""
    if fun is None:
        return functools.partial(custom_jvp, jvp=jvp)
    obj = CustomDerivative(fun, "custom_jvp")
    if jvp is not None:
        obj.defjvp(jvp)
    return obj


def custom_vjp_jvp(fun=None, *, fwd=None, bwd=None, jvp=None):
    """Both rules: reverse mode uses ``fwd``/``bwd``, forward mode (and the forward
    half of ``hessian``) uses ``jvp``. Rules may also be added with ``defvjp``/``defjvp``."""
    if fun is None:
        return functools.partial(custom_vjp_jvp, fwd=fwd, bwd=bwd, jvp=jvp)
    obj = CustomDerivative(fun, "custom_vjp_jvp")
    if fwd is not None or bwd is not None:
        obj.defvjp(fwd, bwd)
    if jvp is not None:
        obj.defjvp(jvp)
    return obj

