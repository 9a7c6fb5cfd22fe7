"""tl.optim against torch.optim: the same gradients give the same parameters,
step after step (float32 and float64), for every optimizer and option."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is the test-only oracle here: pip install torch==2.13.0")
torch.set_num_threads(1)   # tiny ops: threads only add overhead (and contend on 2 cores)

from tlaloc import optim  # noqa: E402

STEPS = 12
TOL = {np.float32: 1e-6, np.float64: 1e-12}

CONFIGS = [
    ("sgd", lambda: optim.SGD(lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    ("sgd_momentum_dampening_wd", lambda: optim.SGD(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("sgd_nesterov", lambda: optim.SGD(lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3),
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3)),
    ("adam", lambda: optim.Adam(lr=1e-2), lambda p: torch.optim.Adam(p, lr=1e-2)),
    ("adam_l2_betas", lambda: optim.Adam(lr=3e-3, b1=0.8, b2=0.95, eps=1e-6, weight_decay=0.05),
     lambda p: torch.optim.Adam(p, lr=3e-3, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.05)),
    ("adamw", lambda: optim.AdamW(lr=1e-2), lambda p: torch.optim.AdamW(p, lr=1e-2)),
    ("adamw_wd", lambda: optim.AdamW(lr=3e-3, weight_decay=0.1, b2=0.98),
     lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.1, betas=(0.9, 0.98))),
    ("rmsprop", lambda: optim.RMSprop(lr=1e-2), lambda p: torch.optim.RMSprop(p, lr=1e-2)),
    ("rmsprop_centered_momentum_wd", lambda: optim.RMSprop(lr=1e-3, alpha=0.9, centered=True, momentum=0.5,
                                                           weight_decay=0.01),
     lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.9, centered=True, momentum=0.5, weight_decay=0.01)),
]


def _params(dtype, rng):
    return {"w": rng.standard_normal((3, 4)).astype(dtype), "b": rng.standard_normal((4,)).astype(dtype)}


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


def _run_both(make_ours, make_theirs, dtype, lr_torch_scheduler=None):
    rng = np.random.default_rng(0)
    params = _params(dtype, rng)
    grads_seq = [{k: rng.standard_normal(v.shape).astype(dtype) for k, v in params.items()} for _ in range(STEPS)]
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    topt = make_theirs([tp["b"], tp["w"]])
    sched = lr_torch_scheduler(topt) if lr_torch_scheduler else None
    opt = make_ours()
    state = opt.init(params)
    before = {k: v.copy() for k, v in params.items()}
    worst = 0.0
    for g in grads_seq:
        new, state = opt.update(params, g, state)
        for k in params:                                   # pure: the inputs are untouched
            assert np.array_equal(params[k], before[k])
        params, before = new, {k: v.copy() for k, v in new.items()}
        for k in tp:
            tp[k].grad = torch.tensor(g[k])
        topt.step()
        if sched:
            sched.step()
        for k in params:
            assert params[k].dtype == dtype
            worst = max(worst, _rel(params[k], tp[k].detach().numpy()))
    assert int(state.count) == STEPS
    return worst


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,ours,theirs", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_optimizer_matches_torch(name, ours, theirs, dtype):
    worst = _run_both(ours, theirs, dtype)
    assert worst <= TOL[dtype], f"{name}: relative error {worst:.3g}"


def test_schedule_as_lr_matches_torch_scheduler():
    sched = optim.cosine_with_warmup(1e-2, warmup_steps=3, total_steps=STEPS, start_factor=0.25, end_lr=1e-4)

    def theirs_sched(o):
        warm = torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, total_iters=3)
        cos = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=STEPS - 3, eta_min=1e-4)
        return torch.optim.lr_scheduler.SequentialLR(o, [warm, cos], milestones=[3])
    worst = _run_both(lambda: optim.AdamW(lr=sched, weight_decay=0.1), lambda p: torch.optim.AdamW(
        p, lr=1e-2, weight_decay=0.1), np.float64, theirs_sched)
    assert worst <= 1e-10


def test_control_wrong_hyperparameter_is_detected():
    """A 0.1% change of lr, or of beta2, lands outside the float32 tolerance."""
    worst = _run_both(lambda: optim.Adam(lr=1.001e-2), lambda p: torch.optim.Adam(p, lr=1e-2), np.float32)
    assert worst > 10 * TOL[np.float32]
    worst = _run_both(lambda: optim.Adam(lr=1e-2, b2=0.998), lambda p: torch.optim.Adam(p, lr=1e-2), np.float32)
    assert worst > TOL[np.float32]


def test_control_l2_is_not_decoupled_decay():
    worst = _run_both(lambda: optim.Adam(lr=3e-3, weight_decay=0.1), lambda p: torch.optim.AdamW(
        p, lr=3e-3, weight_decay=0.1), np.float64)
    assert worst > 1e-6


def test_structure_mismatch_is_refused():
    import tlaloc as tl
    opt = optim.Adam()
    p = {"w": np.zeros(3, np.float32)}
    with pytest.raises(tl.ArgumentError, match="structure"):
        opt.update(p, {"v": np.zeros(3, np.float32)}, opt.init(p))


def test_weight_decay_mask():
    opt = optim.AdamW(lr=0.1, weight_decay=0.5, mask=lambda p: {"w": True, "b": False})
    p = {"w": np.ones(2), "b": np.ones(2)}
    new, _ = opt.update(p, {"w": np.zeros(2), "b": np.zeros(2)}, opt.init(p))
    np.testing.assert_array_equal(new["w"], 0.95)          # decayed: 1 · (1 - 0.1 · 0.5)
    np.testing.assert_array_equal(new["b"], 1.0)           # masked out
