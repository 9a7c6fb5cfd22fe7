"""One compile per signature; TLALOC_LOG_COMPILES=1 logs each compile with its reason."""
import logging

import numpy as np

import tlaloc as tl


def f(x, n):
    s = x * 0.0
    for i in range(n):
        s = s + x * i
    return s.sum()


def test_compile_once_per_signature():
    jf = tl.jit(f, static_argnums=1)
    x = np.ones(3)
    jf(x, 2)
    jf(x, 2)
    jf(np.full(3, 2.0), 2)
    assert jf.cache_size() == 1
    jf(np.ones(4), 2)
    assert jf.cache_size() == 2
    jf(np.ones(4, np.float32), 2)
    assert jf.cache_size() == 3
    jf(x, 3)
    assert jf.cache_size() == 4
    assert float(jf(x, 3)) == 9.0


def test_recompile_reasons_are_logged(monkeypatch, caplog):
    monkeypatch.setenv("TLALOC_LOG_COMPILES", "1")
    jf = tl.jit(f, static_argnums=1)
    with caplog.at_level(logging.WARNING, logger="tlaloc.jit"):
        jf(np.ones(3), 2)
        jf(np.ones(3), 2)                      # cached: no log
        jf(np.ones(5), 2)
        jf(np.ones(5, np.float32), 2)
        jf(np.ones(5, np.float32), 4)
    reasons = [r.getMessage() for r in caplog.records if r.name == "tlaloc.jit"]
    assert len(reasons) == 4, reasons
    for msg, why in zip(reasons, ["first call", "new shape", "new dtype", "new static value"]):
        assert why in msg, msg
    assert "f(float64[5]" in reasons[1]


def test_no_log_without_the_variable(monkeypatch, caplog):
    monkeypatch.delenv("TLALOC_LOG_COMPILES", raising=False)
    with caplog.at_level(logging.WARNING, logger="tlaloc.jit"):
        tl.jit(f, static_argnums=1)(np.ones(2), 1)
    assert not [r for r in caplog.records if r.name == "tlaloc.jit"]


SCALE = 2.0
WEIGHTS = np.array([1.0, 2.0, 3.0])


def scaled_loss(x):
    return (WEIGHTS * x ** 2).sum() * SCALE


def test_a_rebound_global_is_read_again_under_jit():
    # was: tl.jit(f) and tl.jit(tl.grad(f)) kept the old program after `SCALE = 3.0` (the folded
    # Python number), silently returning the old values while tl.grad(f) rebuilt
    global SCALE, WEIGHTS
    jf, jg, x = tl.jit(scaled_loss), tl.jit(tl.grad(scaled_loss)), np.ones(3)
    try:
        assert jf(x) == 12.0 and np.array_equal(jg(x), [4.0, 8.0, 12.0])
        SCALE = 3.0
        assert jf(x) == 18.0                                 # analytic: 3 * (1 + 2 + 3)
        np.testing.assert_array_equal(jg(x), [6.0, 12.0, 18.0])
        WEIGHTS = np.array([0.0, 0.0, 1.0])                  # a rebound global array: a hidden input
        np.testing.assert_array_equal(jg(x), [0.0, 0.0, 6.0])
        assert jf.cache_size() == 1                          # the stale program was dropped
    finally:
        SCALE, WEIGHTS = 2.0, np.array([1.0, 2.0, 3.0])


def scaled_square(x):
    return (x ** 2).sum() * SCALE


def test_a_rebound_global_is_read_again_by_every_transform():
    # was: vmap, jacfwd, hessian (its inner grad), jvp and their tl.jit kept the folded old value
    global SCALE
    x = np.ones(3)
    built = {"vmap": tl.vmap(scaled_square), "jacfwd": tl.jacfwd(scaled_square),
             "hessian": tl.hessian(scaled_square), "jit_vmap": tl.jit(tl.vmap(scaled_square)),
             "jit_hessian": tl.jit(tl.hessian(scaled_square))}

    def values():
        return {"vmap": float(built["vmap"](x[None])[0]), "jacfwd": float(built["jacfwd"](x)[0]),
                "hessian": float(built["hessian"](x)[0, 0]), "jvp": float(tl.jvp(scaled_square, (x,), (x,))[1]),
                "jit_vmap": float(built["jit_vmap"](x[None])[0]), "jit_hessian": float(built["jit_hessian"](x)[0, 0])}
    try:
        assert values() == {"vmap": 6.0, "jacfwd": 4.0, "hessian": 4.0, "jvp": 12.0, "jit_vmap": 6.0,
                            "jit_hessian": 4.0}
        SCALE = 3.0                                   # analytic: every value scales by 3/2
        assert values() == {"vmap": 9.0, "jacfwd": 6.0, "hessian": 6.0, "jvp": 18.0, "jit_vmap": 9.0,
                            "jit_hessian": 6.0}
    finally:
        SCALE = 2.0
