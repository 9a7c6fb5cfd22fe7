// The KV-cache write on the CPU, in place: the ``kv_cache_write`` serving op
// (tlaloc/_prims/serving.py) as an XLA typed-FFI target, for float32 or bfloat16 pools.
//
//   cache (P, BS, K, E) f32 or bf16; new (N, K, E) in the pool's dtype; slot_mapping (N,) s64;
//   attribute page_offset (s64) -> the cache, its buffer aliased to the input's
//   (``output_operand_aliases``): only the N rows are written.
//
// Row n goes to slot s % BS of page page_offset + s / BS, where s = slot_mapping[n]; s < 0
// (padding) or a page beyond the pool writes nothing, as the scatter of the portable
// programs does. XLA CPU has no bfloat16 scatter nor dynamic_update_slice: it computes
// them in float32 over the whole pool (in place, but every element), and a scatter of the
// int16 bits passes over the pool as well; written here, a step touches only its rows.
// The bytes are copied as they are: the float32 -> bfloat16 rounding of new rows is done
// by XLA before the call, as in the portable programs.
#include <cstdint>
#include <cstring>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

template <ffi::DataType KV>
ffi::Error KvWrite(ffi::AnyBuffer cache, ffi::Buffer<KV> rows, ffi::Buffer<ffi::S64> slot_mapping,
                   ffi::Result<ffi::AnyBuffer> out, int64_t page_offset) {
  auto cd = cache.dimensions(), rd = rows.dimensions();
  if (cd.size() != 4 || rd.size() != 3 || slot_mapping.dimensions().size() != 1)
    return ffi::Error::InvalidArgument("tlaloc cpu kv write: cache, new and slot_mapping have the wrong rank");
  const int64_t P = cd[0], BS = cd[1], row = cd[2] * cd[3], N = rd[0];
  if (rd[1] * rd[2] != row || slot_mapping.dimensions()[0] != N || cache.element_type() != KV)
    return ffi::Error::InvalidArgument("tlaloc cpu kv write: new rows and slots do not fit the cache");
  if (page_offset < 0 || page_offset >= P)
    return ffi::Error::InvalidArgument("tlaloc cpu kv write: page_offset must be a page of the pool");
  const size_t bytes = static_cast<size_t>(row) * ffi::ByteWidth(KV);
  char* dst = static_cast<char*>(out->untyped_data());
  if (dst != cache.untyped_data())            // not aliased after all: start from the input
    std::memcpy(dst, cache.untyped_data(), cache.size_bytes());
  const char* src = static_cast<const char*>(rows.untyped_data());
  const int64_t* slots = slot_mapping.typed_data();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t s = slots[n];
    if (s < 0 || page_offset + s / BS >= P) continue;
    const int64_t slot = (page_offset + s / BS) * BS + s % BS;
    std::memcpy(dst + slot * bytes, src + n * bytes, bytes);
  }
  return ffi::Error::Success();
}

}  // namespace

#define TLALOC_KV_WRITE(NAME, KV)                                                             \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, KvWrite<KV>,                                            \
                                ffi::Ffi::Bind()                                              \
                                    .Arg<ffi::AnyBuffer>()                                    \
                                    .Arg<ffi::Buffer<KV>>()                                   \
                                    .Arg<ffi::Buffer<ffi::S64>>()                             \
                                    .Ret<ffi::AnyBuffer>()                                    \
                                    .Attr<int64_t>("page_offset"))

TLALOC_KV_WRITE(tlaloc_cpu_kv_write_f32, ffi::F32);
TLALOC_KV_WRITE(tlaloc_cpu_kv_write_bf16, ffi::BF16);
