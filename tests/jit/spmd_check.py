"""SPMD checks on 8 virtual CPU devices, run in a subprocess by test_sharding.py
(``XLA_FLAGS`` must be set before jax starts its CPU backend; the rest of the
suite keeps one device).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m tests.jit.spmd_check

Prints one JSON object per check: ``{"check": name, "ok": bool, ...details}``.
"""
import json
import os
import sys
import traceback

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import numpy as np  # noqa: E402

import tlaloc as tl  # noqa: E402
from tlaloc import sharding as shd  # noqa: E402
from tlaloc import F64  # noqa: E402

P = shd.PartitionSpec
LR = 0.1


def mlp_loss(params, x, y):
    h = np.tanh(x @ params["w1"] + params["b1"])          # (batch, hidden)
    out = h @ params["w2"] + params["b2"]                 # (batch, out)
    return ((out - y) ** 2).mean()


mlp_value_and_grad = tl.value_and_grad(mlp_loss)


def train_step(params, x, y):
    """One SGD step: (new params, loss)."""
    loss, g = mlp_value_and_grad(params, x, y)
    new = {"w1": params["w1"] - LR * g["w1"], "b1": params["b1"] - LR * g["b1"],
           "w2": params["w2"] - LR * g["w2"], "b2": params["b2"] - LR * g["b2"]}
    return new, loss


def typed_layer(x: F64["batch", "feat"], w: F64["feat", "hidden"]):
    return np.tanh(x @ w)


def _params(rng, d=8, h=16, o=4):
    return {"w1": rng.standard_normal((d, h)) / np.sqrt(d), "b1": 0.1 * rng.standard_normal(h),
            "w2": rng.standard_normal((h, o)) / np.sqrt(h), "b2": 0.1 * rng.standard_normal(o)}


def _max_rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def check_devices():
    import jax
    return {"devices": len(jax.devices("cpu"))}


def _training(param_spec, name):
    mesh = shd.Mesh({"data": 4, "model": 2})
    rng = np.random.default_rng(0)
    params = _params(rng)
    x, y = rng.standard_normal((32, 8)), rng.standard_normal((32, 4))
    spmd = tl.jit(train_step, mesh=mesh, in_shardings=(param_spec, P("data", None), P("data", None)),
                  out_shardings=(param_spec, P()))
    single = tl.jit(train_step)
    text = spmd.lower(params, x, y).as_text()
    p_spmd, p_one = params, params
    worst, losses = 0.0, []
    for _ in range(3):
        p_spmd, l_spmd = spmd(p_spmd, x, y)            # sharded outputs fed back in
        p_one, l_one = single(p_one, x, y)
        losses.append((float(np.asarray(l_spmd)), float(np.asarray(l_one))))
        worst = max([worst, _max_rel(l_spmd, l_one)] + [_max_rel(p_spmd[k], p_one[k]) for k in p_one])
    w1 = p_spmd["w1"]
    compiled = next(iter(spmd._cache.values()))
    hlo = compiled.executable._exe.hlo_modules()[0].to_string()
    return {"collectives": sorted({c for c in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
                                   if c in hlo}),
            "name": name, "max_rel": worst, "losses": losses, "mesh_in_text": 'sdy.mesh @mesh = <["data"=4, "model"=2]>' in text,
            "sdy_shardings": text.count("sdy.sharding"), "num_partitions_8": "mhlo.num_partitions = 8" in text,
            "w1_devices": len(w1.sharding.device_set), "w1_shard_shape": list(w1.addressable_shards[0].data.shape),
            "loss_decreases": losses[-1][0] < losses[0][0]}


def check_mlp_model_sharded():
    spec = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P()}
    return _training(spec, "model-sharded params, data-sharded batch")


def check_mlp_replicated():
    return _training(None, "replicated params, data-sharded batch")


def check_axis_rules():
    mesh = shd.Mesh({"data": 4, "model": 2})
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((16, 8)), rng.standard_normal((8, 6))
    f = tl.jit(typed_layer, mesh=mesh, in_shardings=shd.axis_rules(batch="data", hidden="model"),
               out_shardings=shd.axis_rules(batch="data", hidden="model"))
    text = f.lower(x, w).as_text()
    out = f(x, w)
    return {"max_rel": _max_rel(out, np.tanh(x @ w)),
            "x_sharded_on_data": '#sdy.sharding<@mesh, [{"data"}, {}]>' in text,
            "w_sharded_on_model": '#sdy.sharding<@mesh, [{}, {"model"}]>' in text,
            "out_shard_shape": list(out.addressable_shards[0].data.shape)}


def check_bad_specs():
    mesh = shd.Mesh({"data": 4, "model": 2})
    msgs = []
    for spec in (P("nope"), P("data", "data"), P(None, None, "data")):
        try:
            tl.jit(typed_layer, mesh=mesh, in_shardings=(spec, None)).lower(np.ones((8, 8)), np.ones((8, 6)))
            msgs.append(None)
        except tl.TlalocError as e:
            msgs.append(f"{type(e).__name__}: {e}")
    return {"messages": msgs}


CHECKS = {name[len("check_"):]: fn for name, fn in sorted(globals().items()) if name.startswith("check_")}


def main():
    for name, fn in CHECKS.items():
        try:
            out = {"check": name, "ok": True, **fn()}
        except Exception as e:                           # report, and keep checking the others
            out = {"check": name, "ok": False, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc()[-2000:]}
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
