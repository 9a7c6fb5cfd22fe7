"""Assembling emitted PTX with ``ptxas`` (CUDA's assembler), when it is installed.

``assemble(text, arch)`` returns the cubin bytes or raises ``PtxasError`` with
ptxas's diagnostics; ``ptxas_path()`` is ``None`` where there is no ptxas (tests
skip by name then).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from ...errors import TlalocError


class PtxasError(TlalocError, RuntimeError):
    """ptxas refused a module; the message holds its diagnostics."""


def ptxas_path():
    return os.environ.get("TLALOC_PTXAS") or shutil.which("ptxas")


def assemble(text: str, arch: str, *, verbose: bool = False) -> bytes:
    """The cubin of PTX ``text`` for ``arch`` (``"sm_80"``); raises ``PtxasError``."""
    exe = ptxas_path()
    if exe is None:
        raise PtxasError("ptxas is not installed (put CUDA's bin/ on PATH or set TLALOC_PTXAS)")
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(text)
        cmd = [exe, f"-arch={arch}", src, "-o", out] + (["-v"] if verbose else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise PtxasError(f"ptxas -arch={arch} failed:\n{r.stderr.strip()}")
        with open(out, "rb") as f:
            return f.read()


def resource_usage(text: str, arch: str) -> dict:
    """ptxas -v's summary for the kernel: ``{"registers": n, "shared": bytes, "spill": bytes}``."""
    import re
    exe = ptxas_path()
    if exe is None:
        raise PtxasError("ptxas is not installed")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(text)
        r = subprocess.run([exe, f"-arch={arch}", "-v", src, "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True)
    if r.returncode != 0:
        raise PtxasError(f"ptxas -arch={arch} failed:\n{r.stderr.strip()}")
    regs = re.search(r"Used (\d+) registers", r.stderr)
    smem = re.search(r"(\d+) bytes smem", r.stderr)
    spill = re.search(r"(\d+) bytes spill stores", r.stderr)
    return {"registers": int(regs.group(1)) if regs else None, "shared": int(smem.group(1)) if smem else 0,
            "spill": int(spill.group(1)) if spill else 0}
