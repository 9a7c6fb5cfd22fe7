"""The CPU kernels of ``tlaloc/kernels/cpu/*.cc``: built on first use, registered with XLA's FFI.

The serving programs of a CPU artifact come in two texts: the portable one (every product
in plain StableHLO: convert, multiply, dot) and one where each product by a stored weight
is ``stablehlo.custom_call @tlaloc_cpu_matmul_<format>[_p64]`` (:data:`TARGETS`). The runtime
picks the second at load time when :func:`load` returns True on the CPU platform and (by
default) :func:`pays` says the kernels beat XLA's dots on this CPU, the first otherwise
(another platform, no C++ compiler, ``TLALOC_CPU_KERNELS=0``, a CPU without AVX-512).

:func:`load` compiles the C++ source once per (source, compiler flags, jaxlib, CPU) with
``$CXX`` (default ``g++``; split like a shell word list, so ``ccache g++`` works) and
``-O3 -march=native`` against the FFI headers jaxlib ships, into
``$TLALOC_CACHE_DIR/cpu-kernels/`` (default ``~/.cache/tlaloc``), written atomically with its
sha256 beside it (a damaged cached library is rebuilt, never loaded; an unwritable cache
builds into a private temporary directory), then registers every target for XLA's CPU platform (typed FFI, api_version 1 in
``register_custom_call_target``'s numbering). Registration is process-wide and happens once.

The ``_p64`` targets (matmul.cc: the layers' (in, out) weights) read their weight arrays in
panel order (:func:`pack_panels`): the executor uploads those weights packed, as the
kernel text's manifest entry lists them (``cpu_kernels["panel64"]``).
"""
from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
import threading

import numpy as np

log = logging.getLogger("tlaloc.kernels")

_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels", "cpu")
#: matmul.cc: weights (K, N) as the layers store them; matmul_rows.cc: (N, K), a head table;
#: paged_attention.cc: decode attention reading the KV pools in place; kv_write.cc: the KV-cache
#: write, in place; matmul_x8.cc: int8 activations (``activations="int8"``)
SOURCES = [os.path.join(_DIR, name) for name in ("matmul.cc", "matmul_rows.cc", "matmul_x8.cc", "paged_attention.cc",
                                                 "kv_write.cc")]
#: stored weight format (``tlaloc._prims.stored_matmul.FORMATS``) -> FFI target name
#: (``_p64``: weights in panel order, :func:`pack_panels`)
PANEL_FORMATS = ("f32", "bf16", "i8ch", "q8_0", "q4_1")
PANEL = 64
TARGETS = {**{fmt: f"tlaloc_cpu_matmul_{fmt}_p64" for fmt in PANEL_FORMATS},
           **{fmt: f"tlaloc_cpu_matmul_{fmt}" for fmt in ("f32_t", "bf16_t", "i8ch_t", "q8_0_t")}}
#: the ``_p64`` targets that have an int8-activation twin (matmul_x8.cc) -> the twin, which reads the
#: integer array in k4 order (:func:`pack_k4`) and the rest as its ``_p64`` target does
X8_TARGETS = {f"tlaloc_cpu_matmul_{fmt}_p64": f"tlaloc_cpu_matmul_{fmt}_x8" for fmt in ("i8ch", "q8_0", "q4_1")}
#: other ops -> FFI target name (``_at``: paged attention with a ``page_offset`` attribute, for pools of
#: several layers)
OPS = {**{f"paged_attention_{kv}{at}": f"tlaloc_cpu_paged_attention_{kv}{at}" for kv in ("f32", "bf16")
           for at in ("", "_at")},
       **{f"kv_cache_write_{kv}": f"tlaloc_cpu_kv_write_{kv}" for kv in ("f32", "bf16")}}
FLAGS = ["-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w"]
ENV_SWITCH = "TLALOC_CPU_KERNELS"
_OFF, _ON = {"0", "false", "no", "off"}, {"1", "true", "yes", "on", ""}

_lock = threading.Lock()
_state: dict = {}          # "ok": bool, "reason": str, "path": str


def target_name(fmt: str) -> str:
    """The FFI target of stored format ``fmt`` (one of :data:`TARGETS`); KeyError names the known ones."""
    try:
        return TARGETS[fmt]
    except KeyError:
        raise KeyError(f"no CPU kernel for weight format {fmt!r}; known: {sorted(TARGETS)}") from None


def op_target(op: str) -> str:
    """The FFI target of kernel op ``op`` (one of :data:`OPS`)."""
    try:
        return OPS[op]
    except KeyError:
        raise KeyError(f"no CPU kernel for op {op!r}; known: {sorted(OPS)}") from None


def panel_target(name: str) -> bool:
    """Whether FFI target ``name`` reads its weight operands in panel order (:func:`pack_panels`)."""
    return name.startswith("tlaloc_cpu_matmul_") and name.endswith("_p64")


def pack_panels(a: np.ndarray) -> np.ndarray:
    """A weight array ``a`` (R, N) of a ``_p64`` target in the panel order its kernel reads.

    Returns a C-contiguous array of the same shape and dtype whose bytes are those of the
    (N / 64, R, 64) array ``a.reshape(R, N / 64, 64).transpose(1, 0, 2)``: each panel of 64
    consecutive columns, its R rows one after the other (matmul.cc's header). A uint8 array
    (the q4_1 kernel's nibble bytes, R even) has its rows in pairs as well: the bytes of the
    (N / 64, R / 2, 64, 2) array ``a.reshape(R / 2, 2, N / 64, 64).transpose(2, 0, 3, 1)``, so
    that rows 2i and 2i + 1 of a column are adjacent (one 16-bit lane of the kernel's bfloat16
    dot products). A 1-d array (a per-column scale) is its own panel order and comes back
    unchanged. Raises ValueError when N is not a multiple of 64 (the kernels take only such
    widths), or for a uint8 array of an odd number of rows.
    """
    a = np.asarray(a)
    if a.ndim == 1:
        return a
    if a.ndim != 2 or a.shape[1] % PANEL:
        raise ValueError(f"pack_panels: expected an (R, N) array with N a multiple of {PANEL}, got shape {a.shape}")
    R, N = a.shape
    if a.dtype == np.uint8:
        if R % 2:
            raise ValueError(f"pack_panels: q4_1 nibble bytes need an even number of rows, got shape {a.shape}")
        return np.ascontiguousarray(a.reshape(R // 2, 2, N // PANEL, PANEL).transpose(2, 0, 3, 1)).reshape(R, N)
    return np.ascontiguousarray(a.reshape(R, N // PANEL, PANEL).transpose(1, 0, 2)).reshape(R, N)


def pack_k4(a: np.ndarray) -> np.ndarray:
    """The integer array ``a`` (R, N) int8 or uint8 of an int8-activation target (:data:`X8_TARGETS`)
    in the "k4" panel order it reads (matmul_x8.cc's header).

    Returns a C-contiguous array of the same shape and dtype whose bytes are those of the
    (N / 64, R / 4, 64, 4) array ``a.reshape(R / 4, 4, N / 64, 64).transpose(2, 0, 3, 1)``: panels
    of 64 columns, and in each, per 4 consecutive rows, each column's 4 bytes together (one
    32-byte load is 8 columns x 4 rows, the operand of an integer dot product). Raises
    ValueError unless ``a`` is a 2-d int8 or uint8 array with R a multiple of 4 and N of 64.
    """
    a = np.asarray(a)
    if a.ndim != 2 or a.dtype not in (np.int8, np.uint8) or a.shape[0] % 4 or a.shape[1] % PANEL:
        raise ValueError(f"pack_k4: expected an (R, N) int8 or uint8 array with R a multiple of 4 and N of "
                         f"{PANEL}, got {a.dtype} {a.shape}")
    R, N = a.shape
    return np.ascontiguousarray(a.reshape(R // 4, 4, N // PANEL, PANEL).transpose(2, 0, 3, 1)).reshape(R, N)


def q4_1_bf16_dots() -> bool:
    """Whether the q4_1 kernel built here multiplies by bfloat16 dot products: x split into
    hi + lo bfloat16 parts, |x - hi - lo| <= 2^-17 |x| (matmul.cc's header), instead of float32 x.
    True on a CPU with AVX-512 (F, BW) and AVX512_BF16, since the kernels are built with
    -march=native (a CXX that adds -mno-avx512bf16 builds the float32 path instead)."""
    import shlex
    words = set(shlex.split(os.environ.get("CXX") or "g++"))
    if words & {"-mno-avx512bf16", "-mno-avx512f", "-mno-avx512bw"}:
        return False
    flags = set(_cpu_signature().split())
    return {"avx512f", "avx512bw", "avx512_bf16"} <= flags


#: The most rows of x (a decode step's batch) at which the kernels' portable loops (a CPU without
#: AVX-512: plain loops the compiler vectorises, AVX2 intrinsics for Q4_1) beat XLA's dots of the
#: same artifact. XLA converts bfloat16, int8, Q8_0 and Q4_1 weights to float32 before its dot;
#: the loops read them as stored. On a 2-core AVX2 EPYC, SmolLM2 decoding 32 tokens (prefill
#: included): Q4_1 28.8 -> 57.1 tokens/s at batch 1, 62 -> 71 at 4; bfloat16 25.5 -> 51.6 and
#: 56 -> 79; int8 47 -> 55 and 73 -> 66. At 16 rows the loops are ~2x slower than XLA's float32
#: dot (benchmarks/RESULTS.md, session 18). Float32 weights too since session 19: with four rows
#: of x sharing each loaded weight the float32 loop decodes SmolLM2 at batch 1 1.23x faster than
#: XLA's dot (49.1 against 40.0 tokens/s, 97% of the read roofline against 83%), and at M = 4 and
#: 8 its products take 0.52x and 0.90x XLA's time (benchmarks/RESULTS.md, session 19).
PORTABLE_DECODE_ROWS = 4
#: The most rows of x (batch times tokens a row: decode steps, and prefill chunks) at which the AVX2
#: loops of the float32, bfloat16 and int8-per-channel products (matmul.cc's rows_avx2: up to six
#: rows' sums held in registers over a block) beat XLA's float32 dot: SmolLM2's widest projection
#: took 0.40-0.53x its time at 16 rows, 0.46-0.74x at 32, 0.5-1.4x at 64 and ~1x at 128 (three
#: runs each, benchmarks/cpu_kernels.py, 2-core AVX2 EPYC, session 21).
DENSE_ROWS = 32
_DENSE_TARGETS = frozenset(TARGETS[fmt] for fmt in ("f32", "bf16", "i8ch"))
#: The most rows of x at which the int8-activation kernels (:data:`X8_TARGETS`, AVX2 integer dot
#: products) run a decode step that also has float32 products (whose loops pay only up to
#: :data:`PORTABLE_DECODE_ROWS`): SmolLM2 Q4_1 at 8 and 16 rows, ~3x XLA's tokens/s
#: (benchmarks/RESULTS.md, session 19). A program whose products all have int8 kernels runs them
#: at any rows, prefill and scoring included: SmolLM2 Q4_1's prefill of 16, 64 and 256 rows took
#: 32, 107 and 397 ms through them against 85, 242 and 675 through XLA's dots (session 20).
X8_DECODE_ROWS = 16
#: the products whose portable loops pay at those rows: every ``_p64`` target and the stored
#: formats' ``_t`` ones (the float32 ``_t`` loop, a tied table read row by row, was not measured)
_DECODE_TARGETS = frozenset(name for fmt, name in TARGETS.items() if fmt != "f32_t")
_MATMUL_TARGETS = frozenset(TARGETS.values())


def pays() -> bool:
    """Whether the kernels are faster than XLA's dots on this CPU for every program: their
    micro-kernels are AVX-512 (F and BW) code. Elsewhere (an AVX2-only CPU, or a CXX with
    -mno-avx512f/bw) they build portable loops that pay for some programs only
    (:func:`pays_for`): over many rows (a 512-position score program) they are slower than
    XLA's dots (the bfloat16 score programs of SmolLM2 took minutes on a 2-core AVX2 EPYC)."""
    words = set(shlex.split(os.environ.get("CXX") or "g++"))
    if words & {"-mno-avx512f", "-mno-avx512bw"}:
        return False
    return {"avx512f", "avx512bw"} <= set(_cpu_signature().split())


def pays_for(mode: str, batch: int, targets, activations: str = "float32", tokens: int = 1) -> bool:
    """Whether a program (``mode`` "decode", "prefill", "score"; ``batch`` rows a step, ``tokens``
    a row; kernel ``targets``, its variant's FFI targets) runs faster through the kernels on this
    CPU: every program where :func:`pays`; else, with ``activations="int8"``, every program whose
    products all have int8 kernels (Q4_1, Q8_0 and int8 weights: :data:`X8_TARGETS`); else, on an
    AVX2 CPU, a program of at most :data:`DENSE_ROWS` rows (batch x tokens) whose products are all
    float32, bfloat16 or int8-per-channel ones; else a decode step of at most
    :data:`PORTABLE_DECODE_ROWS` rows whose products all have loops that pay
    (:data:`_DECODE_TARGETS`: every format but the float32 ``_t`` one), or of at most
    :data:`X8_DECODE_ROWS` rows with int8 activations and some int8 kernel among them."""
    if pays():
        return True
    products = _MATMUL_TARGETS & set(targets)
    if activations == "int8" and products and products <= set(X8_TARGETS):
        return True
    if products and products <= _DENSE_TARGETS and "avx2" in _cpu_signature().split():
        return batch * tokens <= DENSE_ROWS
    if mode != "decode" or not products or not products <= _DECODE_TARGETS:
        return False
    if activations == "int8" and set(X8_TARGETS) & products:
        return batch <= X8_DECODE_ROWS
    return batch <= PORTABLE_DECODE_ROWS


def _include_dir() -> str:
    import jaxlib
    return os.path.join(os.path.dirname(jaxlib.__file__), "include")


def _cpu_signature() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return line.strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def cache_dir() -> str:
    root = os.environ.get("TLALOC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tlaloc")
    return os.path.join(root, "cpu-kernels")


def library_path(compiler: str) -> str:
    """Where the library for these sources (and headers), compiler, flags, jaxlib and CPU is cached."""
    import jaxlib
    sources = []
    for name in sorted(os.listdir(_DIR)):                       # the sources and the headers they include
        if name.endswith((".cc", ".h")):
            with open(os.path.join(_DIR, name), "rb") as f:
                sources.append(name.encode() + b"\0" + f.read())
    key = hashlib.sha256(b"\0".join([*sources, compiler.encode(), " ".join(FLAGS).encode(),
                                     jaxlib.__version__.encode(), _cpu_signature().encode()])).hexdigest()[:20]
    return os.path.join(cache_dir(), f"matmul-{key}.so")


def build(compiler: str | None = None) -> str:
    """Compile the kernels (if not cached) and return the library's path.

    Raises:
      RuntimeError: no compiler, or the compile failed (its stderr in the message).
    """
    compiler = compiler or os.environ.get("CXX") or "g++"
    words = shlex.split(compiler)                               # CXX may carry a wrapper or flags: "ccache g++"
    exe = shutil.which(words[0]) if words else None
    if exe is None:
        raise RuntimeError(f"no C++ compiler: {compiler!r} is not on PATH (set CXX to one)")
    path = library_path(compiler)
    if os.path.isfile(path) and _intact(path):
        return path
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".matmul-", suffix=".so", dir=os.path.dirname(path))
    except OSError as e:                                        # read-only or not a directory: build uncached
        private = tempfile.mkdtemp(prefix="tlaloc-cpu-kernels-")
        log.warning("kernels: cannot write the cache %s (%s); building into %s for this process "
                    "(set TLALOC_CACHE_DIR to a writable directory to keep it)", os.path.dirname(path), e, private)
        path = os.path.join(private, os.path.basename(path))
        fd, tmp = tempfile.mkstemp(prefix=".matmul-", suffix=".so", dir=private)
    os.close(fd)
    try:
        cmd = [exe, *words[1:], *FLAGS, f"-I{_include_dir()}", *SOURCES, "-o", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"compiling the CPU kernels failed ({' '.join(cmd)}):\n{done.stderr[-4000:]}")
        with open(tmp, "rb") as f:
            image = f.read()
        if not image.startswith(b"\x7fELF"):
            raise RuntimeError(f"{compiler!r} exited 0 but wrote no shared library ({len(image)} bytes at "
                               f"{tmp}); set CXX to a C++ compiler such as g++")
        _write_atomic(path + ".sha256", hashlib.sha256(image).hexdigest().encode())
        os.chmod(tmp, 0o755)                                    # mkstemp's 0600: other users could not dlopen it
        os.replace(tmp, path)                                   # atomic: readers see a whole library or none
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("kernels: built %s", path)
    return path


def _intact(path: str) -> bool:
    """Whether the cached library matches the sha256 recorded when it was built.

    A truncated or altered library is not loaded: dlopen of a truncated ELF can kill the
    process with SIGBUS (its segments are mapped past the end of the file), which no
    ``except`` catches. A mismatch (or a missing record) means: build again.
    """
    try:
        with open(path + ".sha256", "rb") as f:
            expected = f.read().strip().decode()
        with open(path, "rb") as f:
            actual = hashlib.sha256(f.read()).hexdigest()
    except (OSError, UnicodeDecodeError):
        return False
    if actual != expected:
        log.warning("kernels: cached library %s does not match its sha256 record; rebuilding", path)
    return actual == expected


def _write_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".matmul-", suffix=".tmp", dir=os.path.dirname(path))
    try:
        os.fchmod(fd, 0o644)                                    # mkstemp's 0600 would hide it from a shared cache's users
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _register(path: str) -> None:
    import ctypes

    from jaxlib import xla_client
    lib = ctypes.CDLL(path)
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
    for name in [*TARGETS.values(), *X8_TARGETS.values(), *OPS.values()]:
        fn = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        xla_client.register_custom_call_target(name, new_capsule(fn, None, None), platform="cpu", api_version=1)
    _state["lib"] = lib                                         # keep the library mapped


def load() -> bool:
    """Build (once) and register the CPU kernels; False when they cannot be used (see :func:`reason`)."""
    with _lock:
        if "ok" not in _state:
            switch = os.environ.get(ENV_SWITCH, "1").strip().lower()
            if switch in _OFF:
                _state.update(ok=False, reason=f"disabled by {ENV_SWITCH}={os.environ[ENV_SWITCH]}")
            elif switch not in _ON:
                _state.update(ok=False, reason=f"{ENV_SWITCH}={os.environ[ENV_SWITCH]!r} is not one of "
                                               f"{sorted(_ON | _OFF)}; the kernels stay off until it is")
                log.warning("kernels: %s", _state["reason"])
            else:
                try:
                    path = build()
                    _register(path)
                    _state.update(ok=True, reason="", path=path)
                except Exception as e:                          # no compiler, compile error, no symbol
                    _state.update(ok=False, reason=str(e))
                    log.warning("kernels: CPU kernels unavailable, the portable programs run instead: %s", e)
        return _state["ok"]


def reason() -> str:
    """Why :func:`load` returned False ("" when it returned True or has not run)."""
    return _state.get("reason", "")


__all__ = ["TARGETS", "X8_TARGETS", "pack_k4", "OPS", "PANEL_FORMATS", "panel_target", "pack_panels", "q4_1_bf16_dots", "pays", "pays_for", "PORTABLE_DECODE_ROWS", "DENSE_ROWS", "X8_DECODE_ROWS", "SOURCES", "target_name", "op_target", "build", "load", "reason", "library_path", "cache_dir"]
