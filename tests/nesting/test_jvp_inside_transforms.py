"""``tl.jvp(f, primals, tangents)`` called inside a function that is itself compiled or differentiated.

Regression (adversarial pass, session 15): every such call failed, ``tl.jit(lambda a: tl.jvp(f, (a,),
(a,))[1])`` with "jvp: tangent shape <_SymbolicShape ...> differs from primal shape <_SymbolicShape
...>": the eager jvp ran on the symbolic values. It is now inlined as the JVP graph, as ``tl.grad`` is.

Oracle: JAX float64. Negative control: a tangent of another shape is refused at the call.
"""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.errors import TlalocError

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy

X = np.array([0.5, 1.0, 2.0])
V = np.array([1.0, -2.0, 0.5])


def f0(a):
    return np.sum(np.sin(a) * a ** 2)


def f0_jax(a):
    return jnp.sum(jnp.sin(a) * a ** 2)


def directional(a):
    return tl.jvp(f0, (a,), (V,))[1]


def directional_jax(a):
    return jax.jvp(f0_jax, (a,), (jnp.asarray(V),))[1]


def value_and_slope(a):
    out, slope = tl.jvp(f0, (a,), (a,))
    return out + 2.0 * slope


def test_jvp_under_jit_against_jax():
    np.testing.assert_allclose(tl.jit(directional)(X), directional_jax(X), rtol=1e-14)
    want = f0_jax(X) + 2.0 * jax.jvp(f0_jax, (X,), (X,))[1]
    np.testing.assert_allclose(tl.jit(value_and_slope)(X), want, rtol=1e-14)
    np.testing.assert_allclose(value_and_slope(X), want, rtol=1e-14)                 # eager: the same


def test_grad_of_a_jvp_is_a_hessian_vector_product():
    got = tl.grad(directional)(X)
    want = jax.grad(directional_jax)(X)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-13)
    np.testing.assert_allclose(got, np.asarray(jax.hessian(f0_jax)(X) @ V), rtol=1e-13)
    assert not np.allclose(got, np.asarray(jax.grad(f0_jax)(X)))                      # control


def wrong_tangent(a):
    return tl.jvp(f0, (a,), (np.ones(2),))[1]


def test_a_tangent_of_another_shape_is_refused_at_the_call():
    with pytest.raises(TlalocError, match=r"test_jvp_inside_transforms.py:\d+:\d+: jvp: tangent shape \(2,\) "
                                          r"differs from primal shape \(3,\)"):
        tl.jit(wrong_tangent)(X)
