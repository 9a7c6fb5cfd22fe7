"""Residual stacks that grow: reverse mode through a ``while`` with no declared bound.

The reverse sweep of a ``while`` needs the values of every trip of the forward
sweep (its residuals), kept in stacks with one row per trip. Eager code appends
to lists; StableHLO shapes are static, so compiled code needs a row count before
it runs, and the trip count of ``while s < 10: s = 2 * s`` is known only after.
(JAX refuses reverse mode through ``lax.while_loop`` for this reason.)

``tl.jit`` sizes the stacks itself: the forward ``stablehlo.while`` keeps at most
``START_ROWS`` trips, and a run whose loop still wants to go on at that point
reports ``RESIDUALS_FULL`` (a run-time check, never a silent stop). ``tl.jit``
then compiles the program again with twice the rows and runs it again, up to
``MAX_ROWS``; the capacity it reached is kept for that signature, so later calls
compile and run once. A loop of ``n`` trips costs ``ceil(log2(n / START_ROWS))``
extra compiles and runs at the first call, and stacks of at most ``2 n`` rows.

A program compiled ahead of time (``tl.jit(f).lower(...).compile()``) cannot grow:
it raises the error, whose message says to declare ``max_trips``.
"""
from __future__ import annotations

from .._core.control import RESIDUALS_FULL
from ..errors import TlalocError

#: rows of residuals a reverse-mode ``while`` without ``max_trips`` starts with
START_ROWS = 32
#: the largest capacity ``tl.jit`` grows to (then: declare ``max_trips``)
MAX_ROWS = 1 << 20


def is_full(e: BaseException) -> bool:
    """True for the run-time error of a ``while`` that filled its residual stacks."""
    return isinstance(e, TlalocError) and str(e).startswith(RESIDUALS_FULL)


def grown(rows: int, name: str, donated: bool) -> int:
    """The next capacity after ``rows`` filled up in ``name``, or a TlalocError.

    Raises:
      TlalocError: past ``MAX_ROWS``, or when ``name`` donates arguments (a rerun
        would read buffers the first run may have consumed).
    """
    fix = "declare a bound: tl.while_loop(cond, body, init, max_trips=N)"
    if donated:
        raise TlalocError(f"jit: {name}: a reverse-mode while loop ran more than {rows} trips, and running it "
                          f"again with room for more would read donated arguments; {fix}, or do not donate")
    if 2 * rows > MAX_ROWS:
        raise TlalocError(f"jit: {name}: a reverse-mode while loop ran more than {rows} trips, past the "
                          f"{MAX_ROWS} tl.jit grows its residual stacks to; {fix}")
    return 2 * rows
