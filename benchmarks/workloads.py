"""The differentiated functions every gradient benchmark shares, their inputs,
and hand-written NumPy gradients.

Each function is written once, with plain ``np``; ``rebind(f, module)`` gives
the same code object with ``np`` bound to ``autograd.numpy`` or ``jax.numpy``,
so all peers run exactly the same program.
"""
from __future__ import annotations

import types

import numpy as np

# -- the programs ---------------------------------------------------------------------------


def mlp_loss(W1, b1, W2, b2, W3, b3, x, y):
    """Two tanh hidden layers and a linear head, mean squared error.

    W1 (D, H), b1 (H,), W2 (H, H), b2 (H,), W3 (H, K), b3 (K,), x (N, D), y (N, K) -> scalar.
    """
    h1 = np.tanh(x @ W1 + b1)               # (N, H)
    h2 = np.tanh(h1 @ W2 + b2)              # (N, H)
    out = h2 @ W3 + b3                      # (N, K)
    d = out - y                             # (N, K)
    return np.mean(d * d)


def projectile_loss(c, v0, p0, g, target):
    """38 explicit Euler steps of n projectiles with quadratic drag; squared miss distance.

    c () drag coefficient, v0 (n, 2) launch velocities, p0 (n, 2) positions,
    g (2,) gravity, target (n, 2) -> scalar.
    """
    p = p0
    v = v0
    for t in range(38):
        speed = np.sqrt(np.sum(v * v, axis=1, keepdims=True))   # (n, 1)
        a = g - c * speed * v                                    # (n, 2)
        p = p + 0.02 * v
        v = v + 0.02 * a
    d = p - target                                               # (n, 2)
    return np.sum(d * d)


def deep_mlp_loss(W, b, x, y):
    """A 12-layer tanh MLP with stacked weights, mean squared error.

    W (12, H, H), b (12, H), x (N, H), y (N, H) -> scalar.
    """
    h = x
    for i in range(12):
        h = np.tanh(h @ W[i] + b[i])        # (N, H)
    d = h - y
    return np.mean(d * d)


MLP_ARGNUMS = (0, 1, 2, 3, 4, 5)
PROJECTILE_ARGNUMS = (0, 1)
DEEP_MLP_ARGNUMS = (0, 1)


def rebind(fn, module):
    """``fn`` with the global ``np`` bound to ``module`` (``autograd.numpy``, ``jax.numpy``).

    A new function object each call, so tracing caches keyed on the function miss."""
    env = dict(fn.__globals__)
    env["np"] = module
    return types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)


# -- inputs (float64 unless a dtype is given) -----------------------------------------------

MLP_SIZES = {                 # N, D, H, K
    "small": (64, 32, 64, 10),
    "medium": (256, 256, 512, 10),
    "large": (1024, 512, 1024, 10),
}
PROJECTILE_SIZES = {"small": 16, "medium": 1024, "large": 65536}


def mlp_inputs(size: str, dtype=np.float64, seed: int = 0):
    n, d, h, k = MLP_SIZES[size]
    r = np.random.default_rng(seed)
    arrs = (r.standard_normal((d, h)) / np.sqrt(d), 0.1 * r.standard_normal(h),
            r.standard_normal((h, h)) / np.sqrt(h), 0.1 * r.standard_normal(h),
            r.standard_normal((h, k)) / np.sqrt(h), 0.1 * r.standard_normal(k),
            r.standard_normal((n, d)), r.standard_normal((n, k)))
    return tuple(np.ascontiguousarray(a, dtype=dtype) for a in arrs)


def projectile_inputs(size: str, dtype=np.float64, seed: int = 0):
    n = PROJECTILE_SIZES[size]
    r = np.random.default_rng(seed)
    angle = r.uniform(0.3, 1.2, n)
    speed = r.uniform(8.0, 12.0, n)
    v0 = np.stack([speed * np.cos(angle), speed * np.sin(angle)], axis=1)
    arrs = (np.array(0.05), v0, np.zeros((n, 2)), np.array([0.0, -9.81]),
            r.uniform(5.0, 10.0, (n, 2)))
    return tuple(np.asarray(a, dtype=dtype) for a in arrs)


def deep_mlp_inputs(h: int = 64, n: int = 32, dtype=np.float64, seed: int = 0):
    r = np.random.default_rng(seed)
    arrs = (r.standard_normal((12, h, h)) / np.sqrt(h), 0.1 * r.standard_normal((12, h)),
            r.standard_normal((n, h)), r.standard_normal((n, h)))
    return tuple(np.asarray(a, dtype=dtype) for a in arrs)


# -- hand-written gradients (what a careful NumPy programmer writes) ------------------------

def mlp_loss_grad_numpy(W1, b1, W2, b2, W3, b3, x, y):
    """Gradient of ``mlp_loss`` with respect to W1, b1, W2, b2, W3, b3."""
    h1 = np.tanh(x @ W1 + b1)
    h2 = np.tanh(h1 @ W2 + b2)
    d = h2 @ W3 + b3 - y
    g = d * (2.0 / d.size)                  # (N, K)
    gz2 = (g @ W3.T) * (1.0 - h2 * h2)      # (N, H)
    gz1 = (gz2 @ W2.T) * (1.0 - h1 * h1)    # (N, H)
    return (x.T @ gz1, gz1.sum(0), h1.T @ gz2, gz2.sum(0), h2.T @ g, g.sum(0))


def projectile_loss_grad_numpy(c, v0, p0, g, target):
    """Gradient of ``projectile_loss`` with respect to c and v0 (forward pass stores v and speed)."""
    dt = 0.02
    p, v = p0, v0
    vs, ss = [], []
    for _ in range(38):
        s = np.sqrt(np.sum(v * v, axis=1, keepdims=True))
        vs.append(v)
        ss.append(s)
        p = p + dt * v
        v = v + dt * (g - c * s * v)
    p_bar = 2.0 * (p - target)
    v_bar = np.zeros_like(v)
    c_bar = 0.0
    for t in range(37, -1, -1):
        v, s = vs[t], ss[t]
        a_bar = dt * v_bar
        c_bar = c_bar - np.sum(s * v * a_bar)
        # d(s v)/dv applied to a_bar: s a_bar + v (v . a_bar) / s
        sv_bar = s * a_bar + v * (np.sum(v * a_bar, axis=1, keepdims=True) / s)
        v_bar = v_bar + dt * p_bar - c * sv_bar
    return np.asarray(c_bar), v_bar
