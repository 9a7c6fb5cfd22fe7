"""NumPy indexing through tl.jit (slice/dynamic_slice/gather/scatter) against the interpreter."""
import numpy as np
import pytest

import tlaloc as tl

from . import indexing_programs as I

R = np.random.default_rng(0)
X2 = R.normal(size=(5, 6))
X3 = R.normal(size=(4, 5, 6))

TABLE = [
    ("basic_slices", I.basic_slices, (X2,)),
    ("negative_step", I.negative_step, (X2,)),
    ("newaxis_and_reverse", I.newaxis_and_reverse, (X2,)),
    ("dynamic_row", I.dynamic_row, (X2, np.int64(3))),
    ("dynamic_row_negative", I.dynamic_row, (X2, np.int64(-2))),
    ("dynamic_column", I.dynamic_column, (X2, np.int32(4))),
    ("int_array", I.int_array, (X2, np.array([4, 0, 4, -1]))),
    ("int_array_then_slice", I.int_array_then_slice, (X2, np.array([[1, 2], [0, 0]]))),
    ("non_adjacent", I.non_adjacent, (X3, np.array([0, 3]), np.array([[5], [1]]))),
    ("adjacent", I.adjacent, (X3, np.array([0, 3]), np.array([[5], [1]]))),
    ("ellipsis_last", I.ellipsis_last, (X3,)),
    ("set_slice", I.set_slice, (X2, R.normal(size=6))),
    ("add_fancy", I.add_fancy, (X2, np.array([1, 3, 1]), R.normal(size=(3, 6)))),
    ("set_dynamic_strided", I.set_dynamic_strided, (X2, np.int64(-1), R.normal(size=3))),
    ("take_and_diag", I.take_and_diag, (X2, np.array([5, 0, 2]))),
]


@pytest.mark.parametrize("name,fn,args", TABLE, ids=[t[0] for t in TABLE])
def test_indexing_matches_interpreter(name, fn, args):
    want = tl.jit(fn, backend="interpreter")(*args)
    got = np.asarray(tl.jit(fn)(*args))
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_indexing_gradient():
    def f(x, idx):
        return (x[idx, 1:] ** 2).sum() + x[::-1, 2].sum() + np.take(x, idx, axis=1).sum()

    idx = np.array([0, 2, 2])
    np.testing.assert_allclose(np.asarray(tl.jit(tl.grad(f))(X2, idx)), tl.grad(f)(X2, idx), rtol=1e-12)
