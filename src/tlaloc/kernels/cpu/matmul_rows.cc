// CPU kernels for x @ W.T with W (N, K) stored row by row: an embedding table used as the
// output head (tied embeddings), in float32, bfloat16, int8 with a scale per row, and GGUF's
// Q8_0 blocks along K. Registered with XLA as typed-FFI targets like matmul.cc's.
//
//   f32_t   w (N, K) float32
//   bf16_t  w (N, K) bfloat16
//   i8ch_t  q (N, K) int8, scale (N,) float32:             W[n, k] = q[n, k] * scale[n]
//   q8_0_t  q (N, K) int8, scale (N, K/32) float16:         W[n, k] = q[n, k] * scale[n, k/32]
//
// y (M, N) float32 = x (M, K) float32 @ W.T. K must be a multiple of 32. Each y[m, n] is a
// dot product along a contiguous row of W with its dequantised weights (a Q8_0 block's scale
// is applied to its weights, exactly), summed by one thread in a fixed order (16-lane partial
// sums, then a fixed tree of lane additions), whatever the thread count. Four rows of W are decoded once
// per block and used for up to four rows of x.
// Rows of W are split into units (their count depends on N only) that the calling thread
// and tasks on the helper threads (pool.h) claim from a shared counter, as in matmul.cc.
#include <type_traits>

#include "common.h"

namespace ffi = xla::ffi;

namespace {

using tlaloc_cpu::bf16_to_f32;
using tlaloc_cpu::f16_to_f32;

constexpr int64_t QK = 32;
constexpr int64_t GROUP = 4;       // rows of W per micro-kernel call (they share each load of x)
constexpr int64_t RUN = 256;       // rows of W claimed at a time (see run; RUN / 8 where the threads meet)

using tlaloc_cpu::Problem;
using tlaloc_cpu::problem;

// Formats: value(n, k) is W[n, k] before the block or row scale; block_scale(n, b) and
// row_scale(n) are 1 where the format has none.
struct F32T {
  const float* w; int64_t K;
  float value(int64_t n, int64_t k) const { return w[n * K + k]; }
  float block_scale(int64_t, int64_t) const { return 1.f; }
  float row_scale(int64_t) const { return 1.f; }
};
struct BF16T {
  const uint16_t* w; int64_t K;
  float value(int64_t n, int64_t k) const { return bf16_to_f32(w[n * K + k]); }
  float block_scale(int64_t, int64_t) const { return 1.f; }
  float row_scale(int64_t) const { return 1.f; }
};
struct I8ChT {
  const int8_t* q; const float* scale; int64_t K;
  float value(int64_t n, int64_t k) const { return static_cast<float>(q[n * K + k]); }
  float block_scale(int64_t, int64_t) const { return 1.f; }
  float row_scale(int64_t n) const { return scale[n]; }
};
struct Q8_0T {
  const int8_t* q; const uint16_t* scale; int64_t K;
  float value(int64_t n, int64_t k) const { return static_cast<float>(q[n * K + k]); }
  float block_scale(int64_t n, int64_t b) const { return f16_to_f32(scale[n * (K / QK) + b]); }
  float row_scale(int64_t) const { return 1.f; }
};

// Scalar definition (any CPU): W[n, k] times its block scale (the dequantised weight), summed
// in 16 lanes (k mod 16) over the blocks, then the lanes in order, times the row scale.
template <class Fmt>
void rows_scalar(const Fmt& f, const Problem& p, int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = n0; n < n1; ++n) {
      float lanes[16] = {0};
      for (int64_t b = 0; b < p.K / QK; ++b) {
        const float s = f.block_scale(n, b);
        for (int l = 0; l < 16; ++l) {
          const int64_t k = b * QK + l;
          lanes[l] += p.x[m * p.K + k] * (f.value(n, k) * s);
          lanes[l] += p.x[m * p.K + k + 16] * (f.value(n, k + 16) * s);
        }
      }
      float total = 0.f;
      for (int l = 0; l < 16; ++l) total += lanes[l];
      p.y[m * p.N + n] = total * f.row_scale(n);
    }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define TLALOC_AVX512 1
#include <immintrin.h>

// The 32 weights of block b of row n as two float32 vectors, scaled by the block's scale
// (Q8_0: q * d is exact in float32, 7 + 11 significant bits, so these are the dequantised
// weights themselves).
inline void load_block(const F32T& f, int64_t n, int64_t b, __m512& lo, __m512& hi) {
  const float* src = f.w + n * f.K + b * QK;
  lo = _mm512_loadu_ps(src);
  hi = _mm512_loadu_ps(src + 16);
}
inline void load_block(const BF16T& f, int64_t n, int64_t b, __m512& lo, __m512& hi) {
  const uint16_t* src = f.w + n * f.K + b * QK;
  lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)src)), 16));
  hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(src + 16))), 16));
}
inline void load_int8(const int8_t* src, __m512& lo, __m512& hi) {
  lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)src)));
  hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(src + 16))));
}
inline void load_block(const I8ChT& f, int64_t n, int64_t b, __m512& lo, __m512& hi) {
  load_int8(f.q + n * f.K + b * QK, lo, hi);
}
inline void load_block(const Q8_0T& f, int64_t n, int64_t b, __m512& lo, __m512& hi) {
  load_int8(f.q + n * f.K + b * QK, lo, hi);
  const __m512 s = _mm512_set1_ps(f.block_scale(n, b));
  lo = _mm512_mul_ps(lo, s);
  hi = _mm512_mul_ps(hi, s);
}

// Rows [n, n + G) of W against rows [m, m + R) of x: each block of W is decoded once and
// used for the R rows of x; the G x R dot products are 16-lane partial sums in registers.
template <int G, int R, class Fmt>
inline void rows_tile(const Fmt& f, const Problem& p, int64_t n, int64_t m) {
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < G; ++i) acc[r][i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < p.K / QK; ++b) {
    __m512 lo[G], hi[G];
    for (int i = 0; i < G; ++i) {
      load_block(f, n + i, b, lo[i], hi[i]);
      // keep a float32 block in registers for R > 1 rows of x: a load folded into each row's FMA
      // read it R times (f32_t at batch 16: 19.6 -> 14.3 ms for the 49152 x 576 head); one row
      // is faster with the folded load
      if constexpr (R > 1) asm("" : "+v"(lo[i]), "+v"(hi[i]));
    }
    for (int r = 0; r < R; ++r) {
      const float* xr = p.x + (m + r) * p.K + b * QK;
      const __m512 xlo = _mm512_loadu_ps(xr), xhi = _mm512_loadu_ps(xr + 16);
      for (int i = 0; i < G; ++i) acc[r][i] = _mm512_fmadd_ps(xhi, hi[i], _mm512_fmadd_ps(xlo, lo[i], acc[r][i]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < G; ++i)       // a fixed tree of lane additions (the same every call)
      p.y[(m + r) * p.N + n + i] = _mm512_reduce_add_ps(acc[r][i]) * f.row_scale(n + i);
}

template <int G, class Fmt>
inline void rows_group(const Fmt& f, const Problem& p, int64_t n) {
  int64_t m = 0;
  for (; m + 4 <= p.M; m += 4) rows_tile<G, 4>(f, p, n, m);
  for (; m < p.M; ++m) rows_tile<G, 1>(f, p, n, m);
}

// The bytes of rows [n, n + count) of W (and of their block scales), to prefetch: a group's
// rows are one contiguous run, but each row is read a block at a time across the group's
// rows, too short a stream for the hardware prefetchers to follow (2.8 against 12 GB/s on
// one thread, bf16 head without this).
inline void prefetch(const char* base, int64_t row_bytes, int64_t n, int64_t count) {
  const char* start = base + n * row_bytes;
  for (int64_t i = 0; i < count * row_bytes; i += 64) __builtin_prefetch(start + i);
}
inline void prefetch_rows(const F32T& f, int64_t n, int64_t count) { prefetch((const char*)f.w, 4 * f.K, n, count); }
inline void prefetch_rows(const BF16T& f, int64_t n, int64_t count) { prefetch((const char*)f.w, 2 * f.K, n, count); }
inline void prefetch_rows(const I8ChT& f, int64_t n, int64_t count) { prefetch((const char*)f.q, f.K, n, count); }
inline void prefetch_rows(const Q8_0T& f, int64_t n, int64_t count) {
  prefetch((const char*)f.q, f.K, n, count);
  prefetch((const char*)f.scale, 2 * (f.K / QK), n, count);
}

template <class Fmt>
void rows_avx(const Fmt& f, const Problem& p, int64_t n0, int64_t n1) {
  constexpr int64_t AHEAD = 2;                          // groups
  int64_t n = n0;
  for (; n + GROUP <= n1; n += GROUP) {
    if (n + (AHEAD + 1) * GROUP <= p.N) prefetch_rows(f, n + AHEAD * GROUP, GROUP);   // on into the next run
    rows_group<GROUP>(f, p, n);
  }
  for (; n < n1; ++n) rows_group<1>(f, p, n);
}
#endif

// The rows of W in runs of RUN, on this thread and tasks of the helper threads, each walking a range of
// its own and then taking what the others have not reached (tlaloc_cpu::run_and_steal): each
// thread reads one contiguous stretch of the table.
template <class Fmt>
void run(ffi::ThreadPool& pool, const Fmt& f, const Problem& p) {
  tlaloc_cpu::run_and_steal(tlaloc_cpu::helpers(pool), p.N, RUN, RUN / 8, tlaloc_cpu::threads_for(p, pool.num_threads()), [&f, &p](int64_t n0, int64_t n1) {
#ifdef TLALOC_AVX512
    rows_avx(f, p, n0, n1);
#else
    rows_scalar(f, p, n0, n1);
#endif
  });
}

ffi::Error check(const Problem& p, int64_t n_stored, int64_t k_stored) {
  if (p.K % QK != 0) return ffi::Error::InvalidArgument("tlaloc cpu matmul (rows): K must be a multiple of 32");
  if (p.y_rows != p.M)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul (rows): y's leading dimensions must hold x's rows (M)");
  if (k_stored != p.K || n_stored != p.N)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul (rows): x's last dimension or y's does not match the weights");
  return ffi::Error::Success();
}

ffi::Error RowsF32(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w, ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = w.dimensions();
  if (auto e = check(p, d[0], d[1]); e.failure()) return e;
  run(pool, F32T{w.typed_data(), p.K}, p);
  return ffi::Error::Success();
}

ffi::Error RowsBF16(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::BF16> w,
                    ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = w.dimensions();
  if (auto e = check(p, d[0], d[1]); e.failure()) return e;
  run(pool, BF16T{reinterpret_cast<const uint16_t*>(w.untyped_data()), p.K}, p);
  return ffi::Error::Success();
}

template <class Fmt, ffi::DataType Scale>
ffi::Error RowsScaled(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> q, ffi::Buffer<Scale> scale,
                      ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = q.dimensions();
  if (auto e = check(p, d[0], d[1]); e.failure()) return e;
  const int64_t per_row = Scale == ffi::F32 ? 1 : p.K / QK;     // i8ch_t: (N,); q8_0_t: (N, K/32)
  if (static_cast<int64_t>(scale.element_count()) != p.N * per_row || scale.dimensions()[0] != p.N)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul (rows): scale must be (N,) float32 (i8ch_t) or (N, K/32) "
                                       "float16 (q8_0_t)");
  using S = std::conditional_t<Scale == ffi::F32, float, uint16_t>;
  run(pool, Fmt{q.typed_data(), reinterpret_cast<const S*>(scale.untyped_data()), p.K}, p);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_f32_t, RowsF32,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_bf16_t, RowsBF16,
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>().Ret<ffi::Buffer<ffi::F32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_i8ch_t, (RowsScaled<I8ChT, ffi::F32>),
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>().Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_q8_0_t, (RowsScaled<Q8_0T, ffi::F16>),
                              ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>().Arg<ffi::Buffer<ffi::F16>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
