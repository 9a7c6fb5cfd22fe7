"""Code from an installed package that tlaloc cannot read is refused at the user's own line.

A fake package is written under a ``site-packages`` folder (as pip would lay it
out): its plain NumPy function differentiates as any other source; its
unsupported one is refused at the user's call into it, or where the user applied
``tl.grad`` to it, naming the package (issue 14: never a location inside a library).
"""
import importlib
import inspect
import sys
import textwrap

import numpy as np
import pytest

import tlaloc as tl

LIB = '''
import numpy as np


def smooth(x):
    return np.sum(np.sin(x) ** 2)


def decorated(x):
    def deco(g):
        return g

    @deco
    def inner(y):
        return y * 2.0
    return np.sum(inner(x))


def bad_index(x):
    return np.sum(x * np.arange(3.0)[np.float64(0.5)])
'''


@pytest.fixture(scope="module")
def fakelib(tmp_path_factory):
    root = tmp_path_factory.mktemp("env") / "lib" / "site-packages"
    (root / "fakelib_tl").mkdir(parents=True)
    (root / "fakelib_tl" / "__init__.py").write_text(textwrap.dedent(LIB))
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("fakelib_tl")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("fakelib_tl", None)


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(k for k, line in enumerate(lines) if text in line)


def test_readable_library_code_differentiates(fakelib):
    def loss(x):
        return fakelib.smooth(x) * 3.0
    x = np.array([0.3, -1.2, 2.0])
    np.testing.assert_allclose(tl.grad(loss)(x), 3.0 * 2 * np.sin(x) * np.cos(x), rtol=1e-12)


def test_unreadable_library_call_is_refused_at_the_users_call(fakelib):
    def loss(x):
        return fakelib.decorated(x) + 1.0
    with pytest.raises(tl.FenceError) as info:
        tl.grad(loss)(np.ones(3))
    where = f"{__file__}:{_line_of(loss, 'fakelib.decorated')}:16"
    assert info.value.where == where
    assert "`decorated` from the installed package `fakelib_tl`" in str(info.value)
    assert "decorators on a nested function" in str(info.value)       # the reason is kept


def test_transform_of_a_library_function_is_refused_where_it_is_applied(fakelib):
    with pytest.raises(tl.FenceError) as info:
        tl.grad(fakelib.bad_index)(np.ones(3))  # the line the user wrote
    line = _line_of(test_transform_of_a_library_function_is_refused_where_it_is_applied, "the line the user wrote")
    assert info.value.where.startswith(f"{__file__}:{line}:")
    assert "`bad_index` comes from the installed package `fakelib_tl`" in str(info.value)
    assert "valid indices" in str(info.value)           # the reason is kept
