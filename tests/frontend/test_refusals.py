"""The language fence: constructs outside the differentiable subset are refused
when grad is applied, with file:line:col, the construct's name and a fix."""
import inspect
import os

import numpy as np
import pytest

import tlaloc as tl
from tlaloc import numpy as tnp
from tlaloc._core.primitive import Primitive

from . import refusal_cases as rc

CASES = [
    # (function, marker, words the message must contain)
    (rc.uses_with, "with", ["`with`", "outside"]),
    (rc.uses_try, "try", ["`try`", "validate"]),
    (rc.uses_global, "global", ["`global`", "argument"]),
    (rc.uses_foreign_function, "foreign", ["scipy.special.gammainc", "custom_vjp"]),
    (rc.uses_print, "print", ["`print` of a computed value inside an `if`"]),
    (rc.recursive, "recursion", ["recursive", "loop"]),
    (rc.uses_attribute_store, "attribute store", ["Attribute", "immutable"]),
    (rc.uses_del, "del", ["`del`"]),
    (rc.uses_set_comprehension, "setcomp", ["set comprehension"]),
    (rc.uses_float_on_array, "float", ["float", "astype"]),
    (rc.uses_generator, "yield", ["yield"]),
    (rc.uses_unknown_numpy, "numpy without equivalent", ["unwrap", "tlaloc"]),
    (rc.uses_class, "class", ["class"]),
    (rc.uses_match, "match", ["`match`", "if/elif"]),
    (rc.uses_undefined_after_branch, "maybe undefined", ["`y`", "undefined"]),
]


def _marker_line(marker):
    lines = inspect.getsource(rc).splitlines()
    hits = [i + 1 for i, l in enumerate(lines) if l.rstrip().endswith(f"# REFUSE: {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


def _marker_col(marker):
    line = inspect.getsource(rc).splitlines()[_marker_line(marker) - 1]
    return len(line) - len(line.lstrip()) + 1


@pytest.mark.parametrize("fn,marker,words", CASES, ids=[c[1] for c in CASES])
def test_refused_at_definition_with_location(fn, marker, words):
    with pytest.raises(tl.FenceError) as info:
        tl.grad(fn)
    err = info.value
    assert os.path.samefile(err.filename, rc.__file__)
    assert err.lineno == _marker_line(marker), str(err)
    text = str(err)
    assert text.startswith(f"{err.filename}:{err.lineno}:{err.offset}: ")
    for w in words:
        assert w in text, (w, text)


def test_statement_column_is_the_statement_start():
    with pytest.raises(tl.FenceError) as info:
        tl.grad(rc.uses_with)
    assert info.value.offset == _marker_col("with")


def test_primitive_without_vjp_rule_is_refused_by_name():
    from tlaloc._core.primitive import REGISTRY
    no_rule = Primitive("test_no_vjp_rule", impl=np.sin, shape_rule=lambda x: x.shape,
                        dtype_rule=lambda x: x.dtype)
    try:
        def f(x):
            return no_rule.bind(x).sum()
        with pytest.raises(tl.NoRuleError, match="no VJP rule for `test_no_vjp_rule`"):
            tl.grad(f)
    finally:
        del REGISTRY["test_no_vjp_rule"]     # tables that enumerate every primitive must not see it


def int_input(n, x):
    return (x * n).sum()


def test_gradient_with_respect_to_integer_input_is_refused():
    g = tl.grad(int_input, argnums=0)
    with pytest.raises(tl.GradientError, match="argument `n`.*int64"):
        g(np.arange(3), np.ones(3))
    # the float argument is fine (negative control)
    np.testing.assert_array_equal(tl.grad(int_input, argnums=1)(np.arange(3), np.ones(3)), np.arange(3.0))


def vector_output(x):
    return x * 2


def test_non_scalar_output_is_refused_by_grad():
    g = tl.grad(vector_output)
    with pytest.raises(tl.GradientError, match="scalar output.*shape \\(3,\\)"):
        g(np.ones(3))


def test_a_supported_twin_is_not_refused():
    # negative control: the same body without the refused construct lowers fine
    def ok(x):
        y = x * 2
        return y.sum()
    np.testing.assert_array_equal(tl.grad(ok)(np.ones(3)), np.full(3, 2.0))
