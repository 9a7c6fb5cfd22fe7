"""Keyword arguments to a transformed function, bound to positions as Python binds them.

``tl.grad(f)(x, scale=2.0)``, ``tl.jit(f)(x, mode="sum")``: the transforms take their
arguments positionally (a graph input per argument leaf, ``argnums`` by position), so a
call's keywords are bound against ``f``'s own signature first (``inspect.Signature.bind``,
the rules of a Python call):

- a positional-or-keyword parameter given by keyword takes its position; a parameter
  before it that the call leaves out takes its default there;
- keyword-only parameters follow every positional one, in the order ``def`` lists them
  (``lower.lower_function`` lowers them there), each with its default where left out.

As in JAX, ``argnums`` count positions: a parameter passed by keyword is differentiated
where its position is among ``argnums`` (JAX refuses that call instead).
"""
from __future__ import annotations

import inspect
import weakref

from ..errors import ArgumentError


def user_function(fn):
    """The Python function whose signature a call of ``fn`` follows (through tl.grad, tl.jit,
    tl.vmap ... that keep it), or None where a transform in between changes the signature
    (``tl.jvp(f)`` takes primals and tangents)."""
    seen = 0
    while seen < 64:
        t = getattr(fn, "__tlaloc_transformed__", None)
        if t is None:
            return fn
        if not getattr(t, "same_signature", False):
            return None
        if not getattr(t, "keywords_through", True):
            # a vmap inside another transform: its keywords are batched along axis 0, which binding
            # them to positions would lose (regression: tl.jit(tl.vmap(f, in_axes=1))(X, w=W) batched
            # `w` along axis 1, silently wrong)
            return None
        fn = t.fn
        seen += 1
    return None


def bind_keywords(who: str, fn, args: tuple, kwargs: dict) -> tuple:
    """``args`` and ``kwargs`` of a call of ``fn`` (named ``who`` in errors) as one positional
    tuple: positional parameters in order, then the keyword-only ones where the call passes
    any of them (see ``bind_with_origins``)."""
    return bind_with_origins(who, fn, args, kwargs)[0]


def bind_with_origins(who: str, fn, args: tuple, kwargs: dict) -> tuple:
    """``(positional, origins, names)``: the call's arguments as one positional tuple, and per
    position where its value came from: ``"position"`` (passed positionally), ``"keyword"`` or
    ``"default"`` (a parameter the call left out, before one it gives), and the parameter's name.

    Raises:
      ArgumentError: a keyword ``fn`` does not take, one given twice, a required parameter
        left out, or keywords to a function whose signature the transform does not keep.
    """
    base = user_function(fn)
    name = getattr(base, "__name__", who)
    if base is None:
        raise ArgumentError(f"{who}: pass its arguments positionally (got keywords {', '.join(sorted(kwargs))}): "
                            f"this transform's arguments are not those of the function it wraps, or a tl.vmap "
                            f"inside it would batch keyword arguments along axis 0")
    try:
        sig = inspect.signature(base)
    except (TypeError, ValueError):
        raise ArgumentError(f"{who}: pass the arguments of `{name}` positionally (got keywords "
                            f"{', '.join(sorted(kwargs))}): its signature cannot be read") from None
    params = list(sig.parameters.values())
    kinds = {p.kind for p in params}
    if inspect.Parameter.VAR_KEYWORD in kinds:
        extra = sorted(k for k in kwargs if k not in sig.parameters)
        if extra:
            raise ArgumentError(f"{who}: `{name}` collects keywords in **{params[-1].name}; a transformed "
                                f"function's arguments are positions, so {', '.join(extra)} cannot reach it. "
                                f"Name them as parameters of `{name}`, or bind them first with "
                                f"functools.partial")
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise ArgumentError(f"{who}: {e} (the parameters of `{name}`{_location(base)} are "
                            f"({', '.join(str(p) for p in params)}))") from None
    values = bound.arguments
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword_only = [p for p in params if p.kind is p.KEYWORD_ONLY]
    star = next((p for p in params if p.kind is p.VAR_POSITIONAL), None)
    given_kwonly = [p.name for p in keyword_only if p.name in values]
    if star is not None and given_kwonly:
        raise ArgumentError(f"{who}: `{name}` takes *{star.name} before its keyword-only "
                            f"{', '.join(given_kwonly)}; a transformed function takes those only at their "
                            f"defaults. Make them ordinary parameters (before *{star.name}), or bind them "
                            f"with functools.partial")
    out, origins, names = [], [], []

    def put(p):
        names.append(p.name)
        if p.name in values:
            out.append(values[p.name])
            origins.append("position" if len(out) <= len(args) else "keyword")
        else:                         # inspect's bind refused a left-out one without a default
            out.append(p.default)
            origins.append("default")

    last = max((k for k, p in enumerate(positional) if p.name in values), default=-1)
    if given_kwonly:                  # keyword-only ones follow every positional one: all are given
        last = len(positional) - 1
    for p in positional[:last + 1]:
        put(p)
    if star is not None:
        extra = values.get(star.name, ())
        out.extend(extra)
        origins.extend(["position"] * len(extra))
        names.extend(f"{star.name}[{k}]" for k in range(len(extra)))
    if given_kwonly:
        for p in keyword_only:
            put(p)
    return tuple(out), origins, names


def _location(fn) -> str:
    code = getattr(fn, "__code__", None)
    return "" if code is None else f" ({code.co_filename}:{code.co_firstlineno})"


def static_positions(fn, names) -> tuple:
    """``((position, keyword_only), ...)`` of the parameters ``names`` of ``fn`` (``tl.jit``'s
    ``static_argnames``), at the positions ``bind_keywords`` gives them.

    Raises:
      ArgumentError: a name ``fn`` has no parameter for, or a keyword-only one after *args.
    """
    if isinstance(names, str):
        names = (names,)
    names = tuple(names or ())
    if not names:
        return ()
    base = user_function(fn)
    who = getattr(fn, "__name__", "f")
    try:
        params = list(inspect.signature(base).parameters.values()) if base is not None else None
    except (TypeError, ValueError):
        params = None
    if params is None:
        raise ArgumentError(f"jit: static_argnames={names!r}: the parameters of `{who}` cannot be read; "
                            f"use static_argnums")
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword_only = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    star = any(p.kind is p.VAR_POSITIONAL for p in params)
    out = []
    for name in names:
        if name in positional:
            out.append((positional.index(name), False))
        elif name in keyword_only and not star:
            out.append((len(positional) + keyword_only.index(name), True))
        else:
            raise ArgumentError(f"jit: static_argnames names {name!r}, which is not a parameter of `{who}` "
                                f"({', '.join(str(p) for p in params)})"
                                + ("; keyword-only parameters after *args cannot be static" if name in keyword_only
                                   else ""))
    return tuple(out)


def check_positional_count(who: str, fn, n: int) -> None:
    """Refuses a call of ``fn`` with ``n`` positional arguments where ``fn`` takes fewer (its
    keyword-only parameters are lowered after the positional ones, so the transform alone
    would take the extra ones for them).

    Raises:
      ArgumentError: as Python's own TypeError says it, with the parameters."""
    limit = _LIMITS.get(fn, _UNKNOWN) if _hashable(fn) else _UNKNOWN
    if limit is _UNKNOWN:
        limit = positional_limit(fn)
        if _hashable(fn):
            _LIMITS[fn] = limit
    if limit is not None and n > limit:
        base = user_function(fn)
        name = getattr(base, "__name__", who)
        raise ArgumentError(f"{who}: `{name}`{_location(base)} takes {limit} positional argument"
                            f"{'' if limit == 1 else 's'} but {n} were given; pass its keyword-only "
                            f"parameters by keyword")


_UNKNOWN = object()
_LIMITS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _hashable(fn) -> bool:
    try:
        hash(fn)
        weakref.ref(fn)
    except TypeError:
        return False
    return True


def positional_limit(fn):
    """How many positional arguments a call of ``fn`` may take (None: any, with *args or unknown)."""
    base = user_function(fn)
    code = getattr(base, "__code__", None)
    if code is not None:
        return None if code.co_flags & inspect.CO_VARARGS else code.co_argcount - (1 if inspect.ismethod(base) else 0)
    try:                                      # functools.partial, a callable object
        params = inspect.signature(base).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def require_callable(who: str, fn) -> None:
    """Refuses a transform of something that is not a function (``tl.vmap(None)(x)`` made
    ``vmap(x)``, ``tl.jit("f")``), where it is applied rather than at its first call.

    Raises:
      ArgumentError: naming what was given."""
    if not callable(fn):
        raise ArgumentError(f"{who}: expected a function to transform, got {type(fn).__name__} {fn!r:.60}; "
                            f"e.g. tl.{who}(f) with `def f(x): ...`")
