"""Hooks through which typed-tensor annotations reach the front end.

``tlaloc.typing`` installs real implementations; until then they do nothing.

* ``avals_from_annotations(fn, params) -> list[AbstractValue] | None``:
  per-parameter avals derived from ``fn``'s annotations (``F32["batch", "hidden"]``).
* ``propagate_names(prim, in_avals, out_avals, params) -> out_avals``: axis
  names through one node; raises ``TypeAnnotationError`` on a mismatch.
* ``check_call(fn, args)``: at call time, argument shapes against annotations.
* ``bound_violation(annotation, value, what) -> str | None`` and
  ``call_bound_violation(fn, env) -> str | None``: at definition time, a constant
  size over the bound of a bounded axis (``"seq<=512"``), as a message.
"""
from __future__ import annotations

avals_from_annotations = None
propagate_names = None
check_call = None
bound_violation = None
call_bound_violation = None


def install(avals_fn=None, names_fn=None, check_fn=None, bound_fn=None, call_bound_fn=None):
    global avals_from_annotations, propagate_names, check_call, bound_violation, call_bound_violation
    if bound_fn is not None:
        bound_violation = bound_fn
    if call_bound_fn is not None:
        call_bound_violation = call_bound_fn
    if avals_fn is not None:
        avals_from_annotations = avals_fn
    if names_fn is not None:
        propagate_names = names_fn
        from .._core.builder import set_names_hook
        set_names_hook(names_fn)
    if check_fn is not None:
        check_call = check_fn
