"""Call-time checks of argument arrays against their annotations."""
import numpy as np
import pytest

import tlaloc as tl

import typed_programs as P

F = np.float64


def _line_of_def(fn):
    return fn.__code__.co_firstlineno


def test_good_calls_pass_and_match_numpy():
    x, w, b = np.ones((2, 3)), np.full((3, 4), 0.1), np.arange(4.0)
    g = tl.grad(P.layer, argnums=(0, 1, 2))(x, w, b)
    assert [a.shape for a in g] == [(2, 3), (3, 4), (4,)]
    tl.grad(P.fixed_and_named)(np.ones((3, 5)), np.ones(5))
    tl.grad(P.leading_dims)(np.ones((2, 4, 5)), np.ones((2, 4, 5)))
    tl.grad(P.any_leading)(np.ones((2, 4, 5)), np.float64(2.0))
    tl.grad(P.broadcastable)(np.ones((3, 5)), np.ones((1, 5)))
    tl.grad(P.broadcastable)(np.ones((3, 5)), np.ones((3, 5)))
    tl.grad(P.computed_size)(np.ones(3), np.ones(4))
    tl.grad(P.anonymous)(np.ones((2, 5)), np.ones((7, 5)))
    tl.grad(P.with_int)(np.ones(3), np.int64(2))
    tl.grad(P.string_annotations)(np.ones((2, 3)), np.ones((3, 4)))


def _refused(fn, *args, argnums=0):
    with pytest.raises(tl.TypeAnnotationError) as info:
        tl.grad(fn, argnums=argnums)(*args)
    err = info.value
    assert err.filename == P.__file__ and err.lineno == _line_of_def(fn), str(err)
    assert str(err).startswith(f"{P.__file__}:{err.lineno}:{err.offset}: argument `")
    return str(err)


def test_one_name_two_sizes_across_arguments():
    msg = _refused(P.layer, np.ones((2, 3)), np.ones((4, 5)), np.ones(5))
    assert "argument `w` of `layer`" in msg
    assert "`hidden` of `w`" in msg and "size 4" in msg and "`hidden` is 3 in `x`" in msg
    msg = _refused(P.layer, np.ones((2, 3)), np.ones((3, 4)), np.ones(5))
    assert "argument `b`" in msg and "`out`" in msg


def test_dtype_mismatch_names_the_argument_and_the_fix():
    msg = _refused(P.layer, np.ones((2, 3), np.float32), np.ones((3, 4)), np.ones(4))
    assert "argument `x` of `layer`" in msg and "F64[batch, hidden]" in msg
    assert "float32" in msg and ".astype(np.float64)" in msg


def test_rank_mismatch():
    msg = _refused(P.layer, np.ones((2, 3, 1)), np.ones((3, 4)), np.ones(4))
    assert "2 axes" in msg and "(3 axes)" in msg
    msg = _refused(P.leading_dims, np.float64(1.0), np.float64(1.0))
    assert "at least 1 axes" in msg and "(0 axes)" in msg


def test_fixed_size_mismatch():
    msg = _refused(P.fixed_and_named, np.ones((4, 5)), np.ones(5))
    assert "fixed size 3" in msg and "size 4" in msg


def test_variadic_names_bind_a_whole_shape():
    msg = _refused(P.leading_dims, np.ones((2, 4, 5)), np.ones((2, 3, 5)), argnums=1)
    assert "`batch`" in msg and "(2, 4)" in msg and "(2, 3)" in msg


def test_broadcastable_axis_allows_only_one_or_the_size():
    msg = _refused(P.broadcastable, np.ones((3, 5)), np.ones((2, 5)), argnums=1)
    assert "`batch`" in msg


def test_computed_size():
    msg = _refused(P.computed_size, np.ones(3), np.ones(3))
    assert "`n+1`" in msg and "size 4" in msg


def test_python_float_for_an_f32_scalar_is_refused():
    from tlaloc.typing import F32

    def scaled(x: F32["n"], s: F32[()]):
        return (x * s).sum()
    g = tl.grad(scaled)
    g(np.ones(3, np.float32), np.float32(2.0))
    with pytest.raises(tl.TypeAnnotationError, match="argument `s`"):
        g(np.ones(3, np.float32), 2.0)                 # a Python float is float64


def test_checks_apply_to_nested_transforms_and_custom_functions():
    from tlaloc.typing import F64

    @tl.custom_vjp
    def scale(x: F64["n"]):
        return 2.0 * x
    scale.defvjp(_scale_fwd, _scale_bwd)
    out, pullback = tl.vjp(scale, np.ones(3))
    np.testing.assert_array_equal(pullback(np.ones(3))[0], np.full(3, 2.0))
    with pytest.raises(tl.TypeAnnotationError, match="argument `x` of `scale`"):
        tl.vjp(scale, np.ones((3, 1)))
    nested = tl.value_and_grad(_sum_of_grad)
    nested(np.ones((3, 5)), np.ones(5))
    with pytest.raises(tl.TypeAnnotationError, match="argument `y` of `fixed_and_named`"):
        tl.grad(P.fixed_and_named)(np.ones((3, 5)), np.ones(4))


def _scale_fwd(x):
    return 2.0 * x, None


def _scale_bwd(res, g):
    return (2.0 * g,)


_d_fixed = tl.grad(P.fixed_and_named, argnums=1)


def _sum_of_grad(x, y):
    return _d_fixed(x, y).sum()
