"""Inputs that broadcasting or NumPy's wrap-around would turn into a silently wrong answer are
refused by the layer, by name, with the expected shape; PyTorch (the oracle) refuses them too."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import tlaloc as tl
from tlaloc import nn
from tlaloc.errors import ArgumentError, ShapeError


@pytest.mark.parametrize("layer, torch_layer", [
    (nn.LayerNorm(4, dtype=np.float64), torch.nn.LayerNorm(4, dtype=torch.float64)),
    (nn.RMSNorm(4, dtype=np.float64), torch.nn.RMSNorm(4, dtype=torch.float64)),
])
def test_norm_refuses_a_trailing_axis_that_only_broadcasts(layer, torch_layer):
    x = np.ones((3, 1))
    with pytest.raises(RuntimeError):
        torch_layer(torch.tensor(x))                          # the oracle refuses it too
    with pytest.raises(ShapeError, match=r"got shape \(3, 1\).*\(4,\)"):
        layer(x)                                               # before: a (3, 4) result of zeros / ones
    assert layer(np.ones((3, 4))).shape == (3, 4)              # control: the right shape runs


def test_embedding_refuses_ids_outside_the_table():
    emb = nn.Embedding(5, 2, key=0)
    t = torch.nn.Embedding(5, 2)
    for ids in (np.array([-1]), np.array([5])):
        with pytest.raises(IndexError):
            t(torch.tensor(ids))
        with pytest.raises(ArgumentError, match=r"ids must be in \[0, 5\)"):
            emb(ids)                                           # before: -1 wrapped to the last row
    for ids in (np.array([1.0]), np.array([True])):
        with pytest.raises(ArgumentError, match="integers"):
            emb(ids)
    np.testing.assert_array_equal(emb(np.array([4, 0])), np.asarray(emb.weight)[[4, 0]])   # control


def test_embedding_compiled_out_of_range_id_is_nan_not_another_row():
    emb = nn.Embedding(4, 2, key=0)

    def look(e, ids):
        return e(ids)
    out = np.asarray(tl.jit(look)(emb, np.array([5, -1, 3])))
    assert np.isnan(out[:2]).all()
    np.testing.assert_array_equal(out[2], np.asarray(emb.weight)[3])


@pytest.mark.parametrize("make, x, pattern", [
    (lambda: nn.Linear(4, 3, key=0), np.ones((2, 5), np.float32), r"Linear.*in_features=4.*\(2, 5\)"),
    (lambda: nn.Conv2d(3, 2, 3, key=0), np.ones((1, 8, 8, 3), np.float32), r"Conv2d.*C_in=3.*\(1, 8, 8, 3\)"),
    (lambda: nn.Conv2d(3, 2, 3, key=0), np.ones((3, 8, 8), np.float32), r"Conv2d.*\(3, 8, 8\)"),
    (lambda: nn.Conv2d(3, 2, 3, key=0), np.ones((1, 3, 2, 2), np.float32), r"Conv2d.*empty"),
    (lambda: nn.MultiHeadAttention(8, 2, key=0), np.ones((1, 4, 6), np.float32), r"MultiHeadAttention.*d_model=8"),
    (lambda: nn.MultiHeadAttention(8, 2, key=0), np.ones((4, 8), np.float32), r"MultiHeadAttention.*rank 2"),
])
def test_layers_name_the_expected_input_shape(make, x, pattern):
    with pytest.raises(ShapeError, match=pattern):
        make()(x)


def test_mse_loss_refuses_shapes_that_only_broadcast():
    pred, target = np.arange(4.0).reshape(4, 1), np.arange(4.0)
    with pytest.raises(ArgumentError, match=r"same shape, got \(4, 1\) and \(4,\)"):
        nn.mse_loss(pred, target)                              # before: 2.5 over a (4, 4) grid, not 0
    want = torch.nn.functional.mse_loss(torch.tensor(pred[:, 0]), torch.tensor(target)).item()
    assert float(nn.mse_loss(pred[:, 0], target)) == want == 0.0


def test_astype_converts_bfloat16_leaves():
    m = nn.Linear(2, 2, key=0, dtype=ml_dtypes.bfloat16)
    m32 = nn.astype(m, np.float32)
    assert m32.weight.dtype == np.float32 and m32.bias.dtype == np.float32       # before: left bfloat16
    np.testing.assert_array_equal(m32.weight, np.asarray(m.weight).astype(np.float32))
    assert nn.astype(nn.Linear(2, 2, key=0), ml_dtypes.bfloat16).weight.dtype == ml_dtypes.bfloat16


# -- the same refusals where the shape is known only when tl.jit specialises --------------------------

def _apply(m, x):
    return m(x)


def _mse(pred, target):
    return nn.mse_loss(pred, target)


@pytest.mark.parametrize("make", [lambda: nn.LayerNorm(4, dtype=np.float64), lambda: nn.RMSNorm(4, dtype=np.float64)],
                         ids=["LayerNorm", "RMSNorm"])
def test_norm_refuses_a_trailing_axis_that_only_broadcasts_under_jit_and_grad(make):
    layer = make()
    who = type(layer).__name__
    want = (rf"test_bad_inputs.py:\d+:\d+: {who}: the input must be \(\.\.\., \*normalized_shape=\(4,\)\), got shape "
            rf"\(3, 1\); its trailing axes must be \(4,\) \(the layer's sizes\); check the layer sizes or transpose")
    bad = np.ones((3, 1))
    with pytest.raises(ShapeError, match=want.split(": ", 1)[1]):
        layer(bad)                                            # eager (the earlier fix)
    with pytest.raises(ShapeError, match=want):
        tl.jit(_apply)(layer, bad)                            # before: a (3, 4) result, no error
    with pytest.raises(ShapeError, match=want.split(": ", 1)[1]):
        tl.grad(lambda m, x: tl.numpy.sum(m(x)))(layer, bad)  # before: a gradient, no error
    # control: a fitting shape gives eager's value, compiled and differentiated
    x = np.random.default_rng(0).normal(size=(3, 4))
    np.testing.assert_allclose(np.asarray(tl.jit(_apply)(layer, x)), layer(x), rtol=1e-13, atol=1e-13)

    def loss(m, x):
        return tl.numpy.sum(m(x) * np.arange(4.0))
    g, gj = tl.grad(loss)(layer, x), tl.jit(tl.grad(loss))(layer, x)
    np.testing.assert_allclose(np.asarray(gj.weight), g.weight, rtol=1e-13, atol=1e-13)


def test_mse_loss_refuses_shapes_that_only_broadcast_under_jit():
    pred, target = np.arange(4.0).reshape(4, 1), np.arange(4.0)
    want = (r"test_bad_inputs.py:\d+:\d+: mse_loss: pred and target must have the same shape, got \(4, 1\) and "
            r"\(4,\) \(broadcasting them would compare every pred with every target\); reshape one, e\.g\. "
            r"target\.reshape\(pred\.shape\)")
    with pytest.raises(ArgumentError, match=want):
        tl.jit(_mse)(pred, target)                            # before: 2.5 over a (4, 4) grid
    with pytest.raises(ArgumentError, match=want.split(": ", 1)[1]):
        tl.grad(_mse)(pred, target)
    with pytest.raises(ArgumentError, match=want):            # per example under vmap too
        tl.jit(tl.vmap(lambda p: nn.mse_loss(p, target)))(np.stack([pred, pred]))
    # control: same shapes give eager's (and PyTorch's) value
    p = pred[:, 0] + 0.5
    want_value = torch.nn.functional.mse_loss(torch.tensor(p), torch.tensor(target)).item()
    assert float(tl.jit(_mse)(p, target)) == float(nn.mse_loss(p, target)) == want_value == 0.25
    np.testing.assert_allclose(np.asarray(tl.jit(tl.grad(_mse))(p, target)), np.full(4, 0.25), rtol=1e-15)


# -- layer sizes: refused by name at construction, never a raw math/NumPy error or a silent rounding -------

_POSITIVE = r"must be a positive int"


@pytest.mark.parametrize("make, pattern", [
    (lambda: nn.Linear(-1, 2, key=0), rf"Linear: in_features {_POSITIVE} \(.*\), got -1; pass .*Linear\(64, 10\)"),
    (lambda: nn.Linear(0, 2, key=0), rf"Linear: in_features {_POSITIVE} .*got 0;"),       # was ZeroDivisionError
    (lambda: nn.Linear(2, -3, key=0), rf"Linear: out_features {_POSITIVE} .*got -3;"),
    (lambda: nn.Linear(2.5, 3, key=0), rf"Linear: in_features {_POSITIVE} .*got 2\.5 of type float; pass an int"),
    (lambda: nn.Linear(True, 3, key=0), rf"Linear: in_features {_POSITIVE} .*got True of type bool"),
    (lambda: nn.Embedding(-1, 2, key=0), rf"Embedding: num_embeddings {_POSITIVE} .*got -1;"),
    (lambda: nn.Embedding(3, 0, key=0), rf"Embedding: embedding_dim {_POSITIVE} .*got 0;"),   # was accepted
    (lambda: nn.LayerNorm(-1), rf"LayerNorm: normalized_shape {_POSITIVE} .*got -1; .*LayerNorm\(64\)"),
    (lambda: nn.LayerNorm(0), rf"LayerNorm: normalized_shape {_POSITIVE} .*got 0;"),          # was accepted
    (lambda: nn.LayerNorm(4.7), rf"LayerNorm: normalized_shape {_POSITIVE} .*got 4\.7 of type float"),  # was (4,)
    (lambda: nn.LayerNorm(()), r"LayerNorm: normalized_shape must name at least one axis .*got \(\)"),
    (lambda: nn.RMSNorm((2, -1)), rf"RMSNorm: normalized_shape\[1\] {_POSITIVE} .*got -1;"),
    (lambda: nn.Conv2d(-1, 2, 3, key=0), rf"Conv2d: in_channels {_POSITIVE} .*got -1;"),
    (lambda: nn.Conv2d(1, 0, 3, key=0), rf"Conv2d: out_channels {_POSITIVE} .*got 0;"),
    (lambda: nn.Conv2d(1, 2, 0, key=0), rf"Conv2d: kernel_size {_POSITIVE} .*got 0;"),
    (lambda: nn.Conv2d(1, 2, (3, 3, 3), key=0), r"Conv2d: kernel_size must be an int or an \(h, w\) pair"),
    (lambda: nn.Conv2d(1, 2, 3, stride=0, key=0), rf"Conv2d: stride {_POSITIVE} .*got 0; .*stride=1"),
    (lambda: nn.Conv2d(1, 2, 3, padding=-1, key=0), r"Conv2d: padding must be an int >= 0 .*got -1;"),
    (lambda: nn.Conv2d(1, 2, 3, dilation=(1, 0), key=0), rf"Conv2d: dilation\[1\] {_POSITIVE} .*got 0;"),
    (lambda: nn.MaxPool2d(0), rf"MaxPool2d: kernel_size {_POSITIVE} .*got 0;"),
    (lambda: nn.AvgPool2d(2, stride=0), rf"AvgPool2d: stride {_POSITIVE} .*got 0;"),
    (lambda: nn.MaxPool2d(3, padding=2), r"MaxPool2d: padding must be at most half .*padding=\(2, 2\) for "
                                         r"kernel_size=\(3, 3\).*lower the padding \(here <= 1\)"),
    (lambda: nn.AvgPool2d(2, padding=2), r"AvgPool2d: padding must be at most half"),
    (lambda: nn.MultiHeadAttention(-8, 2, key=0), rf"MultiHeadAttention: d_model {_POSITIVE} .*got -8;"),
    (lambda: nn.MultiHeadAttention(8, 0, key=0), rf"MultiHeadAttention: num_heads {_POSITIVE} .*got 0;"),
    (lambda: nn.MultiHeadAttention(8, 2, 0, key=0), rf"MultiHeadAttention: num_kv_heads {_POSITIVE} .*got 0;"),
    (lambda: nn.MultiHeadAttention(8, 2, head_dim=-4, key=0), rf"MultiHeadAttention: head_dim {_POSITIVE} .*got -4"),
    (lambda: nn.MultiHeadAttention(8, 8, key=0), r"MultiHeadAttention: head_dim must be even .*got head_dim=1; "
                                                 r"pass an even head_dim, or rope_theta=None"),
    (lambda: nn.MLP((3, -1, 2), key=0), rf"MLP: sizes\[1\] {_POSITIVE} .*got -1; .*MLP\(\(64, 128, 10\)\)"),
    (lambda: nn.MLP((3, 2.5, 2), key=0), rf"MLP: sizes\[1\] {_POSITIVE} .*got 2\.5 of type float"),  # was 2
    (lambda: nn.SwiGLU(4, 0, key=0), rf"SwiGLU: hidden {_POSITIVE} .*got 0;"),
    (lambda: nn.TransformerBlock(8, 2, mlp_hidden=-1, key=0), rf"TransformerBlock: mlp_hidden {_POSITIVE} .*got -1"),
    (lambda: nn.TransformerBlock(8, 2, dropout=1.5, key=0), r"TransformerBlock: dropout must be a probability in "
                                                            r"\[0, 1\] .*got 1\.5; pass e\.g\. dropout=0\.1"),
    (lambda: nn.Dropout("a"), r"Dropout: p must be a probability in \[0, 1\] .*got 'a'; pass e\.g\. Dropout\(0\.1\)"),
])
def test_layer_sizes_are_refused_by_name(make, pattern):
    with pytest.raises(ArgumentError, match=pattern):
        make()


def test_layer_sizes_that_fit_still_build():
    assert nn.Linear(np.int64(3), 2, key=0).weight.shape == (2, 3)          # NumPy ints are ints
    assert nn.LayerNorm([2, 3]).normalized_shape == (2, 3)
    assert nn.Conv2d(1, 2, (3, 1), padding=(1, 0), key=0).weight.shape == (2, 1, 3, 1)
    assert nn.MaxPool2d(2, padding=1).padding == (1, 1)                     # PyTorch allows half the kernel
    assert nn.MultiHeadAttention(8, 8, rope_theta=None, key=0).head_dim == 1


# -- integer ids and labels: never rounded, never a silent row of zeros ---------------------------------

def test_one_hot_refuses_labels_outside_the_classes_like_torch():
    for labels in (np.array([0, 3]), np.array([0, -1])):
        with pytest.raises(RuntimeError):
            torch.nn.functional.one_hot(torch.tensor(labels), 3)            # the oracle refuses them
        with pytest.raises(ArgumentError, match=r"one_hot: labels must be in \[0, 3\) for num_classes=3, but "
                                                r"labels\[1\] = -?\d .*check the label encoding"):
            nn.one_hot(labels, 3)                                            # before: a row of zeros
        with pytest.raises(ArgumentError, match=r"one_hot: labels must be in \[0, 3\)"):
            tl.grad(lambda x, y: tl.numpy.sum(x * nn.one_hot(y, 3)))(np.ones((2, 3)), labels)
    with pytest.raises(ArgumentError, match=r"one_hot: labels must be integer class indices, got dtype float64; "
                                            r"convert them with \.astype\(np\.int64\)"):
        nn.one_hot(np.array([0.5, 1.0]), 3)                                  # before: [0,0,0], [0,1,0]
    with pytest.raises(ArgumentError, match=r"test_bad_inputs.py:\d+:\d+: one_hot: labels must be integer"):
        tl.jit(lambda y: nn.one_hot(y, 3))(np.array([0.0, 1.0]))
    with pytest.raises(ArgumentError, match=r"one_hot: num_classes must be a positive int .*got 0; pass e\.g\."):
        nn.one_hot(np.array([0]), 0)
    # compiled code cannot raise: an out-of-range label is a row of NaN, not a row of zeros
    out = np.asarray(tl.jit(lambda y: nn.one_hot(y, 3))(np.array([2, 3, -1, 0])))
    assert np.isnan(out[1:3]).all()
    want = torch.nn.functional.one_hot(torch.tensor([2, 0]), 3).numpy()
    np.testing.assert_array_equal(out[[0, 3]], want)                         # control
    np.testing.assert_array_equal(nn.one_hot(np.array([2, 0]), 3), want)

    def f(x, y):                                                              # a symbolic class count still works
        return tl.numpy.sum(x * nn.one_hot(y, x.shape[-1], dtype=x.dtype))
    np.testing.assert_array_equal(tl.grad(f)(np.ones((2, 3)), np.array([2, 0])), want)


def test_float_ids_and_labels_are_refused_where_the_graph_is_compiled_or_run():
    emb = nn.Embedding(4, 2, key=0)
    ids = np.array([1.5, 2.0])
    with pytest.raises(ArgumentError, match=r"test_bad_inputs.py:\d+:\d+: Embedding: ids must be integers, got dtype "
                                            r"float64; convert them with \.astype\(np\.int64\)"):
        tl.jit(_apply)(emb, ids)                                              # before: row 1 for 1.5
    with pytest.raises(ArgumentError, match=r"Embedding: ids must be integers"):
        tl.grad(lambda e, i: tl.numpy.sum(e(i)))(emb, ids)                    # before: a raw TypeError
    with pytest.raises(ArgumentError, match=r"Embedding: ids must be in \[0, 4\) for num_embeddings=4, but ids\[1\] "
                                            r"= 4 .*negative ids do not wrap around"):
        tl.grad(lambda e, i: tl.numpy.sum(e(i)))(emb, np.array([1, 4]))      # before: a gradient
    logits = np.random.default_rng(0).normal(size=(2, 3))
    with pytest.raises(ArgumentError, match=r"test_bad_inputs.py:\d+:\d+: cross_entropy: labels must be integer "
                                            r"class indices, got dtype float64"):
        tl.jit(lambda lg, y: nn.cross_entropy(lg, y))(logits, np.array([0.0, 2.7]))   # before: a number
    # controls: integer ids and labels run, and agree with eager
    np.testing.assert_array_equal(np.asarray(tl.jit(_apply)(emb, np.array([1, 3]))), emb(np.array([1, 3])))
    g = tl.grad(lambda e, i: tl.numpy.sum(e(i)))(emb, np.array([1, 1]))
    np.testing.assert_array_equal(g.weight, [[0, 0], [2, 2], [0, 0], [0, 0]])
    y = np.array([0, 2])
    assert float(tl.jit(lambda lg, y: nn.cross_entropy(lg, y))(logits, y)) == pytest.approx(
        float(nn.cross_entropy(logits, y)), rel=1e-14)


# -- integer inputs to float layers, and the norms' eps -----------------------------------------------

@pytest.mark.parametrize("make", [lambda: nn.Linear(3, 2, key=0), lambda: nn.LayerNorm(3), lambda: nn.RMSNorm(3)],
                         ids=["Linear", "LayerNorm", "RMSNorm"])
def test_an_integer_input_to_a_float_layer_is_refused_as_torch_does(make):
    """Regression: NumPy promotes int64 against float32 weights to float64, so a float32 model
    silently answered in float64; torch refuses an integer input. Eager, under grad and jit."""
    layer = make()
    who = type(layer).__name__
    with pytest.raises(RuntimeError):
        torch_layer = {"Linear": torch.nn.Linear(3, 2), "LayerNorm": torch.nn.LayerNorm(3),
                       "RMSNorm": torch.nn.RMSNorm(3)}[who]
        torch_layer(torch.tensor([[1, 2, 3]]))                                   # the oracle refuses it
    pattern = rf"{who}: the input must be a floating-point array .*got int64; convert it first"
    with pytest.raises(ArgumentError, match=pattern):
        layer(np.array([[1, 2, 3]]))
    with pytest.raises(ArgumentError, match=pattern):
        tl.jit(lambda x: layer(x))(np.array([[1, 2, 3]]))
    out = layer(np.array([[1.0, 2.0, 3.0]], np.float32))                          # control: a float input
    assert out.dtype == np.float32


@pytest.mark.parametrize("eps", [-1e-5, float("nan"), float("inf"), "1e-5", True])
def test_a_norm_eps_that_is_not_a_finite_number_at_least_0_is_refused(eps):
    for make in (nn.LayerNorm, nn.RMSNorm):
        with pytest.raises(ArgumentError, match=rf"{make.__name__}: eps must be a finite number >= 0"):
            make(4, eps=eps)
    assert nn.LayerNorm(4, eps=0).eps == 0.0 and nn.RMSNorm(4, eps=1e-6).eps == 1e-6       # control
