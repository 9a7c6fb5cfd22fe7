"""Eager code per argument signature.

A transform's generated code is built once for any shapes (``transformed.py``):
its derivative rules read shapes at run time (``sum_to``, ``broadcast_like`` ...)
and every node is a ``lax`` call that tests its operands' types. On small
arrays those calls, not the arithmetic, take the time. ``SignatureCode``
builds, at the first call with each signature (the type, shape and dtype of
every argument leaf), a version of the code specialised to it:

1. ``signature_fold.fold``: the shape-only helpers become identities or
   constants where the signature decides them;
2. ``simplify``: CSE, pruning of loop stacks kept only for their shapes and
   ``drop_broadcasts``, then dead-code elimination;
3. ``python_direct``: direct NumPy calls and operators where the avals say what
   the ``lax`` entry would call.

That is the *exact* code: the generic code's bits, NaNs included. Where they
apply, a *fast* copy also gets ``simplify.fold_negations`` (``x + -y`` as
``x - y``, which can flip a NaN's sign bit) and ``signature_nan.plain_products``
(products whose NaN would reach an output lose their NaN test); it runs first
(plain products with floating-point errors ignored) and the exact code reruns
where an output is not finite (``optimistic``). Where ``drop_broadcasts``
dropped a broadcast, a product of two NaNs may keep the other NaN (which one
depends on NumPy's loop), so there the code runs quiet and the *generic* code
reruns where an output is not finite. So results are always the generic code's
bits (tests/ad/test_signature_code.py, test_signature_fuzz.py); what can
differ is a floating-point warning (or, under ``np.seterr(all="raise")``, an
error) about a value that reaches no output as an inf or NaN. A signature the build
cannot handle (it raises) runs the generic code; past ``MAX_SIGNATURES`` per
function, new signatures run the generic code too.
"""
from __future__ import annotations

import math

import numpy as np

from .._core import simplify as _simplify
from .._core.aval import UNKNOWN, AbstractValue
from .._core.passes import dce
from .._core.verifier import verify
from .._prims._fpstate import quiet
from .._render.python_direct import render_module_direct
from . import signature_fold, signature_nan

#: Signatures specialised per function; calls with further signatures run the generic code.
MAX_SIGNATURES = 16
#: Switch for tests and benchmarks (False: every call runs the generic code).
ENABLED = True

_ARRAYS = (np.ndarray, np.generic)


def signature(flat) -> tuple:
    """The key of a call: per leaf its type, and shape, dtype and whether it is C-contiguous
    for NumPy values (``drop_broadcasts`` keeps results' memory order knowing it)."""
    return tuple((type(x), x.shape, x.dtype, x.flags.c_contiguous) if isinstance(x, _ARRAYS) else type(x)
                 for x in flat)


def leaf_aval(x) -> AbstractValue:
    if isinstance(x, _ARRAYS):
        return AbstractValue(x.dtype, tuple(x.shape))
    if type(x) in (bool, int, float):
        return AbstractValue(np.asarray(x).dtype, (), weak=True)
    return UNKNOWN


class SignatureCode:
    """The specialised functions of one generic graph, keyed by ``signature``."""

    def __init__(self, graph, name: str, arg_names, doc, title: str, generic):
        self.graph, self.name, self.arg_names, self.doc, self.title = graph, name, arg_names, doc, title
        self.generic = generic            # the generic function (also what a failed build runs)
        self.functions: dict = {}         # signature -> function
        self.sources: dict = {}           # id(function) -> its source
        self.errors: list = []            # why a build fell back to the generic code (for debugging)

    def function(self, flat):
        """The function to call on the leaves ``flat`` (built at the first call of a signature)."""
        key = signature(flat)
        fn = self.functions.get(key)
        if fn is None:
            if not ENABLED:
                return self.generic
            fn = self._build(flat) if len(self.functions) < MAX_SIGNATURES else self.generic
            self.functions[key] = fn
        return fn

    def source(self, fn):
        """The generated source of a function this object built (None for the generic one)."""
        return self.sources.get(id(fn))

    def _build(self, flat):
        from .transformed import render_and_load
        try:
            c_ordered = [isinstance(x, _ARRAYS) and x.flags.c_contiguous for x in flat]
            graph, dropped = specialise(self.graph, [leaf_aval(x) for x in flat], c_ordered)
            graph = verify(graph)
            functions = [(graph, self.name, self.arg_names, self.doc)]
            fast = _simplify.fold_negations(graph)
            plain = signature_nan.plain_products(fast)
            if plain is not None or fast is not graph:
                fast = dce(plain or fast)
                functions.append((verify(fast), f"{self.name}_fast", self.arg_names,
                                  f"{self.doc} Run first, see {self.name}_checked."))
            title = f"{self.title}, for ({', '.join(str(a) for a in graph.in_avals())})"
            label = f"{self.name} signature {len(self.functions) + 1}"      # its own traceback lines
            source, namespace = render_and_load(functions, title, label, render=render_module_direct, dump=False)
        except Exception as e:     # a construct the folding does not handle: the generic code is correct
            self.errors.append(f"{type(e).__name__}: {e}")
            return self.generic
        fn = namespace[self.name]
        if dropped:      # a NaN's sign may differ from the generic code's: it reruns on non-finite results
            fn = optimistic(namespace[functions[-1][1]], self.generic, quiet_fast=True)
        elif len(functions) == 2:
            fn = optimistic(namespace[functions[1][1]], fn, quiet_fast=plain is not None)
        self.sources[id(fn)] = source
        return fn


def optimistic(fast, exact, quiet_fast: bool):
    """Run ``fast`` (negations folded, and with ``quiet_fast`` plain products run with
    floating-point errors ignored); where an output is not finite, run ``exact`` instead
    (which then warns or raises as the generic code, and gives NaNs their sign bits)."""
    if quiet_fast:
        fast = quiet(fast)

    def checked(*args):
        outs = fast(*args)
        for o in outs:
            if isinstance(o, _ARRAYS) and o.dtype.kind == "f" and not math.isfinite(np.vdot(o, o)):
                return exact(*args)           # outside ``quiet``: warns and raises as the generic code
        return outs
    checked.__name__ = checked.__qualname__ = f"{exact.__name__}_checked"
    return checked


def specialise(graph, in_avals, c_ordered=()):
    """``graph`` with what ``in_avals`` decides folded (steps 1 and 2 of the module docstring),
    and whether broadcasts were dropped; ``c_ordered``: per input, whether it is C-contiguous
    (part of the signature)."""
    g = signature_fold.fold(graph, in_avals)
    g = _simplify.simplify(dce(g))
    dropped = _simplify.drop_broadcasts(g, c_ordered)
    any_dropped = dropped is not g
    g = signature_fold.fold(dce(dropped), [v.aval for v in g.inputs])      # what the simplification made constant
    return _simplify.prune_loops(dce(g)), any_dropped
