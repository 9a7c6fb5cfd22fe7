"""A CPU simulator for the PTX the DSL emits: kernel numerics without a GPU.

``run(kernel, args, grid, block)`` executes a ``Kernel`` (or a ``Specialized``
kernel, whose launch is known) on NumPy buffers, in place; ``simulate(spec,
*inputs)`` runs a library kernel whose template declares its signature and
returns its outputs (allocated NaN-filled, so an element the kernel never
writes shows).

What it models: every thread of the grid (registers, program counter), warps
of 32 lanes (``shfl.sync``, ``vote.sync``, ``redux.sync`` with member-mask
convergence checks), per-block shared memory, ``bar.sync``, predicates and
branches with min-PC reconvergence, global memory with bounds and alignment
checks, reads of unwritten registers. Float semantics: see ``semantics.py``.
What it does not: timing, memory ordering between blocks (atomics are applied
in thread order), ``.local``/``.const`` memory, rounding modes other than
round-to-nearest, named barriers, ``bar.arrive``.
"""
from __future__ import annotations

import numpy as np

from ..ptx.builder import Specialized
from .machine import Machine, SimError

__all__ = ["run", "simulate", "SimError", "Machine"]


def run(kernel, args, grid=None, block=None, *, max_steps: int = 5_000_000) -> Machine:
    """Run ``kernel`` once; ``args`` is one value per ``.param`` (arrays for pointers,
    written in place). Returns the finished ``Machine`` (``.steps`` counts the
    instruction issues)."""
    if isinstance(kernel, Specialized):
        if grid is None and kernel.launch is not None:
            grid, block = kernel.launch.grid, kernel.launch.block
        kernel = kernel.kernel
    if grid is None or block is None:
        raise SimError("run() needs grid and block for a kernel without a launch configuration")
    return Machine(kernel, grid, block, list(args), max_steps).run()


def simulate(spec: Specialized, *inputs, max_steps: int = 5_000_000):
    """Run library kernel ``spec`` on ``inputs`` (converted to the declared dtypes);
    returns its outputs as a tuple of arrays."""
    sig = spec.signature()
    if sig is None:
        raise SimError(f"kernel `{spec.name}` declares no signature; use run() with explicit buffers")
    ins, outs = sig
    if len(inputs) != len(ins):
        raise SimError(f"kernel `{spec.name}` takes {len(ins)} inputs ({', '.join(n for n, _, _ in ins)}), "
                       f"got {len(inputs)}")
    bufs = []
    for (name, shape, dtype), x in zip(ins, inputs):
        x = np.asarray(x)
        if tuple(x.shape) != tuple(shape):
            raise SimError(f"input {name} has shape {x.shape}; kernel `{spec.name}` was specialized for {shape}")
        bufs.append(np.ascontiguousarray(x, dtype=dtype).copy())
    results = []
    for name, shape, dtype in outs:
        fill = np.nan if np.dtype(dtype).kind == "f" else np.iinfo(dtype).max
        results.append(np.full(shape, fill, dtype))
    run(spec, bufs + results, max_steps=max_steps)
    return tuple(results)
