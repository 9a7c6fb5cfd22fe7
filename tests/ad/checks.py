"""The machinery behind the table: run tlaloc, run the oracles, compare.

Kept apart from the test files so the negative controls exercise exactly the
comparison the real tests use.
"""
from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np

import tlaloc as tl

jax.config.update("jax_enable_x64", True)

RTOL, ATOL = 1e-10, 1e-12          # tlaloc vs JAX (float64)
FD_RTOL, FD_ATOL = 1e-6, 1e-7      # tlaloc vs central differences
FD_STEP = 1e-5

_TRANSFORMS: dict = {}


# -- tlaloc -------------------------------------------------------------------------------

def transform(case):
    """The tlaloc-transformed function of a grad-like case (built once, cached)."""
    if case.name not in _TRANSFORMS:
        aux = case.mode.endswith("_aux")
        make = tl.value_and_grad if case.mode.startswith("value_and_grad") else tl.grad
        _TRANSFORMS[case.name] = make(case.fn, argnums=case.argnums, has_aux=aux)
    return _TRANSFORMS[case.name]


def cotangent_for(case, args, rng):
    """A random cotangent with the structure of the (main) output of ``case.fn``."""
    out = run_plain(case, args)
    if case.mode == "vjp_aux":
        out = out[0]
    return jax.tree_util.tree_map(lambda o: rng.standard_normal(np.shape(o)), out)


def run_tlaloc(case, args, ct=None):
    """The derivative by tlaloc, in the structure JAX's matching API returns."""
    if case.mode == "vjp":
        out, vjp_fn = tl.vjp(case.fn, *args)
        return out, vjp_fn(ct)
    if case.mode == "vjp_aux":
        out, vjp_fn, aux = tl.vjp(case.fn, *args, has_aux=True)
        return out, vjp_fn(ct), aux
    return transform(case)(*args)


# -- oracles --------------------------------------------------------------------------------

def _jax_derivative(case, f):
    """``(args, ct) -> result`` computing the case's derivative of ``f`` with JAX."""
    aux = case.mode.endswith("_aux")

    def derivative(args, ct):
        if case.mode in ("grad", "grad_aux"):
            return jax.grad(f, argnums=case.argnums, has_aux=aux)(*args)
        if case.mode in ("value_and_grad", "value_and_grad_aux"):
            return jax.value_and_grad(f, argnums=case.argnums, has_aux=aux)(*args)
        if case.mode == "vjp":
            val, fn = jax.vjp(f, *args)
            return val, fn(ct)
        val, fn, aux_val = jax.vjp(f, *args, has_aux=True)
        return val, fn(ct), aux_val
    return derivative


_JAX_NEEDS_EAGER = (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
                    jax.errors.TracerIntegerConversionError, jax.errors.TracerArrayConversionError)
_JAX_ORACLES: dict = {}


def run_jax(case, args, ct=None, twin=None):
    """The same derivative by JAX, from the case's twin (or ``twin``).

    Compiled with ``jax.jit`` when the twin allows it (op-by-op JAX compiles every
    primitive separately, which is slow); twins with Python control flow on values
    run eagerly, where JAX's ``grad`` sees concrete values.
    """
    f = twin or case.twin
    key = (case.name, case.mode, case.argnums, f)
    derivative = _JAX_ORACLES.get(key)
    jargs = jax.tree_util.tree_map(jnp.asarray, args)
    jct = None if ct is None else jax.tree_util.tree_map(jnp.asarray, ct)
    if derivative is None:
        eager = _jax_derivative(case, f)
        compiled = jax.jit(eager)
        try:
            out = compiled(jargs, jct)
            _JAX_ORACLES[key] = compiled
        except _JAX_NEEDS_EAGER:
            _JAX_ORACLES[key] = eager
            out = eager(jargs, jct)
    else:
        out = derivative(jargs, jct)
    return jax.tree_util.tree_map(np.asarray, out)


def run_plain(case, args, fn=None):
    """``case.fn`` (or ``fn``) run by NumPy itself, on copies (programs may write into arrays)."""
    return (fn or case.fn)(*copy.deepcopy(args))


def _scalar_objective(case, ct, fn=None):
    """The scalar whose gradient the case computes: the value, or <ct, out> for vjp."""
    def obj(args):
        out = run_plain(case, args, fn)
        if case.mode in ("grad_aux", "value_and_grad_aux", "vjp_aux"):
            out = out[0]
        if case.mode.startswith("vjp"):
            pairs = zip(jax.tree_util.tree_leaves(ct), jax.tree_util.tree_leaves(out))
            return float(sum(np.sum(c * o) for c, o in pairs))
        return float(out)
    return obj


def _wrt(case, n_args):
    if case.mode.startswith("vjp"):
        return tuple(range(n_args)), False
    a = case.argnums
    if isinstance(a, int):
        return (a % n_args,), True
    return tuple(k % n_args for k in a), False


def central_differences(case, args, ct=None, fn=None):
    """Gradient (tuple/leaf per ``argnums``; all arguments for vjp) by central differences
    of ``case.fn`` (or ``fn``) run by NumPy."""
    obj = _scalar_objective(case, ct, fn)
    wrt, single = _wrt(case, len(args))
    grads = []
    for a in wrt:
        leaves, tree = jax.tree_util.tree_flatten(args[a])
        g_leaves = []
        for k, leaf in enumerate(leaves):
            leaf = np.asarray(leaf)
            g = np.zeros(leaf.shape)
            for idx in np.ndindex(leaf.shape):
                h = FD_STEP * max(1.0, abs(float(leaf[idx])))
                vals = []
                for sign in (1.0, -1.0):
                    moved = leaf.copy()
                    moved[idx] += sign * h
                    new_leaves = list(leaves)
                    new_leaves[k] = moved
                    new_args = list(args)
                    new_args[a] = jax.tree_util.tree_unflatten(tree, new_leaves)
                    vals.append(obj(tuple(new_args)))
                g[idx] = (vals[0] - vals[1]) / (2 * h)
            g_leaves.append(g)
        grads.append(jax.tree_util.tree_unflatten(tree, g_leaves))
    return grads[0] if single else tuple(grads)


def gradient_part(case, result):
    """The gradient inside an API result (drops values and aux)."""
    if case.mode in ("value_and_grad", "value_and_grad_aux"):
        return result[1]
    if case.mode == "grad_aux":
        return result[0]
    if case.mode.startswith("vjp"):
        return result[1]
    return result


# -- comparison -------------------------------------------------------------------------------

def _is_float_leaf(x):
    return np.asarray(x).dtype.kind == "f"


def assert_tree_close(actual, expected, rtol=RTOL, atol=ATOL, what="result"):
    """Same pytree structure (containers and their types), same shapes, values close.

    NaN never matches anything (no NaN masking), and every float leaf of both
    sides must be finite.
    """
    a_leaves, a_tree = jax.tree_util.tree_flatten(actual)
    e_leaves, e_tree = jax.tree_util.tree_flatten(expected)
    assert a_tree == e_tree, f"{what}: structure {a_tree} != expected {e_tree}"
    for k, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.shape == e.shape, f"{what}: leaf {k} has shape {a.shape}, expected {e.shape}"
        if _is_float_leaf(e):
            assert a.dtype == np.float64, f"{what}: leaf {k} has dtype {a.dtype}, expected float64"
            assert np.isfinite(a).all(), f"{what}: leaf {k} is not finite: {a}"
            assert np.isfinite(e).all(), f"{what}: expected leaf {k} is not finite: {e}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=False,
                                   err_msg=f"{what}: leaf {k}")


def check_case_against_jax(case, twin=None):
    """tlaloc vs JAX on every argument tuple of ``case`` (raises AssertionError)."""
    rng = np.random.default_rng(0)
    for i, args in enumerate(case.args_list()):
        before = copy.deepcopy(args)
        ct = cotangent_for(case, args, rng) if case.mode.startswith("vjp") else None
        got = run_tlaloc(case, args, ct)
        want = run_jax(case, args, ct, twin=twin)
        assert_tree_close(got, want, what=f"{case.name}[point {i}]")
        assert_tree_close(args, before, rtol=0, atol=0, what=f"{case.name}[point {i}] arguments after the call")


def check_case_against_fd(case, program=None):
    """tlaloc vs central differences of the NumPy program itself (or of ``program``)."""
    rng = np.random.default_rng(0)
    for i, args in enumerate(case.args_list()):
        ct = cotangent_for(case, args, rng) if case.mode.startswith("vjp") else None
        got = gradient_part(case, run_tlaloc(case, args, ct))
        want = central_differences(case, args, ct, fn=program)
        if case.mode.startswith("vjp"):
            got = tuple(g for g, a in zip(got, args) if _is_float_leaf(jax.tree_util.tree_leaves(a)[0]))
            want = tuple(w for w, a in zip(want, args) if _is_float_leaf(jax.tree_util.tree_leaves(a)[0]))
        assert_tree_close(got, want, rtol=FD_RTOL, atol=FD_ATOL, what=f"{case.name}[point {i}] vs FD")


# -- the rendered module on its own ---------------------------------------------------------------

def run_rendered(g, args, extra=()):
    """Exec ``tl.source(g)`` in a fresh namespace and call its entry function on the leaves."""
    namespace = {"__name__": f"roundtrip_{g.__name__}"}
    exec(compile(tl.source(g), f"<roundtrip {g.__name__}>", "exec"), namespace)
    entry = namespace[g.__name__]
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
    return list(entry(*leaves, *extra))


def rendered_layout(case, api_result):
    """API result leaves in the rendered function's output order (None: not visible to the API).

    The rendered function returns the value leaves (value, then aux) when the
    transform has a value or aux, then the gradient leaves.
    """
    leaves = jax.tree_util.tree_leaves
    if case.mode == "grad_aux":
        grads, aux = api_result
        return [None] + leaves(aux) + leaves(grads)
    return leaves(api_result)


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check_case_source_roundtrip(case):
    g = transform(case)
    for i, args in enumerate(case.args_list()):
        api = g(*args)                       # also builds pytree-argument entries
        rendered = run_rendered(g, copy.deepcopy(args), case.extra)
        expected = rendered_layout(case, api)
        assert len(rendered) == len(expected), \
            f"{case.name}[point {i}]: rendered module returned {len(rendered)} leaves, API {len(expected)}"
        for k, (r, e) in enumerate(zip(rendered, expected)):
            if e is None:        # grad(has_aux=True) does not return the value: check it against NumPy
                np.testing.assert_allclose(r, run_plain(case, args)[0], rtol=1e-12, atol=0,
                                           err_msg=f"{case.name}[point {i}]: rendered value")
                continue
            assert same_bits(r, e), (f"{case.name}[point {i}] leaf {k}: rendered module gives "
                                     f"{np.asarray(r)!r}, the API {np.asarray(e)!r}")


def check_vjp_source_roundtrip(case):
    """``tl.source(vjp_fn)``: its ``<f>_fwd`` (outputs, then residuals) and ``<f>_bwd``
    (residuals and output cotangents -> argument cotangents) run alone, bit-identically."""
    rng = np.random.default_rng(0)
    leaves = jax.tree_util.tree_leaves
    has_aux = case.mode == "vjp_aux"
    for i, args in enumerate(case.args_list()):
        ct = cotangent_for(case, args, rng)
        res = tl.vjp(case.fn, *args, has_aux=has_aux)
        vjp_fn = res[1]
        primal = leaves(res[0]) + (leaves(res[2]) if has_aux else [])
        bars = leaves(vjp_fn(ct))
        namespace = {"__name__": f"roundtrip_{case.fn.__name__}_vjp"}
        exec(compile(tl.source(vjp_fn), f"<roundtrip {case.name}>", "exec"), namespace)
        fwd, bwd = namespace[f"{case.fn.__name__}_fwd"], namespace[f"{case.fn.__name__}_bwd"]
        outs = list(fwd(*[np.asarray(x) for x in leaves(copy.deepcopy(args))]))
        got_primal, residuals = outs[:len(primal)], outs[len(primal):]
        got_bars = list(bwd(*residuals, *[np.asarray(c) for c in leaves(ct)]))
        for what, got, want in (("output", got_primal, primal), ("cotangent", got_bars, bars)):
            assert len(got) == len(want), f"{case.name}[point {i}]: {len(got)} {what} leaves, API {len(want)}"
            for k, (r, e) in enumerate(zip(got, want)):
                assert same_bits(r, e), f"{case.name}[point {i}] {what} leaf {k}: {r!r} != API {e!r}"
