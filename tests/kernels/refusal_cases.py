"""ISA-table refusal cases: each build function breaks one rule on the line marked
``# refused``; the test asserts the PtxError points at that line and names the
problem (the expected text follows the marker)."""
from tlaloc.kernels.ptx import (f32, inst, label, mem, param, place, pred, r32, r64, tid, vec, b32)


def unknown_instruction(k):
    r = r32()
    inst("addd.u32", r, r, r)  # refused: unknown instruction `addd`


def modifier_not_for_type(k):
    r = r32()
    inst("add.rn.u32", r, r, r)  # refused: modifier .rn does not apply to type .u32


def register_type_mismatch(k):
    f, r = f32(), r32()
    inst("mov.f32", f, 1.0)
    inst("add.rn.f32", f, f, r)  # refused: is %r0 of type .u32, but add.rn.f32 needs .f32


def integer_immediate_for_float(k):
    f = f32()
    inst("mul.rn.f32", f, f, 2)  # refused: is the integer 2, but .f32 needs a float immediate


def special_register_outside_mov(k):
    r = r32()
    inst("add.u32", r, tid.x, 1)  # refused: special register %tid.x can be read only by mov or cvt


def sm_too_old(k):
    r = r32()
    inst("redux.sync.add.u32", r, r, 0xFFFFFFFF)  # refused: redux needs sm_80 or newer; this kernel targets sm_75


def ptx_version_too_old(k):
    inst("griddepcontrol.wait")  # refused: griddepcontrol needs PTX ISA 7.8 or newer; this kernel is PTX 7.0


def arch_specific_instruction(k):
    inst("setmaxnreg.inc.sync.aligned.u32", 240)  # refused: setmaxnreg needs sm_90a (the arch-specific target)


def missing_rounding(k):
    f = f32()
    inst("fma.f32", f, f, f, f)  # refused: needs a rounding modifier: one of .rn .rz .rm .rp


def operand_count(k):
    r = r32()
    inst("add.u32", r, r)  # refused: takes 3 operands (d, a, b), got 2


def global_load_from_param(k):
    p, f = param("u64", "x_ptr"), f32()
    inst("ld.global.f32", f, mem(p))  # refused: address x_ptr is a kernel parameter; load it first


def narrow_global_address(k):
    r, f = r32(), f32()
    inst("ld.global.f32", f, mem(r))  # refused: global addresses are 64-bit


def vector_width(k):
    a, f, g = r64(), f32(), f32()
    inst("ld.global.v4.f32", vec(f, g), mem(a))  # refused: must be a vector of 4 registers


def nc_needs_global(k):
    r, f = r32(), f32()
    inst("ld.shared.nc.f32", f, mem(r))  # refused: modifier .nc needs .global


def sat_needs_s32(k):
    r = r32()
    inst("add.sat.u32", r, r, r)  # refused: modifier .sat does not apply to type .u32


def negated_operand(k):
    p, q = pred(), pred()
    inst("and.pred", p, ~q, q)  # refused: operand a cannot be negated


def guard_not_predicate(k):
    r = r32()
    inst("add.u32", r, r, 1, guard=r)  # refused: guard must be a predicate register


def label_never_placed(k):
    label("orphan")  # refused: label $L_orphan is never placed
    inst("ret")


def label_placed_twice(k):
    lab = label("twice")
    place(lab)
    place(lab)  # refused: label $L_twice is already placed
    inst("ret")


def shift_amount_type(k):
    b, a = b32(), r64()
    inst("shl.b32", b, b, a)  # refused: operand b is %rd0 of type .u64, but shl.b32 needs .u32


CASES = [  # (build, arch, ptx)
    (unknown_instruction, "sm_90", None), (modifier_not_for_type, "sm_90", None),
    (register_type_mismatch, "sm_90", None), (integer_immediate_for_float, "sm_90", None),
    (special_register_outside_mov, "sm_90", None), (sm_too_old, "sm_75", None),
    (ptx_version_too_old, "sm_80", (7, 0)), (arch_specific_instruction, "sm_90", None),
    (missing_rounding, "sm_90", None), (operand_count, "sm_90", None), (global_load_from_param, "sm_90", None),
    (narrow_global_address, "sm_90", None), (vector_width, "sm_90", None), (nc_needs_global, "sm_90", None),
    (sat_needs_s32, "sm_90", None), (negated_operand, "sm_90", None), (guard_not_predicate, "sm_90", None),
    (label_never_placed, "sm_90", None), (label_placed_twice, "sm_90", None), (shift_amount_type, "sm_90", None),
]
