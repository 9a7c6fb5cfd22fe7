"""``print`` and ``assert`` of values computed inside a differentiated function: they run when
the function is called, in program order, as in plain Python.

``print("loss", loss)`` becomes a ``debug_print`` node and ``assert np.all(x > 0), "msg"`` a
``debug_assert`` node. Both are *effectful* (``Primitive.effectful``): dead-code elimination
and CSE keep them although nothing reads their (empty) results, so ``tl.grad(f)(x)`` prints
what ``f(x)`` prints, once per call, and raises the ``AssertionError`` that ``f(x)`` raises.
They run where the primal computation runs (the forward sweep), never again in the backward
sweep. Printing and checking are not differentiable and have no derivative to give.

Refused by name: ``vmap`` (one print per batch would not be plain Python's), ``tl.jit``
(compiled code cannot call Python; print or check outside the jitted function), an effect
inside an ``if`` or loop on an array value (plain Python would run it only on the paths
taken; a loop over a static range unrolls instead), ``print(..., file=...)``, and an assert
message computed from arrays.
"""
from __future__ import annotations

import contextlib
import threading

from .._core.primitive import Primitive
from .regions import refusal
from .values import is_symbolic


_state = threading.local()


@contextlib.contextmanager
def quiet():
    """Effects off: the debug check that reruns a graph in the interpreter
    (``TLALOC_CHECK_RENDER``) must not print or raise a second time."""
    _state.quiet = getattr(_state, "quiet", 0) + 1
    try:
        yield
    finally:
        _state.quiet -= 1


def _print_impl(*operands, parts, sep, end, flush):
    if getattr(_state, "quiet", 0):
        return ()
    it = iter(operands)
    texts = [str(next(it)) if part is None else part for part in parts]
    print(*texts, sep=sep, end=end, flush=flush)
    return ()


def _assert_impl(test, *, message, where):
    if not getattr(_state, "quiet", 0) and not bool(test):         # as Python's assert: an array of several elements is ambiguous
        raise AssertionError(message) if message is not None else AssertionError()
    return ()


def _no_results(*avals, **params):
    return ()


def _no_cotangents(g, *primals, out, **params):
    return tuple(None for _ in primals)


def _no_tangents(tangents, *primals, out, **params):
    return ()


print_p = Primitive("debug_print", impl=_print_impl, hlo=None, multiple_results=True,
                    shape_rule=_no_results, dtype_rule=_no_results)
assert_p = Primitive("debug_assert", impl=_assert_impl, hlo=None, multiple_results=True,
                     shape_rule=_no_results, dtype_rule=_no_results)
for _p, _what in ((print_p, "print"), (assert_p, "assert")):
    _p.effectful = True
    _p.vjp = _no_cotangents
    _p.jvp = _no_tangents
    _p.batch = refusal("batching", _p.name, f"`{_what}` of a computed value runs once per call in plain "
                                            f"Python; under vmap it would not; {_what} outside the vmapped "
                                            f"function")


def _in_region(lowerer, node, what):
    if lowerer.b is not lowerer.ctx.root:
        from .structure import StaticMutation
        raise lowerer.src.error(node, f"`{what}` of a computed value inside an `if` or loop on an array value "
                                      f"(plain Python runs it only on the paths taken); move it outside the "
                                      f"branch, or return the value (has_aux=True)", StaticMutation)


def lower_print(lowerer, args, kwargs, node):
    """``print(*args, sep=..., end=..., flush=...)`` with computed arrays among ``args``."""
    _in_region(lowerer, node, "print")
    extra = set(kwargs) - {"sep", "end", "flush"}
    if extra:
        raise lowerer.src.error(node, f"`print` of a computed value with {', '.join(sorted(extra))}= is not "
                                      f"supported; print to standard output, or return the value")
    options = {"sep": kwargs.get("sep", " "), "end": kwargs.get("end", "\n"), "flush": kwargs.get("flush", False)}
    for k, v in options.items():
        if is_symbolic(v) or (k != "flush" and v is not None and not isinstance(v, str)):
            raise lowerer.src.error(node, f"print: `{k}=` must be a string")
    options["sep"] = " " if options["sep"] is None else options["sep"]
    options["end"] = "\n" if options["end"] is None else options["end"]
    options["flush"] = bool(options["flush"])
    parts = tuple(None if is_symbolic(a) else str(a) for a in args)
    print_p.bind(*[a for a in args if is_symbolic(a)], parts=parts, **options)
    return None


def lower_assert(lowerer, test, message, node):
    """``assert test, message`` with ``test`` computed from arrays: checked at call time."""
    _in_region(lowerer, node, "assert")
    if is_symbolic(message):
        raise lowerer.src.error(node, "`assert` with a message computed from arrays is not supported; use a "
                                      "message of Python values")
    loc = lowerer.src.loc(node)
    assert_p.bind(test, message=None if message is None else str(message),
                  where=f"{loc.filename}:{loc.lineno}:{loc.col}")


__all__ = ["print_p", "assert_p", "lower_print", "lower_assert", "quiet"]
