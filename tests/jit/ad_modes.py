"""The AD case table (tests/ad/cases.py) re-run through tl.jit, one mode at a time.

Each ``check_<mode>(case, backend, dtype)`` builds the transform of the row's
program, runs it eagerly (the rendered code, bit-identical to the interpreter:
the oracle) and through ``tl.jit(..., backend=backend)``, and compares every
leaf: rtol 1e-12 in float64, 1e-5 in float32. It returns ``"ok"``, or the
reason a row does not apply (``"n/a: ..."``) or is refused by name
(``"refused: ..."``: only the refusals in ``ALLOWED_REFUSALS``).

Modes:
  reverse  tl.grad / tl.value_and_grad as the row says (vjp rows: tl.vjp's pieces
           are not a transform object; the forward program is compiled instead)
  forward  tl.jvp with random tangents for the float leaves (zeros elsewhere),
           and tl.jacfwd of the first differentiated argument
  vmap     tl.vmap over a batch of 3 copies of the first argument (perturbed)
  hessian  tl.hessian of the scalar programs with respect to an array argument
"""
from __future__ import annotations

import copy
import zlib

import numpy as np

import tlaloc as tl

RTOL = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}

#: Refusals compiled code may answer with instead of a value (never a wrong answer).
ALLOWED_REFUSALS = (
    "while loop needs a bound",            # reverse mode over an unbounded while (XLA and IREE)
    "IREE (llvm-cpu) cannot compile",      # float64 tanh/sin/cos/atan2/fmod on IREE
    "the second derivative of prod",       # prod_others_grad: a dense reference computation, not compiled
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


def oracle(t, args, call=None):
    """``t`` run eagerly (rendered code); where the eager path itself fails on a
    renderer bug, the interpreter on the same DXIR (``backend="interpreter"``)."""
    call = call or (lambda f: f(*copy.deepcopy(args)))
    try:
        return call(t)
    except tl.TlalocError:
        raise
    except Exception:                   # e.g. tl.jvp's rendered code for a return inside a branch
        return call(tl.jit(t, backend="interpreter"))


def _run(t, args, backend, dtype, what):
    """Compare ``tl.jit(t)`` with ``t`` eagerly; returns "ok" or "refused: ..."."""
    return _compare(lambda f: f(*copy.deepcopy(args)), t, backend, dtype, what)


def _compare(call, t, backend, dtype, what, ref=None):
    """``call(tl.jit(t))`` against ``call(t)`` (the oracle; ``call(ref)`` when given). Where
    the oracle refuses the arguments there is nothing to compare."""
    try:
        want = call(ref) if ref is not None else oracle(t, None, call)
    except tl.TlalocError as e:          # e.g. float64 constants next to float32 arguments
        try:
            call(tl.jit(t, backend=backend))
        except type(e):
            return f"n/a: refused alike: {str(e).splitlines()[0][:100]}"
        # compiled code types weak scalars at concrete dtypes; the eager reference may mix
        # a float64 weak scalar into float32 (tl.hessian of softmax_xent in float32)
        return f"n/a: only the reference refuses: {str(e).splitlines()[0][:100]}"
    try:
        got = call(tl.jit(t, backend=backend))
    except tl.TlalocError as e:
        msg = str(e)
        if any(r in msg for r in ALLOWED_REFUSALS):
            return f"refused: {msg.splitlines()[0][:120]}"
        raise
    close(got, want, dtype, what)
    return "ok"


def _rng(case, salt):
    return np.random.default_rng(zlib.crc32(f"{case.name}/{salt}".encode()))


def _argnums(case, n):
    a = case.argnums
    a = (a,) if isinstance(a, int) else tuple(a)
    return tuple(k % n for k in a)


def _points(case, dtype, limit=2):
    return [cast(args, dtype) for args in case.args_list()[:limit]]


# -- modes --------------------------------------------------------------------------------------

def check_reverse(case, backend, dtype, limit=2):
    results = []
    for args in _points(case, dtype, limit):
        if case.mode in ("grad", "value_and_grad", "grad_aux", "value_and_grad_aux"):
            make = {"grad": tl.grad, "value_and_grad": tl.value_and_grad}.get(case.mode)
            if make is None:
                make = tl.grad if case.mode == "grad_aux" else tl.value_and_grad
                t = make(case.fn, argnums=case.argnums, has_aux=True)
            else:
                t = make(case.fn, argnums=case.argnums)
        else:
            t = case.fn                            # vjp rows: the program itself
            results.append(_run_plain(t, args, backend, dtype, case.name))
            continue
        results.append(_run(t, args, backend, dtype, f"{case.name} reverse"))
    return _summary(results)


def _run_plain(fn, args, backend, dtype, what):
    return _compare(lambda f: f(*copy.deepcopy(args)), fn, backend, dtype, what,
                    ref=tl.jit(fn, backend="interpreter"))


def check_forward(case, backend, dtype, limit=1, jacobian=True):
    results = []
    for args in _points(case, dtype, limit):
        r = _rng(case, "tangent")
        tangents = tuple(_tangent_like(a, r) for a in args)
        t = _make(tl.jvp, case.fn)
        if isinstance(t, str):
            return t
        results.append(_compare(lambda f: f(copy.deepcopy(args), tangents), t, backend, dtype,
                                f"{case.name} jvp"))
        a = _argnums(case, len(args))[0]
        if jacobian and _is_array(args[a]) and all(_is_array(x) for x in args) and _scalar_or_array_out(case, args):
            t = _make(tl.jacfwd, case.fn, argnums=a)
            results.append(t if isinstance(t, str) else _run(t, args, backend, dtype, f"{case.name} jacfwd"))
    return _summary(results)


def check_vmap(case, backend, dtype, limit=1, size=3):
    results = []
    for args in _points(case, dtype, limit):
        if not _is_float_array(args[0]):
            return "n/a: the first argument is not a float array"
        r = _rng(case, "vmap")
        xs = np.stack([args[0] + (0.01 * k) * r.standard_normal(args[0].shape).astype(args[0].dtype)
                       for k in range(size)])
        in_axes = (0,) + (None,) * (len(args) - 1)
        t = tl.vmap(case.fn, in_axes=in_axes)
        results.append(_run(t, (xs,) + tuple(args[1:]), backend, dtype, f"{case.name} vmap"))
    return _summary(results)


def check_hessian(case, backend, dtype, limit=1):
    results = []
    for args in _points(case, dtype, limit):
        if not all(_is_array(x) for x in args):
            return "n/a: pytree arguments"
        if case.mode not in ("grad", "value_and_grad"):
            return "n/a: not a scalar program"
        a = _argnums(case, len(args))[0]
        out = _primal(case, args)
        if isinstance(out, str):
            return out
        if not _is_float_array(args[a]) or np.ndim(out) != 0:
            return "n/a: not a scalar function of a float array"
        t = _make(tl.hessian, case.fn, argnums=a)
        results.append(t if isinstance(t, str) else _run(t, args, backend, dtype, f"{case.name} hessian"))
    return _summary(results)


MODES = {"reverse": check_reverse, "forward": check_forward, "vmap": check_vmap, "hessian": check_hessian}


# -- helpers ------------------------------------------------------------------------------------

def _make(transform, fn, **kw):
    """The transform, or "n/a: ..." where building it refuses the program (a float64
    constant next to float32 arguments is refused when the transform is applied)."""
    try:
        return transform(fn, **kw)
    except tl.DTypeError as e:
        return f"n/a: refused when applied: {str(e).splitlines()[0][:100]}"


def _summary(results):
    for r in results:
        if r != "ok":
            return r
    return "ok"


def _is_array(x):
    return isinstance(x, np.ndarray)


def _is_float_array(x):
    return isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.ndim >= 1


def _tangent_like(x, r):
    flat, t = tl._pytree.flatten(x)
    out = []
    for v in flat:
        v = np.asarray(v)
        if v.dtype.kind == "f":
            out.append(r.standard_normal(v.shape).astype(v.dtype))
        else:
            out.append(np.zeros(v.shape, v.dtype))
    return tl._pytree.unflatten(t, out)


def _primal(case, args):
    """The program's value on ``args`` (the interpreter), or "n/a: ..." where it refuses them."""
    try:
        return tl.jit(case.fn, backend="interpreter")(*copy.deepcopy(args))
    except tl.DTypeError as e:
        return f"n/a: refused: {str(e).splitlines()[0][:100]}"


def _scalar_or_array_out(case, args):
    out = _primal(case, args)
    return not isinstance(out, (str, tuple, list, dict)) and (isinstance(out, np.ndarray) or np.ndim(out) == 0)
