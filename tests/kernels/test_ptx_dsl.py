"""The PTX DSL: emission, the emit -> parse -> emit round trip, the table's coverage."""
import pytest

from tlaloc.kernels import ptx
from tlaloc.kernels.ptx import (KernelTemplate, PtxError, ctaid, emit, f32, inst, label, mem, param, parse, place,
                                pred, r32, r64, shared, tid, vec)

from .shapes import SMALL, ids


def scale_by_two(k, *, n):
    x_ptr, out_ptr = param("u64", "x_ptr"), param("u64", "out_ptr")
    p, i, a, b, v = pred(), r32(), r64(), r64(), f32()
    done = label("done")
    inst("mov.u32", i, tid.x)
    inst("setp.ge.u32", p, i, n)
    inst("bra", done, guard=p)
    inst("ld.param.u64", a, mem(x_ptr))
    inst("cvta.to.global.u64", a, a)
    inst("mul.wide.u32", b, i, 4)
    inst("add.u64", a, a, b)
    inst("ld.global.f32", v, mem(a))
    inst("add.rn.f32", v, v, v)
    inst("ld.param.u64", a, mem(out_ptr))
    inst("cvta.to.global.u64", a, a)
    inst("add.u64", a, a, b)
    inst("st.global.f32", mem(a), v)
    place(done)
    inst("ret")


SCALE = KernelTemplate("scale_by_two", scale_by_two, launch=lambda n: ((1,), (256,)))


def test_emitted_text_has_header_params_and_declarations():
    text = SCALE.specialize(arch="sm_90", n=100).ptx
    assert ".version 8.0\n.target sm_90\n.address_size 64" in text
    assert ".visible .entry scale_by_two(\n\t.param .u64 x_ptr,\n\t.param .u64 out_ptr\n)" in text
    assert ".maxntid 256, 1, 1" in text
    assert "\t.reg .f32 %f<1>;" in text and "\t.reg .u64 %rd<2>;" in text
    assert "\t@%p0 bra $L_done;" in text
    assert "\tsetp.ge.u32 %p0, %r0, 100;" in text


def test_float_immediates_are_exact_hex():
    def build(k):
        f = f32()
        inst("mov.f32", f, 0.1)
        inst("mov.f32", f, float("-inf"))
        inst("ret")
    text = KernelTemplate("imm", build).specialize().ptx
    assert "mov.f32 %f0, 0f3DCCCCCD;" in text and "mov.f32 %f0, 0fFF800000;" in text


def test_specializations_are_cached_per_arch_and_shape():
    a = SCALE.specialize(arch="sm_90", n=100)
    assert SCALE.specialize(arch="sm_90", n=100) is a
    assert SCALE.specialize(arch="sm_80", n=100) is not a
    assert "target sm_80" in SCALE.specialize(arch="sm_80", n=100).ptx


def test_ptx_version_follows_the_target():
    assert ".version 8.0" in KernelTemplate("t", lambda k: inst("ret")).specialize(arch="sm_90a").ptx
    assert ".version 8.6" in KernelTemplate("t", lambda k: inst("ret")).specialize(arch="sm_100a").ptx
    with pytest.raises(PtxError, match="sm_90 needs PTX ISA 7.8"):
        KernelTemplate("t", lambda k: inst("ret")).specialize(arch="sm_90", ptx=(7, 0))


def test_round_trip_of_a_hand_written_kernel():
    text = SCALE.specialize(arch="sm_90", n=7).ptx
    assert emit(parse(text)) == text


@pytest.mark.parametrize("template,shape", SMALL, ids=ids())
def test_round_trip_of_every_library_kernel(template, shape):
    for arch in ("sm_80", "sm_90"):
        text = template.specialize(arch=arch, **shape).ptx
        assert emit(parse(text)) == text


def test_round_trip_covers_vectors_shared_negation_and_offsets():
    def build(k):
        a, r = r64(), r32()
        s = shared("f32", "buf", 64, align=16)
        f = [f32() for _ in range(4)]
        p = pred()
        inst("mov.u32", r, ctaid.x)
        inst("ld.param.u64", a, mem(param("u64", "x")))
        inst("ld.global.v4.f32", vec(f), mem(a, -16))
        inst("st.shared.v4.f32", mem(s, 32), vec(f))
        inst("setp.lt.and.f32", p, f[0], f[1], ~p)
        inst("vote.sync.any.pred", p, ~p, 0xFFFFFFFF)
        inst("st.global.f32", mem(a, 4), f[2], guard=~p)
        inst("ret")
    text = KernelTemplate("mix", build).specialize().ptx
    assert "ld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd0+-16];" in text
    assert "@!%p0 st.global.f32 [%rd0+4], %f2;" in text
    assert emit(parse(text)) == text


def test_parser_refuses_text_outside_the_subset_with_its_line():
    text = SCALE.specialize(arch="sm_90", n=7).ptx.replace("add.rn.f32", "add.rn.u32")
    with pytest.raises(PtxError, match=r"<ptx>:\d+: add.rn.u32: modifier .rn does not apply"):
        parse(text)


def test_isa_table_coverage():
    cov = ptx.coverage()
    for op in ("add", "sub", "mul", "mad", "fma", "div", "rem", "min", "max", "neg", "abs", "rcp", "sqrt",
               "rsqrt", "ex2", "lg2", "sin", "cos", "tanh", "and", "or", "xor", "not", "shl", "shr", "setp", "selp",
               "mov", "cvt", "cvta", "ld", "st", "atom", "red", "cp", "bra", "ret", "exit", "bar", "membar",
               "fence", "shfl", "vote", "redux", "griddepcontrol", "setmaxnreg"):
        assert op in cov, op
    assert sum(cov.values()) >= 60


def test_kernel_must_end_with_ret():
    with pytest.raises(PtxError, match="must end with an unguarded ret"):
        KernelTemplate("t", lambda k: inst("membar.cta")).specialize()
