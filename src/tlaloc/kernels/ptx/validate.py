"""Checking one instruction against the ISA table (``isa.py``).

``check`` is the only entry point: it parses the opcode text, finds the form
that matches its modifiers, checks the target (PTX version, ``sm``), the
cross-group rules and every operand's kind, type and owner, and returns a
checked ``Instruction`` with each operand's resolved type. It raises
``PtxError`` naming what is wrong; the error's location is the caller's
(``Context.loc``). Nothing here emits text.
"""
from __future__ import annotations

import dataclasses
import difflib

from . import isa
from .errors import PtxError
from .ir import (Imm, Instruction, Label, Mem, Not, Operand, Param, Reg, Shared, Special, Vec,
                 bits, kind)


@dataclasses.dataclass
class Context:
    """What a check needs to know about the kernel being built."""
    name: str
    arch: str
    version: tuple
    owner: int
    loc: object = None


def _fail(ctx: Context, text: str, message: str):
    raise PtxError(f"{text}: {message}", ctx.loc)


def _v(version) -> str:
    return f"{version[0]}.{version[1]}"


# -- modifiers -----------------------------------------------------------------------------

def _match(form: isa.Form, mods):
    """``{group name: option}`` for ``mods``, or an error message."""
    chosen, pos = {}, 0
    for m in mods:
        k = next((i for i in range(pos, len(form.mods)) if m in form.mods[i].options), None)
        if k is None:
            earlier = next((g for g in form.mods[:pos] if m in g.options), None)
            if earlier is not None and earlier.name in chosen:
                return f"modifier {m} conflicts with {chosen[earlier.name]} (both are {earlier.name} options)"
            if earlier is not None:
                return f"modifier {m} is out of order; write the modifiers as " + \
                    ".".join("{" + "|".join(g.options) + "}" for g in form.mods)
            return None
        chosen[form.mods[k].name] = m
        pos = k + 1
    missing = [g for g in form.mods if g.required and g.name not in chosen]
    if missing:
        g = missing[0]
        friendly = {"rnd": "rounding", "irnd": "integer rounding", "cmp": "comparison", "op": "operation"}
        what = "a type" if g.name == "type" else f"a {friendly.get(g.name, g.name)} modifier"
        return f"needs {what}: one of {' '.join(g.options)}"
    return chosen


def _unknown_modifier(form: isa.Form, mods) -> str:
    known = {o for g in form.mods for o in g.options}
    bad = next(m for m in mods if m not in known)
    tys = form.group("type")
    if tys is not None and any(m in tys.options for m in mods):
        owner = [f for f in isa.FORMS[form.opcode] if any(bad in g.options for g in f.mods)]
        if owner:
            given = next(m for m in mods if m in tys.options)
            allowed = [o for f in owner for g in f.mods if g.name == "type" for o in g.options]
            return (f"modifier {bad} does not apply to type {given} (it goes with "
                    f"{' '.join(dict.fromkeys(allowed))})")
    return f"{form.opcode} has no modifier {bad}"


def _choose(text: str, mods, ctx: Context):
    forms = isa.FORMS.get(text.split(".")[0])
    if forms is None:
        near = difflib.get_close_matches(text.split(".")[0], list(isa.FORMS), n=3)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        _fail(ctx, text, f"unknown instruction `{text.split('.')[0]}` (not in the ISA table){hint}")
    errors = []
    for f in forms:
        r = _match(f, mods)
        if isinstance(r, dict):
            return f, r
        known = {o for g in f.mods for o in g.options}
        score = sum(m in known for m in mods)
        errors.append((score, -len(errors), r if r is not None else _unknown_modifier(f, mods)))
    _fail(ctx, text, max(errors)[2])


# -- target --------------------------------------------------------------------------------

def _check_target(text, form, chosen, ctx):
    sm, is_a = isa.sm_number(ctx.arch)
    needs = [(text.split(".")[0], form.ptx, form.sm, form.sm_a)]
    for opt, ptx, gsm, ga in form.gates:
        if opt in chosen.values():
            needs.append((f"{text.split('.')[0]} with {opt}", ptx, gsm, ga))
    for what, ptx, need_sm, need_a in needs:
        if ctx.version < ptx:
            _fail(ctx, text, f"{what} needs PTX ISA {_v(ptx)} or newer; this kernel is PTX {_v(ctx.version)} "
                             f"(specialize(..., ptx={ptx}))")
        if sm < need_sm or (need_a and not (is_a and sm == need_sm)):
            want = f"sm_{need_sm}a (the arch-specific target)" if need_a else f"sm_{need_sm} or newer"
            _fail(ctx, text, f"{what} needs {want}; this kernel targets {ctx.arch}")


def _check_rules(text, form, chosen):
    present = set(chosen.values())
    ty = chosen.get("type")
    for rule in form.rules:
        trig = [o for o in rule.when if o in present]
        if not trig:
            continue
        if rule.types and ty is not None and ty not in rule.types:
            return f"modifier {trig[0]} does not apply to type {ty}: {rule.why}"
        if rule.needs and not any(o in present for o in rule.needs):
            return f"modifier {trig[0]} needs {' or '.join(rule.needs)}: {rule.why}"
        if any(o in present for o in rule.forbid):
            return f"modifier {trig[0]} excludes {' '.join(rule.forbid)}: {rule.why}"
    return None


# -- operands ------------------------------------------------------------------------------

def compatible(reg_ty: str, want: str, relaxed: bool = False) -> bool:
    """PTX's operand type rule: a register of ``reg_ty`` where ``want`` is expected."""
    rk, rb = kind(reg_ty), bits(reg_ty)
    wk, wb = kind(want), bits(want)
    if "pred" in (rk, wk):
        return rk == wk
    if relaxed and wk in "usb" and rk in "usb" and rb >= wb:
        return True
    if rb != wb:
        return False
    return wk == "b" or (wk in "us" and rk in "usb") or (wk == "f" and rk in "fb")


def _resolve_type(code: str, chosen) -> str:
    def strip(o):
        return o[1:]
    if code in ("T", "Tl"):
        return strip(chosen["type"])
    if code == "T2":
        t = strip(chosen["type"])
        return t[0] + str(2 * int(t[1:]))
    if code == "D":
        return strip(chosen["dtype"])
    if code == "S":
        return strip(chosen["stype"])
    return code


def _owned(ctx, text, x, what):
    if getattr(x, "owner", ctx.owner) != ctx.owner:
        _fail(ctx, text, f"{what} {x.name} belongs to another kernel, not `{ctx.name}`; "
                         f"declare it in this kernel")


def _check_reg(ctx, text, slot, r, ty, relaxed=False):
    _owned(ctx, text, r, "register")
    if not compatible(r.ty, ty, relaxed):
        _fail(ctx, text, f"operand {slot.name} is {r.name} of type .{r.ty}, but {text} needs .{ty} "
                         f"(a .{ty}-compatible register: same size, and float only with float or .b)")


def _check_imm(ctx, text, slot, x: Imm, ty):
    k, b = kind(ty), bits(ty)
    if k == "pred":
        _fail(ctx, text, f"operand {slot.name} must be a predicate register, not an immediate")
    if k == "f" and not x.is_float:
        _fail(ctx, text, f"operand {slot.name} is the integer {x.value}, but .{ty} needs a float "
                         f"immediate; write {float(x.value)!r}")
    if k != "f" and x.is_float:
        _fail(ctx, text, f"operand {slot.name} is the float {x.value!r}, but .{ty} needs an integer")
    if k != "f" and not (-(1 << (b - 1)) <= x.value < (1 << b)):
        _fail(ctx, text, f"operand {slot.name} = {x.value} does not fit in .{ty}")


def _check_mem(ctx, text, slot, m: Mem, chosen):
    space = {"saddr": ".shared", "gaddr": ".global"}.get(slot.ty, chosen.get("space"))
    base = m.base
    if isinstance(base, (Param, Shared, Reg)):
        _owned(ctx, text, base, type(base).__name__.lower())
    if space == ".param":
        if not isinstance(base, Param):
            _fail(ctx, text, f"a .param load reads a kernel parameter; got {base!r}")
        width = bits(_resolve_type("T", chosen)) // 8 if "type" in chosen else 0
        pw = bits(base.ty) // 8
        if width and width + m.offset > pw:
            _fail(ctx, text, f"reads {width} bytes at offset {m.offset} of the {pw}-byte parameter {base.name}")
        return
    if isinstance(base, Param):
        _fail(ctx, text, f"address {base.name} is a kernel parameter; load it first "
                         f"(ld.param.u64 then cvta.to.global.u64) and address through the register")
    if isinstance(base, Shared):
        if space != ".shared":
            _fail(ctx, text, f"shared array {base.name} can be addressed only by .shared accesses")
        return
    if not isinstance(base, Reg) or kind(base.ty) not in "usb":
        _fail(ctx, text, f"address operand {slot.name} must be an integer register, got {base!r}")
    if space in (".global", None) and bits(base.ty) != 64:
        _fail(ctx, text, f"address {base.name} is .{base.ty}; {space or 'generic'} addresses are 64-bit "
                         f"(.u64 register)")
    if bits(base.ty) not in (32, 64):
        _fail(ctx, text, f"address {base.name} must be a 32- or 64-bit register")


def _check_operand(ctx, text, slot, x, chosen):
    ty = _resolve_type(slot.ty, chosen) if slot.ty not in ("-", "addr", "saddr", "gaddr") else slot.ty
    kinds = slot.kinds
    if "v" in kinds and "vec" in chosen:
        n = int(chosen["vec"][2:])
        if not isinstance(x, Vec) or len(x.regs) != n:
            _fail(ctx, text, f"operand {slot.name} must be a vector of {n} registers (vec(...)), got {x!r}")
        for r in x.regs:
            _check_reg(ctx, text, slot, r, ty, slot.ty == "Tl")
        return ty
    if isinstance(x, Vec):
        _fail(ctx, text, f"operand {slot.name} is a vector, but {text} has no .v2/.v4 modifier")
    if isinstance(x, Not):
        if "n" not in kinds:
            _fail(ctx, text, f"operand {slot.name} cannot be negated")
        x = x.reg
    if isinstance(x, Reg) and "r" in kinds:
        _check_reg(ctx, text, slot, x, ty, slot.ty == "Tl")
    elif isinstance(x, Imm) and "i" in kinds:
        _check_imm(ctx, text, slot, x, ty)
    elif isinstance(x, Special) and "s" in kinds:
        if not compatible(x.ty, ty, relaxed=True):
            _fail(ctx, text, f"special register {x.name} is .{x.ty}; {text} needs .{ty}")
    elif isinstance(x, Shared) and "y" in kinds:
        _owned(ctx, text, x, "shared array")
        if kind(ty) not in "ub" or bits(ty) not in (32, 64):
            _fail(ctx, text, f"the address of shared array {x.name} is a .u32 or .u64 value, not .{ty}")
    elif isinstance(x, Mem) and "m" in kinds:
        _check_mem(ctx, text, slot, x, chosen)
    elif isinstance(x, Label) and "l" in kinds:
        _owned(ctx, text, x, "label")
    else:
        what = {Reg: "a register", Imm: "an immediate", Special: "a special register", Shared: "a shared array",
                Mem: "a memory operand", Label: "a label", Param: "a kernel parameter"}.get(type(x), repr(x))
        allowed = {"r": "register", "i": "immediate", "s": "special register", "y": "shared array",
                   "m": "memory operand [..]", "l": "label", "v": "vector"}
        if isinstance(x, Special):
            _fail(ctx, text, f"special register {x.name} can be read only by mov or cvt; "
                             f"copy it to a register first")
        _fail(ctx, text, f"operand {slot.name} is {what}; {text} takes "
                         f"{' or '.join(allowed[k] for k in kinds if k in allowed)} there")
    return ty


def as_operand(x):
    if isinstance(x, bool):
        raise TypeError("a Python bool is not an operand")
    if isinstance(x, (int, float)):
        return Imm(x)
    return x


def check(text: str, operands, guard, ctx: Context) -> Instruction:
    """A checked ``Instruction`` for ``text`` with ``operands``; raises ``PtxError``."""
    if not isinstance(text, str) or not text or text.startswith(".") or ".." in text:
        _fail(ctx, str(text), "an instruction is written like \"add.rn.f32\"")
    parts = text.split(".")
    mods = tuple("." + p for p in parts[1:])
    form, chosen = _choose(text, mods, ctx)
    _check_target(text, form, chosen, ctx)
    bad = _check_rules(text, form, chosen)
    if bad:
        _fail(ctx, text, bad)
    ops = tuple(as_operand(x) for x in operands)
    for x in ops:
        if not isinstance(x, Operand):
            _fail(ctx, text, f"{x!r} ({type(x).__name__}) is not an operand; use a register, imm(), mem() or a label")
    present = set(chosen.values())
    slots = [s for s in form.slots if not s.optional or (s.when and any(o in present for o in s.when))]
    extra = [s for s in form.slots if s.optional and not s.when]
    if not (len(slots) <= len(ops) <= len(slots) + len(extra)):
        names = ", ".join(s.name for s in slots) + "".join(f"[, {s.name}]" for s in extra)
        _fail(ctx, text, f"takes {len(slots)} operand{'s' * (len(slots) != 1)} ({names or 'none'}), "
                         f"got {len(ops)}")
    slots = slots + extra[:len(ops) - len(slots)]
    slots.sort(key=form.slots.index)
    types = tuple(_check_operand(ctx, text, s, x, chosen) for s, x in zip(slots, ops))
    if guard is not None:
        g = guard.reg if isinstance(guard, Not) else guard
        if not isinstance(g, Reg) or g.ty != "pred":
            _fail(ctx, text, f"guard must be a predicate register (pred()), got {guard!r}")
        _owned(ctx, text, g, "register")
    return Instruction(text, parts[0], mods, ops, guard, ctx.loc, form, types)
