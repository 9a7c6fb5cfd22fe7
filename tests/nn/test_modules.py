"""tl.nn without an oracle: modules are frozen pytrees, initializers follow
PyTorch's distributions, dropout is explicit and exact, errors say what to do."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp
from tlaloc import _pytree, nn
from tlaloc import random as tr
from tlaloc.errors import ArgumentError, TlalocError


# -- modules are frozen dataclasses and pytrees -------------------------------------------------------

def test_module_is_frozen_pytree():
    lin = nn.Linear(3, 4, key=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lin.weight = np.zeros((4, 3))
    leaves, td = _pytree.flatten(lin)
    assert [l.shape for l in leaves] == [(4, 3), (4,)]            # static fields are structure, not leaves
    back = _pytree.unflatten(td, leaves)
    assert type(back) is nn.Linear and back.in_features == 3 and back.weight is lin.weight
    assert _pytree.flatten(nn.Linear(3, 4, key=1))[1] == td        # same hyperparameters, same structure
    assert _pytree.flatten(nn.Linear(3, 5, key=1))[1] != td


def test_replace_and_repr():
    lin = nn.Linear(3, 4, key=0)
    w = np.ones((4, 3), np.float32)
    new = lin.replace(weight=w)
    assert new.weight is w and new.bias is lin.bias and lin.weight is not w
    with pytest.raises(ArgumentError, match="no field"):
        lin.replace(wieght=w)
    assert repr(lin) == "Linear(weight=float32[4, 3], bias=float32[4], in_features=3, out_features=4)"


def test_tree_of_modules_and_helpers():
    seq = nn.Sequential(nn.Linear(3, 4, key=0), nn.relu, nn.Linear(4, 2, key=1))
    assert isinstance(seq[1], nn.Lambda) and len(seq) == 3
    assert nn.num_params(seq) == 3 * 4 + 4 + 4 * 2 + 2
    host = nn.to_numpy(seq)
    assert type(host) is nn.Sequential and all(type(l) is np.ndarray for l in _pytree.leaves(host))
    f64 = nn.astype(seq, np.float64)
    assert all(l.dtype == np.float64 for l in _pytree.leaves(f64))
    x = np.random.default_rng(0).standard_normal((5, 3))
    np.testing.assert_allclose(f64(x), seq[2](nn.relu(seq[0](x.astype(np.float32)))), rtol=1e-6)


# -- initializers: PyTorch's distributions, reproducible from the key ---------------------------------

def test_linear_and_conv_init_bounds():
    lin = nn.Linear(400, 300, key=0)
    b = 1 / math.sqrt(400)
    assert np.abs(lin.weight).max() <= b and np.abs(lin.bias).max() <= b
    assert abs(lin.weight.std() - b / math.sqrt(3)) < 0.01 * b             # U(-b, b) has std b/√3
    conv = nn.Conv2d(8, 16, (3, 5), key=1)
    bc = 1 / math.sqrt(8 * 3 * 5)
    assert np.abs(conv.weight).max() <= bc and abs(conv.weight.std() - bc / math.sqrt(3)) < 0.03 * bc
    assert np.abs(conv.bias).max() <= bc


def test_embedding_and_norm_init():
    emb = nn.Embedding(500, 200, key=0)
    assert abs(emb.weight.mean()) < 0.01 and abs(emb.weight.std() - 1) < 0.01
    ln = nn.LayerNorm(7)
    np.testing.assert_array_equal(ln.weight, 1)
    np.testing.assert_array_equal(ln.bias, 0)
    assert nn.RMSNorm(4).eps == np.finfo(np.float32).eps and nn.RMSNorm(4, dtype=np.float64).eps == np.finfo(float).eps


def test_init_is_reproducible_and_key_sensitive():
    a, b, c = nn.Linear(5, 6, key=3), nn.Linear(5, 6, key=tr.key(3)), nn.Linear(5, 6, key=4)
    np.testing.assert_array_equal(a.weight, b.weight)
    assert not np.array_equal(a.weight, c.weight)
    assert not np.array_equal(a.weight[:, :1].ravel()[:5], a.bias[:5])  # weight and bias keys differ


def test_missing_or_bad_key_is_refused():
    with pytest.raises(ArgumentError, match="needs `key=`"):
        nn.Linear(3, 4)
    with pytest.raises(ArgumentError, match="uint32"):
        nn.Linear(3, 4, key=np.zeros(3))


def test_bad_hyperparameters_are_refused():
    with pytest.raises(ArgumentError, match="multiple of"):
        nn.MultiHeadAttention(16, 4, 3, key=0)
    with pytest.raises(ArgumentError, match="divisible"):
        nn.MultiHeadAttention(10, 4, key=0)
    with pytest.raises(ArgumentError, match="gelu"):
        nn.TransformerBlock(8, 2, mlp="relu", key=0)
    with pytest.raises(ArgumentError, match="approximate must be 'none'.*got 'erf'"):
        nn.gelu(np.zeros(3), approximate="erf")


# -- dropout: explicit keys, exact scaling ----------------------------------------------------------

def test_dropout_is_exact_and_reproducible():
    drop = nn.Dropout(0.25)
    x = np.ones((200, 100), np.float32)
    y = drop(x, key=tr.key(1))
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_array_equal(y[kept], np.float32(1 / 0.75))
    np.testing.assert_array_equal(drop(x, key=tr.key(1)), y)
    assert not np.array_equal(drop(x, key=tr.key(2)), y)
    assert drop(x, inference=True) is x and nn.Dropout(0.0)(x) is x
    np.testing.assert_array_equal(nn.Dropout(1.0)(x, key=tr.key(0)), 0)
    with pytest.raises(ArgumentError, match="needs `key=`"):
        drop(x)


def test_dropout_gradient_is_the_mask():
    """Under tl.capture (concrete shapes) the key is an input and the gradient is mask / (1 - p)."""
    lin = nn.Linear(4, 6, key=0)
    x = np.ones((3, 4), np.float32)

    def loss(model, batch):
        x, key = batch
        return tnp.sum(nn.Dropout(0.5)(model(x), key=key))
    step = tl.capture(lin, (x, tr.key(5)), loss)
    _, g = step.run(lin, (x, tr.key(5)))
    mask = nn.Dropout(0.5)(np.ones((3, 6), np.float32), key=tr.key(5))      # the same mask, eagerly
    np.testing.assert_allclose(g.bias, mask.sum(0), rtol=1e-6)
    _, g2 = step.run(lin, (x, tr.key(6)))                                  # a new key: a new mask, no retrace
    assert not np.array_equal(g2.bias, g.bias)


def test_dropout_under_grad_is_the_scaled_mask():
    """tl.grad specialises to the argument shapes at the first call (the mask's shape is the
    input's): d sum(dropout(x)) / dx is the kept mask scaled by 1/(1-p), which is dropout of ones."""
    def loss(x, key):
        return tnp.sum(nn.Dropout(0.5)(x, key=key))
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    g = tl.grad(loss)(x, tr.key(0))
    want = nn.Dropout(0.5)(np.ones(64, np.float32), key=tr.key(0))
    np.testing.assert_array_equal(g, want)
    assert set(np.unique(g)) == {0.0, 2.0}                   # negative control: a real mask, not all ones
    assert not np.array_equal(tl.grad(loss)(x, tr.key(1)), g)  # another key, another mask


# -- both front ends, and the derivative prints ----------------------------------------------------

def test_grad_and_capture_agree_on_a_cnn():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, key=0), nn.relu, nn.MaxPool2d(2), nn.Conv2d(4, 6, 3, key=1),
                          nn.relu, nn.AvgPool2d(2))
    x = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)

    def loss(m, x):
        return tnp.sum(m(x) ** 2)
    g_ast = tl.grad(loss)(model, x)
    step = tl.capture(model, x, loss)
    _, g_trace = step.run(model, x)
    for a, b in zip(_pytree.leaves(g_ast), _pytree.leaves(g_trace)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    src = tl.source(step)
    assert "def dloss_dmodel" in src and "_bar" in src


def test_maxpool_gradient_goes_to_the_first_maximum():
    x = np.zeros((1, 1, 2, 2), np.float64)                  # a four-way tie

    def loss(x):
        return tnp.sum(nn.MaxPool2d(2)(x))
    np.testing.assert_array_equal(tl.grad(loss)(x)[0, 0], [[1.0, 0.0], [0.0, 0.0]])


def test_flatten_under_grad_specialises_to_the_shape():
    def loss(x):
        return tnp.sum(nn.Flatten()(x) * np.arange(12.0))
    x = np.ones((2, 3, 4))
    np.testing.assert_array_equal(tl.grad(loss)(x), np.broadcast_to(np.arange(12.0).reshape(3, 4), (2, 3, 4)))
    np.testing.assert_array_equal(nn.Flatten()(np.ones((2, 3, 4))).shape, (2, 12))


@pytest.mark.skipif(not hasattr(tl, "jit"), reason="tl.jit is not available")
def test_compiled_training_step_matches_eager():
    """A whole step (value_and_grad + clipping + AdamW) through tl.jit gives the eager step's numbers."""
    from tlaloc import optim
    model = nn.MLP((6, 16, 3), activation=nn.gelu, key=0)
    rng = np.random.default_rng(0)
    batch = (rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8))
    opt = optim.AdamW(lr=optim.cosine_with_warmup(1e-2, 2, 10), weight_decay=0.1)

    def loss_fn(model, batch):
        x, y = batch
        return nn.cross_entropy(model(x), y)

    def train_step(model, state, batch):
        loss, grads = tl.value_and_grad(loss_fn)(model, batch)
        grads, _ = optim.clip_by_global_norm(grads, 0.5)
        model, state = opt.update(model, grads, state)
        return model, state, loss
    compiled = tl.jit(train_step)
    m1, s1 = model, opt.init(model)
    m2, s2 = model, opt.init(model)
    for _ in range(3):
        m1, s1, l1 = train_step(m1, s1, batch)
        m2, s2, l2 = compiled(m2, s2, batch)
        np.testing.assert_allclose(np.asarray(l2), l1, rtol=1e-5)
    for a, b in zip(_pytree.leaves(m1), _pytree.leaves(m2)):
        np.testing.assert_allclose(np.asarray(b), a, rtol=1e-5, atol=1e-6)
    assert int(np.asarray(s2.count)) == 3
