"""Building a kernel: one call per instruction, each checked when it is added.

A ``KernelTemplate`` wraps a build function ``build(k, **shape)``; calling
``template.specialize(arch="sm_90", **shape)`` runs it with a fresh
``KernelBuilder`` ``k`` and returns the emitted PTX. Inside the build function
the module-level functions (``inst``, ``label``, ``place``, ``r32`` ...) act on
the builder being run, so a kernel reads like the PTX it emits::

    def build(k, *, n):
        x_ptr = param("u64", "x_ptr")
        i, v, a = r32(), f32(), r64()
        p = pred()
        done = label("done")
        inst("mov.u32", i, tid.x)
        inst("setp.ge.u32", p, i, n)
        inst("bra", done, guard=p)
        inst("ld.param.u64", a, mem(x_ptr))
        ...
        place(done)
        inst("ret")

    scale = KernelTemplate("scale", build)
    print(scale.specialize(arch="sm_90", n=256).ptx)

Every mistake raises ``PtxError`` at the line of the offending call.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import threading
from typing import Callable, Optional

from . import isa
from .errors import PtxError, fail, user_frame
from .ir import REG_PREFIX, TYPES, Instruction, Kernel, Label, Param, Place, Reg, Shared, Special
from .validate import Context, check

_owners = itertools.count(1)
_state = threading.local()


class _Dim3:
    def __init__(self, base: str):
        self.x, self.y, self.z = (Special(f"{base}.{a}") for a in "xyz")


tid, ntid, ctaid, nctaid = _Dim3("%tid"), _Dim3("%ntid"), _Dim3("%ctaid"), _Dim3("%nctaid")
laneid, warpid = Special("%laneid"), Special("%warpid")


class KernelBuilder:
    """Collects one kernel's declarations and checked instructions."""

    def __init__(self, name: str, arch: str = "sm_90", version: tuple = isa.DEFAULT_VERSION):
        self.name, self.arch, self.version = name, arch, tuple(version)
        self.owner = next(_owners)
        self.params: list = []
        self.regs: dict = {t: [] for t in REG_PREFIX}
        self.shared_arrays: list = []
        self.body: list = []
        self.labels: dict = {}
        self.max_threads: Optional[tuple] = None

    # -- declarations --------------------------------------------------------------------
    def param(self, ty: str, name: str) -> Param:
        ty = ty.lstrip(".")
        if ty not in ("u32", "s32", "u64", "s64", "b32", "b64", "f32", "f64"):
            fail(f"parameter {name!r} has type .{ty}; use u64 for pointers or a 32/64-bit scalar type")
        if any(p.name == name for p in self.params) or not name.isidentifier():
            fail(f"parameter name {name!r} is not a fresh identifier in kernel `{self.name}`")
        p = Param(name, ty, self.owner)
        self.params.append(p)
        return p

    def reg(self, ty: str) -> Reg:
        ty = ty.lstrip(".")
        if ty not in REG_PREFIX:
            fail(f"no register type .{ty}; use one of {' '.join('.' + t for t in REG_PREFIX)}")
        r = Reg(f"{REG_PREFIX[ty]}{len(self.regs[ty])}", ty, self.owner)
        self.regs[ty].append(r)
        return r

    def shared(self, ty: str, name: str, count: int, align: Optional[int] = None) -> Shared:
        ty = ty.lstrip(".")
        if ty not in TYPES or ty == "pred" or int(count) < 1:
            fail(f"shared array {name!r}: need a data type and a positive count, got .{ty}[{count}]")
        if any(s.name == name for s in self.shared_arrays) or not name.isidentifier():
            fail(f"shared array name {name!r} is not a fresh identifier in kernel `{self.name}`")
        size = TYPES[ty][1] // 8
        s = Shared(name, ty, int(count), int(align or max(size, 4)), self.owner)
        self.shared_arrays.append(s)
        return s

    def label(self, name: str = "L") -> Label:
        base = "$L_" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        full, k = base, 1
        while full in self.labels:
            k += 1
            full = f"{base}_{k}"
        lab = Label(full, self.owner, user_frame())
        self.labels[full] = lab
        return lab

    def place(self, lab: Label) -> None:
        if not isinstance(lab, Label) or lab.owner != self.owner:
            fail(f"place() takes a label made by label() in kernel `{self.name}`, got {lab!r}")
        if lab.placed_at is not None:
            fail(f"label {lab.name} is already placed at {lab.placed_at}")
        lab.placed_at = user_frame()
        self.body.append(Place(lab))

    def maxntid(self, x: int, y: int = 1, z: int = 1) -> None:
        self.max_threads = (int(x), int(y), int(z))

    # -- instructions ---------------------------------------------------------------------
    def inst(self, text: str, *operands, guard=None) -> Instruction:
        """Check ``text operands`` against the ISA table and append it."""
        ctx = Context(self.name, self.arch, self.version, self.owner, user_frame())
        ins = check(text, operands, guard, ctx)
        self.body.append(ins)
        return ins

    def finish(self) -> Kernel:
        for lab in self.labels.values():
            if lab.placed_at is None:
                raise PtxError(f"label {lab.name} is never placed; call place({lab.name[3:]}) where it belongs",
                               lab.made_at)
        last = next((x for x in reversed(self.body) if isinstance(x, Instruction)), None)
        if last is None or last.opcode not in ("ret", "exit", "bra") or last.guard is not None:
            raise PtxError(f"kernel `{self.name}` must end with an unguarded ret, exit or bra",
                           last.loc if last is not None else None)
        regs = {t: list(rs) for t, rs in self.regs.items() if rs}
        return Kernel(self.name, self.arch, self.version, list(self.params), regs, list(self.shared_arrays),
                      list(self.body), self.max_threads, self.owner)

    def __enter__(self):
        _stack().append(self)
        return self

    def __exit__(self, *exc):
        _stack().pop()


def _stack() -> list:
    if not hasattr(_state, "stack"):
        _state.stack = []
    return _state.stack


def current() -> KernelBuilder:
    if not _stack():
        fail("no kernel is being built; call this inside a KernelTemplate's build function")
    return _stack()[-1]


# -- module-level spelling: acts on the kernel being built ----------------------------------

def inst(text: str, *operands, guard=None) -> Instruction:
    return current().inst(text, *operands, guard=guard)


def label(name: str = "L") -> Label:
    return current().label(name)


def place(lab: Label) -> None:
    current().place(lab)


def param(ty: str, name: str) -> Param:
    return current().param(ty, name)


def shared(ty: str, name: str, count: int, align: Optional[int] = None) -> Shared:
    return current().shared(ty, name, count, align)


def reg(ty: str) -> Reg:
    return current().reg(ty)


def r32() -> Reg:
    """A 32-bit unsigned integer register (``.u32``; also usable as ``.s32``/``.b32``)."""
    return current().reg("u32")


def s32() -> Reg:
    return current().reg("s32")


def b32() -> Reg:
    return current().reg("b32")


def r64() -> Reg:
    """A 64-bit unsigned integer register (``.u64``): addresses."""
    return current().reg("u64")


def f32() -> Reg:
    return current().reg("f32")


def f64() -> Reg:
    return current().reg("f64")


def pred() -> Reg:
    return current().reg("pred")


# -- templates ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Launch:
    """Grid and block of a specialized kernel (shared memory is static)."""
    grid: tuple
    block: tuple

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclasses.dataclass(frozen=True)
class Specialized:
    """A kernel specialized for one arch and shape: its IR, PTX text and launch."""
    template: "KernelTemplate"
    kernel: Kernel
    shape: dict
    launch: Optional[Launch]

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def arch(self) -> str:
        return self.kernel.arch

    @functools.cached_property
    def ptx(self) -> str:
        """The PTX module text (emitted once)."""
        from .emit import emit
        return emit(self.kernel)

    def signature(self):
        """``(inputs, outputs)``: ``(name, shape, dtype)`` lists, when the template declares them."""
        if self.template.signature is None:
            return None
        return self.template.signature(**self.shape)


class KernelTemplate:
    """A kernel family: ``build(k, **shape)`` emits one kernel per (arch, shape).

    Args:
      name: the ``.entry`` name (a shape-specific suffix is not added: one module per kernel).
      build: ``build(k, **shape)``; adds params, registers and instructions.
      launch: ``launch(**shape) -> (grid, block)``, each a tuple of up to 3 ints.
      signature: ``signature(**shape) -> (inputs, outputs)``, each a list of
        ``(name, shape, dtype)``; the kernel's pointer parameters are the inputs then
        the outputs, in order.
    """

    def __init__(self, name: str, build: Callable, *, launch: Optional[Callable] = None,
                 signature: Optional[Callable] = None, doc: str = ""):
        self.name, self.build, self.launch, self.signature = name, build, launch, signature
        self.doc = doc or (build.__doc__ or "")
        self._claims: dict = {}
        self._cache: dict = {}

    def __repr__(self) -> str:
        return f"KernelTemplate({self.name!r})"

    def specialize(self, arch: str = "sm_90", ptx: Optional[tuple] = None, **shape) -> Specialized:
        """Run the build function for ``arch`` and ``shape``; raises ``PtxError`` at the user's line."""
        if arch not in isa.TARGETS:
            fail(f"unknown target {arch!r}; the table knows {' '.join(isa.TARGETS)}")
        version = tuple(ptx) if ptx is not None else max(isa.DEFAULT_VERSION, isa.TARGETS[arch])
        if version < isa.TARGETS[arch]:
            fail(f"{arch} needs PTX ISA {isa.TARGETS[arch][0]}.{isa.TARGETS[arch][1]} or newer; "
                 f"asked for {version[0]}.{version[1]}")
        key = (arch, version, tuple(sorted(shape.items())))
        if key in self._cache:
            return self._cache[key]
        launch = None
        if self.launch is not None:
            grid, block = self.launch(**shape)
            launch = Launch(tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block)))
        with KernelBuilder(self.name, arch, version) as k:
            if launch is not None:
                k.maxntid(*launch.block)
            self.build(k, **shape)
            kernel = k.finish()
        out = Specialized(self, kernel, dict(shape), launch)
        self._cache[key] = out
        return out

    # -- claiming coarsened ops (see tlaloc.kernels.registry) ---------------------------------
    def claim(self, op_name: str, *targets: str, when: Optional[Callable] = None) -> "KernelTemplate":
        """Declare that this kernel can replace coarsened op ``op_name`` on ``targets``.
        ``when(**op_params) -> bool`` may narrow it (a shape or dtype the kernel handles)."""
        self._claims[op_name] = (tuple(targets), when)
        return self

    def claims(self, op_name: str, target: str, **op_params) -> bool:
        """Whether this kernel claims ``op_name`` for ``target`` (and these op params)."""
        entry = self._claims.get(op_name)
        if entry is None or target not in entry[0]:
            return False
        return entry[1] is None or bool(entry[1](**op_params))
