"""Programs for the API surface: pytree (dict/tuple) arguments, argnums
subsets, ``has_aux``, ``value_and_grad`` and ``vjp`` with non-scalar outputs,
each next to its JAX twin."""
import jax.numpy as jnp
import numpy as np


def f_mlp_dict(params, x, y):
    # params: {"w1": (d, h), "b1": (h,), "w2": (h,), "b2": ()}; x: (n, d); y: (n,)
    h = np.tanh(x @ params["w1"] + params["b1"])      # (n, h)
    pred = h @ params["w2"] + params["b2"]            # (n,)
    r = pred - y
    return (r * r).mean()


def j_mlp_dict(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    pred = h @ params["w2"] + params["b2"]
    r = pred - y
    return (r * r).mean()


def f_tuple_params(params, x):
    # params: (w: (d, k), (b: (k,), s: ())) nested tuple
    w, (b, s) = params
    return (np.tanh(x @ w + b) * s).sum()


def j_tuple_params(params, x):
    w, (b, s) = params
    return (jnp.tanh(x @ w + b) * s).sum()


def f_dict_of_tuple(p, x):
    # p: {"layer": (w, b), "scale": ()}
    w, b = p["layer"]
    return np.exp(-((x @ w - b) ** 2)).sum() * p["scale"]


def j_dict_of_tuple(p, x):
    w, b = p["layer"]
    return jnp.exp(-((x @ w - b) ** 2)).sum() * p["scale"]


def f_three_args(a, b, c):
    return (np.sin(a) * b).sum() + (b * c * c).sum() + (a * c).sum()


def j_three_args(a, b, c):
    return (jnp.sin(a) * b).sum() + (b * c * c).sum() + (a * c).sum()


def f_loss_with_aux(w, x):
    pred = np.tanh(x @ w)
    loss = (pred * pred).sum()
    return loss, {"pred": pred, "norm": (w * w).sum()}


def j_loss_with_aux(w, x):
    pred = jnp.tanh(x @ w)
    loss = (pred * pred).sum()
    return loss, {"pred": pred, "norm": (w * w).sum()}


def f_vjp_vector(x, w):
    # a non-scalar output (n,)
    return np.tanh(w @ x) * x.sum()


def j_vjp_vector(x, w):
    return jnp.tanh(w @ x) * x.sum()


def f_vjp_tuple_out(x, w):
    # a tuple of outputs with different shapes, with a loop on the way
    h = w @ x
    acc = h * 0.0
    for i in range(len(h)):
        acc = acc + h[i] * h
    return acc, {"m": np.outer(x, h), "s": h.sum()}


def j_vjp_tuple_out(x, w):
    h = w @ x
    acc = h * 0.0
    for i in range(len(h)):
        acc = acc + h[i] * h
    return acc, {"m": jnp.outer(x, h), "s": h.sum()}


def f_vjp_aux(x):
    y = np.sin(x) * x
    return y, (y * y).sum()


def j_vjp_aux(x):
    y = jnp.sin(x) * x
    return y, (y * y).sum()


def f_unused_argument(x, y):
    return (x * x).sum()


def j_unused_argument(x, y):
    return (x * x).sum()


def f_constant_branch(x):
    # one branch returns a Python constant (no dependence on x)
    if x.sum() > 0:
        return 1.5
    return (x * x).sum()


def j_constant_branch(x):
    if x.sum() > 0:
        return 1.5
    return (x * x).sum()


def f_list_params(params, x):
    # params: [w1 (d, h), w2 (h,)] as a list
    return np.tanh(np.tanh(x @ params[0]) @ params[1]).sum()


def j_list_params(params, x):
    return jnp.tanh(jnp.tanh(x @ params[0]) @ params[1]).sum()


def f_rnn(w, u, h0, xs):
    # w: (h, h), u: (h, d), h0: (h,), xs: (T, d); matrix @ vector inside a loop
    h = h0
    loss = 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(w @ h + u @ xs[t])
        loss = loss + (h * h).sum() * (t + 1)
    return loss


def j_rnn(w, u, h0, xs):
    h = h0
    loss = 0.0
    for t in range(xs.shape[0]):
        h = jnp.tanh(w @ h + u @ xs[t])
        loss = loss + (h * h).sum() * (t + 1)
    return loss
