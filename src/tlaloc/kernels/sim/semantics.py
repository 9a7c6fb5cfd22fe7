"""What each instruction does, one handler per opcode: ``HANDLERS[opcode](m, ins, idx)``.

``idx`` are the threads that execute the instruction (guard already applied);
operands are read with the types the validator resolved (``ins.types``).

Float arithmetic is IEEE binary32/binary64 with round-to-nearest-even, as
PTX's ``.rn`` (the default): ``add``/``sub``/``mul``/``div.rn``/``sqrt.rn``/``rcp.rn``
are exact NumPy operations, and ``fma.rn.f32`` is rounded once (the product is
exact in float64 and a two-sum corrects the one case where rounding twice
would differ). Other rounding modes are refused by name. The approximate
instructions (``ex2``, ``lg2``, ``rsqrt``, ``sin``, ``cos``, ``tanh`` ``.approx``,
``div.approx``/``div.full``, ``rcp.approx``, ``sqrt.approx``) are computed in
float64 and rounded once, i.e. correctly rounded, where a GPU is within its
documented error (ex2.approx.f32: 2 ulp; rsqrt.approx.f32 and lg2: about 2^-22
relative; div.full: 2 ulp). Compare a GPU's result with a tolerance of about
1e-6 relative per approximate instruction on the path, never exactly.
"""
from __future__ import annotations

import fractions

import numpy as np

from ..ptx.ir import bits, kind
from .machine import NP, SimError
from .memory_ops import atom, cp_async, ld, st
from .warp_ops import converged, redux, shfl, vote


def _val(m, ins, k, idx):
    return m.read(ins.operands[k], ins.types[k], idx, ins)


def _put(m, ins, idx, v, k=0):
    m.write(ins.operands[k], ins.types[k], idx, v)


def _ftz(x):
    if x.dtype.kind != "f":
        return x
    tiny = np.finfo(x.dtype).tiny
    return np.where(np.abs(x) < tiny, np.copysign(np.zeros_like(x), x), x)


def _float_mods(m, ins, xs):
    bad = [r for r in (".rz", ".rm", ".rp") if ins.has(r)]
    if bad:
        raise SimError(f"{ins.loc}: the simulator models round-to-nearest only, not {bad[0]} ({ins.text})")
    return [_ftz(x) for x in xs] if ins.has(".ftz") else xs


def _finish(ins, r):
    if ins.has(".ftz"):
        r = _ftz(r)
    if ins.has(".sat") and r.dtype.kind == "f":
        r = np.where(np.isnan(r), 0, np.clip(r, 0, 1)).astype(r.dtype)
    return r


def fma_f32(a, b, c):
    """``a*b + c`` rounded once to float32 (inputs float32 arrays)."""
    a64, b64, c64 = a.astype(np.float64), b.astype(np.float64), c.astype(np.float64)
    p = a64 * b64                                   # exact: 24 + 24 bits
    with np.errstate(all="ignore"):
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)           # s + err == p + c exactly (two-sum)
        r = s.astype(np.float32)
        r64 = r.astype(np.float64)
        other = np.nextafter(r, np.where(s > r64, np.inf, -np.inf).astype(np.float32))
        mid = (r64 + other.astype(np.float64)) / 2
        tie = (s == mid) & (err != 0) & np.isfinite(s)
    if tie.any():    # s sits on a float32 midpoint; the exact value is on err's side of it
        up = np.where(other > r, other, r)
        down = np.where(other > r, r, other)
        r = np.where(tie, np.where(err > 0, up, down), r)
    return r.astype(np.float32)


def _fma_f64(a, b, c):
    out = []
    for x, y, z in zip(a, b, c):
        if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            out.append(x * y + z)
        else:
            out.append(float(fractions.Fraction(float(x)) * fractions.Fraction(float(y)) + fractions.Fraction(float(z))))
    return np.array(out, np.float64)


# -- arithmetic ----------------------------------------------------------------------------

def _binary(fn_int, fn_float):
    def h(m, ins, idx):
        a, b = _val(m, ins, 1, idx), _val(m, ins, 2, idx)
        with np.errstate(all="ignore"):
            if a.dtype.kind == "f":
                a, b = _float_mods(m, ins, [a, b])
                r = _finish(ins, fn_float(a, b).astype(a.dtype))
            else:
                if ins.has(".sat"):
                    r = np.clip(fn_int(a.astype(np.int64), b.astype(np.int64)), -2**31, 2**31 - 1)
                else:
                    r = fn_int(a, b)
        _put(m, ins, idx, r)
    return h


def _mul(m, ins, idx):
    a, b = _val(m, ins, 1, idx), _val(m, ins, 2, idx)
    ty = ins.types[1]
    with np.errstate(all="ignore"):
        if a.dtype.kind == "f":
            a, b = _float_mods(m, ins, [a, b])
            return _put(m, ins, idx, _finish(ins, (a * b).astype(a.dtype)))
        if ins.has(".wide"):
            wide = np.int64 if kind(ty) == "s" else np.uint64
            return _put(m, ins, idx, a.astype(wide) * b.astype(wide))
        if ins.has(".hi"):
            return _put(m, ins, idx, _mulhi(a, b, ty))
        _put(m, ins, idx, a * b)


def _mulhi(a, b, ty):
    n = bits(ty)
    if n <= 32:
        wide = np.int64 if kind(ty) == "s" else np.uint64
        return ((a.astype(wide) * b.astype(wide)) >> n).astype(a.dtype)
    return np.array([(int(x) * int(y)) >> n for x, y in zip(a, b)], dtype=object).astype(np.int64 if kind(ty) == "s" else np.uint64).astype(a.dtype)


def _mad(m, ins, idx):
    a, b, c = (_val(m, ins, k, idx) for k in (1, 2, 3))
    ty = ins.types[1]
    with np.errstate(all="ignore"):
        if ins.has(".wide"):
            wide = np.int64 if kind(ty) == "s" else np.uint64
            r = a.astype(wide) * b.astype(wide) + c
        elif ins.has(".hi"):
            r = _mulhi(a, b, ty) + c
        else:
            r = a * b + c
    _put(m, ins, idx, r)


def _fma(m, ins, idx):
    a, b, c = _float_mods(m, ins, [_val(m, ins, k, idx) for k in (1, 2, 3)])
    r = fma_f32(a, b, c) if a.dtype == np.float32 else _fma_f64(a, b, c)
    _put(m, ins, idx, _finish(ins, r))


def _int_div(a, b, ins, m, idx, rem=False):
    if (b == 0).any():
        m.fail(ins, "integer division by zero", idx[int(np.argmax(b == 0))])
    if a.dtype.kind == "u":
        return a % b if rem else a // b
    q = (np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))) * np.sign(a.astype(np.int64)) * np.sign(b)
    return (a - b * q).astype(a.dtype) if rem else q.astype(a.dtype)


def _div(m, ins, idx):
    a, b = _val(m, ins, 1, idx), _val(m, ins, 2, idx)
    if a.dtype.kind != "f":
        return _put(m, ins, idx, _int_div(a, b, ins, m, idx))
    a, b = _float_mods(m, ins, [a, b])
    with np.errstate(all="ignore"):
        _put(m, ins, idx, _finish(ins, (a / b).astype(a.dtype)))


def _rem(m, ins, idx):
    _put(m, ins, idx, _int_div(_val(m, ins, 1, idx), _val(m, ins, 2, idx), ins, m, idx, rem=True))


def _unary_float(fn):
    def h(m, ins, idx):
        (a,) = _float_mods(m, ins, [_val(m, ins, 1, idx)])
        with np.errstate(all="ignore"):
            r = fn(a.astype(np.float64)).astype(a.dtype) if a.dtype.kind == "f" else fn(a)
        _put(m, ins, idx, _finish(ins, r))
    return h


def _minmax(fn_num, fn_nan):
    def h(m, ins, idx):
        a, b = _val(m, ins, 1, idx), _val(m, ins, 2, idx)
        if a.dtype.kind == "f":
            a, b = _float_mods(m, ins, [a, b])
            return _put(m, ins, idx, _finish(ins, (fn_nan if ins.has(".NaN") else fn_num)(a, b)))
        _put(m, ins, idx, fn_nan(a, b))
    return h


def _shift(left):
    def h(m, ins, idx):
        a, b = _val(m, ins, 1, idx), _val(m, ins, 2, idx).astype(np.int64)
        n = bits(ins.types[1])
        if left:
            r = np.where(b >= n, 0, a << np.minimum(b, n - 1).astype(a.dtype))
        elif a.dtype.kind == "i":
            r = a >> np.minimum(b, n - 1).astype(a.dtype)
        else:
            r = np.where(b >= n, 0, a >> np.minimum(b, n - 1).astype(a.dtype))
        _put(m, ins, idx, np.asarray(r, a.dtype))
    return h


def _logic(fn):
    def h(m, ins, idx):
        args = [_val(m, ins, k, idx) for k in range(1, len(ins.operands))]
        _put(m, ins, idx, fn(*args))
    return h


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


def _compare(ins, a, b):
    cmp = next(x[1:] for x in ins.mods if x[1:] in _CMP or x[1:] in ("equ", "neu", "ltu", "leu", "gtu", "geu",
                                                                          "num", "nan"))
    if a.dtype.kind != "f":
        return _CMP[cmp](a, b)
    nan = np.isnan(a) | np.isnan(b)
    if cmp == "num":
        return ~nan
    if cmp == "nan":
        return nan
    if cmp.endswith("u"):
        return _CMP[cmp[:-1]](a, b) | nan
    return _CMP[cmp](a, b) & ~nan


def _setp(m, ins, idx):
    a, b = _float_mods(m, ins, [_val(m, ins, 1, idx), _val(m, ins, 2, idx)])
    r = _compare(ins, a, b)
    if len(ins.operands) == 4:
        c = _val(m, ins, 3, idx)
        r = {".and": np.logical_and, ".or": np.logical_or, ".xor": np.logical_xor}[
            next(x for x in ins.mods if x in (".and", ".or", ".xor"))](r, c)
    _put(m, ins, idx, r)


def _selp(m, ins, idx):
    a, b, c = (_val(m, ins, k, idx) for k in (1, 2, 3))
    _put(m, ins, idx, np.where(c, a, b))


def _mov(m, ins, idx):
    _put(m, ins, idx, _val(m, ins, 1, idx))


def _cvt(m, ins, idx):
    d, s = ins.types
    a = _val(m, ins, 1, idx)
    if ins.has(".ftz"):
        a = _ftz(a)
    dt = NP[d]
    with np.errstate(all="ignore"):
        if kind(d) == "f":
            if kind(s) == "f" and bits(d) >= bits(s):
                r = a.astype(dt)
            else:
                _float_mods(m, ins, [])
                r = a.astype(dt)
            return _put(m, ins, idx, _finish(ins, r))
        if kind(s) == "f":
            rnd = {".rni": np.rint, ".rzi": np.trunc, ".rmi": np.floor, ".rpi": np.ceil}[
                next(x for x in ins.mods if x in (".rni", ".rzi", ".rmi", ".rpi"))]
            info = np.iinfo(dt)
            r = np.clip(rnd(a.astype(np.float64)), info.min, info.max)
            return _put(m, ins, idx, np.where(np.isnan(r), 0, r).astype(dt))
        if ins.has(".sat"):
            info = np.iinfo(dt)
            return _put(m, ins, idx, np.clip(a.astype(np.float64), info.min, info.max).astype(dt))
        wide = a.astype(np.int64) if a.dtype.kind == "i" else a.astype(np.uint64)
        _put(m, ins, idx, wide.astype(dt))


def _cvta(m, ins, idx):
    if ins.has(".shared") or ins.has(".local") or ins.has(".const"):
        raise SimError(f"{ins.loc}: the simulator has no generic window for {ins.text}; "
                       f"address shared memory with ld.shared/st.shared")
    _put(m, ins, idx, _val(m, ins, 1, idx))


def _nop(m, ins, idx):
    pass


HANDLERS = {
    "add": _binary(np.add, np.add), "sub": _binary(np.subtract, np.subtract), "mul": _mul, "mad": _mad,
    "fma": _fma, "div": _div, "rem": _rem,
    "abs": _unary_float(np.abs), "neg": _unary_float(np.negative),
    "min": _minmax(np.fmin, np.minimum), "max": _minmax(np.fmax, np.maximum),
    "rcp": _unary_float(lambda x: 1.0 / x), "sqrt": _unary_float(np.sqrt),
    "rsqrt": _unary_float(lambda x: 1.0 / np.sqrt(x)), "ex2": _unary_float(np.exp2), "lg2": _unary_float(np.log2),
    "sin": _unary_float(np.sin), "cos": _unary_float(np.cos), "tanh": _unary_float(np.tanh),
    "and": _logic(lambda a, b: a & b), "or": _logic(lambda a, b: a | b), "xor": _logic(lambda a, b: a ^ b),
    "not": _logic(lambda a: ~a), "shl": _shift(True), "shr": _shift(False),
    "setp": _setp, "selp": _selp, "mov": _mov, "cvt": _cvt, "cvta": _cvta,
    "ld": ld, "st": st, "atom": atom, "red": lambda m, ins, idx: atom(m, ins, idx, returns=False),
    "cp": cp_async, "shfl": shfl, "vote": vote, "redux": redux,
    "membar": _nop, "fence": _nop, "griddepcontrol": _nop, "setmaxnreg": _nop,
}


def execute_control(m, ins, idx, run_idx):
    """``bra``, ``ret``/``exit`` and ``bar``: they move program counters or park threads."""
    op = ins.opcode
    if op == "bra":
        m.pc[idx] += 1
        if len(run_idx):
            if ins.has(".uni") and len(run_idx) != len(idx):
                m.fail(ins, "bra.uni is divergent: its guard differs between threads here")
            m.pc[run_idx] = m.label_pc(ins.operands[0])
        return
    if op in ("ret", "exit"):
        m.pc[idx] += 1
        m.done[run_idx] = True
        return
    skipped = np.setdiff1d(idx, run_idx)
    m.pc[skipped] += 1
    if not len(run_idx):
        return
    if ins.has(".warp"):
        converged(m, ins, run_idx, _val(m, ins, 0, run_idx))
        m.pc[run_idx] += 1
        return
    if ins.has(".arrive"):
        raise SimError(f"{ins.loc}: the simulator does not model bar.arrive (producer/consumer barriers)")
    if len(ins.operands) > 1:
        n = _val(m, ins, 1, run_idx)
        if (n != m.nthreads).any():
            raise SimError(f"{ins.loc}: the simulator models bar.sync over the whole block only "
                           f"(thread count {int(n[0])} != {m.nthreads})")
    m.waiting[run_idx] = True
    m.barrier[run_idx] = _val(m, ins, 0, run_idx).astype(np.int64)
    m.release_barriers(m.block_of[run_idx])


