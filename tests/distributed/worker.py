"""One process of the multi-process tests (started two at a time by ``test_multiprocess.py``).

    python tests/distributed/worker.py train OUT        # DP f32 and f64, a wrong-shard control,
                                                         # FSDP with a checkpoint at step 25, a mismatch,
                                                         # DP with a tl.capture step, the FSDP transformer
    python tests/distributed/worker.py reference OUT    # one process: DP f64 on 2 virtual devices
    python tests/distributed/worker.py restore OUT CKPT # the FSDP run from CKPT's step to the end, then
                                                         # more steps until killed (prints "step k")
    python tests/distributed/worker.py idle OUT         # joins the run, then sleeps (heartbeat test)

The coordinator, process count and id come from the environment (``tlaloc launch``).
Each process writes ``OUT/result-<id>.json`` and process 0 ``OUT/params-*.npz``.
"""
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

import tlaloc as tl  # noqa: E402
from tlaloc import distributed as dist  # noqa: E402
from tests.distributed import charlm as cl  # noqa: E402
from tests.distributed import digits_mlp as dm  # noqa: E402

P = tl.sharding.PartitionSpec
CHECKPOINT_STEP = 25


def shard_feed(mesh, wrong=False):
    """This process's rows of each batch, as global arrays (``wrong``: process 0's rows, a control)."""
    n, i = dist.process_count(), dist.process_index()

    def feed(xb, yb):
        k = 0 if wrong else i
        lo, hi = k * len(xb) // n, (k + 1) * len(xb) // n
        return dist.global_array((xb[lo:hi], yb[lo:hi]), mesh, P("data"))
    return feed


def save_params(out, name, model):
    if dist.process_index() == 0:
        leaves = tl._pytree.leaves(dist.gather(model))
        np.savez(out / f"params-{name}.npz", *leaves)
    else:
        dist.gather(model)                      # every process takes part in the all-gather


def data_parallel(out, mesh, dtype, result):
    x, y = dm.data(dtype)
    model, opt, state = dm.init(dtype)
    step = dm.make_step(opt, mesh=mesh, in_shardings=(P(), P(), P("data"), P("data")), out_shardings=(P(), P(), P()))
    model, state, losses = dm.train(step, model, state, dm.schedule(), x, y, shard_feed(mesh))
    result.setdefault("steps", {})[np.dtype(dtype).name] = step
    name = np.dtype(dtype).name
    result[f"dp_{name}"] = losses
    result[f"dp_{name}_param_bytes"] = dist.local_nbytes(model)
    save_params(out, f"dp_{name}", model)
    if dtype == np.float32 and dist.process_count() > 1:     # the control: process 1 feeds process 0's rows
        _, _, wrong = dm.train(step, *dm.init(dtype)[::2], dm.schedule()[:3], x, y, shard_feed(mesh, wrong=True))
        result["wrong_shard"] = wrong


def fsdp_setup(mesh):
    model, opt, state = dm.init()
    specs = (dist.fsdp_shardings(model, mesh), dist.fsdp_shardings(state, mesh))
    step = dm.make_step(opt, mesh=mesh, in_shardings=(*specs, P("data"), P("data")), out_shardings=(*specs, P()))
    return model, state, specs, step


def fsdp(out, mesh, result):
    x, y = dm.data()
    model, state, specs, step = fsdp_setup(mesh)
    model, state = dist.put(model, mesh, specs[0]), dist.put(state, mesh, specs[1])
    rows = dm.schedule()
    model, state, first = dm.train(step, model, state, rows[:CHECKPOINT_STEP], x, y, shard_feed(mesh))
    result["fsdp_param_bytes"] = dist.local_nbytes(model)
    result["fsdp_state_bytes"] = dist.local_nbytes(state)
    dist.save_sharded(out / "ckpt", model, state, step=CHECKPOINT_STEP)
    save_params(out, "fsdp_at_checkpoint", model)
    model, state, rest = dm.train(step, model, state, rows[CHECKPOINT_STEP:], x, y, shard_feed(mesh))
    result["fsdp"] = first + rest
    save_params(out, "fsdp", model)


def capture_dp(mesh, result):
    """The digits MLP data-parallel with its gradient from a ``tl.capture`` step on the global mesh."""
    x, y = dm.data()
    model, opt, state = dm.init()
    step = dm.make_capture_step(opt, model, (x[:dm.BATCH], y[:dm.BATCH]), mesh=mesh, in_shardings=(P(), P("data")))
    _, _, result["capture_dp"] = dm.train(step, model, state, dm.schedule(), x, y, shard_feed(mesh))
    _, _, result["capture_wrong_shard"] = dm.train(step, model, state, dm.schedule()[:3], x, y,
                                                   shard_feed(mesh, wrong=True))


def fsdp_charlm(out, mesh, result):
    """The small transformer with FSDP-sharded parameters and AdamW state; then the wrong-shard control."""
    ids, targets, vocab = cl.data()
    model, opt, state = cl.init(vocab)
    specs = (dist.fsdp_shardings(model, mesh), dist.fsdp_shardings(state, mesh))
    step = dm.make_step(opt, loss=cl.loss_fn, mesh=mesh, in_shardings=(*specs, P("data"), P("data")),
                        out_shardings=(*specs, P()))
    placed = dist.put(model, mesh, specs[0]), dist.put(state, mesh, specs[1])
    rows = cl.schedule(len(ids))
    trained, trained_state, result["charlm_fsdp"] = dm.train(step, *placed, rows, ids, targets, shard_feed(mesh))
    result["charlm_param_bytes"] = dist.local_nbytes(trained)
    result["charlm_state_bytes"] = dist.local_nbytes(trained_state)
    save_params(out, "charlm_fsdp", trained)
    _, _, result["charlm_wrong_shard"] = dm.train(step, *placed, rows[:3], ids, targets, shard_feed(mesh, wrong=True))


def mismatch(mesh, result):
    """Process 1 compiles the step for another batch size, then passes other host values to the
    compiled data-parallel step, then compiles another program of the same shapes (another
    learning rate): both processes refuse each by name."""
    x, y = dm.data()
    model, opt, state = dm.init()
    step = dm.make_step(opt, mesh=mesh, in_shardings=(P(), P(), P("data"), P("data")))
    rows = 32 if dist.process_index() == 1 else 16
    try:
        step(model, state, *dist.global_array((x[:rows], y[:rows]), mesh, P("data")))
        result["mismatch"] = "no error"
    except tl.DistributedError as e:
        result["mismatch"] = str(e)
    if dist.process_index() == 1:
        model = tl.nn.MLP((64, 256, 128, 10), activation=tl.nn.relu, key=tl.random.key(1))     # other weights
    try:
        result["steps"]["float32"](model, state, *shard_feed(mesh)(x[:64], y[:64]))
        result["host_mismatch"] = "no error"
    except tl.DistributedError as e:
        result["host_mismatch"] = str(e)
    other = tl.optim.AdamW(lr=1e-3 if dist.process_index() == 1 else 3e-3, weight_decay=1e-4)
    step = dm.make_step(other, mesh=mesh, in_shardings=(P(), P(), P("data"), P("data")))
    try:
        step(*dm.init()[::2], *shard_feed(mesh)(x[:64], y[:64]))
        result["program_mismatch"] = "no error"
    except tl.DistributedError as e:
        result["program_mismatch"] = str(e)


def restore(out, ckpt, mesh, result):
    """Continue the FSDP run from ``ckpt``; write the result; then keep training until killed."""
    x, y = dm.data()
    model, state, specs, step = fsdp_setup(mesh)
    model, state, at = dist.load_sharded(ckpt, (model, state), mesh=mesh, shardings=specs)
    result["restored_step"] = at
    model, state, result["continued"] = dm.train(step, model, state, dm.schedule()[at:], x, y, shard_feed(mesh))
    write(out, result)
    feed = shard_feed(mesh)
    for k in range(100000):
        idx = dm.schedule(1, seed=k)[0]
        model, state, loss = step(model, state, *feed(x[idx], y[idx]))
        print(f"step {k} loss {float(loss):.4f}", flush=True)


def idle():
    """Joined, but in no collective: a peer's death is seen by the runtime's heartbeat only."""
    print("joined", flush=True)
    time.sleep(120)


def write(out, result):
    (out / f"result-{dist.process_index()}.json").write_text(json.dumps(result))


def main(argv):
    mode, out = argv[0], pathlib.Path(argv[1])
    t0 = time.perf_counter()
    if mode != "reference":
        dist.initialize(heartbeat_timeout=5 if mode == "idle" else 10)
    mesh = tl.sharding.Mesh({"data": 2})
    result, times = {}, {}

    def timed(name, fn, *args):
        t = time.perf_counter()
        fn(*args)
        times[name] = round(time.perf_counter() - t, 2)
        result["times"] = dict(times, total=round(time.perf_counter() - t0, 2))
    if mode == "train":
        timed("dp_float32", data_parallel, out, mesh, np.float32, result)
    if mode in ("train", "reference"):
        timed("dp_float64", data_parallel, out, mesh, np.float64, result)
    if mode == "train":
        timed("fsdp", fsdp, out, mesh, result)
        timed("mismatch", mismatch, mesh, result)
        timed("capture_dp", capture_dp, mesh, result)
        timed("charlm_fsdp", fsdp_charlm, out, mesh, result)
    if mode == "restore":
        restore(out, argv[2], mesh, result)
    if mode == "idle":
        idle()
    result.pop("steps", None)
    write(out, result)
    print(f"process {dist.process_index()} of {dist.process_count()} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
