"""Every tl.nn layer against PyTorch for the same weights: outputs, parameter
gradients and input gradients, in float32 and float64, with the gradient built
both by ``tl.grad`` (AST front end) and ``tl.capture`` (tracing)."""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import pytest

from .oracle import (TorchAttention, TorchBlock, TorchMLP, TorchSwiGLU, assert_close, gelu_tanh, linear_from,
                     named_leaves, norm_from, rel_err, rtol_for, t, torch, RTOL)

import tlaloc as tl
import tlaloc.numpy as tnp
from tlaloc import nn

DTYPES = [np.float32, np.float64]


def _rand(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


@dataclasses.dataclass
class Case:
    name: str
    make: Callable            # (dtype, rng) -> our module
    ref: Callable             # our module -> torch module
    input: Callable           # (rng, dtype) -> input array
    modes: tuple = ("grad", "capture")
    int_input: bool = False


def _torch_same(cls, **kw):
    """A torch layer with our layer's weights (fields named as torch's parameters)."""
    def build(ours):
        dtype = torch.from_numpy(np.asarray(ours.weight)).dtype
        m = cls(dtype=dtype, **kw)
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.copy_(t(getattr(ours, name)))
        return m
    return build


def _pool(cls, **kw):
    return lambda ours: cls(**kw)


def _affine(module, rng):
    """A norm layer with random (non-trivial) affine parameters."""
    changes = {"weight": _rand(rng, module.weight.shape, module.weight.dtype) + 1}
    if getattr(module, "bias", None) is not None:
        changes["bias"] = _rand(rng, module.bias.shape, module.bias.dtype)
    return module.replace(**changes)


def _x(*shape):
    return lambda rng, dt: _rand(rng, shape, dt)


RMS_EPS, LN_EPS = 1e-6, 1e-5


def _rms_eps_rows(rng, dt):
    """Rows where eps matters: mean(x²) ≈ eps, ≈ 10·eps, ordinary, and all zero
    (there the output is 0 and the input gradient ``weight·r/√eps`` is finite only through eps)."""
    x = rng.standard_normal((4, 6))
    x[0] *= np.sqrt(RMS_EPS / np.mean(x[0] ** 2))
    x[1] *= np.sqrt(10 * RMS_EPS / np.mean(x[1] ** 2))
    x[3] = 0.0
    return x.astype(dt)


def _ln_eps_rows(rng, dt):
    """LayerNorm rows where eps matters: variance ≈ eps about a mean of 0.5, a constant
    row (variance 0; 0.5 is exact in binary, so the mean is too), ordinary, and all zero."""
    x = rng.standard_normal((4, 6))
    x[0] = 0.5 + (x[0] - x[0].mean()) * np.sqrt(LN_EPS / np.var(x[0]))
    x[1] = 0.5
    x[3] = 0.0
    return x.astype(dt)


CASES = [
    Case("linear", lambda dt, r: nn.Linear(5, 4, dtype=dt, key=1), linear_from, _x(3, 7, 5)),
    Case("linear_nobias", lambda dt, r: nn.Linear(5, 4, bias=False, dtype=dt, key=2), linear_from, _x(6, 5)),
    Case("embedding", lambda dt, r: nn.Embedding(10, 4, dtype=dt, key=3),
         _torch_same(torch.nn.Embedding, num_embeddings=10, embedding_dim=4),
         lambda rng, dt: rng.integers(0, 10, (3, 5)), int_input=True),
    Case("layernorm", lambda dt, r: _affine(nn.LayerNorm(6, dtype=dt), r), norm_from, _x(2, 3, 6)),
    Case("layernorm_2d_nobias", lambda dt, r: _affine(nn.LayerNorm((3, 4), eps=1e-3, bias=False, dtype=dt), r),
         lambda o: _torch_same(torch.nn.LayerNorm, normalized_shape=(3, 4), eps=1e-3, bias=False)(o), _x(5, 3, 4)),
    Case("rmsnorm", lambda dt, r: _affine(nn.RMSNorm(6, dtype=dt), r), norm_from, _x(4, 6)),
    Case("rmsnorm_eps_rows", lambda dt, r: _affine(nn.RMSNorm(6, eps=RMS_EPS, dtype=dt), r), norm_from,
         _rms_eps_rows),
    Case("layernorm_eps_rows", lambda dt, r: _affine(nn.LayerNorm(6, eps=LN_EPS, dtype=dt), r), norm_from,
         _ln_eps_rows),
    Case("conv", lambda dt, r: nn.Conv2d(3, 4, 3, padding=1, dtype=dt, key=4),
         _torch_same(torch.nn.Conv2d, in_channels=3, out_channels=4, kernel_size=3, padding=1), _x(2, 3, 6, 7)),
    Case("conv_stride_dilation", lambda dt, r: nn.Conv2d(2, 3, (3, 2), stride=(2, 1), padding=(1, 2),
                                                           dilation=(1, 2), dtype=dt, key=5),
         _torch_same(torch.nn.Conv2d, in_channels=2, out_channels=3, kernel_size=(3, 2), stride=(2, 1),
                     padding=(1, 2), dilation=(1, 2)), _x(2, 2, 7, 6)),
    Case("maxpool", lambda dt, r: nn.MaxPool2d(2), _pool(torch.nn.MaxPool2d, kernel_size=2), _x(2, 3, 6, 6)),
    Case("maxpool_stride_pad", lambda dt, r: nn.MaxPool2d(3, stride=2, padding=1),
         _pool(torch.nn.MaxPool2d, kernel_size=3, stride=2, padding=1), _x(2, 2, 7, 5)),
    Case("avgpool", lambda dt, r: nn.AvgPool2d(2), _pool(torch.nn.AvgPool2d, kernel_size=2), _x(2, 3, 6, 6)),
    Case("avgpool_stride_pad", lambda dt, r: nn.AvgPool2d(3, stride=2, padding=1),
         _pool(torch.nn.AvgPool2d, kernel_size=3, stride=2, padding=1), _x(2, 2, 7, 5)),
    Case("flatten", lambda dt, r: nn.Flatten(), _pool(torch.nn.Flatten), _x(2, 3, 4, 5), modes=("capture",)),
    Case("mlp_gelu", lambda dt, r: nn.MLP((5, 8, 7, 3), activation=nn.gelu, dtype=dt, key=6),
         lambda o: TorchMLP(o, torch.nn.functional.gelu), _x(4, 5)),
    Case("mlp_gelu_tanh", lambda dt, r: nn.MLP((5, 8, 7, 3), activation=nn.gelu_tanh, dtype=dt, key=6),
         lambda o: TorchMLP(o, gelu_tanh), _x(4, 5)),
    Case("mlp_relu", lambda dt, r: nn.MLP((5, 8, 3), dtype=dt, key=7),
         lambda o: TorchMLP(o, torch.relu), _x(4, 5)),
    Case("swiglu", lambda dt, r: nn.SwiGLU(6, 10, dtype=dt, key=8), TorchSwiGLU, _x(2, 3, 6)),
    Case("attention_gqa_rope_causal", lambda dt, r: nn.MultiHeadAttention(16, 4, 2, dtype=dt, key=9),
         TorchAttention, _x(2, 5, 16)),
    Case("attention_mqa_bias", lambda dt, r: nn.MultiHeadAttention(12, 3, 1, head_dim=6, bias=True,
                                                                   dtype=dt, key=10),
         TorchAttention, _x(2, 4, 12)),
    Case("attention_full_norope", lambda dt, r: nn.MultiHeadAttention(8, 2, rope_theta=None, causal=False,
                                                                      dtype=dt, key=11),
         TorchAttention, _x(3, 4, 8)),
    Case("block_gelu_layernorm", lambda dt, r: nn.TransformerBlock(16, 4, 2, dtype=dt, key=12),
         TorchBlock, _x(2, 5, 16)),
    Case("block_swiglu_rmsnorm", lambda dt, r: nn.TransformerBlock(16, 4, 1, mlp="swiglu", norm="rmsnorm",
                                                                   bias=False, dtype=dt, key=13),
         TorchBlock, _x(2, 5, 16)),
]


def _ours(case, module, x, r, mode):
    """(out, param grads, input grad) from tlaloc."""
    out = module(x)
    if mode == "grad":
        def loss(m, x, r):
            return tnp.sum(m(x) * r)
        if case.int_input:
            return out, tl.grad(loss)(module, x, r), None
        gm, gx = tl.grad(loss, argnums=(0, 1))(module, x, r)
        return out, gm, gx

    def loss_c(mx, r):
        m, x = mx
        return tnp.sum(m(x) * r)
    if case.int_input:
        step = tl.capture((module, x), r, loss_c)
        _, (gm, _) = step.run((module, x), r)
        return out, gm, None
    # integer inputs cannot be in the differentiated pytree; float ones ride along with the model
    step = tl.capture((module, x), r, loss_c)
    _, (gm, gx) = step.run((module, x), r)
    return out, gm, gx


def _theirs(case, module, x, r):
    ref = case.ref(module)
    xt = t(x, grad=not case.int_input)
    out = ref(xt)
    (out * t(r)).sum().backward()
    grads = {name: p.grad for name, p in ref.named_parameters()}
    return out, grads, (None if case.int_input else xt.grad)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_layer_matches_torch(case, dtype):
    rng = np.random.default_rng(0)
    module = case.make(dtype, rng)
    x = case.input(rng, dtype)
    out0 = module(x)
    r = _rand(np.random.default_rng(1), np.shape(out0), dtype)
    out_t, grads_t, gx_t = _theirs(case, module, x, r)
    for mode in case.modes:
        out, gm, gx = _ours(case, module, x, r, mode)
        assert_close(out, out_t, f"{case.name} output")
        ours = named_leaves(gm)
        assert sorted(ours) == sorted(grads_t), f"{case.name}: parameters {sorted(ours)} vs torch {sorted(grads_t)}"
        for name, g in ours.items():
            assert_close(g, grads_t[name], f"{case.name} [{mode}] d/d{name}")
        if gx_t is not None:
            assert_close(gx, gx_t, f"{case.name} [{mode}] d/dx")


# -- PyTorch's own MultiheadAttention (a second, independent oracle) ---------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_torch_multiheadattention(causal):
    rng = np.random.default_rng(2)
    ours = nn.MultiHeadAttention(12, 3, bias=True, rope_theta=None, causal=causal, dtype=np.float64, key=14)
    ref = torch.nn.MultiheadAttention(12, 3, bias=True, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(t(np.concatenate([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])))
        ref.in_proj_bias.copy_(t(np.concatenate([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias])))
        ref.out_proj.weight.copy_(t(ours.o_proj.weight))
        ref.out_proj.bias.copy_(t(ours.o_proj.bias))
    x = _rand(rng, (2, 5, 12), np.float64)
    r = _rand(rng, (2, 5, 12), np.float64)
    xt = t(x, grad=True)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64) if causal else None
    out_t, _ = ref(xt, xt, xt, attn_mask=mask, need_weights=False, is_causal=causal)
    (out_t * t(r)).sum().backward()

    def loss(m, x, r):
        return tnp.sum(m(x) * r)
    gm, gx = tl.grad(loss, argnums=(0, 1))(ours, x, r)
    assert_close(ours(x), out_t, "output")
    assert_close(gx, xt.grad, "d/dx")
    assert_close(np.concatenate([gm.q_proj.weight, gm.k_proj.weight, gm.v_proj.weight]), ref.in_proj_weight.grad,
                 "d/d in_proj_weight")
    assert_close(np.concatenate([gm.q_proj.bias, gm.k_proj.bias, gm.v_proj.bias]), ref.in_proj_bias.grad,
                 "d/d in_proj_bias")
    assert_close(gm.o_proj.weight, ref.out_proj.weight.grad, "d/d out_proj.weight")


# -- activations and losses ---------------------------------------------------------------------------

def _gelu_none(x):
    return nn.gelu(x, approximate="none")


def _gelu_tanh_kw(x):
    return nn.gelu(x, approximate="tanh")


ACTIVATIONS = [
    ("relu", nn.relu, torch.relu),
    ("gelu", nn.gelu, torch.nn.functional.gelu),
    ("gelu_none", _gelu_none, torch.nn.functional.gelu),
    ("gelu_tanh", nn.gelu_tanh, gelu_tanh),
    ("gelu_tanh_kw", _gelu_tanh_kw, gelu_tanh),
    ("silu", nn.silu, torch.nn.functional.silu),
    ("sigmoid", nn.sigmoid, torch.sigmoid),
    ("tanh", nn.tanh, torch.tanh),
    ("softmax", nn.softmax, lambda x: torch.softmax(x, -1)),
    ("log_softmax", nn.log_softmax, lambda x: torch.log_softmax(x, -1)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name,ours,theirs", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_matches_torch(name, ours, theirs, dtype):
    rng = np.random.default_rng(3)
    x = _rand(rng, (4, 9), dtype, scale=3.0)
    x[0, :3] = [0.0, -0.0, 1e-3]                    # relu's kink: derivative 0 at 0, as PyTorch
    r = _rand(rng, (4, 9), dtype)

    def loss(x, r):
        return tnp.sum(ours(x) * r)
    xt = t(x, grad=True)
    (theirs(xt) * t(r)).sum().backward()
    assert_close(ours(x), theirs(t(x)), f"{name} value")
    assert_close(tl.grad(loss)(x, r), xt.grad, f"{name} grad")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_match_torch(reduction, dtype):
    rng = np.random.default_rng(4)
    logits = _rand(rng, (3, 4, 7), dtype, scale=2.0)
    labels = rng.integers(0, 7, (3, 4))
    target = _rand(rng, (3, 4, 7), dtype)
    lt = t(logits, grad=True)
    ce_t = torch.nn.functional.cross_entropy(lt.reshape(-1, 7), t(labels).reshape(-1), reduction=reduction)
    mse_t = torch.nn.functional.mse_loss(lt, t(target), reduction=reduction)
    ce, mse = nn.cross_entropy(logits, labels, reduction), nn.mse_loss(logits, target, reduction)
    assert_close(np.reshape(ce, ce_t.shape), ce_t, "cross_entropy")
    assert_close(mse, mse_t, "mse_loss")
    if reduction == "mean":
        (ce_t + mse_t).backward()

        def loss(z, labels, target):
            return nn.cross_entropy(z, labels) + nn.mse_loss(z, target)
        assert_close(tl.grad(loss)(logits, labels, target), lt.grad, "d(ce + mse)/dlogits")


# -- negative controls: the tolerance catches real faults ---------------------------------------------

def test_control_perturbed_weight_is_detected():
    """One weight off by 1e-3 relative: the comparison used above must fail."""
    lin = nn.Linear(5, 4, dtype=np.float32, key=1)
    x = _rand(np.random.default_rng(5), (3, 5), np.float32)
    w = lin.weight.copy()
    w[1, 2] *= 1 + 1e-3
    ref = linear_from(lin.replace(weight=w))
    with pytest.raises(AssertionError, match="relative error"):
        assert_close(lin(x), ref(t(x)), "perturbed")


def test_control_gelu_exact_differs_from_tanh():
    """PyTorch's default (erf) GELU differs from the tanh form by more than the tolerance, both ways."""
    x = np.linspace(-4, 4, 101)
    assert rel_err(nn.gelu_tanh(x), torch.nn.functional.gelu(t(x))) > 10 * RTOL
    assert rel_err(nn.gelu(x), gelu_tanh(t(x))) > 10 * RTOL


def test_control_wrong_kv_head_mapping_is_detected():
    """Tiling key/value heads instead of grouping them is caught (the GQA mapping matters)."""
    att = nn.MultiHeadAttention(16, 4, 2, dtype=np.float64, key=9)
    x = _rand(np.random.default_rng(6), (2, 5, 16), np.float64)
    assert rel_err(att(x), TorchAttention(att, kv_layout="tile")(t(x)).detach().numpy()) > 100 * RTOL


def test_control_causal_mask_matters():
    att = nn.MultiHeadAttention(8, 2, dtype=np.float64, key=11)
    full = att.replace(causal=False)
    x = _rand(np.random.default_rng(7), (2, 4, 8), np.float64)
    assert rel_err(full(x), TorchAttention(att)(t(x)).detach().numpy()) > 100 * RTOL
    # ... while the last position, which sees every key either way, agrees
    assert rel_err(full(x)[:, -1], att(x)[:, -1]) < 1e-12


def test_control_layernorm_eps_is_detected():
    ln = nn.LayerNorm(6, eps=1e-5, dtype=np.float64)
    x = _rand(np.random.default_rng(8), (4, 6), np.float64, scale=0.05)
    ref = torch.nn.LayerNorm(6, eps=1e-3, dtype=torch.float64)
    assert rel_err(ln(x), ref(t(x)).detach().numpy()) > 100 * RTOL


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm"])
def test_control_norm_eps_dropped_is_detected(kind, dtype):
    """A norm that drops its eps (the layer with eps=0 against torch with the real eps)
    fails the dtype's tolerance on eps-sensitive rows, by at least 100x; in float64
    also on ordinary rows (mean(x²) ≈ 1, where the fault is only ≈ eps/2 = 5e-7)."""
    rng = np.random.default_rng(9)
    ours = (nn.RMSNorm(6, eps=RMS_EPS, dtype=dtype) if kind == "rmsnorm"
            else nn.LayerNorm(6, eps=LN_EPS, dtype=dtype))
    ours = _affine(ours, rng)
    rows = (_rms_eps_rows if kind == "rmsnorm" else _ln_eps_rows)(rng, dtype)[[0, 2]]   # finite without eps
    ref = norm_from(ours)
    dropped = ours.replace(eps=0.0)
    assert rel_err(ours(rows), ref(t(rows)).detach().numpy()) <= rtol_for(dtype)
    assert rel_err(dropped(rows), ref(t(rows)).detach().numpy()) > 100 * rtol_for(dtype)
    if dtype == np.float64:
        ordinary = _rand(rng, (5, 6), dtype)
        assert rel_err(dropped(ordinary), ref(t(ordinary)).detach().numpy()) > 100 * rtol_for(dtype)


def test_control_float64_tolerance_catches_a_1e9_weight_fault():
    """In float64 one weight off by 1e-9 relative is caught (the old shared 1e-5 passed faults 10^4x larger)."""
    lin = nn.Linear(5, 4, dtype=np.float64, key=1)
    x = _rand(np.random.default_rng(5), (3, 5), np.float64)
    w = lin.weight.copy()
    w[1, 2] *= 1 + 1e-9
    with pytest.raises(AssertionError, match="relative error"):
        assert_close(lin(x), linear_from(lin.replace(weight=w))(t(x)), "perturbed")
