"""JAX float64 references for the AD table through tl.jit (``ad_modes.py``).

Each mode's compiled result is held to the eager transform (same dtype, tight) and
to JAX in float64 on the row's JAX twin (``tests/ad/cases.py``), evaluated at the
same argument values (float32 arguments widened exactly to float64): an oracle
that shares no derivative rule with tlaloc, so a wrong rule that compiled and eager
code share is caught. Tolerances: float64 rtol 1e-10; float32 rtol 2e-4 (float32
rounding through loops of a few dozen trips; a flipped sign or a dropped term is
off by O(1)), both with atol = rtol · max(1, max|reference|).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tests.ad import checks

from .jax_twin import call

RTOL = {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 2e-4}


def _f64(tree):
    def conv(v):
        if isinstance(v, (np.ndarray, np.generic)) and np.asarray(v).dtype.kind == "f":
            return np.asarray(v, np.float64)
        return v
    return jax.tree_util.tree_map(conv, tree)


def _j(tree):
    return jax.tree_util.tree_map(jnp.asarray, _f64(tree))


def reverse(case, args):
    """What ``check_reverse`` compiles, by JAX: the derivative of grad-like rows, the
    program itself for vjp rows (those compile the program, not its pullback)."""
    if case.mode.startswith("vjp"):
        return call(("fn", case.name), lambda: case.twin, *_j(args))
    return checks.run_jax(case, _f64(args))


def jvp(case, args, tangents):
    """``jax.jvp`` of the twin; integer leaves (indices) are held fixed (JAX gives them no tangent)."""
    leaves, tree = jax.tree_util.tree_flatten(_f64(args))
    is_float = [np.asarray(v).dtype.kind == "f" for v in leaves]
    floats = [jnp.asarray(v) for v, f in zip(leaves, is_float) if f]
    others = [jnp.asarray(v) for v, f in zip(leaves, is_float) if not f]
    dots = [jnp.asarray(np.asarray(t, np.float64))
            for t, f in zip(jax.tree_util.tree_leaves(tangents), is_float) if f]

    def make():
        def merged(fl, ot):
            it_f, it_o = iter(fl), iter(ot)
            return jax.tree_util.tree_unflatten(tree, [next(it_f) if f else next(it_o) for f in is_float])

        return lambda fl, ot, dt: jax.jvp(lambda *f: case.twin(*merged(f, ot)), tuple(fl), tuple(dt))
    return call(("jvp", case.name, tuple(is_float)), make, floats, others, dots)


def jacfwd(case, args, argnum):
    return call(("jacfwd", case.name, argnum), lambda: jax.jacfwd(case.twin, argnums=argnum), *_j(args))


def vmap(case, batch):
    """The twin on each example of the batch (axis 0 of the first argument), stacked."""
    xs, rest = batch[0], batch[1:]
    outs = [call(("fn", case.name), lambda: case.twin, *_j((x,) + tuple(rest))) for x in xs]
    return jax.tree_util.tree_map(lambda *o: jnp.stack(o), *outs)


def hessian(case, args, argnum):
    """``jax.hessian``; for twins with Python control flow on values (which vmap cannot
    trace), one ``jvp`` of ``grad`` per basis vector, eagerly."""
    jargs = _j(args)
    try:
        return call(("hessian", case.name, argnum), lambda: jax.hessian(case.twin, argnums=argnum), *jargs)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
            jax.errors.TracerIntegerConversionError, jax.errors.TracerArrayConversionError):
        pass
    x = jargs[argnum]
    grad = jax.grad(lambda v: case.twin(*(jargs[:argnum] + (v,) + jargs[argnum + 1:])))
    cols = [jax.jvp(grad, (x,), (jnp.zeros(x.size).at[i].set(1.0).reshape(x.shape),))[1] for i in range(x.size)]
    return jnp.stack(cols).reshape(x.shape + x.shape)        # column i of a symmetric matrix is row i


def close(got, want, dtype, what=""):
    """``got`` (compiled, in ``dtype``) against the JAX float64 reference ``want``."""
    g, w = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(g) == len(w), f"{what}: {len(g)} outputs, JAX gives {len(w)}"
    rtol = RTOL[np.dtype(dtype)]
    for k, (a, b) in enumerate(zip(g, w)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{what}: output {k} has shape {a.shape}, JAX {b.shape}"
        if b.dtype.kind != "f":
            np.testing.assert_array_equal(a, b, err_msg=f"{what}: output {k} vs JAX")
            continue
        scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=rtol, atol=rtol * scale,
                                   err_msg=f"{what}: output {k} vs JAX float64")
