"""The ``tlaloc`` command.

    tlaloc bench [--quick] [--clock cpu] [--threads 1] [--only eager jit ...]

``bench`` runs ``benchmarks/run_all.py`` of the tlaloc checkout this package
is installed from (or the one in the current directory) in a fresh Python
process, and passes its exit code on. Other commands (``serve``) are added by
their own issues, one function per command below.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(help="tlaloc: differentiable array programs by source transformation.",
                  no_args_is_help=True, add_completion=False)


@app.callback()
def _root() -> None:
    """tlaloc: differentiable array programs by source transformation."""


def _benchmarks_dir() -> Optional[Path]:
    """``benchmarks/`` of the checkout: next to ``src/`` of this package, else under the cwd."""
    here = Path(__file__).resolve().parent                  # .../src/tlaloc
    for root in (here.parent.parent, Path.cwd()):
        candidate = root / "benchmarks" / "run_all.py"
        if candidate.is_file():
            return candidate.parent
    return None


@app.command()
def bench(quick: bool = typer.Option(False, "--quick", help="small sizes, few repeats: a smoke run"),
          repeats: Optional[int] = typer.Option(None, help="repeats per implementation"),
          clock: str = typer.Option("wall", help="wall, or cpu (process CPU time; steadier on a loaded machine)"),
          threads: Optional[int] = typer.Option(None, help="limit BLAS, XLA and torch to N threads"),
          only: Optional[List[str]] = typer.Option(None, help="run only this section (repeatable): "
                                                   "eager, jit, definition, training, llm, serving")) -> None:
    """Benchmarks side by side with autograd, NumPy, JAX, PyTorch and transformers (issue 9)."""
    where = _benchmarks_dir()
    if where is None:
        typer.echo("tlaloc bench: benchmarks/run_all.py not found; run it from a tlaloc checkout "
                   "(the benchmarks are not part of the installed package)", err=True)
        raise typer.Exit(2)
    cmd = [sys.executable, str(where / "run_all.py"), "--clock", clock]
    if quick:
        cmd.append("--quick")
    if repeats is not None:
        cmd += ["--repeats", str(repeats)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    if only:
        cmd += ["--only", *only]
    raise typer.Exit(subprocess.call(cmd, env=dict(os.environ)))


def command_names() -> list:
    """Names of the registered commands (the benchmarks use it to see whether ``serve`` exists)."""
    return [c.name or c.callback.__name__ for c in app.registered_commands]


def main() -> None:
    app()


if __name__ == "__main__":
    main()
