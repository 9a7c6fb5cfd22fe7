"""Hooks through which typed-tensor annotations reach the front end.

``tlaloc.typing`` installs real implementations; until then they do nothing.

* ``avals_from_annotations(fn, params) -> list[AbstractValue] | None``:
  per-parameter avals derived from ``fn``'s annotations (``F32["batch", "hidden"]``).
* ``propagate_names(prim, in_avals, out_avals, params) -> out_avals``: axis
  names through one node; raises ``TypeAnnotationError`` on a mismatch.
* ``check_call(fn, args)``: at call time, argument shapes against annotations.
"""
from __future__ import annotations

avals_from_annotations = None
propagate_names = None
check_call = None


def install(avals_fn=None, names_fn=None, check_fn=None):
    global avals_from_annotations, propagate_names, check_call
    if avals_fn is not None:
        avals_from_annotations = avals_fn
    if names_fn is not None:
        propagate_names = names_fn
    if check_fn is not None:
        check_call = check_fn
