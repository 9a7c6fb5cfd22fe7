"""The ahead-of-time stages of ``tl.jit``: ``Lowered`` (StableHLO text) and
``Compiled`` (an XLA or IREE executable).

    lowered = tl.jit(f).lower(x, w)
    print(lowered.as_text())              # the verified StableHLO module
    blob = lowered.serialize("f.mlirbc")  # a portable artifact (StableHLO bytecode)
    compiled = lowered.compile()
    compiled(x, w)                        # same arguments as f
    lowered.recognized                    # coarsened ops the recognizers found

``Lowered`` runs the middle of the pipeline on the specialised graph:
recognize + coarsen (``tlaloc._recognize``), then decompose every coarsened op
that no kernel claims for the target (its forward body is inlined), then emit.
"""
from __future__ import annotations

import os
import tempfile

from .. import _pytree
from ..errors import ArgumentError


class Lowered:
    """A function specialised to one signature and emitted as StableHLO.

    Attributes:
      graph: the specialised DXIR graph (concrete shapes and dtypes).
      coarsened: ``graph`` with recognized patterns as coarsened ops.
      recognized: the coarsened ops found (``[(op name, params)]``).
      program: the emitted ``Program`` (text, avals, donation aliases, checks, shardings).
      backend: ``"xla"`` or ``"iree"``.
    """

    def __init__(self, graph, source, donate, platform, name="f", statics=(), backend="xla", shardings=None,
                 recognize=True):
        from .._render.stablehlo import emit_module
        from .._recognize import coarsen, decompose, summary
        self.statics = tuple(statics)        # ((position, value), ...) bound while lowering
        self.graph = graph
        self.source = source
        self.platform = platform
        self.backend = backend
        self.name = name
        if recognize:
            self.coarsened = coarsen(graph, gradients=False)
            self.recognized = summary(self.coarsened)
            emitted = decompose(self.coarsened, target=target_name(backend, platform))
        else:
            self.coarsened, self.recognized, emitted = graph, [], graph
        self.emitted_graph = emitted
        self.program = emit_module(emitted, name=name, donate=donate, shardings=shardings, backend=backend)

    def as_text(self) -> str:
        """The StableHLO module, as MLIR prints it after verification."""
        return self.program.text

    def compile(self) -> "Compiled":
        names = [v.hint or f"argument {k}" for k, v in enumerate(self.graph.inputs)]
        if self.backend == "iree":
            from .._runtime.iree import Executable as IreeExecutable
            return Compiled(IreeExecutable(self.program, graph=self.graph, arg_names=names), self)
        if self.program.shardings is not None:
            from .._runtime.spmd import SpmdExecutable
            return Compiled(SpmdExecutable(self.program, self.platform, arg_names=names), self)
        from .._runtime.pjrt import Executable
        return Compiled(Executable(self.program, self.platform, arg_names=names), self)

    def serialize(self, path=None, target: str | None = None) -> bytes:
        """The module as a portable StableHLO artifact (versioned MLIR bytecode).

        ``tlaloc._runtime.pjrt.Executable(blob, in_avals=...)`` compiles it again;
        ``deserialize(blob)`` gives its StableHLO text back (for IREE, or to read).

        Args:
          path: if given, the bytes are also written there (atomically).
          target: the StableHLO version to write (default: the current one).
        """
        from jaxlib.mlir import ir
        from jaxlib.mlir.dialects import stablehlo
        from .._render.stablehlo import mlir_context
        from ..errors import NoRuleError
        if self.program.shardings is not None:
            raise NoRuleError("serialize: a program with Shardy shardings (tl.jit(..., mesh=...)) has no portable "
                              "form: the versioned StableHLO artifact (VHLO) carries no `sdy` attributes. Lower "
                              "without a mesh to serialize, and give the shardings when compiling it")
        if "chlo." in self.program.text:
            import re
            ops = sorted(set(re.findall(r'"?(chlo\.[a-z_]+)', self.program.text)))
            what = "float64 `erf`" if ops == ["chlo.erf"] else ", ".join(f"`{o}`" for o in ops)
            fix = "compute erf in float32, or " if ops == ["chlo.erf"] else ""
            raise NoRuleError(f"serialize: the program holds a `chlo` op ({what}), which the versioned "
                              f"StableHLO artifact (VHLO) cannot carry; {fix}compile the StableHLO text "
                              f"(`.program.text`) instead of serializing it")
        with mlir_context():
            module = ir.Module.parse(self.program.text)     # a fresh copy: serialising mutates it
            data = stablehlo.serialize_portable_artifact(module, target or stablehlo.get_current_version())
        if path is not None:
            path = os.fspath(path)
            d = os.path.dirname(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(dir=d, prefix=".tlaloc-", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        return data

    def __repr__(self) -> str:
        ins = ", ".join(str(v.aval) for v in self.graph.inputs)
        return f"<Lowered {self.name}({ins}) for {self.backend}>"


def deserialize(data: bytes) -> str:
    """The StableHLO text of a portable artifact written by ``Lowered.serialize`` (verified)."""
    from jaxlib.mlir.dialects import stablehlo
    from .._render.stablehlo import mlir_context, parse
    with mlir_context() as ctx:
        module = stablehlo.deserialize_portable_artifact(ctx, bytes(data))
        text = str(module)
    return str(parse(text))


def target_name(backend: str, platform: str) -> str:
    """The kernel-claim target of a backend and platform: ``"cpu"``, ``"iree-llvm-cpu"``,
    or the GPU's name (``"nvidia-h100"``) on CUDA."""
    if backend == "iree":
        return "iree-llvm-cpu"
    if platform == "cuda":
        try:
            from .._runtime.pjrt import client
            kind = client("cuda").local_devices()[0].device_kind.lower()
        except Exception:                                  # pragma: no cover
            return "cuda"
        for arch in ("a100", "h100", "h200", "gb10"):
            if arch in kind:
                return f"nvidia-{arch}"
        return "cuda"
    return platform


class Compiled:
    """An executable for one signature. Call it with the jitted function's arguments
    (static ones included, and equal to the values it was lowered with)."""

    def __init__(self, executable, lowered: Lowered):
        self.executable = executable
        self.lowered = lowered

    def as_text(self) -> str:
        return self.lowered.as_text()

    def call_flat(self, leaves):
        return self.executable(*leaves)

    def __call__(self, *args):
        src = self.lowered.source
        statics = dict(self.lowered.statics)
        if statics:
            if any(p >= len(args) for p in statics):
                raise ArgumentError(f"{self.lowered.name}: pass every argument, the static ones included")
            for p, v in statics.items():
                if args[p] is not v and args[p] != v:
                    raise ArgumentError(f"{self.lowered.name}: static argument {p} was {v!r} when lowering, "
                                        f"got {args[p]!r}; lower again for a new value")
            args = tuple(a for k, a in enumerate(args) if k not in statics)
        flat, trees = [], []
        for a in args:
            leaves, tree = _pytree.flatten(a)
            flat.extend(leaves)
            trees.append(tree)
        n_in = len(self.lowered.graph.inputs) - len(src.closure_getters)
        if len(flat) != n_in:
            raise ArgumentError(f"{self.lowered.name}: this executable takes {n_in} array arguments "
                                f"(static arguments are fixed when lowering), got {len(flat)}")
        leaves = flat + [g() for g in src.closure_getters]
        src.check(args, trees, leaves)
        return src.finish(args, trees, self.call_flat(leaves))
