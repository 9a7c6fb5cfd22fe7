"""tl.jit and tl.vmap check typed-tensor annotations as tl.grad does.

At call time: the argument arrays against the annotations (jit: on a new
signature only, never on the hit path; vmap: the per-example shapes). At
definition time: an annotated function is lowered when jit/vmap is applied, so a
dtype mix its annotations make visible is refused there with file:line:col.
"""
import numpy as np
import pytest

import tlaloc as tl
from tlaloc.typing import F32

f32 = np.float32


def layer(x: F32["b", "h"], w: F32["h", "o"]):
    return (x @ w).sum()


def mixes(x: F32["b", "h"]):
    y = x + np.ones(3, np.float64)
    return y.sum()


def uses_later_helper(x: F32["n"]):
    return _later(x)


def _later(x):
    return x.sum()


def unannotated_mix(x):
    y = x + np.ones(3, np.float64)
    return y.sum()


LAYER_LINE = layer.__code__.co_firstlineno
MIX_LINE = mixes.__code__.co_firstlineno + 1


def _x(b=2, h=3, dtype=f32):
    return np.arange(b * h, dtype=dtype).reshape(b, h)


def _w(h=3, o=5, dtype=f32):
    return np.full((h, o), 0.5, dtype=dtype)


def _want(x, w):
    return float((x.astype(np.float64) @ w.astype(np.float64)).sum())


def _at_annotation(err):
    assert err.filename == __file__ and err.lineno == LAYER_LINE and isinstance(err.offset, int)
    assert str(err).startswith(f"{__file__}:{LAYER_LINE}:{err.offset}: ")


# -- jit: call time ---------------------------------------------------------------------------------

def test_jit_refuses_an_axis_size_clash_naming_argument_axis_and_sizes():
    with pytest.raises(tl.TypeAnnotationError) as info:
        tl.jit(layer)(_x(), _w(h=4))
    msg = str(info.value)
    assert "argument `w` of `layer`" in msg and "axis `h`" in msg
    assert "size 4" in msg and "`h` is 3 in `x`" in msg
    _at_annotation(info.value)


def test_jit_refuses_a_wrong_dtype_by_argument_name():
    with pytest.raises(tl.TypeAnnotationError, match=r"argument `x` of `layer`: expected F32\[b, h\] "
                                                     r"\(float32\) but got a float64 array") as info:
        tl.jit(layer)(_x(dtype=np.float64), _w())
    _at_annotation(info.value)


def test_jit_on_the_interpreter_backend_checks_too():
    with pytest.raises(tl.TypeAnnotationError, match="argument `w`"):
        tl.jit(layer, backend="interpreter")(_x(), _w(h=4))


def test_jit_checks_a_transformed_function_against_its_annotations():
    with pytest.raises(tl.TypeAnnotationError, match="argument `w` of `layer`"):
        tl.jit(tl.grad(layer))(_x(), _w(h=4))
    with pytest.raises(tl.TypeAnnotationError, match="argument `w` of `layer`"):
        tl.jit(tl.jvp(layer))((_x(), _w(h=4)), (_x(), _w(h=4)))


def test_jit_correct_calls_and_the_hit_path():
    j = tl.jit(layer)
    x, w = _x(), _w()
    assert float(np.asarray(j(x, w))) == pytest.approx(_want(x, w))
    assert len(j._hits) == 1
    # the hit path does not run the annotation check (it passed for this signature)
    checks = []
    real = j._check
    j._check = lambda args: (checks.append(args), real(args))
    x2 = x + 1
    assert float(np.asarray(j(x2, w))) == pytest.approx(_want(x2, w))
    assert checks == []
    # a new signature is checked: a new batch size passes, a clash of `h` is refused
    x3 = _x(b=4)
    assert float(np.asarray(j(x3, w))) == pytest.approx(_want(x3, w))
    assert len(checks) == 1
    with pytest.raises(tl.TypeAnnotationError, match="argument `w`"):
        j(x, _w(h=4))
    assert j.cache_size() == 2


def test_jit_of_grad_correct_calls_still_run():
    g = tl.jit(tl.grad(layer, argnums=1))
    x, w = _x(), _w()
    want = np.repeat(x.sum(0)[:, None], 5, axis=1)
    np.testing.assert_allclose(np.asarray(g(x, w)), want)
    np.testing.assert_allclose(np.asarray(g(x, w)), want)


# -- vmap: per-example shapes ---------------------------------------------------------------------------

def test_vmap_checks_per_example_shapes():
    with pytest.raises(tl.TypeAnnotationError) as info:
        tl.vmap(layer)(np.ones((7, 2, 3), f32), np.ones((7, 4, 5), f32))
    msg = str(info.value)
    assert "argument `w` of `layer`" in msg and "axis `h`" in msg and "shape (4, 5)" in msg
    assert "`h` is 3 in `x`" in msg and "per example, under vmap_layer" in msg
    _at_annotation(info.value)


def test_vmap_refuses_a_wrong_dtype_per_example():
    with pytest.raises(tl.TypeAnnotationError, match=r"argument `x` of `layer`.*float64 array of shape \(2, 3\)") \
            as info:
        tl.vmap(layer)(np.ones((7, 2, 3)), np.ones((7, 3, 5), f32))
    _at_annotation(info.value)


def test_vmap_checks_unbatched_arguments_whole_and_batched_ones_per_example():
    v = tl.vmap(layer, in_axes=(0, None))
    xs, w = np.ones((7, 2, 3), f32), _w()
    np.testing.assert_allclose(v(xs, w), [_want(xs[0], w)] * 7)
    with pytest.raises(tl.TypeAnnotationError, match="argument `w`"):
        v(xs, _w(h=4))


def test_vmap_of_grad_and_jit_of_vmap_check_per_example():
    bad = (np.ones((7, 2, 3), f32), np.ones((7, 4, 5), f32))
    with pytest.raises(tl.TypeAnnotationError, match="argument `w` of `layer`.*per example"):
        tl.vmap(tl.grad(layer))(*bad)
    with pytest.raises(tl.TypeAnnotationError, match="argument `w` of `layer`.*per example"):
        tl.jit(tl.vmap(layer))(*bad)


def test_vmap_correct_calls_and_a_second_call():
    v = tl.vmap(layer)
    xs = np.stack([_x() + k for k in range(4)])
    ws = np.stack([_w()] * 4)
    want = [_want(a, b) for a, b in zip(xs, ws)]
    np.testing.assert_allclose(v(xs, ws), want)
    np.testing.assert_allclose(v(xs, ws), want)
    np.testing.assert_allclose(np.asarray(tl.jit(tl.vmap(layer))(xs, ws)), want, rtol=1e-6)


# -- definition time -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("transform", [tl.jit, tl.vmap, tl.grad], ids=["jit", "vmap", "grad"])
def test_a_dtype_mix_is_refused_when_the_transform_is_applied(transform):
    with pytest.raises(tl.DTypeError, match="float32 but y is float64") as info:
        transform(mixes)
    assert str(info.value).startswith(f"{__file__}:{MIX_LINE}:")


def test_unannotated_functions_stay_lazy():
    j = tl.jit(unannotated_mix)                 # not refused here
    tl.vmap(unannotated_mix)
    out = j(np.ones(3, f32))                    # unannotated code promotes as NumPy does
    assert np.asarray(out).dtype == np.float64 and float(np.asarray(out)) == 6.0
    with tl.numpy_dtype_promotion("strict"), pytest.raises(tl.DTypeError):
        tl.jit(unannotated_mix)(np.ones(3, f32))


def test_an_annotated_function_whose_lowering_fails_otherwise_is_not_refused_early(monkeypatch):
    # a helper missing at definition time (defined later in a module) is found at the first call
    monkeypatch.delitem(globals(), "_later")
    j, v = tl.jit(uses_later_helper), tl.vmap(uses_later_helper)
    monkeypatch.undo()
    assert float(np.asarray(j(np.ones(4, f32)))) == 4.0
    np.testing.assert_allclose(v(np.ones((2, 4), f32)), [4.0, 4.0])
