"""Registering a kernel as an XLA FFI custom-call target, in pure Python.

XLA calls a typed-FFI handler with an ``XLA_FFI_CallFrame*`` (see jaxlib's
``include/xla/ffi/api/c_api.h``). The handler here is a ``ctypes`` callback: it
answers XLA's metadata query (API version, no traits), reads the argument and
result buffers, gets the stream from the API table, and calls a *launcher*
``launcher(inputs, outputs, stream)`` where each buffer is ``(pointer, dtype,
dims)``. On CUDA the launcher is a ``LoadedKernel`` (``driver.py``); on the CPU
platform it can be the simulator, which is how this module is tested without
a GPU. Errors inside the callback become XLA errors with the message.

Only the C API's leading, stable fields are used; the structs below copy them.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, Structure, c_char_p, c_int, c_int64, c_size_t, c_uint32, c_void_p

import numpy as np

FFI_MAJOR, FFI_MINOR = 0, 1            # the handler ABI these structs follow
METADATA_EXTENSION = 1
EXECUTE = 3
BUFFER = 1
ERROR_INVALID_ARGUMENT, ERROR_INTERNAL = 3, 13
#: XLA_FFI_DataType -> NumPy dtype
DTYPES = {1: np.bool_, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.uint8, 7: np.uint16,
          8: np.uint32, 9: np.uint64, 10: np.float16, 11: np.float32, 12: np.float64}


class ExtensionBase(Structure):
    _fields_ = [("struct_size", c_size_t), ("type", c_int), ("next", c_void_p)]


class ApiVersion(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("major_version", c_int),
                ("minor_version", c_int)]


class Metadata(Structure):
    _fields_ = [("struct_size", c_size_t), ("api_version", ApiVersion), ("traits", c_uint32)]


class MetadataExtension(Structure):
    _fields_ = [("extension_base", ExtensionBase), ("metadata", POINTER(Metadata))]


class Buffer(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("dtype", c_int), ("data", c_void_p),
                ("rank", c_int64), ("dims", POINTER(c_int64))]


class Args(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("size", c_int64),
                ("types", POINTER(c_int)), ("args", POINTER(c_void_p))]


class Attrs(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("size", c_int64),
                ("types", POINTER(c_int)), ("names", POINTER(c_void_p)), ("attrs", POINTER(c_void_p))]


class CallFrame(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", POINTER(ExtensionBase)), ("api", c_void_p),
                ("ctx", c_void_p), ("stage", c_int), ("args", Args), ("rets", Args), ("attrs", Attrs),
                ("future", c_void_p)]


class ErrorCreateArgs(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("message", c_char_p), ("errc", c_int)]


class StreamGetArgs(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("ctx", c_void_p), ("stream", c_void_p)]


_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p)


class Api(Structure):
    _fields_ = [("struct_size", c_size_t), ("extension_start", c_void_p), ("api_version", ApiVersion),
                ("internal_api", c_void_p), ("Error_Create", _FN), ("Error_GetMessage", c_void_p),
                ("Error_Destroy", c_void_p), ("Handler_Register", c_void_p), ("Stream_Get", _FN)]


def _size(struct, last: str) -> int:
    """``XLA_FFI_STRUCT_SIZE``: offset of the last field plus its size (no tail padding)."""
    f = getattr(struct, last)
    return f.offset + f.size


def _error(api: Api, message: str, code: int = ERROR_INTERNAL):
    args = ErrorCreateArgs(_size(ErrorCreateArgs, "errc"), None, message.encode()[:4000], code)
    return api.Error_Create(ctypes.addressof(args))


def _buffers(group: Args):
    out = []
    for i in range(group.size):
        if group.types[i] != BUFFER:
            raise TypeError(f"operand {i} is not a buffer")
        b = ctypes.cast(group.args[i], POINTER(Buffer)).contents
        dims = tuple(int(b.dims[k]) for k in range(b.rank))
        out.append((int(b.data or 0), DTYPES.get(b.dtype), dims))
    return out


def stream_of(api: Api, ctx) -> int:
    args = StreamGetArgs(_size(StreamGetArgs, "stream"), None, ctx, None)
    err = api.Stream_Get(ctypes.addressof(args))
    return 0 if err else int(args.stream or 0)


def make_handler(launcher, signature=None, *, want_stream: bool = True):
    """A ctypes FFI handler that checks buffers against ``signature`` (``(inputs,
    outputs)`` of ``(name, shape, dtype)``) and calls ``launcher``. Keep the returned
    object alive as long as XLA may call it."""
    def handler(frame_ptr):
        frame = ctypes.cast(frame_ptr, POINTER(CallFrame)).contents
        if frame.extension_start and frame.extension_start.contents.type == METADATA_EXTENSION:
            ext = ctypes.cast(frame.extension_start, POINTER(MetadataExtension)).contents
            md = ext.metadata.contents
            md.api_version.struct_size = _size(ApiVersion, "minor_version")
            md.api_version.extension_start = None
            md.api_version.major_version, md.api_version.minor_version = FFI_MAJOR, FFI_MINOR
            md.traits = 0
            return None
        api = ctypes.cast(frame.api, POINTER(Api)).contents
        try:
            if frame.stage != EXECUTE:
                return None
            ins, outs = _buffers(frame.args), _buffers(frame.rets)
            if signature is not None:
                _check(ins, signature[0], "input")
                _check(outs, signature[1], "output")
            launcher(ins, outs, stream_of(api, frame.ctx) if want_stream else 0)
            return None
        except Exception as e:                      # never let an exception cross into XLA
            return _error(api, f"tlaloc kernel: {type(e).__name__}: {e}")
    return _FN(handler)


def _check(bufs, decl, what):
    if len(bufs) != len(decl):
        raise ValueError(f"expected {len(decl)} {what}s, got {len(bufs)}")
    for (ptr, dt, dims), (name, shape, dtype) in zip(bufs, decl):
        if tuple(dims) != tuple(shape) or dt is None or np.dtype(dt) != np.dtype(dtype):
            raise ValueError(f"{what} {name}: expected {np.dtype(dtype).name}{list(shape)}, "
                             f"got {np.dtype(dt).name if dt else '?'}{list(dims)}")


_KEEP: dict = {}


def register(name: str, launcher, signature=None, *, platform: str = "CUDA") -> None:
    """Register ``launcher`` as FFI target ``name`` on ``platform`` (``"CUDA"`` or ``"cpu"``).

    XLA refuses a second handler under a taken name, so registering a name again is a
    no-op: target names are per specialization (``ffi_target_name`` hashes the PTX).
    """
    import jax
    if (name, platform) in _KEEP:
        return
    cb = make_handler(launcher, signature, want_stream=platform.upper() == "CUDA")
    _KEEP[(name, platform)] = cb
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(ctypes.cast(cb, c_void_p).value),
                                platform=platform, api_version=1)


def host_arrays(bufs, decl):
    """NumPy views of host buffers (the CPU platform's pointers)."""
    out = []
    for (ptr, dt, dims), (_, shape, dtype) in zip(bufs, decl):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        raw = (ctypes.c_char * n).from_address(ptr)
        out.append(np.frombuffer(raw, dtype=dtype).reshape(shape))
    return out
