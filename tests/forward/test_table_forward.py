"""Forward mode, Jacobians, Hessians and vmap over the reverse-mode case table.

Every row of tests/ad/cases.py whose arguments are plain float arrays and whose
argnums is one int is re-run through tl.jvp, tl.jacfwd, tl.jacrev, tl.hessian
and tl.vmap(tl.grad(f)), against JAX float64 (jax.jvp, jax.jacfwd, jax.hessian,
a loop of jax.grad) to 1e-10, and jacfwd against jacrev to 1e-12. The JAX oracles run through
one ``jax.jit`` where the twin traces (tests/jit/jax_twin.py: eager JAX lowers every primitive
as its own program, most of these tests' time).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tlaloc as tl

from tests.ad.cases import CASES
from tests.jit.jax_twin import call

jax.config.update("jax_enable_x64", True)
RTOL, ATOL = 1e-10, 1e-12


def _plain(args):
    return all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in args)


def _rows():
    rows = []
    for c in CASES:
        if c.mode != "grad" or not isinstance(c.argnums, int) or not c.fd:
            continue
        points = c.args_list()[:2]
        if not points or not all(_plain(p) for p in points):
            continue
        rows.append(pytest.param(c, points, id=c.name))
    return rows


ROWS = _rows()


def hessian_key(case):
    """The key of ``jax.hessian`` of the row's twin (its own argnums) for ``jax_twin.call``."""
    return "hessian", case.name, case.argnums


def _tangents(args, argnum, rng):
    return tuple(rng.standard_normal(a.shape) if k == argnum else np.zeros_like(a) for k, a in enumerate(args))


@pytest.mark.parametrize("case,points", ROWS)
def test_jvp_matches_jax(case, points):
    rng = np.random.default_rng(1)
    for args in points:
        tangents = _tangents(args, case.argnums % len(args), rng)
        out, out_dot = tl.jvp(case.fn, tuple(np.copy(a) for a in args), tangents)
        want, want_dot = call(("jvp", case.name), lambda: functools.partial(jax.jvp, case.twin),
                              tuple(jnp.asarray(a) for a in args), tuple(jnp.asarray(t) for t in tangents))
        np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(np.asarray(out_dot), np.asarray(want_dot), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case,points", ROWS)
def test_jacfwd_equals_jacrev_and_jax(case, points):
    for args in points[:1]:
        jf = tl.jacfwd(case.fn, argnums=case.argnums)(*args)
        jr = tl.jacrev(case.fn, argnums=case.argnums)(*args)
        np.testing.assert_allclose(jf, jr, rtol=1e-12, atol=1e-12)
        want = call(("jacfwd", case.name), lambda: jax.jacfwd(case.twin, argnums=case.argnums),
                    *[jnp.asarray(a) for a in args])
        np.testing.assert_allclose(jf, np.asarray(want), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case,points", ROWS)
def test_hessian_matches_jax(case, points):
    for args in points[:1]:
        h = tl.hessian(case.fn, argnums=case.argnums)(*args)
        want = call(hessian_key(case), lambda: jax.hessian(case.twin, argnums=case.argnums),
                    *[jnp.asarray(a) for a in args])
        np.testing.assert_allclose(h, np.asarray(want), rtol=1e-9, atol=1e-10)


# regression: vmap of grad of while_in_for once failed when an inner `while` ran zero times for
# every example (its residual stack was an empty list, and transposing it failed)
_VMAP_KNOWN: dict = {}


def _vmap_rows():
    return [pytest.param(*r.values, id=r.id, marks=[pytest.mark.xfail(strict=True, reason=_VMAP_KNOWN[r.id])]
                         if r.id in _VMAP_KNOWN else []) for r in ROWS]


@pytest.mark.parametrize("case,points", _vmap_rows())
def test_vmap_of_grad_matches_a_loop_of_jax_grad(case, points):
    # batch over the differentiated argument at the first point (same shapes for every row)
    args = points[0]
    a = case.argnums % len(args)
    rng = np.random.default_rng(2)
    batch = np.stack([args[a] + 0.01 * rng.standard_normal(args[a].shape) for _ in range(3)])
    in_axes = tuple(0 if k == a else None for k in range(len(args)))
    got = tl.vmap(tl.grad(case.fn, argnums=a), in_axes=in_axes)(*[batch if k == a else x for k, x in enumerate(args)])
    want = np.stack([np.asarray(call(("grad", case.name, a), lambda: jax.grad(case.twin, argnums=a),
                                     *[jnp.asarray(row) if k == a else jnp.asarray(x) for k, x in enumerate(args)]))
                     for row in batch])
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL)


def test_the_table_is_not_empty():
    assert len(ROWS) >= 30


def test_negative_control_a_wrong_tangent_is_caught():
    case, points = ROWS[0].values
    args = points[0]
    tangents = _tangents(args, case.argnums % len(args), np.random.default_rng(1))
    _, out_dot = tl.jvp(case.fn, args, tangents)
    _, want_dot = jax.jvp(case.twin, tuple(jnp.asarray(a) for a in args),
                          tuple(jnp.asarray(t) * 1.000001 for t in tangents))
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(np.asarray(out_dot), np.asarray(want_dot), rtol=RTOL, atol=ATOL)
