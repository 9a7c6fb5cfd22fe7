"""The one entry point that loads every rule table: ``ensure_rules()``.

A primitive's VJP and JVP are declared with it (``tlaloc._prims``). Its other
rules live with the engine that reads them, one file per primitive family:

=====================  ==========================================================
batching               ``tlaloc._ad.batching*``: ``prim.batch``
control-flow and       ``tlaloc._ad.control_rules``, ``forward_rules``, ``custom``:
custom-rule nodes      ``NodeRule`` in ``prim.vjp`` / ``prim.jvp``
StableHLO lowering     ``tlaloc._render.stablehlo_*``: ``prim.lower``
specialisation         ``tlaloc._core.specialize*``: ``specialize.RULES[name]``
bounded axes           ``tlaloc._jit.bounded_rules``: ``RULES[name]``
named axes             ``tlaloc._frontend.names``: ``RULES[name]``
=====================  ==========================================================

Every engine calls ``ensure_rules()`` before it looks a rule up, so what a
transform can do never depends on which modules the caller happened to import
first. The modules are named here as data (``RULE_MODULES``) and imported by
name: this module sits in the DXIR layer and must not import the layers above it,
the way a plugin registry names its plugins. The first call imports them (a few
hundred milliseconds, once per process); later calls compare one counter.
Primitives declared after the first call (a ``custom_vjp``, a coarsened op) get
their batching and lowering rules on the next call.
"""
from __future__ import annotations

import importlib
import threading

from .primitive import REGISTRY

#: Every module that declares primitives or attaches rules to them, in load order.
RULE_MODULES = (
    "tlaloc._prims",
    "tlaloc._prims.serving",
    "tlaloc._core.control",
    "tlaloc.numpy",
    "tlaloc.typing",
    "tlaloc._ad.control_rules",
    "tlaloc._ad.forward_rules",
    "tlaloc._ad.custom",
    "tlaloc._ad.custom_passes",
    "tlaloc._frontend.odeint",
    "tlaloc._frontend.fixed_point",
    "tlaloc._frontend.call_time",
    "tlaloc._ad.remat",
    "tlaloc._ad.batching_rules",
    "tlaloc._ad.batching_control",
    "tlaloc._ad.batching_index",
    "tlaloc._ad.batching_linalg",
    "tlaloc._recognize.ops",
    "tlaloc.kernels.mosaic.primitive",
    "tlaloc._core.specialize_rules",
    "tlaloc._core.specialize_control",
    "tlaloc._core.specialize_linalg",
    "tlaloc._jit.bounded_rules",
    "tlaloc._jit.bounded_queries",
    "tlaloc._frontend.names",
    "tlaloc._render.stablehlo_rules",
    "tlaloc._render.stablehlo_serving",
)

#: ``module:function`` run after the imports and whenever primitives were added since:
#: they attach rules to primitives declared after their tables (by name or by kind).
INSTALLERS = (
    "tlaloc._ad.batching:install_rules",
    "tlaloc._render.stablehlo_rules:install",
    "tlaloc._jit.bounded:install_rules",
)

#: Which rule each engine reads, and how a primitive without an entry is treated.
#: ``None``: a rule or a refusal in ``REFUSALS`` is required (the completeness test,
#: ``tests/core/test_rule_table.py``, names a primitive with neither); a string: the
#: engine's stated default for a primitive without a rule.
KINDS = {
    "vjp": None,
    "jvp": None,
    "batch": None,
    "lower": None,
    "specialize": "generic: re-bound at the concrete avals (its shape and dtype rules)",
    "bounded": "refused by name when an operand has a padded axis",
    "names": "the output carries no axis names",
}

_HELPER_2ND = ("a helper of {of}'s derivative; a derivative of it (the {nth} derivative of {of}) "
               "is not implemented")

_COMPOSITE_3RD = ("a composite of prod's second derivative: once its operands' shapes are known its body "
                  "(products of all others) replaces it and is differentiated; before that (a graph built "
                  "at definition time) the third derivative of prod is not implemented")

#: ``(primitive, kind) -> why the engine refuses it``: decisions, not gaps. Lowering
#: refusals live with the lowering table (``tlaloc._render.stablehlo_rules.REFUSED``).
REFUSALS = {
    ("cummax", "vjp"): "the running maximum's derivative needs a tie convention that is not written yet",
    ("cummax", "jvp"): "the running maximum's derivative needs a tie convention that is not written yet",
    ("cumprod_grad", "vjp"): _HELPER_2ND.format(of="cumprod", nth="second"),
    ("cumprod_grad", "jvp"): _HELPER_2ND.format(of="cumprod", nth="second"),
    ("cumprod_jvp", "vjp"): _HELPER_2ND.format(of="cumprod", nth="second"),
    ("cumprod_jvp", "jvp"): _HELPER_2ND.format(of="cumprod", nth="second"),
    ("prod_others_grad", "vjp"): _COMPOSITE_3RD,
    ("prod_others_grad", "jvp"): _COMPOSITE_3RD,
}


def refusal(name: str, kind: str) -> str:
    """``": <reason>"`` when ``(name, kind)`` is a declared refusal, else ``""`` (for messages)."""
    why = REFUSALS.get((name, kind))
    return f": {why}" if why else ""


_lock = threading.RLock()
_installed_for = -1          # len(REGISTRY) when the installers last ran
_loading = False


def ensure_rules() -> None:
    """Load every rule module and attach the rules to every registered primitive.

    Idempotent; after the first call it costs one length comparison unless new
    primitives were declared. Safe to call while a rule module is being imported
    (the nested call returns at once).
    """
    global _installed_for, _loading
    if _installed_for == len(REGISTRY):
        return
    with _lock:                  # another thread waits here; this thread's nested call returns
        if _installed_for == len(REGISTRY) or _loading:
            return
        _loading = True
        try:
            for name in RULE_MODULES:
                importlib.import_module(name)
            for spec in INSTALLERS:
                module, fn = spec.split(":")
                getattr(importlib.import_module(module), fn)()
            _installed_for = len(REGISTRY)
        finally:
            _loading = False
