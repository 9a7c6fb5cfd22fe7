"""Reading back the PTX subset that ``emit.py`` writes.

``parse(text)`` rebuilds the ``Kernel`` through the same ``KernelBuilder``, so
every parsed instruction is checked against the ISA table again (errors point
at ``<ptx>:LINE``). ``emit(parse(emit(k))) == emit(k)`` for every kernel the DSL
builds; text outside that subset is refused with its line number.
"""
from __future__ import annotations

import re

from .builder import KernelBuilder
from .errors import PtxError, SourceLine
from .ir import PREFIX_TYPE, Imm, Label, Mem, Not, Special, Vec
from .isa import SPECIALS

_REG = re.compile(r"^(%[a-z]+)(\d+)$")
_INT = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)$")


class _Reader:
    def __init__(self, text: str, filename: str):
        self.lines = text.split("\n")
        self.filename = filename
        self.n = 0

    def where(self) -> SourceLine:
        return SourceLine(self.filename, self.n, self.lines[self.n - 1].strip() if self.n else "")

    def fail(self, message: str):
        raise PtxError(message, self.where())

    def next(self) -> str:
        """The next line that is not blank or a comment."""
        while self.n < len(self.lines):
            line = self.lines[self.n].strip()
            self.n += 1
            if line and not line.startswith("//"):
                return line
        self.fail("unexpected end of the module")

    def expect(self, pattern: str):
        m = re.fullmatch(pattern, self.next())
        if m is None:
            self.fail(f"expected {pattern!r}")
        return m


def parse(text: str, filename: str = "<ptx>"):
    """The ``Kernel`` of a module written by ``emit``; raises ``PtxError`` at a bad line."""
    rd = _Reader(text, filename)
    ver = rd.expect(r"\.version (\d+)\.(\d+)")
    arch = rd.expect(r"\.target (sm_\w+)").group(1)
    rd.expect(r"\.address_size 64")
    name = rd.expect(r"\.visible \.entry (\w+)\(").group(1)
    k = KernelBuilder(name, arch, (int(ver.group(1)), int(ver.group(2))))
    while True:
        line = rd.next()
        if line == ")":
            break
        m = re.fullmatch(r"\.param \.(\w+) (\w+),?", line)
        if m is None:
            rd.fail("expected a parameter `.param .TYPE NAME`")
        k.param(m.group(1), m.group(2))
    line = rd.next()
    m = re.fullmatch(r"\.maxntid (\d+), (\d+), (\d+)", line)
    if m:
        k.maxntid(*map(int, m.groups()))
        line = rd.next()
    if line != "{":
        rd.fail("expected `{`")
    regs, labels = {}, {}
    env = {"regs": regs, "labels": labels, "shared": {}, "params": {p.name: p for p in k.params}}
    while True:
        line = rd.next()
        m = re.fullmatch(r"\.reg \.(\w+) (%[a-z]+)<(\d+)>;", line)
        if m is None:
            break
        ty, prefix, count = m.group(1), m.group(2), int(m.group(3))
        if PREFIX_TYPE.get(prefix) != ty:
            rd.fail(f"register prefix {prefix} does not name .{ty} registers")
        for _ in range(count):
            r = k.reg(ty)
            regs[r.name] = r
    while True:
        m = re.fullmatch(r"\.shared \.align (\d+) \.(\w+) (\w+)\[(\d+)\];", line)
        if m is None:
            break
        s = k.shared(m.group(2), m.group(3), int(m.group(4)), int(m.group(1)))
        env["shared"][s.name] = s
        line = rd.next()
    while line != "}":
        if line.endswith(":") and line.startswith("$L_"):
            lab = _label(k, labels, line[:-1], rd)
            if lab.placed_at is not None:
                rd.fail(f"label {lab.name} is placed twice")
            k.body.append(_place(lab, rd.where()))
        else:
            _instruction(k, rd, line, env)
        line = rd.next()
    return k.finish()


def _label(k, labels, name, rd):
    if name not in labels:
        lab = Label(name, k.owner, rd.where())
        k.labels[name] = lab
        labels[name] = lab
    return labels[name]


def _place(lab, where):
    from .ir import Place
    lab.placed_at = where
    return Place(lab)


def _split_operands(s: str) -> list:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _operand(tok: str, rd: _Reader, k, env):
    if tok.startswith("!"):
        return Not(_operand(tok[1:], rd, k, env))
    if tok.startswith("{") and tok.endswith("}"):
        return Vec([_operand(t, rd, k, env) for t in _split_operands(tok[1:-1])])
    if tok.startswith("[") and tok.endswith("]"):
        base, _, off = tok[1:-1].partition("+")
        return Mem(_operand(base.strip(), rd, k, env), int(off) if off else 0)
    if tok in env["regs"]:
        return env["regs"][tok]
    if tok in SPECIALS:
        return Special(tok)
    if tok in env["params"]:
        return env["params"][tok]
    if tok in env["shared"]:
        return env["shared"][tok]
    if tok.startswith("$L_"):
        return _label(k, env["labels"], tok, rd)
    if re.fullmatch(r"0[fF][0-9a-fA-F]{8}", tok):
        import struct
        return Imm(struct.unpack("<f", struct.pack("<I", int(tok[2:], 16)))[0], True)
    if re.fullmatch(r"0[dD][0-9a-fA-F]{16}", tok):
        import struct
        return Imm(struct.unpack("<d", struct.pack("<Q", int(tok[2:], 16)))[0], True)
    if _INT.fullmatch(tok):
        return Imm(int(tok, 0), False)
    if _REG.fullmatch(tok):
        rd.fail(f"register {tok} is not declared")
    rd.fail(f"cannot read operand {tok!r}")


def _instruction(k, rd: _Reader, line: str, env):
    if not line.endswith(";"):
        rd.fail("an instruction ends with `;`")
    line = line[:-1]
    guard = None
    if line.startswith("@"):
        g, _, line = line.partition(" ")
        guard = _operand(g[1:], rd, k, env)
    op, _, rest = line.partition(" ")
    ops = [_operand(t, rd, k, env) for t in _split_operands(rest)]
    from .validate import Context, check
    ctx = Context(k.name, k.arch, k.version, k.owner, rd.where())
    k.body.append(check(op, ops, guard, ctx))
