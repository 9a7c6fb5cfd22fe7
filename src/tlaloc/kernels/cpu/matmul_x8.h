// The int8-activation products of matmul_x8.cc (its header says what they compute), called by
// matmul.cc's _x8 FFI targets once they have checked the arguments.
#pragma once

#include "common.h"

namespace tlaloc_cpu {

// y = x @ W, W GGUF's Q4_1 blocks (matmul.cc's q4_1: G = 32 or 64 rows per scale and offset,
// float16 or float32 (f32) sides, `groups` = K / G rows of them), q in k4 order.
void matmul_q4_1_x8(xla::ffi::ThreadPool& pool, const Problem& p, const uint8_t* q, const void* scale,
                    const void* offset, bool f32, int64_t G, int64_t groups);
// W GGUF's Q8_0 (G = 32, float16 scales) or Q6_K's d * sc (G = 16, float32 scales), q in k4 order.
void matmul_q8_0_x8(xla::ffi::ThreadPool& pool, const Problem& p, const int8_t* q, const void* scale, bool f32,
                    int64_t G);
// W = q * scale[n], int8 per output channel, q in k4 order.
void matmul_i8ch_x8(xla::ffi::ThreadPool& pool, const Problem& p, const int8_t* q, const float* scale);

}  // namespace tlaloc_cpu
