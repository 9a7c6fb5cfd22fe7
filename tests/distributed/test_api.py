"""tlaloc.distributed in one process (no coordinator): the refusals, FSDP shardings, global arrays,
and the launcher. The runs across processes are in test_multiprocess.py."""
import io
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("jax", reason="tlaloc.distributed runs on jaxlib's distributed runtime")

import tlaloc as tl  # noqa: E402
from tlaloc import _pytree  # noqa: E402
from tlaloc import distributed as dist  # noqa: E402
from tlaloc import nn  # noqa: E402
from tlaloc.launch import launch  # noqa: E402

P = tl.sharding.PartitionSpec
ENV_NAMES = ("TLALOC_COORDINATOR_ADDRESS", "TLALOC_NUM_PROCESSES", "TLALOC_PROCESS_ID", "MASTER_ADDR", "MASTER_PORT",
             "WORLD_SIZE", "RANK")


def _env() -> dict:
    src = pathlib.Path(__file__).resolve().parents[2] / "src"
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture
def clean_env(monkeypatch):
    for k in ENV_NAMES:
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_initialize_names_what_is_missing(clean_env):
    with pytest.raises(tl.ArgumentError, match=r"coordinator \(or \$TLALOC_COORDINATOR_ADDRESS\), num_processes "
                                               r"\(or \$TLALOC_NUM_PROCESSES\).*tlaloc launch -n N"):
        dist.initialize()
    with pytest.raises(tl.ArgumentError, match=r"process_id \(or \$TLALOC_PROCESS_ID\) not given"):
        dist.initialize("127.0.0.1:1234", 2)


@pytest.mark.parametrize("args, message", [
    (("127.0.0.1:1", 2, 2), "process_id 2 is not below num_processes 2"),
    (("127.0.0.1:1", 0, 0), "num_processes must be >= 1, got 0"),
    (("127.0.0.1:1", "two", 0), "num_processes must be an int, got 'two'"),
    (("localhost", 2, 0), "coordinator must be 'host:port', got 'localhost'"),
])
def test_initialize_refuses_bad_values_by_name(clean_env, args, message):
    with pytest.raises(tl.ArgumentError, match=message):
        dist.initialize(*args)
    assert not dist.is_initialized()


def test_initialize_after_the_pjrt_client_exists_is_refused(clean_env):
    from tlaloc._runtime.pjrt import client
    client("cpu")
    with pytest.raises(tl.ArgumentError, match="call it before the first tl.jit call"):
        dist.initialize("127.0.0.1:1", 2, 0)
    assert not dist.is_initialized() and dist.process_count() == 1 and dist.process_index() == 0


def test_a_process_whose_run_never_forms_fails_by_name(tmp_path):
    """No process 0 at the coordinator: joining fails after ``init_timeout``, naming the run."""
    from tlaloc.launch import free_port
    port = free_port()
    code = f"from tlaloc import distributed as d; d.initialize('127.0.0.1:{port}', 2, 1, init_timeout=1)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 1
    assert (f"DistributedError: tlaloc.distributed.initialize: process 1 of 2 found no coordinator at "
            f"127.0.0.1:{port} within 1 s") in proc.stderr, proc.stderr[-2000:]


def test_the_environment_gives_the_values_ours_before_torchruns(clean_env):
    from tlaloc._runtime.distributed import _from_env
    for k, v in dict(MASTER_ADDR="10.0.0.1", MASTER_PORT="29500", WORLD_SIZE="4", RANK="3").items():
        clean_env.setenv(k, v)
    assert [_from_env(n) for n in ("coordinator", "num_processes", "process_id")] == ["10.0.0.1:29500", "4", "3"]
    clean_env.setenv("TLALOC_PROCESS_ID", "1")
    assert _from_env("process_id") == "1"


def test_fsdp_shardings_split_the_largest_divisible_axis():
    model = nn.MLP((64, 6, 5), key=0)                  # weights (6, 64) and (5, 6); biases (6,) and (5,)
    specs = dist.fsdp_shardings(model, tl.sharding.Mesh({"data": 2}))
    assert [tuple(s) for s in _pytree.leaves(specs)] == [(None, "data"), ("data",), (None, "data"), ()]
    specs4 = dist.fsdp_shardings(model, tl.sharding.Mesh({"data": 4}))
    assert [tuple(s) for s in _pytree.leaves(specs4)] == [(None, "data"), (), (), ()]
    state = tl.optim.Adam().init(model)
    assert tuple(dist.fsdp_shardings(state, tl.sharding.Mesh({"data": 2})).count) == ()
    with pytest.raises(tl.ArgumentError, match="axis 'model' is not in Mesh"):
        dist.fsdp_shardings(model, tl.sharding.Mesh({"data": 2}), axis="model")


def _loss(model, x):
    return (model(x) ** 2).mean()


def test_a_model_of_specs_is_read_as_shardings_by_jit():
    """``in_shardings`` may hold a model-shaped pytree of specs (what fsdp_shardings returns)."""
    model, x = nn.MLP((4, 6, 2), key=1), np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
    mesh = tl.sharding.Mesh({"data": 1})
    specs = dist.fsdp_shardings(model, mesh)
    sharded = tl.jit(tl.value_and_grad(_loss), mesh=mesh, in_shardings=(specs, P("data")))
    value, grads = sharded(model, x)
    want_value, want_grads = tl.jit(tl.value_and_grad(_loss))(model, x)
    assert float(value) == float(want_value)
    assert all(np.array_equal(a, b) for a, b in zip(_pytree.leaves(grads), _pytree.leaves(want_grads)))
    other = dist.fsdp_shardings(nn.Linear(4, 2, key=0), mesh)          # specs of another class
    with pytest.raises(tl.ArgumentError, match=r"in_shardings\[0\]: cannot read .* as shardings"):
        tl.jit(tl.value_and_grad(_loss), mesh=mesh, in_shardings=(other, P("data")))(model, x)


def test_global_array_gather_and_local_bytes_in_one_process():
    mesh = tl.sharding.Mesh({"data": 1})
    x = np.arange(6.0).reshape(3, 2)
    g = dist.global_array({"x": x, "n": np.int32(3)}, mesh, {"x": P("data"), "n": None})
    assert g["x"].shape == (3, 2) and dist.local_nbytes(g) == 48 + 4 == dist.local_nbytes({"x": x, "n": np.int32(3)})
    assert np.array_equal(dist.gather(g)["x"], x)
    placed = dist.put({"x": x, "n": np.int32(3)}, mesh, {"x": P("data"), "n": None})
    assert np.array_equal(dist.gather(placed)["x"], x) and int(dist.gather(placed)["n"]) == 3
    with pytest.raises(tl.ArgumentError, match="global_array: mesh axis 'model' is not in Mesh"):
        dist.global_array(x, mesh, P("model"))
    with pytest.raises(tl.ShapeError, match=r"global_array \(leaf 0\): PartitionSpec.* 1 entries for a value of rank 0"):
        dist.global_array((np.int32(3), x), mesh, P("data"))
    with pytest.raises(tl.ArgumentError, match="multi-process|devices"):
        dist.global_array(x, tl.sharding.Mesh({"data": 2}), P("data"))       # one device here


# -- the launcher ---------------------------------------------------------------------------------

SCRIPT = """
import os, pathlib, sys, time
i = int(os.environ["TLALOC_PROCESS_ID"])
print(f"hello from {i} of {os.environ['TLALOC_NUM_PROCESSES']} at {os.environ['TLALOC_COORDINATOR_ADDRESS']}",
      sys.argv[1:], flush=True)
ready = pathlib.Path(__file__).with_name("ready")
if i == 0:
    ready.touch()
if i == 1 and "--fail" in sys.argv:
    while not ready.exists():          # fail once process 0 has printed
        time.sleep(0.01)
    sys.exit(3)
time.sleep(float(os.environ.get("SLEEP", "0")))
"""


def test_the_launcher_stops_the_others_when_one_fails(tmp_path, monkeypatch):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    monkeypatch.setenv("SLEEP", "60")
    out, err = io.StringIO(), io.StringIO()
    status = launch([sys.executable, str(script), "--fail"], 2, stdout=out, stderr=err, grace=2, timeout=120)
    assert status == 3
    assert "process 1 exited with status 3; stopping the others" in err.getvalue()
    assert any(line.startswith("[0] hello from 0 of 2 at 127.0.0.1:") for line in out.getvalue().splitlines())


def test_the_launcher_stops_every_process_at_its_timeout(tmp_path, monkeypatch):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    monkeypatch.setenv("SLEEP", "60")
    err = io.StringIO()
    assert launch([sys.executable, str(script)], 2, stdout=io.StringIO(), stderr=err, grace=1, timeout=2) == 124
    assert "time is up" in err.getvalue()


def test_tlaloc_launch_passes_the_script_its_arguments(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "tlaloc.cli", "launch", "-n", "2", str(script), "--flag", "x", "-n",
                           "5"], capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for i in range(2):
        assert any(ln.startswith(f"[{i}] hello from {i} of 2") and ln.endswith("['--flag', 'x', '-n', '5']")
                   for ln in lines), proc.stdout


# -- tl.capture on a mesh -------------------------------------------------------------------------

def _batch_loss(model, batch):
    return _loss(model, batch)


def test_a_capture_step_on_a_mesh_gives_the_one_device_loss_and_gradients():
    """One process, a mesh of one device: the SPMD program of a capture step equals the plain one
    (across 2 processes: test_multiprocess.py)."""
    model, x = nn.MLP((4, 6, 2), key=1), np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
    mesh = tl.sharding.Mesh({"data": 1})
    on_mesh = tl.capture(model, x, _batch_loss, mesh=mesh, in_shardings=(dist.fsdp_shardings(model, mesh), P("data")))
    value, grads = on_mesh(model, dist.global_array(x, mesh, P("data")))
    want_value, want_grads = tl.capture(model, x, _batch_loss)(model, x)
    assert float(value) == float(want_value)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(_pytree.leaves(grads),
                                                                            _pytree.leaves(want_grads)))
    assert all(hasattr(g, "sharding") for g in _pytree.leaves(grads))


def test_capture_refuses_shardings_it_cannot_read_by_name():
    model, x = nn.MLP((4, 6, 2), key=1), np.zeros((3, 4), np.float32)
    mesh = tl.sharding.Mesh({"data": 1})
    with pytest.raises(tl.ArgumentError, match="in_shardings name mesh axes; pass the mesh too"):
        tl.capture(model, x, _batch_loss, in_shardings=(P(), P("data")))
    with pytest.raises(tl.ArgumentError, match=r"in_shardings must be a pair \(model shardings, batch shardings\)"):
        tl.capture(model, x, _batch_loss, mesh=mesh, in_shardings=P("data"))
    with pytest.raises(tl.ArgumentError, match="a mesh needs backend='xla'"):
        tl.capture(model, x, _batch_loss, backend="interpreter", mesh=mesh)
    with pytest.raises(tl.ArgumentError, match="capture: mesh must be a tl.sharding.Mesh, got dict"):
        tl.capture(model, x, _batch_loss, mesh={"data": 1})
    step = tl.capture(model, x, _batch_loss, mesh=mesh, in_shardings=(P(), P("model")))
    with pytest.raises(tl.ArgumentError, match=r"capture: in_shardings \(input `.*`\): mesh axis 'model' is not in"):
        step(model, x)
