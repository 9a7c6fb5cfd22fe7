"""The AD case table (tests/ad/cases.py) re-run through tl.jit, one mode at a time.

``check(case, mode, backend, dtype)`` builds the transform of the row's program
once, compiles it once per argument shape with ``tl.jit(..., backend=backend)``,
and compares it at every argument point of the row (the points sweep both sides
of each branch and several trip counts) with the transform run eagerly (the
rendered code, bit-identical to the interpreter: the oracle): rtol 1e-12 in
float64, 1e-5 in float32 (and the same atol), and with JAX in float64 on the row's
JAX twin (``ad_jax.py``: rtol 1e-10 / 2e-4), since eager and compiled code share
every derivative rule. It returns ``"ok"``, or:

* ``"refused: ..."``: compiled code refused by name, with one of ``ALLOWED_REFUSALS``
  (never a wrong answer);
* ``"n/a: ..."``: the mode does not apply to the row (pytree arguments for a
  Hessian), or the reference itself refuses the arguments (a float64 constant of
  the program next to float32 arguments).

Modes:
  reverse  tl.grad / tl.value_and_grad as the row says (vjp rows: tl.vjp's pieces
           are not a transform object; the program itself is compiled instead)
  forward  tl.jvp with random tangents for the float leaves (zeros elsewhere), and
           with ``jacobian=True`` also tl.jacfwd of the first differentiated argument
  vmap     tl.vmap over a batch of 3 perturbed copies of the first argument
  hessian  tl.hessian of a scalar program with respect to an array argument
"""
from __future__ import annotations

import copy
import zlib

import numpy as np

import tlaloc as tl

from . import ad_jax

RTOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}

#: Refusals compiled code may answer with instead of a value; which entry may give which is
#: ``ad_expected.py``'s explicit list (any other entry must be "ok").
ALLOWED_REFUSALS = (
    "while loop needs a bound",            # tl.hessian of an unbounded while (ad_expected.REFUSED says where)
    "IREE (llvm-cpu) cannot compile",      # float64 tanh/sin/cos/atan2/fmod on IREE
    "IREE could not compile the program",  # IREE's own compiler error (ad_expected.IREE_REFUSED says where)
)


def leaves(x):
    return [np.asarray(v) for v in tl._pytree.flatten(x)[0]]


def cast(tree, dtype):
    """Float arrays (and floats) of ``tree`` in ``dtype``; other leaves as they are."""
    flat, t = tl._pytree.flatten(tree)
    out = []
    for v in flat:
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            v = v.astype(dtype)
        elif isinstance(v, np.floating):
            v = dtype(v)
        out.append(v)
    return tl._pytree.unflatten(t, out)


def close(got, want, dtype, what=""):
    g, w = leaves(got), leaves(want)
    assert len(g) == len(w), f"{what}: {len(g)} outputs, want {len(w)}"
    rtol = RTOL[np.dtype(dtype)]
    for k, (a, b) in enumerate(zip(g, w)):
        assert a.shape == b.shape, f"{what}: output {k} has shape {a.shape}, want {b.shape}"
        np.testing.assert_allclose(a.astype(np.float64) if a.dtype.kind == "f" else a,
                                   b.astype(np.float64) if b.dtype.kind == "f" else b,
                                   rtol=rtol, atol=rtol, err_msg=f"{what}: output {k}")


# -- one comparison -------------------------------------------------------------------------------

def _oracle(t, call):
    """``call(t)`` eagerly; where the eager path fails on a bug of its own (not a refusal),
    the interpreter on the same DXIR (``backend="interpreter"``)."""
    try:
        return call(t)
    except tl.TlalocError:
        raise
    except Exception:
        return call(tl.jit(t, backend="interpreter"))


def _compare(call, t, jt, dtype, what, ref=None, jax_ref=None):
    """``call(jt)`` (compiled) against ``call(t)`` (or ``call(ref)``), and against
    ``jax_ref()`` (JAX float64); see the module docstring."""
    try:
        want = call(ref) if ref is not None else _oracle(t, call)
    except tl.TlalocError as e:          # the reference refuses these arguments: nothing to compare
        try:
            call(jt)
        except type(e):
            return f"n/a: refused alike: {_first(e)}"
        if not isinstance(e, tl.DTypeError):
            raise AssertionError(f"{what}: the reference refuses ({_first(e)}) but compiled code runs") from None
        # compiled code types Python scalars at concrete dtypes; the eager reference may let a
        # float64 scalar meet float32 (tl.hessian of softmax_xent in float32)
        return f"n/a: only the reference refuses: {_first(e)}"
    try:
        got = call(jt)
    except tl.TlalocError as e:
        if any(r in str(e) for r in ALLOWED_REFUSALS):
            return f"refused: {_first(e)}"
        raise
    close(got, want, dtype, what)
    if jax_ref is not None:
        ad_jax.close(got, jax_ref(), dtype, what)
    return "ok"


def _first(e):
    return str(e).splitlines()[0][:120]


def _summary(results):
    for r in results:
        if r != "ok":
            return r
    return "ok" if results else "n/a: no argument points"


def _make(transform, fn, **kw):
    """The transform, or "n/a: ..." where applying it refuses the program."""
    try:
        return transform(fn, **kw)
    except tl.DTypeError as e:
        return f"n/a: refused when applied: {_first(e)}"


def _points(case, dtype, limit=None):
    pts = case.args_list()
    return [cast(args, dtype) for args in (pts if limit is None else pts[:limit])]


def _argnum(case, n):
    a = case.argnums
    return (a if isinstance(a, int) else tuple(a)[0]) % n


def _rng(case, salt):
    return np.random.default_rng(zlib.crc32(f"{case.name}/{salt}".encode()))


def _is_float_array(x):
    return isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.ndim >= 1


def _primal(case, args):
    """The program's value on ``args`` (the interpreter), or "n/a: ..." where it refuses them."""
    try:
        return tl.jit(case.fn, backend="interpreter")(*copy.deepcopy(args))
    except tl.DTypeError as e:
        return f"n/a: refused: {_first(e)}"


# -- modes ----------------------------------------------------------------------------------------

def check_reverse(case, backend, dtype, limit=None):
    if case.mode.startswith("vjp"):                  # tl.vjp's pullback is not a transform object
        t = case.fn
        jt, ref = tl.jit(t, backend=backend), tl.jit(t, backend="interpreter")
    else:
        make = tl.value_and_grad if case.mode.startswith("value_and_grad") else tl.grad
        t = _make(make, case.fn, argnums=case.argnums, has_aux=case.mode.endswith("aux"))
        if isinstance(t, str):
            return t
        jt, ref = tl.jit(t, backend=backend), None
    results = [_compare(lambda f: f(*copy.deepcopy(args)), t, jt, dtype, f"{case.name} reverse", ref,
                        lambda: ad_jax.reverse(case, args))
               for args in _points(case, dtype, limit)]
    return _summary(results)


def check_forward(case, backend, dtype, limit=None, jacobian=True):
    t = _make(tl.jvp, case.fn)
    if isinstance(t, str):
        return t
    jt, results, jac = tl.jit(t, backend=backend), [], None
    for args in _points(case, dtype, limit):
        r = _rng(case, "tangent")
        tangents = tuple(_tangent_like(a, r) for a in args)
        results.append(_compare(lambda f: f(copy.deepcopy(args), tangents), t, jt, dtype, f"{case.name} jvp",
                                jax_ref=lambda: ad_jax.jvp(case, args, tangents)))
        a = _argnum(case, len(args))
        if jacobian and all(isinstance(x, np.ndarray) for x in args) and _is_float_array(args[a]):
            out = _primal(case, args)
            if isinstance(out, str) or isinstance(out, (tuple, list, dict)):
                continue
            if jac is None:
                jac = _make(tl.jacfwd, case.fn, argnums=a)
                jjac = tl.jit(jac, backend=backend) if not isinstance(jac, str) else None
            if isinstance(jac, str):
                results.append(jac)
                continue
            results.append(_compare(lambda f: f(*copy.deepcopy(args)), jac, jjac, dtype, f"{case.name} jacfwd",
                                    jax_ref=lambda: ad_jax.jacfwd(case, args, a)))
    return _summary(results)


def check_vmap(case, backend, dtype, limit=None, size=3):
    pts = _points(case, dtype, limit)
    if not pts or not _is_float_array(pts[0][0]):
        return "n/a: the first argument is not a float array"
    t = tl.vmap(case.fn, in_axes=(0,) + (None,) * (len(pts[0]) - 1))
    jt, results = tl.jit(t, backend=backend), []
    for args in pts:
        r = _rng(case, "vmap")
        x = args[0]
        xs = np.stack([x + (0.01 * k) * r.standard_normal(x.shape).astype(x.dtype) for k in range(size)])
        batch = (xs,) + tuple(args[1:])
        results.append(_compare(lambda f: f(*copy.deepcopy(batch)), t, jt, dtype, f"{case.name} vmap",
                                jax_ref=lambda: ad_jax.vmap(case, batch)))
    return _summary(results)


def check_hessian(case, backend, dtype, limit=None):
    pts = _points(case, dtype, limit)
    if not pts or not all(isinstance(x, np.ndarray) for x in pts[0]):
        return "n/a: pytree arguments"
    if case.mode not in ("grad", "value_and_grad"):
        return "n/a: not a scalar program"
    a = _argnum(case, len(pts[0]))
    t = _make(tl.hessian, case.fn, argnums=a)
    if isinstance(t, str):
        return t
    jt, results = tl.jit(t, backend=backend), []
    for args in pts:
        out = _primal(case, args)
        if isinstance(out, str):
            results.append(out)
            continue
        if not _is_float_array(args[a]) or np.ndim(out) != 0:
            return "n/a: not a scalar function of a float array"
        results.append(_compare(lambda f: f(*copy.deepcopy(args)), t, jt, dtype, f"{case.name} hessian",
                                jax_ref=lambda: ad_jax.hessian(case, args, a)))
    return _summary(results)


MODES = {"reverse": check_reverse, "forward": check_forward, "vmap": check_vmap, "hessian": check_hessian}


def check(case, mode, backend, dtype, **kw):
    return MODES[mode](case, backend, dtype, **kw)


def _tangent_like(x, r):
    flat, t = tl._pytree.flatten(x)
    out = []
    for v in flat:
        v = np.asarray(v)
        out.append(r.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else np.zeros(v.shape, v.dtype))
    return tl._pytree.unflatten(t, out)
