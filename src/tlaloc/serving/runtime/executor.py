"""The artifact's programs on one PJRT device: weights uploaded once, KV pools donated to every call.

Loading uploads the weights once, from the bytes whose sha256 was checked, and (for
decoders) allocates the KV pools on the device; the pools stay there and are donated to
every decode and prefill call (updated in place). A program compiles on first use of its
bucket, once per process for identical programs (``_COMPILED``), after its text is checked
against the manifest's hash again; with a cache directory a compiled executable is kept
on disk and reloaded by the next process.
"""
from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np

from .. import manifest as mf
from ..errors import ArgumentError, ArtifactError

log = logging.getLogger("tlaloc.serving")

_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
              "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
_COMPILED: dict = {}                 # (cache_key, platform, fast_compile, x8) -> Program: one compile per process
#: what the CPU kernels' products by stored quantised weights may take as x (Engine's ``activations``)
ACTIVATIONS = ("float32", "int8")
_COMPILE_LOCK = threading.Lock()


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def compiled_count() -> int:
    """Programs compiled (or loaded from the cache) in this process."""
    return len(_COMPILED)


class Executor:
    """Runs the programs of the artifact at ``path`` (its manifest already read) on ``platform``.

    verify: check the weights' sha256 on upload. fast_compile, cache_dir: see
    :class:`tlaloc.serving.Engine`. Raises ArtifactError when the weights do not match the manifest.
    """

    def __init__(self, path: str, manifest: dict, *, platform: str, verify: bool, fast_compile: bool,
                 cache_dir: str | None, cpu_kernels: bool | str = "auto", activations: str = "float32"):
        from . import device
        self._device = device
        self.path, self.manifest, self.platform = path, manifest, platform
        if cpu_kernels not in (True, False, "auto"):
            raise ArgumentError(f"cpu_kernels must be True, False or 'auto' (where they beat XLA's dots on "
                                f"this CPU), got {cpu_kernels!r}")
        if not isinstance(activations, str) or activations not in ACTIVATIONS:
            raise ArgumentError(f"activations must be one of {list(ACTIVATIONS)} (int8: the CPU kernels quantise x "
                                f"per block of 32, as llama.cpp does), got {activations!r}")
        self.cpu_kernels = bool(cpu_kernels) and platform == "cpu" and any(
            p.get("cpu_kernels") for p in manifest["programs"])
        self._activations_run = self._activations(str(activations), manifest)
        #: "auto" where the kernels do not pay for every program: the variants of the programs they pay for
        self._chosen = None
        if self.cpu_kernels and cpu_kernels == "auto":
            from ..._runtime import cpu_kernels as kernels
            if not kernels.pays():
                self._chosen = {p["name"] for p in manifest["programs"] if p.get("cpu_kernels")
                                and kernels.pays_for(p["mode"], p["batch"], p["cpu_kernels"]["targets"], self._activations_run,
                                                    p.get("tokens", 1))}
                self.cpu_kernels = bool(self._chosen)
                log.info("engine: this CPU has no AVX-512: the CPU kernels' portable loops run %s, the portable "
                         "programs the rest (cpu_kernels=True forces the kernels everywhere)",
                         f"{len(self._chosen)} programs ({', '.join(sorted(self._chosen))})" if self._chosen else "no program")
        if self.cpu_kernels:
            from ..._runtime import cpu_kernels as kernels
            self.cpu_kernels = kernels.load()           # False (logged, with the reason) -> the portable texts
        if self.cpu_kernels:
            known = {*kernels.TARGETS.values(), *kernels.OPS.values()}
            unknown = sorted({t for p in manifest["programs"] if p.get("cpu_kernels")
                              for t in p["cpu_kernels"]["targets"]} - known)
            if unknown:                                 # an artifact of another tlaloc version
                log.warning("engine: the artifact's CPU-kernel programs call %s, which this tlaloc does not have; "
                            "running the portable programs (re-export the artifact to use the CPU kernels)",
                            ", ".join(unknown))
                self.cpu_kernels = False
        self._activations_run = self._activations(self._activations_run, manifest)   # the kernels may not have loaded
        log.info("engine: %s programs on %s", "the CPU-kernel" if self.cpu_kernels else "the portable", platform)
        self.verify, self.fast_compile, self.cache_dir = verify, fast_compile, cache_dir
        #: (mode, batch, context, tokens per row) -> manifest program entry
        self.programs = {(p["mode"], p["batch"], p["context"], p["tokens"]): p for p in manifest["programs"]}
        self._widest = {}                   # (mode, batch, context) -> the most tokens per row of its programs
        for mode, B, C, T in self.programs:
            self._widest[mode, B, C] = max(T, self._widest.get((mode, B, C), 0))
        self.programs_used: set = set()     # (mode, batch, context, tokens) of every decode/prefill program run
        self._plans: dict = {}
        self._reshapes: dict = {}           # B -> the program of tokens_from_ids
        self.weights = self._upload_weights()
        self.pools: dict = {}

    @property
    def activations(self) -> str:
        """What the CPU kernels' products by Q4_1, Q8_0 and int8 weights take as x here: "float32"
        (exact) or "int8" (quantised per block of 32: ``cpu_kernels.X8_TARGETS``); "float32" wherever
        no such product runs through the kernels. Fixed at load (the weights are packed for it)."""
        return self._activations_run

    # -- loading ---------------------------------------------------------------------------------
    def _activations(self, wanted: str, manifest: dict) -> str:
        """``wanted`` where it can run here, else "float32" (logged, with the reason)."""
        if wanted == "float32":
            return wanted
        if not self.cpu_kernels:
            log.warning("engine: activations=%r: no program of this engine runs the CPU kernels (cpu_kernels=False, "
                        "another platform, kernels that do not build, no kernel texts in the artifact, or none "
                        "chosen for this CPU); float32 activations run (exact)", wanted)
            return "float32"
        from ..._runtime.cpu_kernels import X8_TARGETS
        if not any(set(X8_TARGETS) & set(p["cpu_kernels"]["targets"]) for p in manifest["programs"] if p.get("cpu_kernels")):
            log.warning("engine: activations=%r changes only products by Q4_1, Q8_0 or int8 weights, and this "
                        "artifact has none; float32 activations run", wanted)
            return "float32"
        slots = {s["name"]: s for s in manifest["weights"]["slots"]}
        names = {n for p in manifest["programs"] if p.get("cpu_kernels") for n in p["cpu_kernels"].get("panel64", ())}
        odd = sorted(n for n in names if slots[n]["dtype"] in ("int8", "uint8")
                     and slots[n]["shape"][0] * (2 if slots[n]["dtype"] == "uint8" else 1) % 32)
        if odd:
            log.warning("engine: activations=%r needs each quantised weight's input width to be a multiple of 32 "
                        "(%s is not); float32 activations run (exact)", wanted, odd[0])
            return "float32"
        return wanted

    def _packed(self, program: dict) -> set:
        """The weights the text this executor runs for ``program`` reads in panel order."""
        return set(self._variant(program).get("panel64", ()))

    def _upload_weights(self) -> dict:
        """Each weight on the device once, as the programs read it: name -> device array, and for
        the weights a CPU kernel reads in panel order (``tlaloc._runtime.cpu_kernels.pack_panels``)
        ``(name, "panel64")`` -> the packed copy (both where some program reads each layout)."""
        from safetensors import deserialize
        w = self.manifest["weights"]
        with open(mf.resolve(self.path, w["file"]), "rb") as f:
            data = f.read()
        if self.verify:
            mf.check_bytes(self.manifest, w["file"], data)                     # the bytes uploaded are the ones hashed
        found = {}
        for name, info in deserialize(data):
            if info["dtype"] not in _ST_DTYPES:
                raise ArtifactError(f"{w['file']}: tensor {name} has dtype {info['dtype']}, which this runtime "
                                    f"does not read")
            found[name] = np.frombuffer(info["data"], np_dtype(_ST_DTYPES[info["dtype"]])).reshape(info["shape"])
        want = {s["name"]: s for s in w["slots"]}
        if set(found) != set(want):
            missing, extra = sorted(set(want) - set(found)), sorted(set(found) - set(want))
            raise ArtifactError(f"{w['file']} does not hold the manifest's weights: missing {missing[:10]}, "
                                f"unexpected {extra[:10]}; re-export the artifact")
        packed, plain = set(), set()
        for program in self.manifest["programs"]:
            program_packed = self._packed(program)
            packed |= program_packed
            plain |= set(program["inputs"]) - program_packed
        host = {}
        for name, slot in want.items():
            arr = found[name]
            if arr.dtype != np_dtype(slot["dtype"]) or list(arr.shape) != list(slot["shape"]):
                raise ArtifactError(f"{w['file']}: weight {name} is {arr.dtype}{list(arr.shape)}, the manifest says "
                                    f"{slot['dtype']}{slot['shape']}; re-export the artifact")
            if name in plain or name not in packed:
                host[name] = arr
            if name in packed:
                from ..._runtime.cpu_kernels import pack_k4, pack_panels
                x8 = self._activations_run == "int8" and arr.dtype in (np.int8, np.uint8)   # read by an X8_TARGETS kernel
                host[name, "panel64"] = pack_k4(arr) if x8 else pack_panels(arr)
        return self._device.put_weights(host, self.platform)      # once; every call reuses them

    def new_pools(self) -> None:
        """Zeroed KV pools on the device (one per manifest KV slot), replacing any held."""
        self.pools = {}
        for slot in self.manifest["kv"]["slots"]:
            zeros = np.zeros(slot["shape"], np_dtype(slot["dtype"]))
            self.pools[slot["name"]] = self._device.device_put(zeros, self.platform)   # owned: donatable in place

    def pools_lost(self) -> bool:
        """Whether a failed call consumed the donated pools (they must be made again)."""
        return any(p.is_deleted() for p in self.pools.values())

    def kv_pool_pointers(self) -> list:
        """The device buffer address of every KV pool (donation keeps them fixed across steps)."""
        return [p.unsafe_buffer_pointer() for p in self.pools.values()]

    # -- programs --------------------------------------------------------------------------------
    def tokens(self, mode: str, B: int, C: int) -> list:
        """The tokens per row of the ``mode`` programs of batch B and context C, ascending."""
        return sorted(T for (m, b, c, T) in self.programs if (m, b, c) == (mode, B, C))

    def executable(self, mode: str, B: int, C: int, T: int | None = None):
        """``(manifest program entry, compiled Program)`` of bucket (mode, B, C, T), compiled on first use
        (T None: the most tokens per row of (mode, B, C), the only program of most modes)."""
        program = self.programs[(mode, B, C, self._widest[mode, B, C] if T is None else T)]
        key = (self._variant(program)["cache_key"], self.platform, self.fast_compile, self._x8(program))
        exe = _COMPILED.get(key)
        if exe is None:
            with _COMPILE_LOCK:
                exe = _COMPILED.get(key)
                if exe is None:
                    exe = self._compile(program)
                    _COMPILED[key] = exe
        return program, exe

    def _variant(self, program: dict) -> dict:
        """The text this executor runs for ``program``: its CPU-kernel variant when the kernels are
        loaded, it has one and (``cpu_kernels="auto"``) they pay for it here
        (``tlaloc._runtime.cpu_kernels.pays_for``), else the portable text (``{"file", "cache_key"}``)."""
        if self.cpu_kernels and program.get("cpu_kernels") and (self._chosen is None or program["name"] in self._chosen):
            return program["cpu_kernels"]
        return program

    def _x8(self, program: dict) -> bool:
        """Whether the text run for ``program`` calls the int8-activation kernels (cpu_kernels.X8_TARGETS)."""
        return self._activations_run == "int8" and self._variant(program) is not program

    def _compile(self, program: dict):
        variant = self._variant(program)
        rel = variant["file"]
        with open(mf.resolve(self.path, rel), "rb") as f:
            text = f.read()
        mf.check_bytes(self.manifest, rel, text)                                 # the text compiled is the one hashed
        text = text.decode("utf-8")
        if self._x8(program):
            from ..._runtime.cpu_kernels import X8_TARGETS
            for p64, x8 in X8_TARGETS.items():
                text = text.replace(f"@{p64}(", f"@{x8}(")
        avals = []
        slots = {s["name"]: s for s in program["request_slots"]}
        slots.update({s["name"]: s for s in (self.manifest["kv"] or {}).get("slots", [])})
        slots.update({s["name"]: s for s in self.manifest["weights"]["slots"]})
        for name in program["inputs"]:
            avals.append((np_dtype(slots[name]["dtype"]), tuple(slots[name]["shape"])))
        t0 = time.perf_counter()
        cache_path = None
        if self.cache_dir:
            import jaxlib
            opts = "O0" if self.fast_compile else "O2"
            if self.platform == "cpu" and not self._device.memory_scheduler_active():
                opts += "-concurrent"                   # the scheduler changes the executable
            tag = f"{variant['cache_key']}{'-a8' if self._x8(program) else ''}-{self.platform}-{opts}-jaxlib{jaxlib.__version__}"
            cache_path = os.path.join(self.cache_dir, tag + ".xla")
        exe = self._device.Program(text, self.platform, list(program["inputs"]), avals,
                                   fast_compile=self.fast_compile, cache_path=cache_path)
        log.info("engine: %s %s in %.2f s (first use of bucket %s batch %d context %d)",
                 "loaded compiled" if exe.from_cache else "compiled", program["name"], time.perf_counter() - t0,
                 program["mode"], program["batch"], program["context"])
        return exe

    def _plan(self, program: dict, request: dict) -> tuple:
        """``(args, fill)`` of ``program``: its argument list, holding its weights (fixed once loaded) and
        None in the places of the request inputs and pools, and ``fill``, those places as
        ``(position, name, from_request)``. Made on the program's first call."""
        plan = self._plans.get(program["name"])
        if plan is None:
            names, packed = program["inputs"], self._packed(program)
            plan = self._plans[program["name"]] = (
                [self.weights.get((n, "panel64") if n in packed else n) for n in names],
                [(i, n, n in request) for i, n in enumerate(names) if n not in self.weights and n not in packed])
        return plan

    def call(self, mode: str, B: int, C: int, inputs: dict, T: int | None = None) -> list:
        """Run bucket (mode, B, C, T) on the request ``inputs`` (the weights and pools are added); its outputs
        in manifest order, as device arrays."""
        program, exe = self.executable(mode, B, C, T)
        return self._execute(program, exe, inputs)

    def _execute(self, program: dict, exe, inputs: dict) -> list:
        """:meth:`call` of ``program``, compiled as ``exe`` (a device ``Program``): the request's NumPy
        inputs are transferred here, so ``exe`` does not test each of its hundreds of arguments.

        The program's argument list (its weights) is kept, not copied per call: copying it touches
        every weight's array object (its reference count), which after a step has left the host's
        caches cold costs more than all the other per-call work on it. Only the few dozen request
        and pool places are written, and emptied again after the call so that the list keeps no
        pool or input alive between calls. Not reentrant: the engine's lock serialises calls."""
        args, fill = self._plan(program, inputs)
        pools, put = self.pools, exe.put
        try:
            for i, n, from_request in fill:
                args[i] = put(inputs[n], i) if from_request else pools[n]
            return exe.execute(args)
        finally:
            for i, _, _ in fill:
                args[i] = None

    def run(self, mode: str, B: int, C: int, inputs: dict, T: int | None = None) -> dict:
        """Run a decode or prefill program; the pools it returns replace the donated ones. Returns its
        other outputs by role (``next_token_ids``, and ``token_logprob``, ``top_logprobs``, ``top_ids``
        where the artifact has them) as host arrays."""
        return self.collect(self.dispatch(mode, B, C, inputs, T))

    def dispatch(self, mode: str, B: int, C: int, inputs: dict, T: int | None = None) -> dict:
        """Start a decode or prefill program without waiting for it (PJRT runs it on its own thread): the
        pools it returns replace the donated ones at once, so a later call runs after it. Returns its
        other outputs by role as device arrays, for :meth:`collect`. ``inputs`` may hold device arrays
        (an earlier call's ``next_token_ids`` as ``token_ids``: see :meth:`tokens_from_ids`)."""
        program, exe = self.executable(mode, B, C, T)
        self.programs_used.add((mode, B, C, program["tokens"]))
        results = {}
        for slot, out in zip(program["outputs"], self._execute(program, exe, inputs)):
            if slot["role"] == "kv_pool":
                self.pools[slot["name"]] = out
            else:
                results[slot["role"]] = out
        return results

    @staticmethod
    def collect(results: dict) -> dict:
        """The outputs of :meth:`dispatch` as host arrays: waits for the program (and raises its error)."""
        return {role: np.asarray(out) for role, out in results.items()}

    def tokens_from_ids(self, ids):
        """A decode call's ``next_token_ids`` (B,) int32, still on the device, as the next decode call's
        ``token_ids`` (B, 1) int32, by a one-op program (StableHLO ``reshape``, compiled once per B):
        the next call can start before this one's tokens reach the host."""
        B = int(ids.shape[0])
        prog = self._reshapes.get(B)
        if prog is None:
            text = (f"module @next_tokens {{\n  func.func public @main(%arg0: tensor<{B}xi32>) -> tensor<{B}x1xi32> {{\n"
                    f"    %0 = stablehlo.reshape %arg0 : (tensor<{B}xi32>) -> tensor<{B}x1xi32>\n"
                    f"    return %0 : tensor<{B}x1xi32>\n  }}\n}}\n")
            prog = self._reshapes[B] = self._device.Program(text, self.platform, ["next_token_ids"],
                                                            [("int32", (B,))])
        return prog.execute([ids])[0]


__all__ = ["Executor", "compiled_count", "np_dtype"]
