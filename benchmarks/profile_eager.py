"""Where tlaloc's eager gradient spends its time (diagnostic, not a comparison).

    python benchmarks/profile_eager.py [--quick] [--clock cpu] [--threads 1]

For the small MLP and the 38-step integrator (n=16) (and, in the ablation, the
medium MLP) it prints:

1. cProfile's top functions by own time (ufunc time counts in the Python
   function that calls the ufunc, as cProfile does not see ufuncs);
2. an ablation of the same generated derivative source run with a different
   ``lax`` namespace: as shipped (``Primitive.bind`` → float-mix check → NumPy
   impl), with ``bind`` bypassed (impls called directly), and with lean
   stand-ins (plain ufuncs, shape fast paths for the broadcasting helpers, a
   cheaper NaN test in ``safe_mul``), next to the hand-written gradient;
3. the cost of one call of each primitive the derivatives use, vs the NumPy
   call it wraps, on a (16, 2) array.

The ablation reads tlaloc internals (``_entries``, ``REGISTRY``); it is a
measurement of where time goes, not a supported API.
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import common  # noqa: E402
import workloads as W  # noqa: E402


# -- lean stand-ins: what the primitives cost without the generic machinery ----------------

def _sum_to(x, like):
    shape = like.shape if hasattr(like, "shape") else np.shape(like)
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape) if d == 1 and x.shape[i + lead] != 1)
    return np.add.reduce(x, axis=axes, keepdims=True).reshape(shape)


def _broadcast_like(x, like):
    x = np.asarray(x)
    shape = like.shape
    if x.shape == shape:
        return x
    out = np.empty(shape, x.dtype)
    out[...] = x
    return out


def _safe_mul(a, b):
    with np.errstate(invalid="ignore"):
        out = np.multiply(a, b)
    s = np.add.reduce(out, axis=None) if out.ndim else out
    if s != s:                                   # a NaN somewhere (or inf - inf): the exact path
        out = np.where((np.asarray(a) == 0) | (np.asarray(b) == 0), out.dtype.type(0), out)
    return out


def _safe_div(a, b):
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.divide(a, b)
    s = np.add.reduce(out, axis=None) if out.ndim else out
    if s != s:
        out = np.where(np.asarray(a) == 0, out.dtype.type(0), out)
    return out


def _reduce_sum(x, axes, keepdims):
    return np.add.reduce(x, axis=axes, keepdims=keepdims)


def _expand_reduced(g, like, axes, keepdims):
    if keepdims:
        return g
    rank = like.ndim
    ax = tuple(range(rank)) if axes is None else tuple(a % rank for a in ((axes,) if isinstance(axes, int) else axes))
    return np.reshape(g, tuple(1 if i in ax else d for i, d in enumerate(like.shape)))


def lean_namespace():
    from tlaloc._core.primitive import REGISTRY
    from tlaloc.numpy import lax
    ns = {k: getattr(p.impl, "__wrapped__", p.impl) for k, p in REGISTRY.items()}
    ns.update(add=np.add, subtract=np.subtract, multiply=np.multiply, divide=np.divide, negative=np.negative,
              tanh=np.tanh, sqrt=np.sqrt, matmul=np.matmul, sum_to=_sum_to, broadcast_like=_broadcast_like,
              safe_mul=_safe_mul, safe_div=_safe_div, reduce_sum=_reduce_sum, expand_reduced=_expand_reduced,
              zeros_like=np.zeros_like, grad_seed=lambda x: np.ones_like(x))
    ns.update(truth=lax.truth, check_trips=lax.check_trips)
    return types.SimpleNamespace(**ns)


def impl_namespace():
    from tlaloc._core.primitive import REGISTRY
    from tlaloc.numpy import lax
    ns = {k: p.impl for k, p in REGISTRY.items()}
    ns.update(truth=lax.truth, check_trips=lax.check_trips)
    return types.SimpleNamespace(**ns)


def with_lax(entry, lax_ns):
    """The generated derivative function, executed against another ``lax`` namespace."""
    ns = {"__name__": "tlaloc_bench_ablation"}
    exec(compile(entry["source"], "<ablation>", "exec"), ns)
    ns["lax"] = lax_ns
    return ns[entry["graphs"][0][1]]


def profile(label, fn, args, calls) -> None:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn(*args)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    text = out.getvalue()
    start = text.find("   ncalls")
    print(f"### cProfile: {label}, {calls} calls, top 12 by own time\n")
    print("```")
    print(text[start:].rstrip().replace(os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/", ""))
    print("```\n")


def ablation(bench, label, g, args, by_hand) -> None:
    entry = g._entries[(None, None)]
    impls = {"tlaloc": lambda: g(*args),
             "generated fn only": lambda f=entry["fn"]: f(*args),
             "bind bypassed": lambda f=with_lax(entry, impl_namespace()): f(*args),
             "lean lax": lambda f=with_lax(entry, lean_namespace()): f(*args),
             "numpy": lambda: by_hand(*args)}
    want = by_hand(*args)
    for k in ("bind bypassed", "lean lax"):
        common.assert_close(f"{label}: {k}", impls[k](), want)
    bench.compare(label, impls)


def primitive_costs(bench) -> None:
    from tlaloc.numpy import lax
    a = np.random.default_rng(0).standard_normal((16, 2))
    b = np.random.default_rng(1).standard_normal((16, 2))
    col = np.ones((16, 1))
    ops = [
        ("add", lambda: lax.add(a, b), lambda: np.add(a, b)),
        ("multiply by a Python float", lambda: lax.multiply(0.02, a), lambda: np.multiply(0.02, a)),
        ("safe_mul", lambda: lax.safe_mul(a, b), lambda: np.multiply(a, b)),
        ("sqrt", lambda: lax.sqrt(a * a), lambda: np.sqrt(a * a)),
        ("reduce_sum axis 1 keepdims", lambda: lax.reduce_sum(a, axes=(1,), keepdims=True),
         lambda: np.add.reduce(a, axis=1, keepdims=True)),
        ("sum_to, same shape (a no-op)", lambda: lax.sum_to(a, b), lambda: a),
        ("sum_to (16,2) -> (16,1)", lambda: lax.sum_to(a, col), lambda: np.add.reduce(a, axis=1, keepdims=True)),
        ("broadcast_like (16,1) -> (16,2)", lambda: lax.broadcast_like(col, a),
         lambda: np.broadcast_to(col, a.shape)),
        ("zeros_like", lambda: lax.zeros_like(a), lambda: np.zeros_like(a)),
    ]
    for name, tl_fn, np_fn in ops:
        bench.compare(name, {"tlaloc": tl_fn, "numpy": np_fn})


def run(quick: bool = False, repeats=None) -> None:
    import tlaloc as tl
    common.print_header("profile of tlaloc's eager gradient")
    cases = [("MLP small", W.mlp_loss, W.MLP_ARGNUMS, W.mlp_inputs("small"), W.mlp_loss_grad_numpy, 300),
             ("integrator 38 steps, n=16", W.projectile_loss, W.PROJECTILE_ARGNUMS, W.projectile_inputs("small"),
              W.projectile_loss_grad_numpy, 30)]
    grads = {}
    for label, fn, argnums, args, _, calls in cases:
        g = grads[label] = tl.grad(fn, argnums=argnums)
        g(*args)
        profile(label, g, args, calls // 10 if quick else calls)
    print("### ablation: the same generated source under other `lax` namespaces\n")
    bench = common.Bench(quick=quick, repeats=repeats)
    for label, fn, argnums, args, by_hand, _ in cases:
        ablation(bench, label, grads[label], args, by_hand)
    ablation(bench, "MLP medium", tl.grad(W.mlp_loss, argnums=W.MLP_ARGNUMS), W.mlp_inputs("medium"),
             W.mlp_loss_grad_numpy)
    bench.print_table(["generated fn only", "bind bypassed", "lean lax", "numpy"], ratio_to=["lean lax", "numpy"])
    print("\n### one primitive call on (16, 2) float64 vs the NumPy call it wraps\n")
    bench = common.Bench(quick=quick, repeats=repeats)
    primitive_costs(bench)
    bench.print_table(["numpy"])


def main(argv=None) -> int:
    args = common.parse_args(__doc__, argv)
    run(args.quick, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
