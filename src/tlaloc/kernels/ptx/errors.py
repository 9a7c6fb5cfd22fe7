"""``PtxError``: a kernel-building mistake, reported at the user's own line.

Every check of the PTX DSL (an instruction against the ISA table, a label
never placed, a register from another kernel, a target too old for an
instruction) raises ``PtxError``. Its location is the first stack frame outside
the DSL package ``tlaloc/kernels/ptx/``: the line of the ``inst(...)`` call in
the kernel's own source (a library kernel's line for library kernels), never a
line of the DSL itself.

Example::

    File "my_kernels.py", line 12
    PtxError: my_kernels.py:12: add.rn.u32: modifier .rn does not apply to type .u32
    (it is one of .rn .rz .rm .rp, allowed with .f32 .f64)
"""
from __future__ import annotations

import linecache
import os
import sys

from ...errors import TlalocError

_DSL_DIR = os.path.dirname(os.path.abspath(__file__))


class PtxError(TlalocError, ValueError):
    """A PTX kernel breaks a rule of the ISA table or of the DSL.

    Attributes:
      where: ``file:line`` of the user's call (``None`` when unknown).
      filename, lineno, line: the same, split, plus the source line's text.
    """

    def __init__(self, message: str, where: "SourceLine | None" = None):
        self.where = where
        self.filename = where.filename if where else None
        self.lineno = where.lineno if where else None
        self.line = where.text if where else ""
        self.msg = f"{where}: {message}" if where else message
        super().__init__(self.msg)

    def __str__(self) -> str:
        return self.msg


class SourceLine:
    """``file:line`` of a user call, with the line's text."""
    __slots__ = ("filename", "lineno", "text")

    def __init__(self, filename: str, lineno: int, text: str = ""):
        self.filename, self.lineno, self.text = filename, lineno, text

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"

    def __repr__(self) -> str:
        return f"SourceLine({self.filename!r}, {self.lineno})"


def user_frame() -> SourceLine | None:
    """The first frame on the stack whose file is outside the DSL package."""
    f = sys._getframe(1)
    while f is not None:
        fname = os.path.abspath(f.f_code.co_filename)
        if os.path.dirname(fname) != _DSL_DIR:
            text = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
            return SourceLine(f.f_code.co_filename, f.f_lineno, text)
        f = f.f_back
    return None


def fail(message: str, where: SourceLine | None = None):
    """Raise ``PtxError`` at ``where`` (default: the user's current frame)."""
    raise PtxError(message, where if where is not None else user_frame())
