"""Bounded axes (``F32["seq<=512", "d"]``) under tl.jit: values, gradients, refusals, compile counts.

Oracles: plain NumPy on the unpadded arguments; JAX in float64 for gradients.
"""
import inspect
import json

import numpy as np
import pytest

import tlaloc as tl
import tlaloc.numpy as tnp
from tlaloc.errors import ArgumentError, BoundedAxisError, TypeAnnotationError
from tlaloc.typing import F32, F64

LENGTHS = (1, 5, 16, 17, 64)            # 1, inside a bucket, a bucket edge, just past it, the bound


def softmax_rows(x: F64["seq<=64", "d"], w: F64["d", "e"]):
    return tnp.softmax(x @ w, axis=0).sum(axis=1)                       # (seq,)


def stats(x: F64["seq<=64", "d"]):
    return x.mean(axis=0), tnp.max(x, axis=0), tnp.argmax(x, axis=0), tnp.logsumexp(x, axis=0), \
        x.sum(axis=0) / x.shape[0], tnp.cumsum(x, axis=0), x.T @ x, x[0] + x[:, 1].sum()


def with_mask(x: F64["seq<=64", "d"], m: F64["seq"]):
    z = tnp.zeros((x.shape[0], 4))
    return tnp.einsum("sd,s->d", x + z, m), (x * m[:, None]).std(axis=0)


def loss(x: F64["seq<=64", "d"], w: F64["d", "e"]):
    p = tnp.softmax(x @ w, axis=0)
    return (p * p).sum() + tnp.logsumexp(x, axis=0).sum() + x.mean() + (x ** 2).sum() / x.shape[0]


def _np_softmax(z, axis):
    e = np.exp(z - z.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _x(n, d=4, seed=0):
    return np.random.default_rng(seed + n).standard_normal((n, d)) - 1.0


@pytest.mark.parametrize("n", LENGTHS)
def test_values_match_numpy_on_the_unpadded_input(n):
    x, w = _x(n), np.random.default_rng(1).standard_normal((4, 3))
    got = tl.jit(softmax_rows)(x, w)
    assert got.shape == (n,)
    np.testing.assert_allclose(got, _np_softmax(x @ w, 0).sum(1), rtol=1e-12, atol=1e-12)
    lse = np.log(np.exp(x - x.max(0)).sum(0)) + x.max(0)
    want = (x.mean(0), x.max(0), x.argmax(0), lse, x.sum(0) / n, np.cumsum(x, 0), x.T @ x, x[0] + x[:, 1].sum())
    for g, r in zip(tl.jit(stats)(x), want):
        assert np.shape(g) == np.shape(r)
        np.testing.assert_allclose(np.asarray(g), r, rtol=1e-12, atol=1e-12)
    m = np.linspace(-1, 1, n)
    got = tl.jit(with_mask)(x, m)
    np.testing.assert_allclose(got[0], x.T @ m, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], (x * m[:, None]).std(0), rtol=1e-12, atol=1e-12)


def test_padding_without_masks_would_be_wrong():
    """Negative control: the same padded input through a function without the bound differs."""
    def plain(x, w):
        return tnp.softmax(x @ w, axis=0).sum(axis=1)
    n, x, w = 5, _x(5), np.random.default_rng(1).standard_normal((4, 3))
    padded = np.pad(x, ((0, 16 - n), (0, 0)))
    unmasked = np.asarray(tl.jit(plain)(padded, w))[:n]
    want = _np_softmax(x @ w, 0).sum(1)
    assert np.abs(unmasked - want).max() > 1e-2
    np.testing.assert_allclose(tl.jit(softmax_rows)(x, w), want, rtol=1e-12)


_GRAD = tl.jit(tl.grad(loss, argnums=(0, 1)))          # shared: one compile per bucket across the cases
_VALUE_AND_GRAD = tl.jit(tl.value_and_grad(loss))


@pytest.mark.parametrize("n", (1, 16, 33, 64))
def test_gradients_match_jax(n):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def ref(x, w):
        p = jax.nn.softmax(x @ w, axis=0)
        return (p * p).sum() + jax.scipy.special.logsumexp(x, axis=0).sum() + x.mean() + (x ** 2).sum() / x.shape[0]

    x, w = _x(n), np.random.default_rng(2).standard_normal((4, 3))
    gx, gw = _GRAD(x, w)
    rx, rw = jax.grad(ref, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(w))
    assert gx.shape == (n, 4)
    np.testing.assert_allclose(gx, rx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw, rw, rtol=1e-10, atol=1e-12)
    v, g = _VALUE_AND_GRAD(x, w)
    np.testing.assert_allclose(float(v), float(ref(x, w)), rtol=1e-12)
    np.testing.assert_allclose(g, rx, rtol=1e-10, atol=1e-12)


def test_200_lengths_compile_one_program_per_bucket():
    def plain(x):
        return tnp.softmax(x, axis=0).sum(axis=1)

    def f(x: F32["seq<=512", "d"]):
        return tnp.softmax(x, axis=0).sum(axis=1)

    lengths = np.unique(np.linspace(1, 512, 200).round().astype(int))
    assert len(lengths) == 200
    jf = tl.jit(f)
    for n in lengths:
        x = np.ones((n, 2), np.float32)
        out = jf(x)
        assert out.shape == (n,)
        np.testing.assert_allclose(out, np.full(n, 2.0 / n, np.float32), rtol=1e-5)
    assert jf.cache_size() == 6 <= 8                  # buckets 16, 32, 64, 128, 256, 512
    jp = tl.jit(plain)                                 # without the bound: one program per length
    for n in lengths[:5]:
        jp(np.ones((n, 2), np.float32))
    assert jp.cache_size() == 5
    assert len({(n, 2) for n in lengths}) == 200


def test_bucket_ladders():
    from tlaloc._jit.bounded import ladder
    assert ladder(512) == (16, 32, 64, 128, 256, 512)
    assert ladder(100) == (16, 32, 64, 100)
    assert ladder(8) == (8,)
    assert ladder(512, (64, 128)) == (64, 128, 512)
    jf = tl.jit(softmax_rows, buckets={"seq": (8, 64)})
    w = np.ones((4, 3))
    for n in (1, 8, 9, 40):
        jf(_x(n), w)
    assert jf.cache_size() == 2
    with pytest.raises(ArgumentError, match="outside 1..64"):
        tl.jit(softmax_rows, buckets={"seq": (128,)})
    with pytest.raises(ArgumentError, match="not bounded axes"):
        tl.jit(softmax_rows, buckets={"time": (8,)})


# -- refusals -------------------------------------------------------------------------------------

def test_size_over_the_bound_is_refused_at_the_call():
    with pytest.raises(TypeAnnotationError, match=r"argument `x` of `softmax_rows`: axis 0 \(`seq`\) has size 65, "
                                                  r"over its bound 64"):
        tl.jit(softmax_rows)(_x(65), np.ones((4, 3)))
    with pytest.raises(ArgumentError, match="at least one element"):
        tl.jit(softmax_rows)(np.ones((0, 4)), np.ones((4, 3)))


def _const_over_bound(x: F32["seq<=512", "d"]):
    y: F32["seq<=512", "d"] = tnp.zeros((5000, 4), np.float32)
    return x.sum() + y.sum()


def _callee(x: F32["seq<=512", "d"]):
    return x.sum()


def _calls_with_constant(x):
    return _callee(tnp.ones((600, 3), np.float32)) + x.sum()


@pytest.mark.parametrize("fn, marker, what", [
    (_const_over_bound, "tnp.zeros((5000, 4)", "`y` is annotated F32[seq<=512, d] but its axis 0 (`seq`) has "
                                               "the constant size 5000, over the bound 512"),
    (_calls_with_constant, "_callee(", "argument `x` of `_callee` is annotated F32[seq<=512, d] but its axis 0 "
                                       "(`seq`) has the constant size 600"),
])
def test_constant_over_the_bound_is_refused_at_definition(fn, marker, what):
    lines, start = inspect.getsourcelines(fn)
    k = next(i for i, line in enumerate(lines) if marker in line)
    where = f"{__file__}:{start + k}:{lines[k].index(marker) + 1}:"
    with pytest.raises(TypeAnnotationError) as e:
        tl.grad(fn)                          # the transform is applied: no call yet
    assert str(e.value).startswith(where) and what in str(e.value)


def _flip(x: F64["seq<=64", "d"]):
    return tnp.flip(x, 0).sum(axis=1)


def _negative_index(x: F64["seq<=64", "d"]):
    return x[-1]


def _merge(x: F64["seq<=64", "d"]):
    return x.reshape(-1).sum()


def _concat(x: F64["seq<=64", "d"]):
    return tnp.concatenate([x, x], axis=0).sum()


def _slice(x: F64["seq<=64", "d"]):
    return x[1:].sum()


def _fixed_size(x: F64["seq<=64", "d"]):
    return x + np.ones((16, 4))


def _loop(x: F64["seq<=64", "d"]):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + x[i].sum()
    return s


@pytest.mark.parametrize("fn, line_marker, what", [
    (_flip, "tnp.flip", "`flip` reads a value whose axis 0 (`seq`) is bounded"),
    (_negative_index, "x[-1]", "with a negative index"),
    (_merge, "reshape", "merges or splits the bounded axis 0 (`seq`)"),
    (_concat, "concatenate", "`concatenate` reads a value"),
    (_slice, "x[1:]", "slices the bounded axis 0 (`seq`) with `1::`"),
    (_fixed_size, "np.ones", "combines the bounded axis `seq` with an axis of fixed size 16"),
    (_loop, "for i", "a loop or branch (`for_range`)"),
])
def test_operations_that_would_read_the_padding_are_refused(fn, line_marker, what):
    lines, start = inspect.getsourcelines(fn)
    line = start + next(i for i, text in enumerate(lines) if line_marker in text)
    with pytest.raises(BoundedAxisError) as e:
        tl.jit(fn)(_x(5))
    assert str(e.value).startswith(f"{__file__}:{line}:") and what in str(e.value)


def test_an_index_past_the_valid_length_is_refused_at_the_call():
    def first(x: F64["seq<=64", "d"]):
        return x[2]
    np.testing.assert_array_equal(tl.jit(first)(_x(5)), _x(5)[2])
    with pytest.raises(ArgumentError, match="indexes entry 2 of the bounded axis `seq`.*has length 2"):
        tl.jit(first)(_x(2))


def test_other_transforms_and_backends_are_refused():
    with pytest.raises(ArgumentError, match="not under vmap"):
        tl.jit(tl.vmap(softmax_rows))
    with pytest.raises(ArgumentError, match="backend='xla'"):
        tl.jit(softmax_rows, backend="interpreter")


def test_export_writes_one_program_per_bucket(tmp_path):
    x, w = _x(3), np.ones((4, 3))
    manifest = tl.jit(softmax_rows).export(tmp_path, x, w)
    assert manifest["axes"] == {"seq": {"bound": 64, "buckets": [16, 32, 64]}}
    assert [p["buckets"]["seq"] for p in manifest["programs"]] == [16, 32, 64]
    p = manifest["programs"][1]
    assert p["inputs"][0] == {"name": "x", "dtype": "float64", "shape": [32, 4], "bounded": {"0": "seq"}}
    assert p["inputs"][-1] == {"name": "len_seq", "dtype": "int32", "shape": [], "valid_length": "seq"}
    assert p["outputs"] == [{"dtype": "float64", "shape": [32], "bounded": {"0": "seq"}}]
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest
    text = (tmp_path / p["file"]).read_text()
    assert "func.func public @main" in text or "func.func @main" in text
    again = tl.jit(softmax_rows).export(tmp_path / "again", _x(40), w)
    assert again == manifest                                         # example sizes do not matter
    lowered = tl.jit(softmax_rows).lower(x, w)
    assert [str(v.aval) for v in lowered.graph.inputs] == ["f64[16,4]", "f64[4,3]", "i32[]"]


def test_bad_bucket_specs_and_export_examples_are_refused(tmp_path):
    """Regression: '64', (16.5,), (True,) were read as sizes; export took examples of the wrong dtype or rank
    (a program for another signature) and a file path as the directory (FileExistsError)."""
    for spec in ("64", (16.5,), (True,), 64):
        with pytest.raises(ArgumentError, match="expected a tuple of ints"):
            tl.jit(softmax_rows, buckets={"seq": spec})
    with pytest.raises(ArgumentError, match="must be a dict"):
        tl.jit(softmax_rows, buckets=[(8,)])
    w = np.ones((4, 3))
    with pytest.raises(TypeAnnotationError, match=r"argument `x` of `softmax_rows`.*\(2 axes\)"):
        tl.jit(softmax_rows).export(tmp_path / "a", np.ones(3), w)
    with pytest.raises(TypeAnnotationError, match="float64"):
        tl.jit(softmax_rows).export(tmp_path / "b", _x(3).astype(np.float32), w)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ArgumentError, match="is an existing file"):
        tl.jit(softmax_rows).export(tmp_path / "file", _x(3), w)
