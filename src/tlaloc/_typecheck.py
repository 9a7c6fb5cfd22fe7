"""Reading typed-tensor annotations off a function, and checking calls against them.

``avals_from_annotations`` gives the front end one aval per parameter (dtype,
rank, axis names); ``check_call`` checks the argument arrays of every call of a
transformed function: dtype, rank, fixed sizes, and one size per axis name
across all arguments (jaxtyping's rule). Installed as front-end hooks by
``tlaloc.typing``.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import weakref
from typing import Optional

import numpy as np

from ._core.aval import UNKNOWN
from .errors import DTypeError, ShapeError, TypeAnnotationError
from ._annotations import _ANY, TensorType, from_annotation


def _eval_expression(text: str, sizes: dict) -> int:
    return int(eval(compile(ast.parse(text, mode="eval"), "<dim>", "eval"), {"__builtins__": {}}, dict(sizes)))


# -- annotations of a function -------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ParamSpec:
    index: int
    name: str
    type: TensorType
    where: tuple          # (filename, lineno, col) of the annotation, or ()


_SPECS = weakref.WeakKeyDictionary()     # function -> [ParamSpec]


def _unwrap(fn):
    """The Python function behind transforms and custom-rule objects."""
    for _ in range(64):
        t = getattr(fn, "__tlaloc_transformed__", None)
        if t is not None:
            fn = t.fn
            continue
        custom = getattr(fn, "__tlaloc_custom__", None)
        if custom is not None and getattr(custom, "fun", None) is not None:
            fn = custom.fun
            continue
        return fn
    return fn


def param_specs(fn) -> list:
    """``ParamSpec`` per positional parameter with a typed-tensor annotation (cached)."""
    try:
        hit = _SPECS.get(fn)
    except TypeError:
        hit = None
    if hit is not None:
        return hit
    specs = []
    code = getattr(fn, "__code__", None)
    raw = getattr(fn, "__annotations__", None) or {}
    if code is not None and raw:
        names = code.co_varnames[:code.co_argcount]
        env = {}                                  # closure cells, read as locals
        for n, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                env[n] = cell.cell_contents
            except ValueError:
                pass
        for i, pname in enumerate(names):
            ann = raw.get(pname)
            if isinstance(ann, str):
                try:
                    ann = eval(ann, getattr(fn, "__globals__", {}), env)
                except Exception:
                    continue
            tt = from_annotation(ann)
            if tt is not None:
                specs.append(ParamSpec(i, pname, tt, _annotation_loc(fn, i)))
    try:
        _SPECS[fn] = specs
    except TypeError:
        pass
    return specs


def _annotation_loc(fn, index: int) -> tuple:
    try:
        from ._frontend.source import read_source
        src = read_source(fn)
        a = src.node.args
        param = (a.posonlyargs + a.args)[index]
        loc = src.loc(param.annotation if param.annotation is not None else param)
        return (loc.filename, loc.lineno, loc.col)
    except Exception:
        return ()


def avals_from_annotations(fn, param_names) -> Optional[list]:
    """Per-parameter avals from typed-tensor annotations; None when there are none."""
    specs = param_specs(fn)
    if not specs:
        return None
    by_name = {s.name: s.type.aval() for s in specs}
    return [by_name.get(n, UNKNOWN) for n in param_names]


# -- call-time checks ---------------------------------------------------------------------------

def check_call(fn, args) -> None:
    """Check argument arrays against ``fn``'s annotations.

    Raises TypeAnnotationError naming the argument (at the annotation's
    ``file:line:col``) for a wrong dtype or rank, a fixed size that differs, a
    bounded axis over its bound (``"seq<=512"``), or one axis name bound to two sizes.
    """
    fn = _unwrap(fn)
    specs = param_specs(fn)
    if not specs:
        return
    sizes: dict = {}          # name -> (size, argument)
    deferred = []
    for spec in specs:
        if spec.index < len(args):
            deferred += _check_arg(fn, spec, args[spec.index], sizes)
    for spec, dim, size in deferred:
        env = {k: v[0] for k, v in sizes.items() if isinstance(v[0], int)}
        try:
            want = _eval_expression(dim.name, env)
        except Exception:
            raise _arg_error(fn, spec, f"cannot compute the size `{dim.name}` from the sizes bound "
                                       f"so far {env}") from None
        if want != size:
            raise _arg_error(fn, spec, f"the axis `{dim.name}` should have size {want} (from {env}) "
                                       f"but has size {size}")


_SAME_ARGS = ("grad", "value_and_grad", "jacfwd", "jacrev")     # transforms called with f's arguments


def call_checker(fn):
    """``check(args)`` checking a call of ``fn`` (a function, or a transform of one)
    against the annotations of the function behind it; None when there is nothing to check.

    For ``tl.jit``, which runs it on a new signature only. A ``jvp`` is checked on
    its primals; a ``vmap`` checks its examples itself (``_ad.vmap``); other
    transforms (``vjp``, custom rules) are not checked here.
    """
    primals = False
    for depth in range(64):
        t = getattr(fn, "__tlaloc_transformed__", None)
        if t is None:
            break
        kind = getattr(t, "kind", None)
        if kind == "jvp" and depth == 0:
            primals = True
        elif kind not in _SAME_ARGS:
            return None
        fn = t.fn
    fn = _unwrap(fn)
    if inspect.ismethod(fn) or not param_specs(fn):
        return None
    if primals:
        return lambda args: check_call(fn, tuple(args[0]) if args and isinstance(args[0], (tuple, list)) else ())
    return lambda args: check_call(fn, args)


# -- definition-time checks under jit and vmap -------------------------------------------------------

_DEFINITION_ERRORS = (TypeAnnotationError, DTypeError, ShapeError)


def lower_annotated(fn, lower):
    """``lower()`` when ``fn`` is a plain function with typed-tensor annotations, else None.

    ``tl.jit``/``tl.vmap`` call it when they are applied, so a dtype mix, broadcast
    or contraction the annotations refuse is refused at definition time (as under
    ``tl.grad``). Only those refusals are raised; any other failure (a helper not
    yet defined, pytree arguments) returns None and the first call lowers again.
    """
    if getattr(fn, "__tlaloc_transformed__", None) is not None or not hasattr(fn, "__code__") \
            or inspect.ismethod(fn) or not param_specs(fn):
        return None
    try:
        return lower()
    except _DEFINITION_ERRORS:
        raise
    except Exception:
        return None


def _check_arg(fn, spec: ParamSpec, x, sizes: dict) -> list:
    tt = spec.type
    if not (isinstance(x, (np.ndarray, np.generic, int, float, bool)) or hasattr(x, "__array__")):
        raise _arg_error(fn, spec, f"expected an array, got {type(x).__name__}")
    arr = np.asarray(x)
    got = f"a {arr.dtype} array of shape {arr.shape}"
    if tt.dtypes is not _ANY and arr.dtype not in tt.dtypes:
        want = " or ".join(d.name for d in tt.dtypes)
        raise _arg_error(fn, spec, f"expected {tt} ({want}) but got {got}; convert it with "
                                   f"`.astype(np.{tt.dtypes[0].name})`")
    dims = tt.dims
    v = next((i for i, d in enumerate(dims) if d.kind == "variadic"), None)
    n_fixed = len(dims) - (v is not None)
    if (v is None and arr.ndim != len(dims)) or (v is not None and arr.ndim < n_fixed):
        raise _arg_error(fn, spec, f"expected {tt} ({'at least ' if v is not None else ''}{n_fixed} axes) "
                                   f"but got {got} ({arr.ndim} axes)")
    shape = arr.shape
    if v is None:
        pairs = list(zip(dims, shape))
    else:
        after = len(dims) - v - 1
        pairs = list(zip(dims[:v], shape[:v])) + [(dims[v], shape[v:arr.ndim - after])] + \
            list(zip(dims[v + 1:], shape[arr.ndim - after:]))
    deferred = []
    for axis, (d, size) in enumerate(pairs):
        if d.kind == "fixed" and size != d.size and not (d.broadcastable and size == 1):
            raise _arg_error(fn, spec, f"expected {tt} but got {got}: an axis of fixed size {d.size} "
                                       f"has size {size}")
        if d.kind == "symbolic":
            deferred.append((spec, d, size))
        if d.bound is not None and size > d.bound:
            raise _arg_error(fn, spec, f"axis {axis} (`{d.name}`) has size {size}, over its bound {d.bound} "
                                       f"({tt}, got shape {shape}); split the input or raise the bound")
        if d.kind in ("named", "variadic") and d.name is not None:
            if d.broadcastable and size == 1:
                continue
            seen = sizes.get(d.name)
            if seen is None:
                sizes[d.name] = (size, spec.name, shape)
            elif seen[0] != size:
                what = "axes" if d.kind == "variadic" else "axis"
                raise _arg_error(fn, spec, f"{what} `{d.name}` of `{spec.name}` ({tt}, shape {shape}) has "
                                           f"size {size}, but `{d.name}` is {seen[0]} in `{seen[1]}` "
                                           f"(shape {seen[2]}); every axis named `{d.name}` must have "
                                           f"one size")
    return deferred


def _arg_error(fn, spec: ParamSpec, msg: str) -> TypeAnnotationError:
    text = f"argument `{spec.name}` of `{getattr(fn, '__name__', fn)}`: {msg}"
    return TypeAnnotationError(text, *spec.where) if spec.where else TypeAnnotationError(text)


# -- definition-time checks of bounded axes ------------------------------------------------------

def bound_violation(ann, value, what: str) -> Optional[str]:
    """A message when ``value`` has a constant size over a bound of annotation ``ann``, else None.

    ``value`` is a symbolic value (its aval's int dims are the sizes the front end
    knows) or a constant. ``what`` names it in the message (``"`x`"``).
    """
    tt = from_annotation(ann)
    if tt is None or not tt.bounds or tt.variadic:
        return None
    aval = getattr(value, "aval", None)
    if aval is not None:
        shape = aval.shape
    elif isinstance(value, (np.ndarray, np.generic, int, float, bool)):
        shape = np.shape(value)
    else:
        return None
    if shape is None or len(shape) != len(tt.dims):
        return None
    for axis, (d, size) in enumerate(zip(tt.dims, shape)):
        if d.bound is not None and type(size) is int and size > d.bound:
            return (f"{what} is annotated {tt} but its axis {axis} (`{d.name}`) has the constant size {size}, "
                    f"over the bound {d.bound}; split it into pieces of at most {d.bound}, or raise the bound")
    return None


def call_bound_violation(fn, env: dict) -> Optional[str]:
    """``bound_violation`` for the arguments ``env`` (name -> value) of a call to ``fn``."""
    for spec in param_specs(_unwrap(fn)):
        if spec.name in env:
            msg = bound_violation(spec.type, env[spec.name],
                                  f"argument `{spec.name}` of `{getattr(fn, '__name__', fn)}`")
            if msg is not None:
                return msg
    return None


def merge_annotations(fn, param_names, avals) -> list:
    """``avals`` (e.g. concrete example avals from ``vmap``/``jit``) with the axis names
    of ``fn``'s annotations attached where the rank agrees; unannotated ones unchanged.

    For lowerings that pass explicit avals (so ``avals_from_annotations`` is not
    consulted) and still want definition-time name checks. The sizes themselves
    are checked by ``check_call``.
    """
    specs = {s.name: s.type for s in param_specs(_unwrap(fn))}
    out = []
    for name, aval in zip(param_names, avals):
        tt = specs.get(name)
        ann = tt.aval() if tt is not None else None
        if ann is None or ann.names is None or aval is None or aval.shape is None \
                or len(aval.shape) != len(ann.names):
            out.append(aval)
        else:
            out.append(aval.with_(names=ann.names))
    return out + list(avals[len(out):])


def install_hooks():
    """Route the front end's typing hooks (``tlaloc._frontend.typing_hooks``) here; idempotent."""
    from ._frontend import names as _names, typing_hooks
    typing_hooks.install(avals_from_annotations, _names.propagate_names, check_call, bound_violation,
                         call_bound_violation)


install_hooks()
