"""``tlaloc.kernels.ptx``: a PTX DSL checked against a declarative ISA table.

=================  ==============================================================
file               job
=================  ==============================================================
``isa.py``         the ISA table: forms, modifier groups, operands, versions, sm
``validate.py``    checking one instruction against the table
``builder.py``     ``KernelTemplate``, ``KernelBuilder`` and the one-call-per-
                   instruction spelling (``inst``, ``label``, ``place``, ``r32`` ...)
``emit.py``        PTX text
``parse.py``       reading that text back (round trip: emit -> parse -> emit)
``ptxas.py``       assembling with ``ptxas`` when it is installed
``errors.py``      ``PtxError``, located at the user's own line
=================  ==============================================================
"""
from .errors import PtxError
from .ir import Imm, Instruction, Kernel, Label, Mem, Not, Param, Reg, Shared, Special, Vec, imm, mem, vec
from .builder import (KernelBuilder, KernelTemplate, Launch, Specialized, b32, ctaid, current, f32, f64, inst,
                      label, laneid, nctaid, ntid, param, place, pred, r32, r64, reg, s32, shared, tid, warpid)
from .emit import emit
from .parse import parse
from .isa import FORMS, TARGETS, coverage
from .ptxas import assemble, ptxas_path

__all__ = [
    "PtxError", "KernelTemplate", "KernelBuilder", "Launch", "Specialized", "Kernel", "Instruction",
    "inst", "label", "place", "param", "shared", "reg", "r32", "s32", "b32", "r64", "f32", "f64", "pred",
    "tid", "ntid", "ctaid", "nctaid", "laneid", "warpid", "current",
    "mem", "imm", "vec", "Imm", "Label", "Mem", "Not", "Param", "Reg", "Shared", "Special", "Vec",
    "emit", "parse", "FORMS", "TARGETS", "coverage", "assemble", "ptxas_path",
]
