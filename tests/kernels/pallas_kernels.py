"""Three Pallas kernels (elementwise add, RMSNorm, a tiled matmul) and their
tlaloc.numpy references. ``interpret=True`` runs a kernel with Pallas's CPU
interpreter."""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

import tlaloc.numpy as tnp


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add(x, y, *, interpret=False):
    return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x, y)


def add_reference(x, y):
    return tnp.add(x, y)


def rmsnorm_kernel(x_ref, w_ref, o_ref, *, eps):
    x = x_ref[...]
    ms = jnp.mean(x * x, axis=-1, keepdims=True)
    o_ref[...] = x * jax.lax.rsqrt(ms + eps) * w_ref[...]


def rmsnorm(x, w, *, eps=1e-6, interpret=False):
    """x (rows, dim), w (1, dim) -> (rows, dim)."""
    return pl.pallas_call(functools.partial(rmsnorm_kernel, eps=eps),
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x, w)


def rmsnorm_reference(x, w, eps=1e-6):
    return x / tnp.sqrt(tnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def matmul_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)


def matmul(x, y, *, bm=128, bn=128, interpret=False):
    """x (m, k) @ y (k, n), one (bm, bn) output tile per grid step."""
    m, k = x.shape
    n = y.shape[1]
    return pl.pallas_call(
        matmul_kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(m // bm, n // bn),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)), pl.BlockSpec((k, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)), interpret=interpret)(x, y)


def matmul_reference(x, y):
    return tnp.matmul(x, y)
