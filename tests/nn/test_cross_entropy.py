"""``nn.cross_entropy``: ignore_index, label_smoothing and out-of-range labels, against torch.

Regression: a label outside [0, C) silently gave a number (its row counted as loss 0).
"""
from __future__ import annotations

import numpy as np
import pytest

import tlaloc as tl
from tlaloc import nn
from tlaloc.errors import ArgumentError

torch = pytest.importorskip("torch")
F = torch.nn.functional

RNG = np.random.default_rng(7)
Z = RNG.standard_normal((3, 5, 4)) * 2.0
Y = np.array([[0, -100, 3, 2, 1], [3, 3, -100, 0, 1], [2, 1, 0, -100, -100]])
TOL = {np.float32: 2e-6, np.float64: 1e-13}


def _torch(z, y, reduction, ignore_index=-100, label_smoothing=0.0):
    zt = torch.tensor(z, requires_grad=True)
    out = F.cross_entropy(zt.reshape(-1, z.shape[-1]), torch.tensor(y).reshape(-1), reduction=reduction,
                          ignore_index=ignore_index, label_smoothing=label_smoothing)
    return zt, out


def loss_default(z, y):
    return nn.cross_entropy(z, y)


def loss_smooth(z, y):
    return nn.cross_entropy(z, y, ignore_index=3, label_smoothing=0.2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index,smoothing", [(-100, 0.0), (-100, 0.1), (3, 0.0), (3, 0.25)])
def test_values_match_torch(dtype, reduction, ignore_index, smoothing):
    z = Z.astype(dtype)
    y = np.where(Y == -100, ignore_index, Y) if ignore_index != -100 else Y
    _, want = _torch(z, y, reduction, ignore_index, smoothing)
    got = nn.cross_entropy(z, y, reduction, ignore_index=ignore_index, label_smoothing=smoothing)
    assert np.asarray(got).dtype == dtype
    np.testing.assert_allclose(np.reshape(got, want.shape), want.detach().numpy(), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("loss,kw", [(loss_default, {}), (loss_smooth, dict(ignore_index=3, label_smoothing=0.2))],
                         ids=["default", "smooth_ignore3"])
def test_gradients_match_torch_eager_and_compiled(dtype, loss, kw):
    z = Z.astype(dtype)
    y = np.where(Y == -100, kw.get("ignore_index", -100), Y)
    zt, want = _torch(z, y, "mean", **kw)
    want.backward()
    g = zt.grad.numpy().reshape(z.shape)
    np.testing.assert_allclose(tl.grad(loss)(z, y), g, rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(tl.jit(tl.grad(loss))(z, y), g, rtol=10 * TOL[dtype], atol=10 * TOL[dtype])
    assert float(tl.jit(loss)(z, y)) == pytest.approx(float(want.detach()), rel=10 * TOL[dtype])


def test_control_ignored_labels_matter():
    """Negative control: counting the ignored rows (as class 0) changes the mean beyond the tolerance."""
    _, want = _torch(Z, Y, "mean")
    wrong = nn.cross_entropy(Z, np.where(Y == -100, 0, Y))
    assert abs(float(wrong) - float(want.detach())) > 1e-6


def test_all_ignored_mean_is_nan_as_torch():
    y = np.full((3, 5), -100)
    _, want = _torch(Z, y, "mean")
    assert np.isnan(float(want))
    with np.errstate(invalid="ignore"):
        assert np.isnan(nn.cross_entropy(Z, y))


@pytest.mark.parametrize("bad", [5, 4, -1, -7])
def test_out_of_range_label_is_refused_eagerly(bad):
    y = Y.copy()
    y[1, 2] = bad
    with pytest.raises(ArgumentError, match=rf"labels must be in \[0, 4\).*labels\[1, 2\] = {bad}"):
        nn.cross_entropy(Z, y)


def test_out_of_range_label_is_refused_under_grad():
    y = Y.copy()
    y[2, 0] = 9
    with pytest.raises(ArgumentError, match=r"labels\[2, 0\] = 9"):
        tl.grad(loss_default)(Z, y)
    with pytest.raises(ArgumentError, match=r"labels\[2, 0\] = 9"):
        tl.value_and_grad(loss_default)(Z, y)


def test_out_of_range_label_under_jit_is_nan_not_a_number():
    """Compiled code cannot raise; the loss and its gradient are NaN, never a plausible value."""
    y = Y.copy()
    y[0, 0] = 4
    assert np.isnan(float(tl.jit(loss_default)(Z, y)))
    g = np.asarray(tl.jit(tl.grad(loss_default))(Z, y))
    assert np.isnan(g[0, 0]).all()                            # the bad row
    assert np.isfinite(g[1:]).all() and np.isfinite(g[0, 1:]).all()   # the others stay exact


def test_bad_arguments_are_refused():
    with pytest.raises(ArgumentError, match="label_smoothing must be in"):
        nn.cross_entropy(Z, Y, label_smoothing=1.5)
    with pytest.raises(ArgumentError, match="reduction must be"):
        nn.cross_entropy(Z, Y, reduction="avg")
    with pytest.raises(ArgumentError, match="integer class indices"):
        nn.cross_entropy(Z, Y.astype(np.float64))


def test_bad_label_shapes_and_options_are_refused():
    """Regression: labels of another shape were broadcast (a number where PyTorch raises); a str/None
    label_smoothing crashed with TypeError; a float or None ignore_index was accepted."""
    with pytest.raises(ArgumentError, match=r"labels must have the logits' shape without the class axis"):
        nn.cross_entropy(Z, Y[None])
    with pytest.raises(ArgumentError, match=r"labels must have the logits' shape"):
        nn.cross_entropy(Z, np.array(1))
    with pytest.raises(ArgumentError, match=r"labels must have the logits' shape"):
        nn.cross_entropy(Z, Y[:-1])
    for ls in ("0.1", None, float("nan")):
        with pytest.raises(ArgumentError, match="label_smoothing must be in"):
            nn.cross_entropy(Z, Y, label_smoothing=ls)
    for ii in (1.5, None):
        with pytest.raises(ArgumentError, match="ignore_index must be an int"):
            nn.cross_entropy(Z, Y, ignore_index=ii)
