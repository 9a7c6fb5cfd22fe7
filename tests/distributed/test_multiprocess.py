"""Training across two processes on loopback (tlaloc.distributed, XLA's distributed runtime, gloo).

Four groups of processes, each bounded in time (``tests/distributed/worker.py``):

* ``trained``: ``tlaloc.launch`` starts 2 processes that train the digits MLP for 50
  steps data-parallel (f32, f64; ``tl.jit`` and ``tl.capture`` steps), with FSDP-sharded
  parameters (a sharded checkpoint at step 25), try a program mismatch, and train the
  small transformer FSDP-sharded for a few steps; at the same time one process runs the same
  f64 data-parallel program on 2 virtual devices (the reference for bit-identity).
* ``restored``: 2 processes restore the checkpoint, continue to step 50, then keep
  training until the test kills one of them.
* ``idle``: 2 processes join a run and idle; the test kills one.
* ``single``: in this process, the single-process, single-device runs (the oracle).

The groups run once per test session, even when pytest-xdist spreads these tests over
workers (``_once``: the first worker runs a group, the others wait for its files).
Marked slow: the groups take tens of seconds of wall time on a loaded 2-core machine.
"""
import fcntl
import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("jax", reason="tlaloc.distributed runs on jaxlib's distributed runtime")

import tlaloc as tl  # noqa: E402
from tlaloc import distributed as dist  # noqa: E402
from tlaloc import _pytree  # noqa: E402
from tlaloc.launch import free_port, launch  # noqa: E402

from . import charlm as cl  # noqa: E402
from . import digits_mlp as dm  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKER = str(ROOT / "tests" / "distributed" / "worker.py")
LIMIT_S = 300            # every group of processes is killed past this (a hang fails, never blocks the suite)
pytestmark = pytest.mark.slow


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TLALOC_COORDINATOR", "TLALOC_NUM_PROC",
                                                                      "TLALOC_PROCESS_ID"))}
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


class _Lines:
    """Collects a stream's lines in a thread; ``wait(prefix)`` until one starts with it."""

    def __init__(self, stream):
        self.lines, self._cond = [], threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()

    def wait(self, prefix: str, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: any(x.startswith(prefix) for x in self.lines), timeout)

    def text(self) -> str:
        with self._cond:
            return "".join(self.lines)


def _start_pair(mode: str, *args) -> list:
    """Two worker processes of one run, started directly (``tlaloc launch`` would stop the survivor
    itself when one dies; these tests watch what the survivor does on its own)."""
    port, procs = free_port(), []
    for i in range(2):
        env = _env(TLALOC_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", TLALOC_NUM_PROCESSES="2",
                   TLALOC_PROCESS_ID=str(i), PYTHONUNBUFFERED="1")
        p = subprocess.Popen([sys.executable, WORKER, mode, *map(str, args)], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.out, p.err = _Lines(p.stdout), _Lines(p.stderr)
        procs.append(p)
    return procs


def _kill_one_and_watch(procs, ready: str, victim: int) -> dict:
    """Once both printed ``ready``, SIGKILL ``procs[victim]``; how and how soon the other exits (30 s at most)."""
    try:
        for p in procs:
            assert p.out.wait(ready, LIMIT_S), f"no `{ready}` line:\n{p.out.text()}\n{p.err.text()[-3000:]}"
        procs[victim].send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        survivor = procs[1 - victim]
        try:
            survivor.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        waited = time.monotonic() - t0
        return {"returncode": survivor.poll(), "seconds": waited, "stderr": survivor.err.text()}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def _results(out: pathlib.Path, n: int = 2) -> list:
    return [json.loads((out / f"result-{i}.json").read_text()) for i in range(n)]


def _once(tmp_path_factory, name: str, make) -> dict:
    """``make(directory)`` (a JSON-able dict) run once per session: under pytest-xdist the first
    worker runs it and the others read what it wrote (a lock file orders them)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    directory, done = root / f"distributed-{name}", root / f"distributed-{name}.json"
    with open(root / f"distributed-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            directory.mkdir(exist_ok=True)
            try:
                result = {"ok": make(directory)}
            except AssertionError as e:
                result = {"failed": str(e)}
            done.write_text(json.dumps(result))
    result = json.loads(done.read_text())
    assert "ok" in result, result.get("failed")
    return result["ok"]


def _train(out: pathlib.Path) -> dict:
    ref = out / "reference"
    ref.mkdir()
    reference = subprocess.Popen([sys.executable, WORKER, "reference", str(ref)], text=True,
                                 env=_env(XLA_FLAGS="--xla_force_host_platform_device_count=2"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    try:
        status = launch([sys.executable, WORKER, "train", str(out)], 2, env=_env(), stdout=stdout, stderr=stderr,
                        timeout=LIMIT_S)
        ref_out, ref_err = reference.communicate(timeout=LIMIT_S)
    finally:
        if reference.poll() is None:
            reference.kill()
            reference.wait()
    assert status == 0, stdout.getvalue()[-3000:] + stderr.getvalue()[-5000:]
    assert reference.returncode == 0, ref_err[-5000:]
    return {"results": _results(out), "reference": _results(ref, 1)[0], "out": str(out), "ref": str(ref),
            "stdout": stdout.getvalue(), "seconds": time.monotonic() - t0}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    r = _once(tmp_path_factory, "train", _train)
    return dict(r, out=pathlib.Path(r["out"]), ref=pathlib.Path(r["ref"]))


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The oracle: the same training on one process and one device (no mesh): the digits MLP in
    f32 and f64 (``tl.jit``) and in f32 with a ``tl.capture`` step, and the small transformer."""
    def make(out):
        runs = {}

        def keep(name, model, losses):
            np.savez(out / f"params-{name}.npz", *[np.asarray(a) for a in _pytree.leaves(model)])
            runs[name] = {"losses": losses, "params": str(out / f"params-{name}.npz")}
        for dtype in (np.float32, np.float64):
            x, y = dm.data(dtype)
            model, opt, state = dm.init(dtype)
            model, state, losses = dm.train(dm.make_step(opt), model, state, dm.schedule(), x, y)
            keep(np.dtype(dtype).name, model, losses)
        x, y = dm.data()
        model, opt, state = dm.init()
        model, state, losses = dm.train(dm.make_capture_step(opt, model, (x[:dm.BATCH], y[:dm.BATCH])), model, state,
                                        dm.schedule(), x, y)
        keep("capture", model, losses)
        ids, targets, vocab = cl.data()
        model, opt, state = cl.init(vocab)
        model, state, losses = dm.train(dm.make_step(opt, loss=cl.loss_fn), model, state, cl.schedule(len(ids)), ids,
                                        targets)
        keep("charlm", model, losses)
        return runs
    runs = _once(tmp_path_factory, "single", make)
    for run in runs.values():
        run["losses"] = np.array(run["losses"])
        stored = np.load(run["params"])
        run["params"] = [stored[f"arr_{k}"] for k in range(len(stored.files))]
    return runs


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-30)))


def _params_rel(npz_path, ref: list) -> float:
    got = np.load(npz_path)
    got = [got[f"arr_{k}"] for k in range(len(ref))]
    return max(float(np.max(np.abs(g - r))) / float(np.max(np.abs(r))) for g, r in zip(got, ref))


def test_data_parallel_matches_the_single_process_run(trained, single):
    r0, r1 = trained["results"]
    for name, rtol in (("float32", 1e-6), ("float64", 1e-12)):
        losses = np.array(r0[f"dp_{name}"])
        assert len(losses) == dm.STEPS and r1[f"dp_{name}"] == r0[f"dp_{name}"]   # one program, one result
        assert _rel(losses, single[name]["losses"]) < rtol, name
        assert _params_rel(trained["out"] / f"params-dp_{name}.npz", single[name]["params"]) < 10 * rtol, name
        assert losses[-1] < 0.5 * losses[0]                                      # it trains
    # f64: bit-identical to the same partitioned program on 2 devices of one process (the
    # rounding of the sum over the batch differs from one device's: that comparison has a tolerance)
    assert r0["dp_float64"] == trained["reference"]["dp_float64"]
    a, b = np.load(trained["out"] / "params-dp_float64.npz"), np.load(trained["ref"] / "params-dp_float64.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_negative_control_a_wrong_shard_is_seen(trained, single):
    """Process 1 feeding process 0's rows (a wrong shard) moves the losses far outside the tolerance."""
    wrong = np.array(trained["results"][0]["wrong_shard"])
    assert _rel(wrong, single["float32"]["losses"][:len(wrong)]) > 1e-3


def test_fsdp_holds_half_the_parameters_per_process(trained, single):
    r0, r1 = trained["results"]
    params = single["float32"]["params"]
    full = sum(a.nbytes for a in params)
    assert r0["fsdp_param_bytes"] == r1["fsdp_param_bytes"] == full // 2
    assert r0["dp_float32_param_bytes"] == full                                    # data parallel: replicated
    assert r0["fsdp_state_bytes"] == full + 4                                      # mu and nu halved, count whole
    assert _rel(r0["fsdp"], single["float32"]["losses"]) < 1e-6
    assert r1["fsdp"] == r0["fsdp"]
    # float32 parameters after the run: the sharded reductions round differently from one
    # device's, by 1.3e-5 on an AVX2-only host (below 1e-5 with AVX-512); a wrong shard moves
    # the losses by more than 1e-3 (the negative control above)
    assert _params_rel(trained["out"] / "params-fsdp.npz", params) < 5e-5


def test_a_capture_step_trains_data_parallel_like_the_single_process_run(trained, single):
    """``tl.capture(..., mesh=..., in_shardings=(P(), P("data")))``: one program across the processes,
    each feeding half of every batch, gives the one-device capture run's losses."""
    r0, r1 = trained["results"]
    losses = np.array(r0["capture_dp"])
    assert len(losses) == dm.STEPS and r1["capture_dp"] == r0["capture_dp"]
    assert _rel(losses, single["capture"]["losses"]) < 1e-6
    assert losses[-1] < 0.5 * losses[0]
    wrong = np.array(r0["capture_wrong_shard"])                   # the control: process 1 feeds process 0's rows
    assert _rel(wrong, single["capture"]["losses"][:len(wrong)]) > 1e-3


def test_fsdp_transformer_holds_half_the_parameters_per_process(trained, single):
    """The small transformer (embedding, GQA attention with RoPE, SwiGLU, RMSNorm, head) with FSDP-sharded
    parameters and AdamW state: half the bytes in each process, the one-process losses and parameters."""
    r0, r1 = trained["results"]
    params = single["charlm"]["params"]
    full = sum(a.nbytes for a in params)
    assert r0["charlm_param_bytes"] == r1["charlm_param_bytes"] == full // 2
    assert r0["charlm_state_bytes"] == full + 4                                   # mu and nu halved, count whole
    losses = np.array(r0["charlm_fsdp"])
    assert len(losses) == cl.STEPS and r1["charlm_fsdp"] == r0["charlm_fsdp"]
    assert _rel(losses, single["charlm"]["losses"]) < 1e-6
    # AdamW divides by sqrt(nu): float32 sums taken in another order (the sharded gradients) drift
    # the parameters a little more than the losses; 1.14e-5 on an AMD EPYC (Zen 4) host, < 1e-5 on Intel
    assert _params_rel(trained["out"] / "params-charlm_fsdp.npz", params) < 3e-5
    assert losses[-1] < losses[0]
    wrong = np.array(r0["charlm_wrong_shard"])                    # the control: process 1 feeds process 0's rows
    assert _rel(wrong, single["charlm"]["losses"][:len(wrong)]) > 1e-3


def test_a_program_or_input_mismatch_is_refused_by_name(trained):
    for r in trained["results"]:
        msg = r["mismatch"]
        assert msg.startswith("tlaloc.distributed: process"), msg
        assert "compile `train_step`" in msg and "differ" in msg
        assert "argument 19 `x`: float32[" in msg and "argument 20 `y`: int32[" in msg
        assert "float32[32, 64]" in msg and "float32[64, 64]" in msg
        host = r["host_mismatch"]                  # NumPy arguments differ: the model's weights
        assert host.startswith("tlaloc.distributed: process") and "inputs `train_step`" in host, host
        assert "argument 0 `" in host and "content sha256" in host and "tl.distributed.global_array" in host
        assert "argument 6 `" not in host          # the optimizer state is the same in both
        program = r["program_mismatch"]            # the same argument types, another learning rate
        assert program.startswith("tlaloc.distributed: process") and "compile `train_step`" in program, program
        assert "the same 22 parts, but the compile differs (sha256" in program


def test_the_launcher_prefixes_each_process_lines(trained):
    lines = trained["stdout"].splitlines()
    assert "[0] process 0 of 2 done" in lines and "[1] process 1 of 2 done" in lines


@pytest.fixture(scope="module")
def restored(trained, tmp_path_factory):
    def make(out):
        procs = _start_pair("restore", out, trained["out"] / "ckpt")
        killed = _kill_one_and_watch(procs, "step 3 ", victim=1)
        return {"results": _results(out), "killed": killed}
    return _once(tmp_path_factory, "restore", make)


def test_checkpoint_of_two_processes_restores_into_two(trained, restored):
    r0, r1 = restored["results"]
    assert r0["restored_step"] == 25
    assert r0["continued"] == r1["continued"] == trained["results"][0]["fsdp"][25:]     # identical, bit for bit
    manifest = json.loads((trained["out"] / "ckpt" / "manifest.json").read_text())
    assert manifest["num_processes"] == 2 and len(manifest["files"]) == 2
    sizes = sorted(os.path.getsize(trained["out"] / "ckpt" / f) for f in manifest["files"])
    assert sizes[1] - sizes[0] < 1024                  # each process wrote its half of every sharded array


def test_checkpoint_of_two_processes_into_one_reshards_only_when_asked(trained, restored, single):
    ckpt = trained["out"] / "ckpt"
    model, opt, state = dm.init()
    with pytest.raises(tl.ArgumentError, match=r"written by 2 processes, restoring into 1.*reshard=True"):
        dist.load_sharded(ckpt, (model, state))
    model, state, at = dist.load_sharded(ckpt, (model, state), reshard=True)
    saved = np.load(trained["out"] / "params-fsdp_at_checkpoint.npz")
    assert all(np.array_equal(a, saved[f"arr_{k}"]) for k, a in enumerate(_pytree.leaves(model)))
    x, y = dm.data()
    _, _, losses = dm.train(dm.make_step(opt), model, state, dm.schedule()[at:], x, y)
    assert _rel(losses, restored["results"][0]["continued"]) < 1e-6


def test_a_killed_process_stops_the_other_with_a_clear_error(restored):
    k = restored["killed"]
    assert k["returncode"] not in (None, 0), f"still running {k['seconds']:.0f} s after its peer was killed"
    assert "DistributedError: tlaloc.distributed: process 0 of 2: running `train_step`" in k["stderr"], k["stderr"]
    assert "another process of the run stopped" in k["stderr"]


def test_a_peer_that_dies_outside_a_collective_stops_the_other_by_heartbeat(tmp_path):
    k = _kill_one_and_watch(_start_pair("idle", tmp_path), "joined", victim=1)
    assert k["returncode"] not in (None, 0), f"still running {k['seconds']:.0f} s after its peer was killed"
    assert "the JAX distributed service detected fatal errors" in k["stderr"], k["stderr"][-3000:]
    assert "stopped sending heartbeats" in k["stderr"]
