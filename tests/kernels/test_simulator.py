"""The PTX simulator: warps, shuffles, votes, barriers, divergence, memory checks, numerics."""
import fractions

import numpy as np
import pytest

from tlaloc.kernels.ptx import (KernelTemplate, ctaid, f32, inst, label, mem, param, place, pred, r32, r64,
                                shared, tid, laneid)
from tlaloc.kernels.sim import SimError, run
from tlaloc.kernels.sim.semantics import fma_f32

FULL = 0xFFFFFFFF


def out_ptr(name="out"):
    a = r64()
    inst("ld.param.u64", a, mem(param("u64", name)))
    inst("cvta.to.global.u64", a, a)
    return a


def store_u32(a, value, index):
    off = r64()
    inst("mul.wide.u32", off, index, 4)
    inst("add.u64", off, a, off)
    inst("st.global.u32", mem(off), value)


def one_value_kernel(body):
    """A kernel writing ``body(t)`` (a u32 register) to out[global thread]."""
    def build(k):
        a = out_ptr()
        t, g = r32(), r32()
        inst("mov.u32", t, tid.x)
        inst("mov.u32", g, ctaid.x)
        inst("mad.lo.u32", g, g, 64, t)
        store_u32(a, body(t), g)
        inst("ret")
    return KernelTemplate("k", build)


def launch(template, blocks=1, threads=64, dtype=np.uint32):
    out = np.zeros(blocks * threads, dtype)
    run(template.specialize(), [out], (blocks,), (threads,))
    return out


@pytest.mark.parametrize("mode,b,c", [("up", 3, 0), ("down", 5, 31), ("bfly", 6, 31), ("idx", 9, 31),
                                      ("down", 2, (32 - 8) << 8 | 31), ("idx", 3, (32 - 8) << 8 | 31)])
def test_shfl_matches_the_ptx_definition(mode, b, c):
    def body(t):
        v = r32()
        inst(f"shfl.sync.{mode}.b32", v, t, b, c, FULL)
        return v
    got = launch(one_value_kernel(body)).reshape(2, 32)
    lane = np.arange(32)
    seg = (c >> 8) & 31
    min_lane = lane & seg
    max_lane = min_lane | ((c & 31) & ~seg)
    j = {"up": lane - b, "down": lane + b, "bfly": lane ^ b, "idx": min_lane | (b & ~seg)}[mode]
    ok = (j >= max_lane) if mode == "up" else (j <= max_lane)
    src = np.where(ok, j, lane)
    for w in range(2):
        np.testing.assert_array_equal(got[w], src + 32 * w)


def test_vote_and_redux():
    def body(t):
        p, q, b, s, out = pred(), pred(), r32(), r32(), r32()
        inst("setp.lt.u32", p, t, 40)                      # warp 0: all, warp 1: lanes 0..7
        inst("vote.sync.ballot.b32", b, p, FULL)
        inst("vote.sync.all.pred", q, p, FULL)
        inst("selp.u32", s, 1 << 31, 0, q)
        inst("or.b32", out, b, s)
        inst("redux.sync.add.u32", s, t, FULL)
        inst("xor.b32", out, out, s)
        return out
    got = launch(one_value_kernel(body)).reshape(2, 32)
    sums = [sum(range(32)), sum(range(32, 64))]
    assert (got[0] == ((0xFFFFFFFF | 1 << 31) ^ sums[0]) & 0xFFFFFFFF).all()
    assert (got[1] == (0xFF ^ sums[1])).all()


def test_divergent_branches_reconverge_before_a_shuffle():
    def body(t):
        odd, v, w = pred(), r32(), r32()
        other, join = label("other"), label("join")
        inst("and.b32", v, t, 1)
        inst("setp.eq.u32", odd, v, 1)
        inst("bra", other, guard=odd)
        inst("mul.lo.u32", v, t, 10)                      # even lanes
        inst("bra", join)
        place(other)
        inst("add.u32", v, t, 1000)                       # odd lanes
        place(join)
        inst("shfl.sync.bfly.b32", w, v, 1, 31, FULL)      # every lane is back
        return w
    got = launch(one_value_kernel(body), threads=32)
    t = np.arange(32)
    mine = np.where(t % 2, t + 1000, t * 10)
    np.testing.assert_array_equal(got, mine[t ^ 1])


def test_loops_with_different_trip_counts():
    def body(t):
        i, acc, more = r32(), r32(), pred()
        top = label("top")
        inst("mov.u32", acc, 0)
        inst("mov.u32", i, 0)
        place(top)
        inst("add.u32", acc, acc, i)
        inst("add.u32", i, i, 1)
        inst("setp.le.u32", more, i, t)
        inst("bra", top, guard=more)
        return acc
    got = launch(one_value_kernel(body))
    t = np.arange(64)
    np.testing.assert_array_equal(got, t * (t + 1) // 2)


def test_shuffle_with_diverged_lanes_is_refused():
    def body(t):
        p, v = pred(), r32()
        skip = label("skip")
        inst("mov.u32", v, t)
        inst("setp.lt.u32", p, t, 16)
        inst("bra", skip, guard=p)
        inst("shfl.sync.bfly.b32", v, v, 1, 31, FULL)
        place(skip)
        return v
    with pytest.raises(SimError, match=r"lanes \[0, 1, .*15\] of the member mask are not converged"):
        launch(one_value_kernel(body), threads=32)


def test_shared_memory_and_barrier_reverse_a_block():
    def build(k):
        a = out_ptr()
        s = shared("u32", "buf", 64)
        t, addr, r, v = r32(), r32(), r32(), r32()
        inst("mov.u32", t, tid.x)
        inst("mov.u32", addr, s)
        inst("mad.lo.u32", addr, t, 4, addr)
        inst("mul.lo.u32", v, t, 3)
        inst("st.shared.u32", mem(addr), v)
        inst("bar.sync", 0)
        inst("sub.u32", r, 63, t)
        inst("mov.u32", addr, s)
        inst("mad.lo.u32", addr, r, 4, addr)
        inst("ld.shared.u32", v, mem(addr))
        store_u32(a, v, t)
        inst("ret")
    got = launch(KernelTemplate("rev", build))
    np.testing.assert_array_equal(got, 3 * (63 - np.arange(64)))


def test_barrier_not_reached_by_everyone_deadlocks():
    def build(k):
        t, p = r32(), pred()
        skip = label("skip")
        inst("mov.u32", t, tid.x)
        inst("setp.lt.u32", p, t, 32)
        inst("bra", skip, guard=p)
        inst("bar.sync", 0)
        inst("ret")
        place(skip)
        inst("bar.sync", 1)
        inst("ret")
    with pytest.raises(SimError, match=r"deadlock: in block 0, threads wait at bar.sync 0 at .*; bar.sync 1 at"):
        run(KernelTemplate("dead", build).specialize(), [], (1,), (64,), max_steps=2000)


def test_out_of_bounds_access_names_the_buffer_and_the_line():
    def build(k):
        a = out_ptr("data")
        t = r32()
        inst("mov.u32", t, tid.x)
        store_u32(a, t, t)
        inst("ret")
    with pytest.raises(SimError, match=r"writes 4 bytes at byte 40 of `data` \(40 bytes\): out of bounds") as e:
        run(KernelTemplate("oob", build).specialize(), [np.zeros(10, np.uint32)], (1,), (32,))
    assert "test_simulator.py" in str(e.value) and "(block 0, thread 10)" in str(e.value)


def test_reading_an_unwritten_register_is_refused():
    def body(t):
        v, p = r32(), pred()
        inst("setp.lt.u32", p, t, 3)
        inst("mov.u32", v, 7, guard=p)
        inst("add.u32", v, v, 1)
        return v
    with pytest.raises(SimError, match=r"reads register %r\d+ before anything was written"):
        launch(one_value_kernel(body))


def test_endless_loop_is_stopped():
    def build(k):
        top = label("top")
        place(top)
        inst("bra", top)
    with pytest.raises(SimError, match="ran over 500 steps"):
        run(KernelTemplate("spin", build).specialize(), [], (1,), (32,), max_steps=500)


def test_integer_semantics():
    def body(t):
        s, r, v = r32(), r32(), r32()
        inst("sub.u32", s, t, 10)                         # negative for t < 10 (as s32)
        inst("div.s32", r, s, 3)                          # truncates towards zero
        inst("rem.s32", v, s, 3)
        inst("mad.lo.u32", r, r, 1000, v)
        inst("shr.s32", v, s, 1)
        inst("xor.b32", r, r, v)
        inst("mul.hi.u32", v, t, 0x80000001)
        inst("add.u32", r, r, v)
        return r
    got = launch(one_value_kernel(body)).astype(np.int64)
    t = np.arange(64, dtype=np.int64)
    s = t - 10
    q = np.trunc(s / 3).astype(np.int64)
    want = ((q * 1000 + (s - 3 * q)) ^ (s >> 1)) + ((t * 0x80000001) >> 32)
    np.testing.assert_array_equal(got, want & 0xFFFFFFFF)


def test_cvt_float_to_int_saturates_and_rounds():
    vals = np.array([2.5, -2.5, 3.7, -0.2, 1e20, -1e20, np.nan, 0.0], np.float32)

    def build(k):
        src, dst = out_ptr("src"), out_ptr("dst")
        t, off, n = r32(), r64(), r32()
        f = f32()
        inst("mov.u32", t, tid.x)
        inst("mul.wide.u32", off, t, 4)
        inst("add.u64", src, src, off)
        inst("add.u64", dst, dst, off)
        inst("ld.global.f32", f, mem(src))
        inst("cvt.rni.s32.f32", n, f)
        inst("st.global.s32", mem(dst), n)
        inst("ret")
    out = np.zeros(8, np.int32)
    run(KernelTemplate("cvt", build).specialize(), [vals, out], (1,), (8,))
    np.testing.assert_array_equal(out, [2, -2, 4, 0, 2**31 - 1, -2**31, 0, 0])


def test_fma_is_rounded_once():
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(20000).astype(np.float32) for _ in range(3))
    # products near -c, where a second rounding would show
    c[:5000] = -(a[:5000].astype(np.float64) * b[:5000]).astype(np.float32)
    got = fma_f32(a, b, c)
    exact = [fractions.Fraction(float(x)) * fractions.Fraction(float(y)) + fractions.Fraction(float(z))
             for x, y, z in zip(a[:3000], b[:3000], c[:3000])]
    want = np.array([float(e) for e in exact], np.float64)            # exact, then one rounding to f64...
    np.testing.assert_array_equal(got[:3000], want.astype(np.float32))  # ...then f32 (innocuous here)
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 sits exactly halfway between two floats; adding
    # +-2^-80 decides the rounding, though float64 alone would round the sum back to the tie
    a = np.full(3, 1 + 2.0**-12, np.float32)
    got = fma_f32(a, a, np.array([2.0**-80, -2.0**-80, 0.0], np.float32))
    low = np.float32(1 + 2.0**-11)
    np.testing.assert_array_equal(got, [np.nextafter(low, np.float32(2)), low, low])   # up, down, tie to even


def test_special_registers_of_a_2d_grid():
    def build(k):
        a = out_ptr()
        x, y, g, lane = r32(), r32(), r32(), r32()
        inst("mov.u32", x, ctaid.x)
        inst("mov.u32", y, ctaid.y)
        inst("mov.u32", lane, laneid)
        inst("mad.lo.u32", g, y, 3, x)
        inst("mad.lo.u32", g, g, 100, lane)
        inst("mov.u32", lane, tid.x)
        inst("mad.lo.u32", x, x, 32, lane)
        inst("mad.lo.u32", x, y, 96, x)
        store_u32(a, g, x)
        inst("ret")
    out = np.zeros(3 * 2 * 32, np.uint32)
    run(KernelTemplate("grid", build).specialize(), [out], (3, 2), (32,))
    blk = np.repeat(np.arange(6), 32)
    np.testing.assert_array_equal(out, blk * 100 + np.tile(np.arange(32), 6))


def test_atomics_apply_in_thread_order():
    def build(k):
        a = out_ptr()
        t, old = r32(), r32()
        f = f32()
        inst("mov.u32", t, tid.x)
        inst("atom.global.add.u32", old, mem(a), t)
        inst("cvt.rn.f32.u32", f, t)
        inst("red.global.add.f32", mem(a, 4), f)
        inst("ret")
    out = np.zeros(2, np.uint32)
    run(KernelTemplate("atom", build).specialize(), [out], (2,), (64,))
    assert out[0] == 2 * sum(range(64))
    assert out.view(np.float32)[1] == 2 * sum(range(64))
