"""The ISA table: which PTX instructions the DSL accepts, declared as data.

Each ``Form`` is one instruction family: its modifier groups in PTX order, its
operands, the minimum PTX ISA version and the minimum ``sm``, per-option gates
(an option that needs a newer target than its instruction) and cross-group
``Rule``s. An opcode may have several forms (integer ``add`` and float ``add``);
an instruction must match one of them. ``validate.py`` does the checking; this
file holds only the facts, following the PTX ISA 8.x manual.

Operand slots are written ``name:kinds:type``:

  kinds  r register · i immediate · s special register (``%tid.x``) · y shared
         array (its address) · m memory ``[base+off]`` · v vector ``{a, b}`` ·
         l label · n negated predicate ``!p``
  type   T the instruction type · T2 twice its width · D / S the destination /
         source type of ``cvt`` · Tl T with ld/st's relaxed rule (integer
         registers may be wider) · a literal type (``pred``, ``u32``, ``b32``)

``name?`` is an optional operand; ``name?.and|.or`` is present exactly when one
of those options is.
"""
from __future__ import annotations

import dataclasses

# -- targets -------------------------------------------------------------------------------

#: arch -> the oldest PTX ISA version that knows it.
TARGETS = {
    "sm_75": (6, 3), "sm_80": (7, 0), "sm_86": (7, 1), "sm_87": (7, 4), "sm_89": (7, 8),
    "sm_90": (7, 8), "sm_90a": (8, 0), "sm_100": (8, 6), "sm_100a": (8, 6), "sm_120": (8, 7),
}
#: PTX ISA versions ptxas 13 assembles.
VERSIONS = [(7, 8), (8, 0), (8, 1), (8, 2), (8, 3), (8, 4), (8, 5), (8, 6), (8, 7), (8, 8), (9, 0)]
DEFAULT_VERSION = (8, 0)


def sm_number(arch: str) -> tuple:
    """``"sm_90a"`` -> ``(90, True)`` (number, arch-specific)."""
    body = arch[3:]
    return (int(body.rstrip("a")), body.endswith("a"))


# -- table entries -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Mods:
    """One modifier slot: mutually exclusive options, in PTX order among the groups."""
    name: str
    options: tuple
    required: bool = False


@dataclasses.dataclass(frozen=True)
class Slot:
    name: str
    kinds: str
    ty: str
    optional: bool = False
    when: tuple = ()          # options that make an optional slot present


@dataclasses.dataclass(frozen=True)
class Rule:
    """When any option of ``when`` is present: the type group must be in ``types``,
    one of ``needs`` must be present, and no option of ``forbid`` may be."""
    when: tuple
    why: str
    types: tuple = ()
    needs: tuple = ()
    forbid: tuple = ()


@dataclasses.dataclass(frozen=True)
class Form:
    opcode: str
    mods: tuple
    slots: tuple
    ptx: tuple = (1, 0)
    sm: int = 20
    sm_a: bool = False              # needs the arch-specific target (sm_90a)
    gates: tuple = ()               # (option, (ptx), sm, sm_a)
    rules: tuple = ()
    doc: str = ""

    def group(self, name: str):
        return next((g for g in self.mods if g.name == name), None)


def _slots(spec: str) -> tuple:
    out = []
    for part in spec.split():
        name, kinds, ty = part.split(":")
        when: tuple = ()
        optional = "?" in name
        if optional:
            name, _, cond = name.partition("?")
            when = tuple(cond.split("|")) if cond else ()
        out.append(Slot(name, kinds, ty, optional, when))
    return tuple(out)


FORMS: dict = {}


def form(opcode, mods, slots, **kw):
    FORMS.setdefault(opcode, []).append(Form(opcode, tuple(mods), _slots(slots), **kw))


def M(name, *options, required=False):
    return Mods(name, tuple(options), required)


# -- type sets -----------------------------------------------------------------------------

U = (".u16", ".u32", ".u64")
S = (".s16", ".s32", ".s64")
B = (".b16", ".b32", ".b64")
INT = U + S
F = (".f32", ".f64")
MEMT = (".b8", ".b16", ".b32", ".b64", ".u8", ".u16", ".u32", ".u64",
        ".s8", ".s16", ".s32", ".s64", ".f32", ".f64")
RND = M("rnd", ".rn", ".rz", ".rm", ".rp")
FTZ = M("ftz", ".ftz")
SAT = M("sat", ".sat")
SYNC = M("sync", ".sync", required=True)
APPROX = M("approx", ".approx", required=True)
F32_ONLY = (".f32",)


def T(*types):
    return M("type", *types, required=True)


def _f32_only(*opts):
    return Rule(opts, "only with .f32", types=F32_ONLY)


# -- integer and float arithmetic ----------------------------------------------------------

for op in ("add", "sub"):
    form(op, [SAT, T(*INT)], "d:r:T a:ri:T b:ri:T",
         rules=(Rule((".sat",), ".sat applies to .s32 only", types=(".s32",)),))
    form(op, [RND, FTZ, SAT, T(*F)], "d:r:T a:ri:T b:ri:T", rules=(_f32_only(".ftz", ".sat"),))
form("mul", [M("mode", ".lo", ".hi", required=True), T(*INT)], "d:r:T a:ri:T b:ri:T")
form("mul", [M("mode", ".wide", required=True), T(".u16", ".u32", ".s16", ".s32")], "d:r:T2 a:ri:T b:ri:T")
form("mul", [RND, FTZ, SAT, T(*F)], "d:r:T a:ri:T b:ri:T", rules=(_f32_only(".ftz", ".sat"),))
form("mad", [M("mode", ".lo", ".hi", required=True), T(*INT)], "d:r:T a:ri:T b:ri:T c:ri:T")
form("mad", [M("mode", ".wide", required=True), T(".u16", ".u32", ".s16", ".s32")],
     "d:r:T2 a:ri:T b:ri:T c:ri:T2")
form("fma", [M("rnd", ".rn", ".rz", ".rm", ".rp", required=True), FTZ, SAT, T(*F)],
     "d:r:T a:ri:T b:ri:T c:ri:T", rules=(_f32_only(".ftz", ".sat"),))
form("div", [T(*INT)], "d:r:T a:ri:T b:ri:T")
form("div", [M("mode", ".approx", ".full", ".rn", ".rz", ".rm", ".rp", required=True), FTZ, T(*F)],
     "d:r:T a:ri:T b:ri:T", rules=(_f32_only(".approx", ".full", ".ftz"),))
form("rem", [T(*INT)], "d:r:T a:ri:T b:ri:T")
for op in ("abs", "neg"):
    form(op, [T(".s16", ".s32", ".s64")], "d:r:T a:r:T")
    form(op, [FTZ, T(*F)], "d:r:T a:r:T", rules=(_f32_only(".ftz"),))
for op in ("min", "max"):
    form(op, [T(*INT)], "d:r:T a:ri:T b:ri:T")
    form(op, [FTZ, M("nan", ".NaN"), T(*F)], "d:r:T a:ri:T b:ri:T",
         gates=((".NaN", (7, 0), 80, False),), rules=(_f32_only(".ftz", ".NaN"),))
for op in ("rcp", "sqrt"):
    form(op, [M("mode", ".approx", ".rn", ".rz", ".rm", ".rp", required=True), FTZ, T(*F)], "d:r:T a:r:T",
         rules=(_f32_only(".approx", ".ftz"),))
form("rsqrt", [APPROX, FTZ, T(".f32", ".f64")], "d:r:T a:r:T", rules=(_f32_only(".ftz"),))
for op in ("ex2", "lg2", "sin", "cos"):
    form(op, [APPROX, FTZ, T(".f32", ".bf16") if op == "ex2" else T(".f32")], "d:r:T a:r:T",
         gates=((".bf16", (7, 8), 90, False),),
         rules=(Rule((".bf16",), ".bf16 needs .ftz", needs=(".ftz",)),))
form("tanh", [APPROX, T(".f32")], "d:r:T a:r:T", ptx=(7, 0), sm=75)

# -- logic, shifts, comparison, selection ------------------------------------------------------

for op in ("and", "or", "xor"):
    form(op, [T(".pred", *B)], "d:r:T a:ri:T b:ri:T")
form("not", [T(".pred", *B)], "d:r:T a:r:T")
form("shl", [T(*B)], "d:r:T a:ri:T b:ri:u32")
form("shr", [T(*B, *U, *S)], "d:r:T a:ri:T b:ri:u32")
BOP = M("bop", ".and", ".or", ".xor")
form("setp", [M("cmp", ".eq", ".ne", ".lt", ".le", ".gt", ".ge", ".lo", ".ls", ".hi", ".hs", required=True),
              BOP, T(*B, *INT)],
     "d:r:pred a:ri:T b:ri:T c?.and|.or|.xor:rn:pred",
     rules=(Rule((".lo", ".ls", ".hi", ".hs"), "unsigned comparisons take unsigned types",
                 types=B + U),))
form("setp", [M("cmp", ".eq", ".ne", ".lt", ".le", ".gt", ".ge", ".equ", ".neu", ".ltu", ".leu",
                ".gtu", ".geu", ".num", ".nan", required=True), BOP, FTZ, T(*F)],
     "d:r:pred a:ri:T b:ri:T c?.and|.or|.xor:rn:pred", rules=(_f32_only(".ftz"),))
form("selp", [T(*B, *INT, *F)], "d:r:T a:ri:T b:ri:T c:r:pred")

# -- data movement -------------------------------------------------------------------------

form("mov", [T(".pred", *B, *INT, *F)], "d:r:T a:risy:T")
form("cvt", [M("rnd", ".rn", ".rz", ".rm", ".rp", required=True), SAT, M("dtype", *F, required=True),
             M("stype", *INT, required=True)], "d:r:D a:ris:S", doc="integer to float")
form("cvt", [M("irnd", ".rni", ".rzi", ".rmi", ".rpi", required=True), FTZ, SAT,
             M("dtype", *INT, required=True), M("stype", *F, required=True)], "d:r:D a:r:S",
     doc="float to integer")
form("cvt", [M("rnd", ".rn", ".rz", ".rm", ".rp", required=True), FTZ, SAT, M("dtype", ".f32", required=True),
             M("stype", ".f64", required=True)], "d:r:D a:r:S", doc="narrowing float")
form("cvt", [FTZ, SAT, M("dtype", ".f64", required=True), M("stype", ".f32", required=True)], "d:r:D a:r:S",
     doc="widening float")
form("cvt", [SAT, M("dtype", *INT, required=True), M("stype", *INT, required=True)], "d:r:D a:ris:S",
     doc="integer to integer")
SPACES = (".global", ".shared", ".local", ".const", ".param")
form("cvta", [M("to", ".to", required=True), M("space", ".global", ".shared", ".local", ".const",
                                                  required=True), T(".u32", ".u64")], "d:r:T a:r:T")
form("cvta", [M("space", ".global", ".shared", ".local", ".const", required=True), T(".u32", ".u64")],
     "d:r:T a:ry:T")
VEC = M("vec", ".v2", ".v4")
form("ld", [M("space", *SPACES), M("nc", ".nc"), M("cop", ".ca", ".cg", ".cs", ".lu", ".cv"), VEC, T(*MEMT)],
     "d:rv:Tl a:m:addr", rules=(Rule((".nc",), ".nc applies to .global loads", needs=(".global",)),))
form("st", [M("space", ".global", ".shared", ".local", ".param"), M("cop", ".wb", ".cg", ".cs", ".wt"), VEC,
            T(*MEMT)], "a:m:addr b:rv:Tl")
ATOM_OPS = (".add", ".min", ".max", ".inc", ".dec", ".and", ".or", ".xor", ".exch", ".cas")
_atom_rules = (Rule((".and", ".or", ".xor", ".exch", ".cas"), "bitwise atomics take .b32/.b64",
                    types=(".b32", ".b64")),
               Rule((".inc", ".dec"), ".inc/.dec take .u32", types=(".u32",)),
               Rule((".add",), "atomic add takes .u32 .s32 .u64 .f32 .f64",
                    types=(".u32", ".s32", ".u64", ".f32", ".f64")),
               Rule((".min", ".max"), "atomic min/max take integer types", types=(".u32", ".s32", ".u64", ".s64")))
SCOPE = M("scope", ".cta", ".gpu", ".sys")
form("atom", [M("space", ".global", ".shared"), SCOPE, M("op", *ATOM_OPS, required=True),
              T(".b32", ".b64", ".u32", ".u64", ".s32", ".s64", ".f32", ".f64")],
     "d:r:T a:m:addr b:ri:T c?.cas:ri:T", gates=((".cta", (5, 0), 60, False), (".gpu", (5, 0), 60, False),
                                                  (".sys", (5, 0), 60, False)), rules=_atom_rules)
form("red", [M("space", ".global", ".shared"), SCOPE, M("op", *ATOM_OPS[:8], required=True),
             T(".b32", ".b64", ".u32", ".u64", ".s32", ".s64", ".f32", ".f64")],
     "a:m:addr b:ri:T", rules=_atom_rules)
form("cp", [M("async", ".async", required=True), M("cache", ".ca", ".cg", required=True),
            M("dst", ".shared", required=True), M("src", ".global", required=True)],
     "dst:m:saddr src:m:gaddr size:i:u32", ptx=(7, 0), sm=80)
form("cp", [M("async", ".async", required=True), M("op", ".commit_group", ".wait_all", required=True)], "",
     ptx=(7, 0), sm=80)
form("cp", [M("async", ".async", required=True), M("op", ".wait_group", required=True)], "n:i:u32",
     ptx=(7, 0), sm=80)

# -- control flow and synchronisation --------------------------------------------------------

form("bra", [M("uni", ".uni")], "target:l:-")
form("ret", [M("uni", ".uni")], "")
form("exit", [], "")
form("bar", [M("warp", ".warp", required=True), SYNC], "mask:ri:b32", ptx=(6, 0), sm=30)
form("bar", [M("op", ".sync", ".arrive", required=True)], "a:ri:u32 b?:ri:u32")
form("membar", [M("level", ".cta", ".gl", ".sys", required=True)], "")
form("fence", [M("sem", ".sc", ".acq_rel", required=True), M("scope", ".cta", ".gpu", ".sys", required=True)],
     "", ptx=(6, 0), sm=70)
form("shfl", [SYNC, M("mode", ".up", ".down", ".bfly", ".idx", required=True), T(".b32")],
     "d:r:T a:ri:T b:ri:u32 c:ri:u32 mask:ri:b32", ptx=(6, 0), sm=30)
form("vote", [SYNC, M("mode", ".all", ".any", ".uni", required=True), T(".pred")],
     "d:r:pred a:rn:pred mask:ri:b32", ptx=(6, 0), sm=30)
form("vote", [SYNC, M("mode", ".ballot", required=True), T(".b32")],
     "d:r:b32 a:rn:pred mask:ri:b32", ptx=(6, 0), sm=30)
form("redux", [SYNC, M("op", ".add", ".min", ".max", ".and", ".or", ".xor", required=True),
               T(".u32", ".s32", ".b32", ".f32")], "d:r:T a:r:T mask:ri:b32", ptx=(7, 0), sm=80,
     gates=((".f32", (8, 6), 100, True),),
     rules=(Rule((".and", ".or", ".xor"), "bitwise redux takes .b32", types=(".b32",)),
            Rule((".add",), "redux add takes .u32/.s32", types=(".u32", ".s32"))))
form("griddepcontrol", [M("action", ".launch_dependents", ".wait", required=True)], "", ptx=(7, 8), sm=90)
form("setmaxnreg", [M("action", ".inc", ".dec", required=True), SYNC, M("aligned", ".aligned", required=True),
                    T(".u32")], "n:i:u32", ptx=(8, 0), sm=90, sm_a=True)

#: The special registers the DSL knows (all ``u32``).
SPECIALS = ("%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z",
            "%nctaid.x", "%nctaid.y", "%nctaid.z", "%laneid", "%warpid", "%nwarpid", "%smid")


def coverage() -> dict:
    """opcode -> number of forms; a summary of what the table holds."""
    return {op: len(fs) for op, fs in sorted(FORMS.items())}
