"""Programs with nested functions, closures and calls to other user functions,
each next to its JAX twin."""
import jax
import jax.numpy as jnp
import numpy as np

import tlaloc as tl


# -- module-level helpers (called from the programs below) ------------------------------

def helper_affine(x, w, b=0.5):
    return x * w + b


def helper_moments(x):
    m = x.mean()
    return m, ((x - m) ** 2).mean()


def helper_branchy(v):
    if v > 0:
        return v * v
    return -0.5 * v


def helper_loop(x):
    s = 0.0
    for i in range(len(x)):
        s = s + np.sin(x[i]) * (i + 1)
    return s


def helper_outer(x):
    return helper_affine(x, x, b=1.0) * helper_moments(x)[1]


def jhelper_branchy(v):
    if v > 0:
        return v * v
    return -0.5 * v


def jhelper_moments(x):
    m = x.mean()
    return m, ((x - m) ** 2).mean()


# -- calls ---------------------------------------------------------------------------------

def f_call_helpers(x, w):
    m, v = helper_moments(x)
    y = helper_affine(x, w) + helper_affine(x, w=m, b=v)
    return y.sum() + helper_loop(w) + helper_outer(x).sum()


def j_call_helpers(x, w):
    m, v = jhelper_moments(x)
    y = (x * w + 0.5) + (x * m + v)
    s = 0.0
    for i in range(len(w)):
        s = s + jnp.sin(w[i]) * (i + 1)
    outer = (x * x + 1.0) * jhelper_moments(x)[1]
    return y.sum() + s + outer.sum()


def f_call_in_loop_branch(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0.3:
            s = s + helper_branchy(x[i] - 0.5) * helper_affine(x[i], x[0])
        else:
            s = s + helper_branchy(x[i])
    return s


def j_call_in_loop_branch(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0.3:
            s = s + jhelper_branchy(x[i] - 0.5) * (x[i] * x[0] + 0.5)
        else:
            s = s + jhelper_branchy(x[i])
    return s


# -- nested functions and closures -----------------------------------------------------------

def f_nested_closure(x, w):
    scale = w.sum()

    def layer(z, k):
        return np.tanh(z * scale + k)       # reads `scale` from the enclosing function

    def twice(z):
        return layer(layer(z, 1.0), -1.0)   # a nested function calling another

    sq = lambda z: z * z                    # noqa: E731
    return sq(twice(x)).sum()


def j_nested_closure(x, w):
    scale = w.sum()

    def layer(z, k):
        return jnp.tanh(z * scale + k)

    return (layer(layer(x, 1.0), -1.0) ** 2).sum()


def f_closure_late_binding(x):
    # Python closures read the enclosing variable when called, not when defined
    c = x[0]

    def mul(z):
        return z * c

    a = mul(x)
    c = x[1] * 2.0
    b = mul(x)
    return (a * b).sum()


def j_closure_late_binding(x):
    return ((x * x[0]) * (x * x[1] * 2.0)).sum()


def f_closure_in_loop(x):
    def step(s, v):
        if v > 0:
            return s * 0.9 + v
        return s - v * v

    s = 0.0
    for i in range(len(x)):
        s = step(s, x[i])
    return s


def j_closure_in_loop(x):
    def step(s, v):
        if v > 0:
            return s * 0.9 + v
        return s - v * v

    s = 0.0
    for i in range(len(x)):
        s = step(s, x[i])
    return s


def f_higher_order(x):
    def apply_twice(fn, z):
        return fn(fn(z))

    return apply_twice(np.sin, x).sum() + apply_twice(lambda z: z * x[0], x).sum()


def j_higher_order(x):
    return jnp.sin(jnp.sin(x)).sum() + (x * x[0] * x[0]).sum()


# -- a module-level array read as a global (becomes an extra input of the graph) ------------

W_GLOBAL = np.array([[0.3, -1.2, 0.7], [1.1, 0.4, -0.6]])


def f_global_array(x):
    return np.tanh(W_GLOBAL @ x).sum()


def j_global_array(x):
    return jnp.tanh(jnp.asarray(W_GLOBAL) @ x).sum()


def f_loop_var_closure(x):
    # a function defined in a loop body reads the loop variable and a carry
    acc = 0.0
    for i in range(len(x)):
        def term(z):
            return z * x[i] + acc * 0.5
        acc = acc + term(x[0])
    return acc


def j_loop_var_closure(x):
    acc = 0.0
    for i in range(len(x)):
        acc = acc + (x[0] * x[i] + acc * 0.5)
    return acc


def f_builtins_on_arrays(x):
    # Python's abs/max/min/sum on array scalars
    return abs(x[0]) + max(x[1], x[2]) + min(x[0], x[1]) * 2.0 + sum([x[0], x[1] * x[2]])


def j_builtins_on_arrays(x):
    return jnp.abs(x[0]) + jnp.maximum(x[1], x[2]) + jnp.minimum(x[0], x[1]) * 2.0 + (x[0] + x[1] * x[2])


def helper_first_above(v, t):
    # returns from inside its loop
    for i in range(len(v)):
        if v[i] > t:
            return v[i] * t
    return t * 0.0


def f_early_return_helper_in_loop(x):
    s = 0.0
    for k in range(3):
        s = s + helper_first_above(x, 0.5 * k + x[0] * 0.1)
    return s


def j_early_return_helper_in_loop(x):
    s = 0.0
    for k in range(3):
        t = 0.5 * k + x[0] * 0.1
        for i in range(len(x)):
            if x[i] > t:
                s = s + x[i] * t
                break
    return s


# -- a transformed function called inside a differentiated one (second order) -----------------

def inner_piecewise(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + x[i] ** 3
        else:
            s = s + np.sin(x[i])
    return s


def f_grad_of_grad(x):
    return (grad_inner_piecewise(x) * x).sum()


def j_inner_piecewise(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + x[i] ** 3
        else:
            s = s + jnp.sin(x[i])
    return s


def j_grad_of_grad(x):
    return (jax.grad(j_inner_piecewise)(x) * x).sum()


grad_inner_piecewise = tl.grad(inner_piecewise)
