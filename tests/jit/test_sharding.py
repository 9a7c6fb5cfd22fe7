"""Sharding with Shardy and XLA's SPMD partitioner on 8 virtual CPU devices.

The checks run in one subprocess (``tests/jit/spmd_check.py``) because the
device count is fixed when jax starts its CPU backend; the rest of the suite
keeps one device. Here, without a mesh of 8 devices: the emitted annotations
and the refusals.
"""
import json
import os
import subprocess
import sys
import pathlib

import numpy as np
import pytest

import tlaloc as tl
from tlaloc import sharding as shd

P = shd.PartitionSpec
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spmd():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "tests.jit.spmd_check"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["check"]] = r
    return results


def _ok(spmd, name):
    r = spmd[name]
    assert r["ok"], r.get("traceback", r)
    return r


def test_eight_virtual_devices(spmd):
    assert _ok(spmd, "devices")["devices"] == 8


@pytest.mark.parametrize("name", ["mlp_model_sharded", "mlp_replicated"])
def test_sharded_training_step_equals_single_device(spmd, name):
    r = _ok(spmd, name)
    assert r["max_rel"] < 1e-12, r                  # float64: SPMD == one device, three steps
    assert r["loss_decreases"]
    assert r["mesh_in_text"] and r["num_partitions_8"] and r["sdy_shardings"] > 0
    assert r["w1_devices"] == 8
    assert r["collectives"], "the partitioned program should communicate (all-reduce of the gradients)"
    assert r["w1_shard_shape"] == ([8, 8] if name == "mlp_model_sharded" else [8, 16])


def test_named_axes_map_onto_mesh_axes(spmd):
    r = _ok(spmd, "axis_rules")
    assert r["max_rel"] < 1e-12
    assert r["x_sharded_on_data"] and r["w_sharded_on_model"]
    assert r["out_shard_shape"] == [4, 3]            # (16, 6) split 4 x 2


def test_bad_specs_are_refused_by_name(spmd):
    msgs = _ok(spmd, "bad_specs")["messages"]
    assert "mesh axis 'nope' is not in" in msgs[0]
    assert "shards two axes of one value" in msgs[1]
    assert "has 3 entries for a value of rank 2" in msgs[2]


# -- in this process (one device) ---------------------------------------------------------------

def f(x, w):
    return np.tanh(x @ w)


def test_shardy_text_without_compiling():
    mesh = shd.Mesh({"data": 4, "model": 2})
    text = tl.jit(f, mesh=mesh, in_shardings=(P("data"), P(None, "model")),
                  out_shardings=P("data", "model")).lower(np.ones((8, 4)), np.ones((4, 6))).as_text()
    assert 'sdy.mesh @mesh = <["data"=4, "model"=2]>' in text
    assert '%arg0: tensor<8x4xf64> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}' in text
    assert '-> (tensor<8x6xf64> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {"model"}]>})' in text
    assert "mhlo.num_partitions = 8" in text


def test_a_mesh_larger_than_the_machine_is_refused():
    import jax
    n = len(jax.devices("cpu"))
    mesh = shd.Mesh({"data": n + 1})
    with pytest.raises(tl.ArgumentError, match="xla_force_host_platform_device_count"):
        tl.jit(f, mesh=mesh, in_shardings=(P("data"), None))(np.ones((n + 1, 2)), np.ones((2, 3)))


def test_shardings_need_a_mesh_and_a_mesh_needs_xla():
    with pytest.raises(tl.ArgumentError, match="pass the mesh too"):
        tl.jit(f, in_shardings=(P("data"), None))
    with pytest.raises(tl.ArgumentError, match="backend='xla'"):
        tl.jit(f, backend="interpreter", mesh=shd.Mesh({"data": 2}))


def test_mesh_and_spec_validation():
    with pytest.raises(tl.ArgumentError, match="positive int"):
        shd.Mesh({"data": 0})
    with pytest.raises(tl.ArgumentError, match="must be None, a mesh axis name"):
        P(3)
    with pytest.raises(tl.ArgumentError, match="2 positional arguments"):
        tl.jit(f, mesh=shd.Mesh({"data": 2}), in_shardings=(P("data"),)).lower(np.ones((2, 2)), np.ones((2, 2)))
