"""20 AdamW steps of a tiny transformer LM (grouped-query attention, RoPE,
causal mask, GELU MLP, LayerNorm, gradient clipping) track PyTorch's losses
within 1e-5 relative, step by step, in float32."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is the test-only oracle here: pip install torch==2.13.0")
torch.set_num_threads(1)   # tiny ops: threads only add overhead (and contend on 2 cores)

import tlaloc as tl  # noqa: E402
from tlaloc import optim  # noqa: E402
from nn.models import TinyLM, lm_loss  # noqa: E402  (tests/nn/models.py)
from nn.oracle import TorchLM  # noqa: E402

STEPS = 20
VOCAB, B, T = 11, 4, 8


def _batches():
    rng = np.random.default_rng(0)
    seqs = rng.integers(0, VOCAB, (STEPS, B, T + 1))
    return [(s[:, :-1], s[:, 1:]) for s in seqs]


def _ours(model, opt, clip=1.0):
    step = tl.capture(model, _batches()[0], lm_loss)
    state = opt.init(model)
    losses = []
    for batch in _batches():
        loss, grads = step.run(model, batch)
        grads, _ = optim.clip_by_global_norm(grads, clip)
        model, state = opt.update(model, grads, state)
        losses.append(float(loss))
    return np.array(losses)


def _theirs(model, lr, weight_decay, clip=1.0):
    ref = TorchLM(model)
    opt = torch.optim.AdamW(ref.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for ids, targets in _batches():
        opt.zero_grad()
        logits = ref(torch.from_numpy(ids))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), torch.from_numpy(targets).reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return np.array(losses)


@pytest.fixture(scope="module")
def torch_losses():
    return _theirs(TinyLM(VOCAB, key=0), lr=3e-3, weight_decay=0.1)


def test_adamw_tracks_torch_for_20_steps(torch_losses):
    ours = _ours(TinyLM(VOCAB, key=0), optim.AdamW(lr=3e-3, weight_decay=0.1))
    rel = np.abs(ours - torch_losses) / np.abs(torch_losses)
    assert rel.max() <= 1e-5, f"step {rel.argmax()}: relative loss difference {rel.max():.3g}\n{ours}\n{torch_losses}"
    assert ours[-1] < ours[0]                     # and it learns


def test_control_lr_off_by_a_tenth_of_a_percent_is_detected(torch_losses):
    ours = _ours(TinyLM(VOCAB, key=0), optim.AdamW(lr=3e-3 * 1.001, weight_decay=0.1))
    rel = np.abs(ours - torch_losses) / np.abs(torch_losses)
    assert rel.max() > 1e-5
