"""``Primitive.abstract_eval`` remembers its results by (primitive, rules, input avals, params):
a serving export evaluates the same rules on the same avals once per layer. A remembered
result must be exactly the computed one, and nothing that changes the answer may share a key."""
import numpy as np
import pytest

from tlaloc._core import primitive
from tlaloc._core.aval import AbstractValue
from tlaloc._prims import REGISTRY
from tlaloc.errors import ShapeError

F32 = np.dtype(np.float32)


def _a(shape, dtype=F32, **kw):
    return AbstractValue(np.dtype(dtype), shape, **kw)


@pytest.fixture(autouse=True)
def _empty_memo(monkeypatch):
    monkeypatch.setattr(primitive, "_AVAL_MEMO", {})


def test_a_remembered_result_equals_the_computed_one():
    p, x = REGISTRY["reshape"], _a((2, 3))
    first = p.abstract_eval(x, shape=(3, 2))
    assert len(primitive._AVAL_MEMO) == 1
    assert p.abstract_eval(x, shape=(3, 2)) is first
    assert first == AbstractValue(F32, (3, 2))
    assert p.abstract_eval(x, shape=(6,)) == AbstractValue(F32, (6,))   # another param, another key


def test_params_equal_in_python_but_of_other_types_do_not_share_a_key():
    """1 == 1.0 == True in Python; as params they may mean different things, so each is its own key."""
    keys = {primitive._aval_key(REGISTRY["reduce_sum"], (_a((2, 3)),), {"axes": v}) for v in
            ((1,), (1.0,), (True,))}
    assert len(keys) == 3


def test_avals_that_differ_in_names_or_weakness_do_not_share_a_key():
    p = REGISTRY["exp"]
    keys = {primitive._aval_key(p, (a,), {}) for a in
            (_a((2,)), _a((2,), names=("batch",)), _a((), weak=True), _a(()))}
    assert len(keys) == 4


def test_unhashable_or_unknown_params_are_not_remembered():
    assert primitive._aval_key(REGISTRY["exp"], (_a((2,)),), {"table": np.zeros(2)}) is None
    assert primitive._aval_key(REGISTRY["exp"], (_a((2,)),), {"f": [1, 2]}) is None
    assert primitive._aval_key(REGISTRY["exp"], (_a((2,)),), {"x": np.float32(1)}) is None


def test_a_rule_replaced_after_use_is_used(monkeypatch):
    """A rule swapped after a result was remembered (a test's monkeypatch, a re-registration)
    gives its own answer, not the remembered one."""
    p, x = REGISTRY["exp"], _a((2, 3))
    assert p.abstract_eval(x).shape == (2, 3)
    monkeypatch.setattr(p, "shape_rule", lambda x, **_: (7,))
    assert p.abstract_eval(x).shape == (7,)


def test_a_rule_that_raises_raises_every_time():
    p = REGISTRY["add"]
    for _ in range(2):
        with pytest.raises(ShapeError, match="add: shapes"):
            p.abstract_eval(_a((2, 3)), _a((4, 5)))
    assert primitive._AVAL_MEMO == {}


def test_negative_control_a_key_without_the_rules_would_serve_a_stale_result(monkeypatch):
    """The check above can fail: with the rules left out of the key, the swapped rule is not seen."""
    monkeypatch.setattr(primitive, "_aval_key", lambda prim, avals, params: (prim, avals))
    p, x = REGISTRY["exp"], _a((2, 3))
    p.abstract_eval(x)
    monkeypatch.setattr(p, "shape_rule", lambda x, **_: (7,))
    assert p.abstract_eval(x).shape == (2, 3)
