"""Schedules against torch.optim.lr_scheduler, clipping against
torch.nn.utils.clip_grad_norm_ / clip_grad_value_ (within 1e-6 relative)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is the test-only oracle here: pip install torch==2.13.0")
torch.set_num_threads(1)   # tiny ops: threads only add overhead (and contend on 2 cores)
S = torch.optim.lr_scheduler

import tlaloc as tl  # noqa: E402
from tlaloc import optim  # noqa: E402

TOL = 1e-6
N = 60
BASE = 0.1


def _torch_lrs(make, n=N):
    p = torch.nn.Parameter(torch.zeros(1))
    o = torch.optim.SGD([p], lr=BASE)
    s = make(o)
    out = []
    for _ in range(n):
        out.append(o.param_groups[0]["lr"])
        o.step()
        s.step()
    return np.array(out)


SCHEDULES = [
    ("step", optim.step_decay(BASE, step_size=7, gamma=0.5), lambda o: S.StepLR(o, step_size=7, gamma=0.5)),
    ("exponential", optim.exponential_decay(BASE, gamma=0.93), lambda o: S.ExponentialLR(o, gamma=0.93)),
    ("cosine", optim.cosine_decay(BASE, decay_steps=N, end_lr=1e-3),
     lambda o: S.CosineAnnealingLR(o, T_max=N, eta_min=1e-3)),
    ("cosine_with_warmup", optim.cosine_with_warmup(BASE, warmup_steps=10, total_steps=N, start_factor=0.1,
                                                    end_lr=1e-4),
     lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=10),
                                  S.CosineAnnealingLR(o, T_max=N - 10, eta_min=1e-4)], milestones=[10])),
    ("constant", optim.constant(BASE), lambda o: S.ConstantLR(o, factor=1.0)),
]


@pytest.mark.parametrize("name,ours,theirs", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedule_matches_torch(name, ours, theirs):
    mine = np.array([ours(k) for k in range(N)])
    ref = _torch_lrs(theirs)
    np.testing.assert_allclose(mine, ref, rtol=TOL, atol=0)


@pytest.mark.parametrize("name,ours,theirs", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedule_on_symbolic_steps_matches_python_ints(name, ours, theirs):
    """Inside a compiled step the count is an array: the array form of each closed form
    (run here through tl.jit's interpreter back end) gives the Python-int values."""
    def lr_of(step):
        return ours(step)
    f = tl.jit(lr_of, backend="interpreter")
    arr = [float(np.asarray(f(np.asarray(k, np.int32)))) for k in range(N)]
    np.testing.assert_allclose(arr, [ours(k) for k in range(N)], rtol=1e-12)


def test_control_warmup_off_by_one_is_detected():
    ours = optim.cosine_with_warmup(BASE, warmup_steps=11, total_steps=N, start_factor=0.1, end_lr=1e-4)
    ref = _torch_lrs(SCHEDULES[3][2])
    mine = np.array([ours(k) for k in range(N)])
    assert np.abs(mine - ref).max() / ref.max() > 100 * TOL


def _grads(dtype, scale):
    rng = np.random.default_rng(0)
    return {"a": (rng.standard_normal((5, 3)) * scale).astype(dtype),
            "b": (rng.standard_normal((7,)) * scale).astype(dtype)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("scale", [0.01, 10.0], ids=["below", "above"])
def test_clip_by_global_norm_matches_torch(scale, dtype):
    g = _grads(dtype, scale)
    ts = [torch.nn.Parameter(torch.zeros(v.shape, dtype=torch.from_numpy(v).dtype)) for v in g.values()]
    for p, v in zip(ts, g.values()):
        p.grad = torch.tensor(v)
    norm_t = torch.nn.utils.clip_grad_norm_(ts, max_norm=1.0)
    clipped, norm = optim.clip_by_global_norm(g, 1.0)
    np.testing.assert_allclose(norm, norm_t.numpy(), rtol=TOL)
    for v, p in zip(clipped.values(), ts):
        assert v.dtype == dtype
        np.testing.assert_allclose(v, p.grad.numpy(), rtol=TOL, atol=TOL * np.abs(p.grad.numpy()).max())
    if scale < 1:
        for k in g:
            np.testing.assert_array_equal(clipped[k], g[k])
    else:
        np.testing.assert_allclose(float(optim.global_norm(clipped)), 1.0, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_clip_by_value_matches_torch(dtype):
    g = _grads(dtype, 1.0)
    ts = [torch.nn.Parameter(torch.zeros(v.shape, dtype=torch.from_numpy(v).dtype)) for v in g.values()]
    for p, v in zip(ts, g.values()):
        p.grad = torch.tensor(v)
    torch.nn.utils.clip_grad_value_(ts, 0.5)
    clipped = optim.clip_by_value(g, 0.5)
    for v, p in zip(clipped.values(), ts):
        np.testing.assert_array_equal(v, p.grad.numpy())


def test_clip_works_on_modules():
    from tlaloc import nn
    lin = nn.Linear(3, 2, key=0)
    clipped, norm = optim.clip_by_global_norm(lin, 0.1)
    assert isinstance(clipped, nn.Linear)
    np.testing.assert_allclose(float(optim.global_norm(clipped)), 0.1, rtol=1e-5)
    assert float(norm) > 0.1
    _ = tl  # the public package imports cleanly with tl.optim
