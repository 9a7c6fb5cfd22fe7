"""``tlaloc.random`` compiled: ``tl.jit`` gives the bits of the eager NumPy
implementation and of ``jax.random``, for every sampler, dtype and shape.

The references: eager ``tlaloc.random`` (NumPy) and ``jax.random`` with JAX's
defaults (x64 off) from the same raw key; float64 and uint64 with x64 on.
A Dropout training step compiles with no interpreter fallback.
"""
import logging

import jax
import ml_dtypes
import numpy as np
import pytest

import tlaloc.typing  # noqa: F401  (first: tl.jit reads annotations through it)
import tlaloc as tl
import tlaloc.numpy as tnp
import tlaloc.random as tr
from tlaloc import _pytree, nn, optim
from tlaloc.typing import F32

BF16 = np.dtype(ml_dtypes.bfloat16)

SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 3, 4)]
KEYS = [tr.key(0), tr.key(2**31 - 1), tr.split(tr.key(5))[1]]
FLOATS = [np.float32, np.float16, BF16, np.float64]


def assert_same_values(got, want):
    """Same dtype, shape and bits (random samples are never NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{got.dtype}{got.shape} != {want.dtype}{want.shape}"
    u = f"u{got.dtype.itemsize}"
    np.testing.assert_array_equal(got.reshape(-1).view(u), want.reshape(-1).view(u), err_msg="bits differ")


def _ulps(got, want):
    """Distance in units in the last place, per element (any float dtype, bfloat16 too)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype

    def ordered(x):                    # float bits as integers that order like the floats
        b = x.reshape(-1).view(f"i{x.itemsize}").astype(np.int64)
        return np.where(b < 0, np.int64(np.iinfo(f"i{x.itemsize}").min) - b, b)
    return np.abs(ordered(got) - ordered(want))


def _jax_ref(dtype, fn):
    """``fn()`` under JAX's defaults; float64/uint64 need x64."""
    with jax.enable_x64(np.dtype(dtype).itemsize == 8):
        return [np.asarray(a) for a in fn()]


def jkey(k):
    return jax.random.wrap_key_data(np.asarray(k, np.uint32), impl="threefry2x32")


def _same(got, *wants):
    for want in wants:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_values(np.asarray(g), w)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64], ids=lambda d: np.dtype(d).name)
def test_bits_match_eager_and_jax(dtype):
    def draw(key):
        return [tr.bits(key, s, dtype) for s in SHAPES]
    f = tl.jit(draw)
    for k in KEYS:
        want = _jax_ref(dtype, lambda: [jax.random.bits(jkey(k), s, dtype) for s in SHAPES])
        _same(f(k), draw(k), want)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_uniform_and_normal_match_eager_and_jax(dtype):
    lo, hi = np.linspace(-2, 1, 5).astype(dtype), np.linspace(1, 9, 5).astype(dtype)

    def draw(key, lo, hi):
        return ([tr.uniform(key, s, dtype) for s in SHAPES] + [tr.normal(key, s, dtype) for s in SHAPES]
                + [tr.uniform(key, (300,), dtype, -3.0, 5.5), tr.uniform(key, (3, 5), dtype, lo, hi),
                   tr.normal(key, (2000,), dtype)])

    def draw_jax(k):
        jk = jkey(k)
        return ([jax.random.uniform(jk, s, dtype) for s in SHAPES] + [jax.random.normal(jk, s, dtype) for s in SHAPES]
                + [jax.random.uniform(jk, (300,), dtype, -3.0, 5.5), jax.random.uniform(jk, (3, 5), dtype, lo, hi),
                   jax.random.normal(jk, (2000,), dtype)])
    f = tl.jit(draw)
    for k in KEYS:
        _same(f(k, lo, hi), draw(k, lo, hi), _jax_ref(dtype, lambda: draw_jax(k)))


def derive(key, step, data):
    k = tr.fold_in(key, step)                  # a run-time 32-bit word
    keys = tr.split(k, 3)
    return [keys, tr.split(keys[1], (2, 3)), tr.split(k, 0), tr.fold_in(keys[2], 7),
            tr.fold_in(keys[0], 2**32 - 1), tr.fold_in(k, data), tr.key(data)]


def test_split_fold_in_and_key_match_eager_and_jax():
    f = tl.jit(derive)
    for k in KEYS:
        for step, data in [(0, -3), (5, 2**31), (2**32 - 1, 9)]:
            got = f(k, np.uint32(step), np.int64(data))
            jk = jax.random.PRNGKey(0)
            with jax.enable_x64(False):
                jk = jax.random.fold_in(jkey(k), np.uint32(step))
                keys = jax.random.split(jk, 3)
                want = [jax.random.split(keys[1], (2, 3)), jax.random.split(jk, 0), jax.random.fold_in(keys[2], 7),
                        jax.random.fold_in(keys[0], 2**32 - 1), jax.random.fold_in(jk, np.int64(data))]
                want = [np.asarray(jax.random.key_data(w)) for w in [keys] + want]
            _same(got, derive(k, np.uint32(step), np.int64(data)))
            _same(got[:-1], want)           # key(seed): JAX's seeding depends on its x64 flag (test_random.py)


def test_negative_control_another_key_gives_other_bits():
    f = tl.jit(lambda key: [tr.bits(key, (64,)), tr.uniform(key, (64,)), tr.normal(key, (64,), np.float64)])
    a, b = f(tr.key(0)), f(tr.key(1))
    for x, y in zip(a, b):
        assert not np.any(np.asarray(x) == np.asarray(y))
    with pytest.raises(AssertionError):
        _same(a, [np.asarray(x) for x in b])
    _same(f(tr.key(0)), [np.asarray(x) for x in a])                 # and the same key, the same bits


def test_the_program_is_plain_stablehlo():
    text = tl.jit(lambda key: tr.normal(key, (5,))).lower(tr.key(0)).as_text()
    assert "stablehlo.xor" in text and "stablehlo.shift_right_logical" in text and "erf_inv" in text
    assert "custom_call" not in text


# -- training: Dropout compiles --------------------------------------------------------------------

def _loss(model, batch):
    x, y, key = batch
    return tnp.sum((nn.Dropout(0.25)(model(x), key=key) - y) ** 2)


def test_dropout_capture_step_compiles_with_no_fallback(caplog):
    model = nn.MLP((8, 16, 4), key=0)
    batch = (np.ones((5, 8), np.float32), np.zeros((5, 4), np.float32), tr.key(3))
    step = tl.capture(model, batch, _loss)
    with caplog.at_level(logging.INFO, logger="tlaloc.compile"):
        loss, grads = step.run(model, batch)
    messages = [r.getMessage() for r in caplog.records]
    assert any("capture: compiling" in m for m in messages)
    assert not any("uncompiled" in m for m in messages), messages
    ref_loss, ref_grads = tl.capture(model, batch, _loss, backend="interpreter").run(model, batch)
    np.testing.assert_allclose(np.asarray(loss), ref_loss, rtol=1e-5)
    for g, r in zip(_pytree.leaves(grads), _pytree.leaves(ref_grads)):
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-6)
    other, _ = step.run(model, batch[:2] + (tr.key(4),))       # a new key: a new mask, no recompile
    assert np.asarray(other) != np.asarray(loss)


def _typed_loss(w: F32[6, 6], x: F32[4, 6], key):
    return tnp.sum(nn.Dropout(0.5)(x @ w, key=key) ** 2)


def train_step(w: F32[6, 6], opt_state, x: F32[4, 6], key):
    loss, g = tl.value_and_grad(_typed_loss)(w, x, key)
    w, opt_state = optim.SGD(lr=0.1).update(w, g, opt_state)
    return w, opt_state, loss


def test_jit_train_step_and_jit_grad_through_dropout():
    """With the mask's shape known at definition time (annotated), tl.grad's lowering
    takes dropout, and tl.jit compiles it: the gradient is the mask times the scale."""
    x = np.ones((4, 6), np.float32)

    def masked(x: F32[4, 6], key):
        return tnp.sum(nn.Dropout(0.5)(x, key=key) * x)
    for k in KEYS:
        g = np.asarray(tl.jit(tl.grad(masked))(x, k))
        assert_same_values(g, 2 * nn.Dropout(0.5)(x, key=k))
    w = np.eye(6, dtype=np.float32)
    opt_state = optim.SGD(lr=0.1).init(w)
    got = tl.jit(train_step)(w, opt_state, x, KEYS[0])
    want = tl.jit(train_step, backend="interpreter")(w, opt_state, x, KEYS[0])
    for a, b in zip(_pytree.leaves(got), _pytree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-6)


# -- vmap and IREE -------------------------------------------------------------------------------

def noisy(key, x, lo):
    return x * tr.uniform(key, (3,), np.float32), tr.uniform(key, (3,), np.float32, lo, 5.5)


def test_vmap_with_a_shared_key():
    """Batched keys are refused by the batching rules; a shared key with batched data
    and bounds compiles, and gives each example's own bits (XLA fuses the batched
    multiply-add as it does the per-example one; the eager batched rule does not,
    and is within one rounding of it)."""
    x, lo = np.arange(15, dtype=np.float32).reshape(5, 3), np.linspace(-3, 1, 5).astype(np.float32).reshape(5, 1)
    for lo_axis, lows in [(0, lo), (None, np.float32(-2))]:
        got = tl.jit(tl.vmap(noisy, in_axes=(None, 0, lo_axis)))(KEYS[1], x, lows)
        rows = [noisy(KEYS[1], x[i], lows if lo_axis is None else lows[i]) for i in range(5)]
        for g, want in zip(got, zip(*rows)):
            assert_same_values(g, np.stack(want))


def test_iree_gives_the_same_bits():
    """IREE: bits, keys and unit uniforms bit for bit, bounded float32/float64 uniforms too;
    IREE rounds half-precision arithmetic its own way (bounded float16/bfloat16 uniforms
    to 2 ulp) and has its own erf_inv/log (normals to 64 ulp, ~1e-14 in float64)."""
    pytest.importorskip("iree.runtime", reason="backend='iree' needs iree-base-runtime")

    def draw(key):
        return ([tr.bits(key, s, d) for s in [(), (0,), (3, 5)] for d in (np.uint8, np.uint32, np.uint64)]
                + [tr.split(key, 3), tr.fold_in(key, 7)] + [tr.uniform(key, (3, 5), d) for d in FLOATS]
                + [tr.uniform(key, (9,), d, -3.0, 5.5) for d in (np.float32, np.float64)])

    def near(key):
        return ([tr.uniform(key, (9,), d, -3.0, 5.5) for d in (np.float16, BF16)]
                + [tr.normal(key, (500,)), tr.normal(key, (500,), np.float64)])
    for k in KEYS[:2]:
        _same(tl.jit(draw, backend="iree")(k), draw(k))
        for got, want, ulps in zip(tl.jit(near, backend="iree")(k), near(k), [2, 2, 64, 64]):
            assert _ulps(got, want).max() <= ulps
