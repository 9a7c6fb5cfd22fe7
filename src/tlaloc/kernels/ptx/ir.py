"""The PTX DSL's data: types, operands, instructions and a kernel body.

Everything here is plain data. Checking lives in ``validate.py`` (against the
table in ``isa.py``), text in ``emit.py`` and ``parse.py``.

Types are written without the dot: ``"f32"``, ``"u64"``, ``"pred"``.
"""
from __future__ import annotations

import dataclasses
import struct
from typing import Optional, Union

# -- types -------------------------------------------------------------------------------

#: type -> (kind, bits); kind is "u" unsigned, "s" signed, "f" float, "b" untyped bits, "pred".
TYPES = {
    "pred": ("pred", 1),
    "b8": ("b", 8), "b16": ("b", 16), "b32": ("b", 32), "b64": ("b", 64),
    "u8": ("u", 8), "u16": ("u", 16), "u32": ("u", 32), "u64": ("u", 64),
    "s8": ("s", 8), "s16": ("s", 16), "s32": ("s", 32), "s64": ("s", 64),
    "f16": ("f", 16), "bf16": ("f", 16), "f32": ("f", 32), "f64": ("f", 64),
}

#: how registers of each declared type are named: %r0, %f3, %rd1, %p2 ...
REG_PREFIX = {
    "pred": "%p", "b16": "%h", "u16": "%rh", "s16": "%sh", "f16": "%hf", "bf16": "%hb",
    "b32": "%b", "u32": "%r", "s32": "%ri", "f32": "%f",
    "b64": "%bd", "u64": "%rd", "s64": "%rl", "f64": "%fd",
}
PREFIX_TYPE = {p: t for t, p in REG_PREFIX.items()}


def kind(ty: str) -> str:
    return TYPES[ty][0]


def bits(ty: str) -> int:
    return TYPES[ty][1]


# -- operands ----------------------------------------------------------------------------

class Operand:
    """Base class of everything an instruction can take."""
    __slots__ = ()


class Reg(Operand):
    """A virtual register of one kernel. ``~p`` of a predicate is its negation."""
    __slots__ = ("name", "ty", "owner")

    def __init__(self, name: str, ty: str, owner: int):
        self.name, self.ty, self.owner = name, ty, owner

    def __repr__(self) -> str:
        return f"{self.name}:{self.ty}"

    def __invert__(self) -> "Not":
        return Not(self)


class Not(Operand):
    """A negated predicate: ``@!%p1`` as a guard, ``!%p1`` as a vote operand."""
    __slots__ = ("reg",)

    def __init__(self, reg: Reg):
        self.reg = reg

    def __repr__(self) -> str:
        return f"!{self.reg!r}"

    def __invert__(self) -> Reg:
        return self.reg


class Imm(Operand):
    """An immediate. ``value`` is a Python int or float; ``is_float`` says which."""
    __slots__ = ("value", "is_float")

    def __init__(self, value, is_float: Optional[bool] = None):
        self.is_float = isinstance(value, float) if is_float is None else is_float
        self.value = float(value) if self.is_float else int(value)

    def __repr__(self) -> str:
        return f"imm({self.value!r})"

    def text(self, ty: str) -> str:
        """PTX spelling for an operand of type ``ty`` (floats as exact hex)."""
        if not self.is_float:
            return str(self.value)
        if ty == "f64":
            return "0d%016X" % struct.unpack("<Q", struct.pack("<d", self.value))[0]
        return "0f%08X" % struct.unpack("<I", struct.pack("<f", self.value))[0]


class Special(Operand):
    """A read-only special register such as ``%tid.x`` (type ``u32``)."""
    __slots__ = ("name", "ty")

    def __init__(self, name: str, ty: str = "u32"):
        self.name, self.ty = name, ty

    def __repr__(self) -> str:
        return self.name


class Param(Operand):
    """A kernel parameter (state space ``.param``)."""
    __slots__ = ("name", "ty", "owner")

    def __init__(self, name: str, ty: str, owner: int):
        self.name, self.ty, self.owner = name, ty, owner

    def __repr__(self) -> str:
        return f"param {self.name}:{self.ty}"


class Shared(Operand):
    """A ``.shared`` array of ``count`` elements of ``ty``; as an operand, its address."""
    __slots__ = ("name", "ty", "count", "align", "owner")

    def __init__(self, name: str, ty: str, count: int, align: int, owner: int):
        self.name, self.ty, self.count, self.align, self.owner = name, ty, count, align, owner

    @property
    def nbytes(self) -> int:
        return self.count * bits(self.ty) // 8

    def __repr__(self) -> str:
        return f"shared {self.name}:{self.ty}[{self.count}]"


class Mem(Operand):
    """A memory operand ``[base+offset]``; ``base`` is a register, parameter or shared array."""
    __slots__ = ("base", "offset")

    def __init__(self, base: Union[Reg, Param, Shared], offset: int = 0):
        self.base, self.offset = base, int(offset)

    def __repr__(self) -> str:
        return f"[{self.base!r}{self.offset:+d}]"


class Vec(Operand):
    """A vector of registers ``{%f0, %f1}`` for ``.v2``/``.v4`` loads and stores."""
    __slots__ = ("regs",)

    def __init__(self, regs):
        self.regs = tuple(regs)

    def __repr__(self) -> str:
        return "{" + ", ".join(map(repr, self.regs)) + "}"


class Label(Operand):
    """A branch target; placed once in the body with ``place``."""
    __slots__ = ("name", "owner", "made_at", "placed_at")

    def __init__(self, name: str, owner: int, made_at=None):
        self.name, self.owner, self.made_at, self.placed_at = name, owner, made_at, None

    def __repr__(self) -> str:
        return self.name


def mem(base, offset: int = 0) -> Mem:
    """``[base+offset]``: the address operand of ``ld``/``st``/``atom``."""
    return Mem(base, offset)


def imm(value) -> Imm:
    """An immediate operand (Python ints and floats are also accepted as they are)."""
    return Imm(value)


def vec(*regs) -> Vec:
    """``{a, b, ...}``: the data operand of a vector load or store."""
    return Vec(regs[0] if len(regs) == 1 and isinstance(regs[0], (list, tuple)) else regs)


# -- instructions and kernels ---------------------------------------------------------------

@dataclasses.dataclass(eq=False)
class Instruction:
    """One checked instruction.

    text: the full opcode as written (``"ld.global.v4.f32"``); opcode: ``"ld"``;
    mods: the modifiers (``(".global", ".v4", ".f32")``); types: the resolved type
    of each operand (filled by the validator); loc: the user's line.
    """
    text: str
    opcode: str
    mods: tuple
    operands: tuple
    guard: Optional[Union[Reg, Not]] = None
    loc: object = None
    form: object = None
    types: tuple = ()

    def has(self, mod: str) -> bool:
        return mod in self.mods


@dataclasses.dataclass(eq=False)
class Place:
    """A label's position in the body."""
    label: Label


@dataclasses.dataclass(eq=False)
class Kernel:
    """One ``.entry``: what the emitter prints and the simulator runs."""
    name: str
    arch: str
    version: tuple
    params: list
    regs: dict                   # type -> list of Reg, in declaration order
    shared: list
    body: list                   # Instruction | Place
    maxntid: Optional[tuple] = None
    owner: int = 0

    def instructions(self):
        return [x for x in self.body if isinstance(x, Instruction)]

    @property
    def shared_bytes(self) -> int:
        total = 0
        for s in self.shared:
            total = -(-total // s.align) * s.align + s.nbytes
        return total
