"""Random NumPy programs for the per-signature differential fuzzer (test_signature_fuzz.py).

``program(rng)`` builds the source of a small function of two or three arguments
(shapes from (3, 5), (5,), (1, 5), (3, 1), (), (1,), a Python scalar or an int
array; float32 or float64) by composing operators, ufuncs, reductions, reshapes,
indexing and matmul; each step is checked by running it in NumPy, so every
program runs. ``check(prog)`` differentiates it in one of several modes (grad,
value_and_grad, vjp, grad of a function that calls ``tl.grad``) and compares the
per-signature code with the generic code (dtype, shape and bytes: the module
docstring of ``signature_code`` promises the generic code's bits, NaNs included)
and, where every value is finite, with JAX in float64.

Run by hand for a bigger sample: ``python tests/ad/signature_fuzz.py N [SEED]``.
"""
from __future__ import annotations

import linecache
import sys
import warnings

import numpy as np

import tlaloc as tl
from tlaloc._ad import signature_code

SHAPES = [(3, 5), (5,), (1, 5), (3, 1), (), (1,)]
UNARY = ["np.sin({})", "np.exp({})", "np.log({})", "np.tanh({})", "np.sqrt({})", "np.abs({})",
         "-{}", "({}) ** 2", "({}) ** 3", "np.sqrt(np.abs({}) + 1.0)", "np.log(np.abs({}) + 0.5)",
         "np.exp(-({}) * ({}))"]
BINARY = ["({}) + ({})", "({}) - ({})", "({}) * ({})", "({}) / ({})", "np.maximum({}, {})",
          "np.where(({}) > ({}), {}, {})", "({}) @ ({})", "np.abs({}) ** ({})"]
SCALARS = ["2.0", "0.5", "3", "-1.5", "1", "0.0", "-0.0", "0"]
SPECIAL = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0]
_counter = [0]


def _leaf_value(rng, kind, shape, dtype):
    if kind == "scalar":
        return float(rng.choice([0.7, -1.3, 2.0]))
    if kind == "int":
        return rng.integers(-3, 4, size=shape)
    v = rng.standard_normal(shape)
    if SPECIAL_RATE[0] and rng.random() < SPECIAL_RATE[0]:     # zeros, NaNs (either sign), infs
        mask = rng.random(shape) < 0.4
        v = np.where(mask, rng.choice(SPECIAL, size=shape), v)
    v = np.asarray(v).astype(dtype)
    if v.ndim == 2 and rng.random() < 0.25:     # memory order is not part of the shape
        v = np.asfortranarray(v) if rng.random() < 0.5 else np.ascontiguousarray(v.T).T
    return v


SPECIAL_RATE = [0.15]


def _eval(text, env):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return eval(text, {"np": np}, env)


def _grow(rng, pool, env):
    """One new (text, value) from the pool, or None where NumPy refuses it."""
    r = rng.random()
    a_text, _ = pool[rng.integers(len(pool))]
    if r < 0.3:
        t = UNARY[rng.integers(len(UNARY))].format(a_text, a_text)
    elif r < 0.65:
        b_text, _ = pool[rng.integers(len(pool))]
        if rng.random() < 0.2:
            b_text = SCALARS[rng.integers(len(SCALARS))]
        form = BINARY[rng.integers(len(BINARY))]
        args = [a_text, b_text, a_text, b_text] if "where" in form else [a_text, b_text]
        if rng.random() < 0.5:
            args[:2] = args[1::-1]
        t = form.format(*args)
    elif r < 0.85:
        fn = ["np.sum", "np.mean", "np.max"][rng.integers(3)]
        v = _eval(a_text, env)
        nd = np.ndim(v)
        axis = f", axis={rng.integers(-nd, nd)}" if nd and rng.random() < 0.7 else ""
        keep = ", keepdims=True" if axis and rng.random() < 0.5 else ""
        t = f"{fn}({a_text}{axis}{keep})" if rng.random() < 0.7 else f"({a_text}).{fn[3:]}({axis[2:]}{keep})"
    else:
        t = [f"({a_text}).reshape(-1)", f"({a_text}).T", f"np.transpose({a_text})", f"({a_text})[0]",
             f"({a_text})[1:]", f"({a_text})[..., ::2]", f"({a_text})[:, 0]", f"({a_text}).reshape(5, -1)",
             f"({a_text})[None]", f"({a_text})[-1, 1:4]"][rng.integers(10)]
    try:
        v = _eval(t, env)
    except Exception:
        return None
    if not isinstance(v, (np.ndarray, np.generic, float, int)) or np.size(v) == 0 or len(t) > 400:
        return None
    return t, v


def program(rng):
    """A random program: dict(source, name, args, argnums)."""
    n = int(rng.integers(2, 4))
    dtype = np.float32 if rng.random() < 0.25 else np.float64
    names, args, argnums = ["x", "y", "z"][:n], [], []
    for i in range(n):
        kind = "float" if i == 0 else ["float"] * 4 + ["scalar", "int"][:1 + (rng.random() < 0.5)]
        kind = kind if isinstance(kind, str) else kind[rng.integers(len(kind))]
        shape = SHAPES[rng.integers(len(SHAPES))]
        args.append(_leaf_value(rng, kind, shape, dtype))
        if kind == "float" or kind == "scalar" and rng.random() < 0.5:    # a Python float too
            argnums.append(i)
    env = dict(zip(names, args))
    pool = [(nm, a) for nm, a in env.items()]
    for _ in range(int(rng.integers(2, 10))):
        new = _grow(rng, pool, env)
        if new is not None:
            pool.append(new)
    body = pool[-1][0] if len(pool) > n else pool[0][0]
    _counter[0] += 1
    name = f"fuzz_{_counter[0]}"
    source = f"def {name}({', '.join(names)}):\n    return np.sum({body})\n"
    prog = dict(source=source, name=name, args=args, argnums=tuple(argnums), names=names)
    if rng.random() < LOOP_RATE[0]:
        prog = _with_loop(rng, prog, pool, env, body) or prog
    return prog


LOOP_RATE = [0.3]


def _fits(v, acc):
    """Whether ``0.5 * acc + v`` keeps ``acc``'s shape and dtype (a loop carry's must not change)."""
    try:
        return (np.broadcast_shapes(np.shape(v), np.shape(acc)) == np.shape(acc)
                and np.asarray(v).dtype == np.asarray(acc).dtype)
    except ValueError:
        return False


def _with_loop(rng, prog, pool, env, init):
    """``prog`` as ``acc = init; for i in range(k): acc = step(acc, args, i)``, or None."""
    acc = _eval(init, env)
    env = dict(env, acc=acc, i=1)
    pool = [p for p in pool if p[0] in env] + [("acc", acc), ("acc", acc)]
    for _ in range(int(rng.integers(1, 5))):
        new = _grow(rng, pool, env)
        if new is not None:
            pool.append(new)
    steps = [t for t, v in pool if "acc" in t and t != "acc" and _fits(v, acc)]
    if not steps:
        return None
    step = steps[-1]
    k = int(rng.integers(1, 4))
    scale = "" if rng.random() < 0.5 else " * i"
    source = (f"def {prog['name']}({', '.join(prog['names'])}):\n    acc = {init}\n"
              f"    for i in range({k}):\n        acc = 0.5 * acc + {step}{scale}\n    return np.sum(acc)\n")
    return dict(prog, source=source) if _runs(source, prog["name"], prog["args"]) is not None else None


def _runs(source, name, args):
    """``name``'s result on ``args`` in plain NumPy (floating-point errors ignored), or None."""
    try:
        ns = {"np": np}
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            exec(source, ns)
            return ns[name](*args)
    except Exception:
        return None


def load(source, name, namespace):
    """``name`` defined by ``source`` under a file name inspect can read (linecache)."""
    filename = f"<signature-fuzz {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


MODES = ["grad", "value_and_grad", "vjp", "grad_of_grad", "vjp_of_grad", "value_and_grad_of_grad",
         "grad_of_value_and_grad", "grad_of_grad_of_grad"]


def nest_source(prog, mode):
    """Source of an outer function for the nested modes (it calls ``tl.grad`` on the program)."""
    names, inner = prog["names"], prog["argnums"][-1]
    weight, call = names[prog["argnums"][0]], ", ".join(names)
    name = prog["name"]
    if mode == "grad_of_value_and_grad":
        return (f"def outer_{name}({call}):\n"
                f"    v, g = tl.value_and_grad({name}, argnums={inner})({call})\n"
                f"    return np.sum(g * np.sin({weight})) + v * v\n")
    if mode == "grad_of_grad_of_grad":
        return (f"def mid_{name}({call}):\n"
                f"    return np.sum(tl.grad({name}, argnums={inner})({call}) * {weight})\n"
                f"def outer_{name}({call}):\n"
                f"    g = tl.grad(mid_{name}, argnums={prog['argnums'][0]})({call})\n"
                f"    return np.sum(g * g)\n")
    return (f"def outer_{name}({call}):\n"
            f"    g = tl.grad({name}, argnums={inner})({call})\n"
            f"    return np.sum(g * np.sin({weight}))\n")


def run_mode(prog, mode, np_module):
    """The derivative outputs of ``prog`` in ``mode``, with ``np`` bound to ``np_module``."""
    namespace = {"np": np_module, "tl": tl if np_module is np else _jax_tl()}
    fn = load(prog["source"], prog["name"], namespace)
    args, argnums = prog["args"], prog["argnums"]
    if "_of_" in mode:
        fn = load(nest_source(prog, mode), f"outer_{prog['name']}", namespace)
    if np_module is not np:
        return _jax_mode(fn, mode, args, argnums)
    if mode.startswith("grad"):
        return tuple(tl.grad(fn, argnums=argnums)(*args))
    if mode.startswith("value_and_grad"):
        v, g = tl.value_and_grad(fn, argnums=argnums)(*args)
        return (v, *g)
    closed = _close(fn, args, argnums)
    out, vjp_fn = tl.vjp(closed, *[args[i] for i in argnums])
    return (out, *vjp_fn(np.ones_like(out) * 1.5))


def _jax_tl():
    import types

    import jax
    return types.SimpleNamespace(grad=jax.grad, value_and_grad=jax.value_and_grad)


def _close(fn, args, argnums):
    def closed(*diff):
        full = list(args)
        for i, d in zip(argnums, diff):
            full[i] = d
        return fn(*full)
    return closed


def _jax_mode(fn, mode, args, argnums):
    import jax
    import jax.numpy as jnp
    args = [np.asarray(a, np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args]
    if mode.startswith("grad"):
        return tuple(jax.grad(fn, argnums)(*args))
    if mode.startswith("value_and_grad"):
        v, g = jax.value_and_grad(fn, argnums)(*args)
        return (v, *g)
    out, vjp_fn = jax.vjp(_close(fn, args, argnums), *[args[i] for i in argnums])
    return (out, *vjp_fn(jnp.ones_like(out) * 1.5))


def bits(outs):
    return [(np.asarray(o).dtype.str, np.shape(o), np.asarray(o).tobytes()) for o in outs]


def derivatives(prog, mode, enabled):
    """``run_mode`` with the per-signature code on (``enabled``) or off; the exception if one."""
    before = signature_code.ENABLED
    signature_code.ENABLED = enabled
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return run_mode(prog, mode, np)
    except Exception as e:
        return e
    finally:
        signature_code.ENABLED = before


def check(prog, mode):
    """None where the specialised code agrees with the generic code and JAX, else why not.
    Returns "skip: ..." where tlaloc refuses the program in both codes."""
    generic = derivatives(prog, mode, False)
    fast = derivatives(prog, mode, True)
    cached = derivatives(prog, mode, True)
    if isinstance(generic, Exception) or isinstance(fast, Exception):
        if isinstance(generic, AssertionError):      # TLALOC_CHECK_RENDER: rendered code vs interpreter
            return f"generic code: {generic}"
        if type(generic) is type(fast) and str(generic) == str(fast):
            return f"skip: {type(generic).__name__}: {str(generic)[:120]}"
        return f"exception differs: generic {generic!r} / specialised {fast!r}"
    if bits(fast) != bits(generic) or bits(cached) != bits(generic):
        return "bits differ: " + _describe(fast, generic)
    return _against_jax(prog, mode, generic)


def _describe(got, want):
    rows = []
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if (g.dtype, g.shape) != (w.dtype, w.shape):
            rows.append(f"{g.dtype}{g.shape} vs {w.dtype}{w.shape}")
        elif g.tobytes() != w.tobytes():
            rows.append(f"values {g.ravel()[:4]} vs {w.ravel()[:4]}")
    return "; ".join(rows)


def _against_jax(prog, mode, got):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    if not all(np.isfinite(np.asarray(o, np.float64)).all() for o in got):
        return None
    if any(isinstance(a, np.ndarray) and (a == 0).any() for a in prog["args"]):
        return None             # a kink at 0: tlaloc's abs'(0) is 0, JAX's 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = run_mode(prog, mode, jnp)
    except Exception as e:
        return f"skip: jax {type(e).__name__}"
    f32 = any(np.asarray(o).dtype == np.float32 for o in got)
    for g, w in zip(got, want):
        w = np.asarray(w, np.float64)
        if np.shape(g) != w.shape:
            return f"shape {np.shape(g)} vs jax {w.shape}"
        scale = np.max(np.abs(w), initial=1.0)
        rtol, atol = (2e-3, 2e-3 * scale) if f32 else (1e-9, 1e-11 * scale)
        if np.isfinite(w).all() and not np.allclose(np.asarray(g, np.float64), w, rtol=rtol, atol=atol):
            return f"differs from jax: {np.ravel(g)[:4]} vs {w.ravel()[:4]}"
    return None


def variants(prog, rng, k=4):
    """Up to ``k`` other argument lists the program runs on in NumPy: other shapes, the other
    float dtype, 0-d arrays, NumPy scalars, Python numbers for 0-d values, int for float."""
    out = []
    for _ in range(4 * k):
        args = []
        for a in prog["args"]:
            r = rng.random()
            if isinstance(a, float):
                a = [a, np.float64(a), np.array(a), int(round(a)) or 1][rng.integers(4)]
            elif r < 0.4:
                shape = SHAPES[rng.integers(len(SHAPES))]
                a = _leaf_value(rng, "int" if a.dtype.kind == "i" else "float", shape, a.dtype)
            elif r < 0.6 and a.dtype.kind == "f":
                a = a.astype(np.float32 if a.dtype == np.float64 else np.float64)
            elif r < 0.7 and a.ndim == 0:
                a = a[()]
            elif r < 0.8 and a.ndim == 2:
                a = np.asfortranarray(a) if a.flags.c_contiguous else np.ascontiguousarray(a)
            args.append(a)
        v = _runs(prog["source"], prog["name"], args)
        if v is not None and np.ndim(v) == 0:
            out.append(args)
        if len(out) == k:
            break
    return out


def check_signatures(prog, rng):
    """One ``tl.grad`` object called with several signatures in turn (the cache keys): each
    call against the generic code for the same arguments. None, or why not."""
    namespace = {"np": np, "tl": tl}
    g = tl.grad(load(prog["source"], prog["name"], namespace), argnums=prog["argnums"])
    calls = [prog["args"], *variants(prog, rng), prog["args"]]
    for args in calls:
        diff_ok = all(isinstance(args[i], (np.ndarray, np.generic, float)) and np.asarray(args[i]).dtype.kind == "f"
                      for i in prog["argnums"])
        if not diff_ok:
            continue
        results = []
        for enabled in (True, False, True):
            signature_code.ENABLED = enabled
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    results.append(g(*args))
            except Exception as e:
                results.append(e)
            finally:
                signature_code.ENABLED = True
        if any(isinstance(r, Exception) for r in results):
            if len({f"{type(r).__name__}{r}" for r in results}) == 1 and not isinstance(results[0], AssertionError):
                continue
            return f"exception differs for {_sig(args)}: {results!r}"
        if not bits(results[0]) == bits(results[1]) == bits(results[2]):
            return f"bits differ for {_sig(args)}: " + _describe(results[0], results[1])
    return None


def _sig(args):
    return [(type(a).__name__, np.shape(a), np.asarray(a).dtype.str) for a in args]


def fuzz(n, seed=0, out=print, verbose=False):
    """Check ``n`` random programs (each in one random mode); returns (counts, failures)."""
    rng = np.random.default_rng(seed)
    counts, failures = {"ok": 0, "skip": 0, "fail": 0}, []
    for _ in range(n):
        prog = program(rng)
        mode = (MODES + ["signatures"])[rng.integers(len(MODES) + 1)]
        why = check_signatures(prog, rng) if mode == "signatures" else check(prog, mode)
        kind = "ok" if why is None else "skip" if why.startswith("skip") else "fail"
        counts[kind] += 1
        if kind == "skip" and verbose:
            out(f"{why}")
        if kind == "fail":
            failures.append((prog, mode, why))
            out(f"FAIL {mode}: {why}\n{prog['source']}args: {prog['args']!r}\n")
    return counts, failures


if __name__ == "__main__":
    n, seed = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0
    counts, _ = fuzz(n, seed, verbose=True)
    print(n, "programs, seed", seed, counts)
