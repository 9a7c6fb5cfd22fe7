"""The hit path of ``tl.jit`` (``tlaloc._jit.dispatch``): a call whose signature was compiled
before reuses its executable without rebuilding TreeDefs and avals; a new structure, shape,
dtype, leaf type, static value or closure shape compiles anew; bad arguments are still
refused by name on every call, not only the first."""
import collections
import dataclasses
import sys

import numpy as np
import pytest

import tlaloc as tl
from tlaloc import _pytree, nn, optim
from tlaloc._jit import dispatch
from tlaloc._runtime.pjrt import device_put

from . import programs as P

SHIFT = np.ones(3)


def affine(params, x):
    return x @ params["w"] + params["b"]


def pair(p, x):
    return p[0] * x + p[1]


def total(x):
    return x.sum() + SHIFT.sum()


def scaled(m, x):
    return x * m.w * m.scale


def step(w, g):
    return w - 0.1 * g


def sq_loss(w, x):
    return ((x @ w) ** 2).sum()


@dataclasses.dataclass(frozen=True)
class Scaled:
    w: object
    scale: float = nn.static_field()


def mlp_loss(model, batch):
    x, y = batch
    return nn.cross_entropy(model(x), y)


OPT = optim.AdamW(lr=1e-2)


def train_step(model, state, batch):
    loss, grads = tl.value_and_grad(mlp_loss)(model, batch)
    model, state = OPT.update(model, grads, state)
    return model, state, loss


def _r():
    return np.random.default_rng(0)


def _params(d=3, k=2, dtype=np.float64):
    r = _r()
    return {"w": r.normal(size=(d, k)).astype(dtype), "b": r.normal(size=k).astype(dtype)}


def test_hits_reuse_the_executable_and_read_the_new_values():
    jf = tl.jit(affine)
    r = _r()
    for _ in range(4):
        p, x = _params(), r.normal(size=(4, 3))
        p = {"w": p["w"] * r.normal(), "b": p["b"] + r.normal()}
        np.testing.assert_allclose(np.asarray(jf(p, x)), affine(p, x), rtol=1e-12)
    assert jf.cache_size() == 1


def test_a_new_shape_dtype_or_structure_compiles_anew():
    jf = tl.jit(affine)
    x = _r().normal(size=(4, 3))
    jf(_params(), x)
    jf(_params(), x[:2])                                   # new shape
    assert jf.cache_size() == 2
    jf(_params(dtype=np.float32), x.astype(np.float32))   # new dtype
    assert jf.cache_size() == 3
    p = dict(_params(), c=np.zeros(1))                     # new structure (one more key)
    np.testing.assert_allclose(np.asarray(jf(p, x)), affine(p, x), rtol=1e-12)
    assert jf.cache_size() == 4
    for k in range(4):                                     # each again: all hits
        jf(_params(), x)
        jf(_params(), x[:2])
    assert jf.cache_size() == 4

    jp = tl.jit(pair)
    a, b, x = np.full(3, 2.0), np.ones(3), np.arange(3.0)
    assert np.asarray(jp((a, b), x)).tolist() == [1.0, 3.0, 5.0]
    assert np.asarray(jp([a, b], x)).tolist() == [1.0, 3.0, 5.0]     # a list is another structure
    assert jp.cache_size() == 2


def test_a_static_field_value_is_part_of_the_signature():
    js = tl.jit(scaled)
    w, x = np.full(2, 3.0), np.ones(2)
    assert np.asarray(js(Scaled(w, 2.0), x)).tolist() == [6.0, 6.0]
    assert np.asarray(js(Scaled(w, 5.0), x)).tolist() == [15.0, 15.0]
    assert np.asarray(js(Scaled(w, 2.0), x)).tolist() == [6.0, 6.0]
    assert js.cache_size() == 2


def test_static_argnums_values_select_the_executable():
    jf = tl.jit(_static_sum, static_argnums=1)
    x = np.ones(3)
    assert float(jf(x, 2)) == float(_static_sum(x, 2))
    assert float(jf(x, 3)) == float(_static_sum(x, 3))
    assert float(jf(x, 2)) == float(_static_sum(x, 2))
    assert jf.cache_size() == 2


def _static_sum(x, n):
    s = x * 0.0
    for i in range(n):
        s = s + x * i
    return s.sum()


def test_numpy_and_device_arrays_share_one_program():
    jf = tl.jit(step)
    w, g = np.arange(4.0), np.ones(4)
    a = jf(w, g)
    b = jf(device_put(w), device_put(g))
    c = jf(device_put(w), g)
    assert jf.cache_size() == 1
    for out in (a, b, c):
        np.testing.assert_allclose(np.asarray(out), w - 0.1, rtol=1e-12)


def test_python_numbers_are_weak_leaves_and_read_each_call():
    jp = tl.jit(pair)
    x = np.arange(3.0, dtype=np.float32)
    for s in (2.0, 3.0, -1.0):
        out = jp((s, 1.0), x)
        assert out.dtype == np.float32                     # weak: adopts the array's dtype
        np.testing.assert_allclose(np.asarray(out), s * x + 1.0)
    assert jp.cache_size() == 1
    out = jp((np.float32(2.0), 1.0), x)                    # a NumPy scalar is not weak: another program
    np.testing.assert_allclose(np.asarray(out), 2.0 * x + 1.0)
    assert jp.cache_size() == 2


def test_closure_arrays_are_read_each_call_and_a_new_shape_recompiles(monkeypatch):
    mod = sys.modules[__name__]
    jt = tl.jit(total)
    x = np.ones(2)
    assert float(jt(x)) == 5.0
    monkeypatch.setattr(mod, "SHIFT", np.full(3, 2.0))
    assert float(jt(x)) == 8.0                             # same shape: the hit reads the new value
    assert jt.cache_size() == 1
    monkeypatch.setattr(mod, "SHIFT", np.ones(5))
    assert float(jt(x)) == 7.0                             # new shape: compiled anew
    assert jt.cache_size() == 2
    assert float(jt(x)) == 7.0


def test_module_and_optimizer_state_step_compiles_once_and_matches_eager():
    model = nn.MLP((4, 8, 3), key=0)
    state = OPT.init(model)
    r = _r()
    batch = (r.normal(size=(5, 4)).astype(np.float32), r.integers(0, 3, 5).astype(np.int32))
    jstep = tl.jit(train_step)
    m_j, s_j, m_e, s_e = model, state, model, state
    for _ in range(3):
        m_j, s_j, loss_j = jstep(m_j, s_j, batch)
        m_e, s_e, loss_e = train_step(m_e, s_e, batch)
        np.testing.assert_allclose(float(np.asarray(loss_j)), float(loss_e), rtol=1e-5)
    assert jstep.cache_size() == 1
    assert type(m_j) is nn.MLP and type(s_j) is type(state)
    for a, b in zip(_pytree.leaves((m_j, s_j)), _pytree.leaves((m_e, s_e))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    other = nn.MLP((4, 8, 3), activation=nn.tanh, key=0)  # another static field value
    jstep(other, OPT.init(other), batch)
    assert jstep.cache_size() == 2


def test_hit_outputs_are_device_arrays_like_the_first_call():
    jf = tl.jit(affine)
    p, x = _params(), _r().normal(size=(4, 3))
    first, again = jf(p, x), jf(p, x)
    assert type(first) is type(again)
    assert (first.dtype, first.shape, first.sharding) == (again.dtype, again.shape, again.sharding)
    np.testing.assert_array_equal(np.asarray(first), np.asarray(again))


def test_bad_arguments_are_refused_after_a_hit_too():
    jg = tl.jit(tl.grad(sq_loss))
    w, x = np.ones((3, 2)), np.ones((4, 3))
    jg(w, x)
    jg(w, x)
    with pytest.raises(tl.GradientError, match="floating-point"):
        jg(np.ones((3, 2), np.int32), x)
    with pytest.raises(tl.ArgumentError, match="positional arguments"):
        jg(w, x, x)

    jstep = tl.jit(step, donate_argnums=0)
    w = device_put(np.ones(8))
    w = jstep(w, np.ones(8))
    w2 = jstep(w, np.ones(8))                              # a hit, donating w
    with pytest.raises(tl.ArgumentError, match="donated to an earlier call"):
        jstep(w, np.ones(8))
    np.testing.assert_allclose(np.asarray(jstep(w2, np.ones(8))), np.full(8, 0.7))


def test_run_time_checks_raise_on_every_call():
    jf = tl.jit(P.while_overflow)
    for _ in range(2):
        with pytest.raises(tl.TlalocError, match="max_trips=8"):
            jf(np.ones(2))


# -- the signature itself -------------------------------------------------------------------

def _key(*args, static=frozenset()):
    sig = dispatch.signature(args, static)
    return None if sig is None else sig[0]


def test_signature_tells_structures_shapes_dtypes_and_leaf_types_apart():
    x = np.ones(3)
    same = [_key((x, x)), _key((np.zeros(3), np.full(3, 2.0)))]
    assert same[0] == same[1]
    different = [_key((x, x)), _key([x, x]), _key((x, (x,))), _key((x, np.ones(4))),
                 _key((x, np.ones(3, np.float32))), _key((x, device_put(x))), _key((x, 1.0)),
                 _key((x, np.float64(1.0))), _key((x, 1)), _key((x, None)), _key({"a": x, "b": x}),
                 _key({"a": x, "c": x}), _key(Scaled(x, 1.0)), _key(Scaled(x, 2.0))]
    assert len(set(different)) == len(different)
    assert _key(x, 2, static=frozenset({1})) != _key(x, 3, static=frozenset({1}))
    assert _key(x, 2, static=frozenset({-1})) == _key(x, 2, static=frozenset({1}))


def test_signature_leaves_unknown_values_to_the_slow_path():
    assert _key(object()) is None
    assert _key(2 ** 70) is None
    assert _key(np.ones(2), [1], static=frozenset({1})) is None      # unhashable static value
    assert _key(np.ones(2), 1, static=frozenset({5})) is None        # out of range: the slow path says so
    assert dispatch.signature((np.ones(2), {"a": 1.0}), frozenset())[1][1] == 1.0


def test_unflattener_rebuilds_every_kind_of_node():
    Point = collections.namedtuple("Point", "x y")
    tree = {"a": (1, [2, None, Point(3, 4)]), "b": Scaled(5, 0.5), "c": {"z": 6, "y": 7}}
    leaves, td = _pytree.flatten(tree)
    rebuilt = _pytree.unflattener(td)(leaves)
    assert rebuilt == tree
    assert _pytree.flatten(rebuilt)[1] == td
    assert type(rebuilt["a"][1][2]) is Point
    with pytest.raises(ValueError, match="leaves"):
        _pytree.unflattener(td)(leaves[:-1])


def _minus(w, g):
    return w - g


def test_two_functions_with_one_signature_keep_their_own_programs():
    ja, jb = tl.jit(step), tl.jit(_minus)
    w, g = np.arange(3.0), np.ones(3)
    for k in range(3):
        np.testing.assert_allclose(np.asarray(ja(w + k, g)), w + k - 0.1, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(jb(w + k, g)), w + k - 1.0, rtol=1e-12)


def test_hits_run_under_jax_disable_jit():
    jax = pytest.importorskip("jax")
    jf = tl.jit(step)
    w, g = np.arange(3.0), np.ones(3)
    jf(w, g)
    jf(w, g)
    with jax.disable_jit():
        np.testing.assert_allclose(np.asarray(jf(w, g)), w - 0.1, rtol=1e-12)
