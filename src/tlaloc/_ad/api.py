"""``grad``, ``value_and_grad``, ``vjp`` and ``source``: reverse mode, public API.

The derivative is built when the transform is applied: the function's source
is lowered to DXIR, the reverse transform runs on DXIR, and the result is
rendered as Python (see ``tl.source``) and executed. No tape, no tracing.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import _pytree
from .._core.builder import Builder
from .._core.graph import Graph
from .._core.passes import dce, split
from .._core.simplify import simplify
from .._frontend.lower import LoweredFunction
from .._frontend.specialise import NOTHING
from .._prims.misc import grad_seed_p
from ..errors import ArgumentError, GradientError
from . import control_rules  # noqa: F401  (registers the control-flow rules)
from .reverse import forward_sweep
from .call_checks import refuse_none_argnums
from .transformed import Transformed, _LEAF


from ..dtypes import FLOATS as _FLOAT_DTYPES  # noqa: E402


def _normalize_argnums(argnums, name):
    if isinstance(argnums, (int, np.integer)) and not isinstance(argnums, bool):
        return (int(argnums),), True
    if isinstance(argnums, (tuple, list)) and all(isinstance(a, (int, np.integer)) for a in argnums):
        if len(set(argnums)) != len(argnums):
            raise ArgumentError(f"{name}: argnums {tuple(argnums)} repeats an index")
        return tuple(int(a) for a in argnums), False
    raise ArgumentError(f"{name}: argnums must be an int or a tuple of ints, got {argnums!r}")


from .transformed import _leaf_ranges  # noqa: E402


def _fn_name(fn) -> str:
    name = getattr(fn, "__name__", "f")
    return "f" if name == "<lambda>" else name


class _ReverseTransform(Transformed):
    """grad / value_and_grad."""
    same_signature = True

    def __init__(self, fn, argnums, has_aux, with_value):
        self.argnums, self.single = _normalize_argnums(argnums, "grad")
        self.has_aux = has_aux
        self.with_value = with_value
        self.kind = "value_and_grad" if with_value else "grad"
        name = _fn_name(fn)
        super().__init__(fn, name=f"d{name}_d{'_'.join(map(str, self.argnums))}")

    def _arg_label(self, lowered, k):
        return lowered.arg_names[k] if k < len(lowered.arg_names) else str(k)

    def build(self, lowered: LoweredFunction):
        n_args = len(lowered.arg_trees)
        for a in self.argnums:
            if not -n_args <= a < n_args:
                raise ArgumentError(f"grad: argnums={a} but `{lowered.fn.__name__}` takes {n_args} "
                                    f"positional arguments")
        self.argnums = tuple(a % n_args for a in self.argnums)
        fname = _fn_name(lowered.fn)
        self.name = f"d{fname}_d{'_'.join(self._arg_label(lowered, a) for a in self.argnums)}"
        self.__name__ = self.name
        ranges = _leaf_ranges(lowered)
        wrt_idx = [i for a in self.argnums for i in range(*ranges[a])]
        graph = lowered.graph
        out_leaves = len(graph.outputs)
        if self.has_aux:
            if lowered.out_tree.kind not in ("tuple", "list") or len(lowered.out_tree.children) != 2:
                raise GradientError(f"grad(has_aux=True): `{fname}` must return a pair (value, aux), "
                                    f"got structure {lowered.out_tree!r}")
            value_tree = lowered.out_tree.children[0]
        else:
            value_tree = lowered.out_tree
        if value_tree.kind != "leaf":
            raise GradientError(f"grad: `{fname}` must return one scalar"
                                + (" (as the first element of (value, aux))" if self.has_aux else "")
                                + f", but it returns the structure {value_tree!r}; use tl.vjp for "
                                  f"structured outputs")
        b = Builder(name=self.name)
        with b.active():
            ins = [b.new_input(v.aval, v.hint) for v in graph.inputs]
            outs, backward = forward_sweep(graph, ins)
            seed = grad_seed_p.bind(outs[0])
            if type(seed).__name__ == "Value":
                seed.var.hint = f"{graph.outputs[0].hint or 'out'}_bar"
            bars = backward([seed] + [None] * (out_leaves - 1))
            from .._prims.broadcasting import zeros_like
            grads = []
            for i in wrt_idx:
                g = bars[i]
                if g is None:
                    g = zeros_like(ins[i])
                grads.append(g)
            results = (list(outs) if (self.with_value or self.has_aux) else []) + grads
            g = b.finish(results, self.name)
        g = simplify(dce(g))
        arg_names = [v.hint for v in graph.inputs]
        self._out_layout = (out_leaves, len(grads))
        nested = g
        if self.has_aux and not self.with_value:
            # the nested view returns (grads, aux) as a call does: the value leaf dropped, the
            # gradients first (regression: tl.vmap(tl.grad(f, has_aux=True)) returned the value
            # where the gradient belongs)
            outs = tuple(g.outputs)                        # value (one leaf), aux leaves, gradients
            nested = dce(Graph(g.inputs, g.nodes, outs[out_leaves:] + outs[1:out_leaves], g.name))
        as_lowered = LoweredFunction(nested, lowered.fn, lowered.arg_names, lowered.arg_trees,
                                     lowered.closure_getters, None, lowered.src, lowered.guards)
        doc = f"Gradient of `{fname}` with respect to {', '.join(self._arg_label(lowered, a) for a in self.argnums)}."
        functions = [(g, self.name, arg_names, doc)]
        # the nested-call view returns the same structure as calling this object
        as_lowered.out_tree = self._out_tree_for(lowered)
        return functions, as_lowered

    def _out_tree_for(self, lowered):
        grads_tree = self._grads_tree(lowered)
        if self.with_value:
            return _pytree.TreeDef("tuple", None, (lowered.out_tree, grads_tree))
        if self.has_aux:
            return _pytree.TreeDef("tuple", None, (grads_tree, lowered.out_tree.children[1]))
        return grads_tree

    def _grads_tree(self, lowered):
        trees = [lowered.arg_trees[a] for a in self.argnums]
        if self.single:
            return trees[0]
        return _pytree.TreeDef("tuple", None, tuple(trees))

    def check_structure(self, args):
        refuse_none_argnums(self.kind, self.fn, args, self.argnums)

    def differentiated(self, n_args: int):
        return {a % n_args for a in self.argnums if -n_args <= a < n_args}

    def check_args(self, args, trees, flat, lowered, entry):
        ranges = entry["ranges"]
        for a in self.argnums:
            for i in range(*ranges[a]):
                if flat[i] is NOTHING:                 # an object, not an array: no gradient to give
                    label = lowered.arg_names[a] if a < len(lowered.arg_names) else a
                    what = (f"a {type(args[a]).__name__} object" if ranges[a][1] - ranges[a][0] == 1
                            else "a structure holding a value that is not an array or a number")
                    raise GradientError(
                        f"grad: argument `{label}` (argnums={a}) is {what}: it has no gradient. Make its "
                        f"class a @dataclasses.dataclass, whose "
                        f"array fields are then differentiated, or pass its arrays (a dict or list) as the "
                        f"argument, or leave it out of argnums")
                dt = flat[i].dtype
                if dt not in _FLOAT_DTYPES:
                    label = lowered.arg_names[a] if a < len(lowered.arg_names) else a
                    raise GradientError(
                        f"grad: argument `{label}` (argnums={a}) has dtype {dt}; gradients are only defined "
                        f"for floating-point inputs. Convert it (e.g. x.astype(np.float64)) or leave it "
                        f"out of argnums")

    def finish(self, args, trees, outs, entry):
        lowered = entry["lowered"]
        n_out, n_grads = self._out_layout
        value_leaves = outs[:n_out] if (self.with_value or self.has_aux) else []
        grad_leaves = outs[len(value_leaves):]
        if entry.get("grads_are_leaves") is None:
            entry["grads_are_leaves"] = all(lowered.arg_trees[a] == _LEAF for a in self.argnums)
        if entry["grads_are_leaves"] and not (self.with_value or self.has_aux):
            return grad_leaves[0] if self.single else tuple(grad_leaves)
        ranges = entry["ranges"]
        grads, k = [], 0
        for a in self.argnums:
            n = ranges[a][1] - ranges[a][0]
            grads.append(_pytree.unflatten(lowered.arg_trees[a], grad_leaves[k:k + n]))
            k += n
        g = grads[0] if self.single else tuple(grads)
        if self.with_value:
            value = _pytree.unflatten(lowered.out_tree, value_leaves)
            return value, g
        if self.has_aux:
            aux = _pytree.unflatten(lowered.out_tree, value_leaves)[1]
            return g, aux
        return g


def _argnums_alias(name, argnums, argnum):
    """``argnum=`` is autograd's spelling of ``argnums=`` (same meaning: int or tuple of ints)."""
    if argnum is None:
        return argnums
    if argnums != 0:
        raise ArgumentError(f"{name}: pass either argnums= or autograd's argnum=, not both "
                            f"(got argnums={argnums!r}, argnum={argnum!r})")
    return argnum


def grad(fun=None, argnums=0, has_aux=False, *, argnum=None):
    """The gradient of a scalar-valued function, built now by source transformation.

    Args:
      fun: a Python function using ``tlaloc.numpy`` or plain NumPy.
      argnums: which positional argument(s) to differentiate (int or tuple).
      has_aux: ``fun`` returns ``(value, aux)``; the result is ``(grad, aux)``.
      argnum: autograd's name for ``argnums`` (accepted so autograd programs port by
        changing imports only); giving both raises ``ArgumentError``.

    Returns:
      A function with ``fun``'s signature returning the gradient with the
      structure of the chosen argument(s) (a tuple for a tuple ``argnums``).

    Raises:
      FenceError: at definition, for Python outside the supported subset (file:line:col).
      GradientError: at call, for a non-scalar output or an integer argument in ``argnums``.

    Usable as ``@tl.grad`` or ``@tl.grad(argnums=1)``.
    """
    argnums = _argnums_alias("grad", argnums, argnum)
    if fun is None:
        return functools.partial(grad, argnums=argnums, has_aux=has_aux)
    return _ReverseTransform(fun, argnums, has_aux, with_value=False)


def value_and_grad(fun=None, argnums=0, has_aux=False, *, argnum=None):
    """Like ``grad`` but returns ``(value, grad)`` (``((value, aux), grad)`` with ``has_aux``)."""
    argnums = _argnums_alias("value_and_grad", argnums, argnum)
    if fun is None:
        return functools.partial(value_and_grad, argnums=argnums, has_aux=has_aux)
    return _ReverseTransform(fun, argnums, has_aux, with_value=True)


class _VJPFunction:
    """The ``vjp_fn`` of ``tl.vjp``: maps an output cotangent to input cotangents."""

    def __init__(self, parent, residuals, entry, out_tree, arg_trees):
        self._parent, self._res, self._entry = parent, residuals, entry
        self._out_tree, self._arg_trees = out_tree, arg_trees
        # tl.source(vjp_fn): the fwd/bwd module. (Not __tlaloc_transformed__: vjp_fn takes cotangents,
        # not the arguments of the function; regression: tl.jit(vjp_fn) compiled the forward pass.)
        self.__tlaloc_source_of__ = parent
        self.__name__ = f"{parent.name}_fn"

    def _structured(self, bars):
        out, k = [], 0
        for t in self._arg_trees:
            out.append(_pytree.unflatten(t, list(bars[k:k + t.num_leaves])))
            k += t.num_leaves
        return tuple(out)

    def _checked_cotangent(self, ct):
        leaves, tree = _pytree.flatten(ct)
        if tree != self._out_tree:
            raise ArgumentError(f"vjp_fn: the cotangent must have the output's structure {self._out_tree!r}, "
                                f"got {tree!r}")
        return leaves

    def __tlaloc_lower_symbolic__(self, lowerer, args, kwargs, node):
        """``vjp_fn(ct)`` inside a function being lowered (``tl.grad`` of it, or under ``tl.jit``): the
        backward graph inlined, the residuals of the forward call as constants."""
        from .._core.passes import inline
        if kwargs or len(args) != 1:
            raise lowerer.src.error(node, "vjp_fn takes one argument: the output cotangent")
        try:
            leaves = self._checked_cotangent(args[0])
        except ArgumentError as e:
            raise lowerer.src.error(node, str(e)) from None
        res = [lowerer._external(r, ("vjp residual", id(self), k), lambda r=r: r, f"residual_{k}")
               for k, r in enumerate(self._res)]
        bwd = self._entry["graphs"][1][0]
        return self._structured(inline(bwd, res + list(leaves)))

    def __tlaloc_jit_source__(self, trees, source_type):
        """``tl.jit(vjp_fn)``: the backward graph, taking the cotangent's leaves, then the residuals
        (as closure values)."""
        from .._core.graph import Graph as _Graph
        if len(trees) != 1 or trees[0] != self._out_tree:
            raise ArgumentError(f"jit of vjp_fn: call it with one cotangent of the output's structure "
                                f"{self._out_tree!r}")
        bwd = self._entry["graphs"][1][0]
        n_res = len(self._res)
        graph = _Graph(tuple(bwd.inputs[n_res:]) + tuple(bwd.inputs[:n_res]), bwd.nodes, bwd.outputs, bwd.name)

        def finish(args, trees_, outs):
            return self._structured(list(outs))

        def check(args, trees_, leaves):
            return None

        return source_type(graph, [lambda r=r: r for r in self._res], finish, check)

    def __call__(self, ct):
        leaves = self._checked_cotangent(ct)
        for k, (c, o) in enumerate(zip(leaves, self._out_leaves)):
            c, o = np.asarray(c), np.asarray(o)
            if c.shape != o.shape or c.dtype != o.dtype:
                raise ArgumentError(f"vjp_fn: cotangent {k} must have the output's shape and dtype "
                                    f"{o.shape} {o.dtype}, got {c.shape} {c.dtype}; "
                                    f"e.g. np.ones_like(out)")
        bars = self._entry["bwd"](*self._res, *[np.asarray(l) for l in leaves])
        return self._structured(bars)


class _VJPTransform(Transformed):
    kind = "vjp"

    def __init__(self, fn, has_aux):
        self.has_aux = has_aux
        super().__init__(fn, name=f"{_fn_name(fn)}_vjp")

    def build(self, lowered):
        graph = lowered.graph
        n_args = sum(t.num_leaves for t in lowered.arg_trees)
        from .reverse import vjp_graph
        n_out = len(graph.outputs)
        if self.has_aux:
            if lowered.out_tree.kind not in ("tuple", "list") or len(lowered.out_tree.children) != 2:
                raise GradientError("vjp(has_aux=True): the function must return a pair (out, aux)")
            n_main = lowered.out_tree.children[0].num_leaves
        else:
            n_main = n_out
        mask = [k < n_main for k in range(n_out)]
        wrt = [k < n_args for k in range(len(graph.inputs))]
        G, _ = vjp_graph(graph, ct_mask=mask, wrt=wrt, name=self.name)
        fwd, bwd, residuals = split(G, len(graph.inputs), n_out)
        fname = _fn_name(lowered.fn)
        fwd_name, bwd_name = f"{fname}_fwd", f"{fname}_bwd"
        self._layout = (n_out, len(residuals), n_main)
        functions = [(fwd, fwd_name, [v.hint for v in graph.inputs], f"Forward pass of `{fname}`: outputs, then residuals."),
                     (bwd, bwd_name, None, f"Backward pass of `{fname}`: residuals and output cotangents -> input cotangents.")]
        return functions, None

    def finish(self, args, trees, outs, entry):
        lowered = entry["lowered"]
        n_out, n_res, n_main = self._layout
        primal = _pytree.unflatten(lowered.out_tree, outs[:n_out])
        # a residual that is (a view of) an argument is copied, as JAX's inputs are immutable: a later
        # in-place change to the argument must not reach vjp_fn (regression: half the result used it)
        given = [x for x in _pytree.leaves(list(args)) if isinstance(x, np.ndarray)]
        residuals = [np.array(r, copy=True) if isinstance(r, np.ndarray) and any(
            r is x or np.shares_memory(r, x) for x in given) else r for r in outs[n_out:]]
        entry.setdefault("bwd", entry["namespace"][entry["graphs"][1][1]])
        out_tree = lowered.out_tree.children[0] if self.has_aux else lowered.out_tree
        fn = _VJPFunction(self, residuals, entry, out_tree, lowered.arg_trees)
        fn._out_leaves = outs[:n_main]
        if self.has_aux:
            return primal[0], fn, primal[1]
        return primal, fn


def vjp(fun, *primals, has_aux=False):
    """``(out, vjp_fn)`` with ``vjp_fn(out_bar) -> tuple of input cotangents`` (JAX's convention).

    ``fun``'s derivative is built (and cached on ``fun``) by source transformation;
    the forward pass runs now, and ``vjp_fn`` runs the backward pass on its residuals.
    With ``has_aux`` the result is ``(out, vjp_fn, aux)``.
    """
    cache = _vjp_cache(fun, has_aux)
    return cache(*primals)


_VJP_CACHE: dict = {}


def _vjp_cache(fun, has_aux):
    key = (fun, has_aux)
    try:
        hit = _VJP_CACHE.get(key)
    except TypeError:
        hit = None
    if hit is None:
        hit = _VJPTransform(fun, has_aux)
        try:
            _VJP_CACHE[key] = hit
        except TypeError:
            pass
    return hit


def source(f, *example_args) -> str:
    """The generated Python module behind a transformed function.

    With ``example_args``, the module built for their signature: a function
    whose code reads shapes or integer values (``np.eye(len(y))``) is
    specialised per signature at its first call.

    Accepts what ``tl.grad``, ``tl.value_and_grad``, ``tl.vjp`` (its ``vjp_fn``),
    ``tl.jvp(f)``, ``tl.jacfwd``/``tl.jacrev``/``tl.hessian``, ``tl.vmap`` (after a
    call) and ``tl.capture`` return. The module imports only numpy and
    ``tlaloc.numpy`` and returns the same bits when run on its own; it is the
    module of the most recent call (pytree arguments get one module per structure).

    Raises:
      ArgumentError: for anything else (``tl.jit`` output: use ``.lower(...).as_text()``).
    """
    t = getattr(f, "__tlaloc_transformed__", None) or getattr(f, "__tlaloc_source_of__", None)
    if t is None:
        raise ArgumentError(f"source: {getattr(f, '__name__', f)!r} is not a transformed function; pass the "
                            f"result of tl.grad / tl.vjp / tl.jvp / tl.vmap / tl.capture (for tl.jit use "
                            f"jitted.lower(*args).as_text())")
    return t.source(*example_args) if example_args else t.source()


# a nested def/lambda passed to these inside a function being lowered is closure-converted
# (tlaloc._frontend.local_transform)
grad.__tlaloc_takes_local__ = True
value_and_grad.__tlaloc_takes_local__ = True

from .vjp_inline import lower_vjp as _lower_vjp  # noqa: E402  (vjp inside a lowering)
vjp.__tlaloc_lower_symbolic__ = _lower_vjp
