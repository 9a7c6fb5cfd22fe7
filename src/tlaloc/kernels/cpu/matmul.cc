// CPU kernels for x @ W with W kept as stored: float32, bfloat16, int8 per output channel,
// and GGUF's Q8_0 and Q4_1 blocks. Registered with XLA as typed-FFI custom-call targets
// (xla/ffi/api/ffi.h, shipped in jaxlib's include directory); see tlaloc/kernels/cpu/__init__.py.
//
// Every target computes y (M, N) float32 = x (M, K) float32 @ W (K, N), where M is the
// product of x's leading dimensions. W is in the serving artifacts' (in, out) layout:
//
//   f32     w (K, N) float32
//   bf16    w (K, N) bfloat16 (uint16 bit patterns)
//   i8ch    q (K, N) int8, scale (N,) float32:              W[k, n] = q[k, n] * scale[n]
//   q8_0    q (K, N) int8, scale (K/32, N) float16:          W[k, n] = q[k, n] * scale[k/32, n]
//   q4_1    q (K/2, N) uint8, scale, offset (K/32, N) float16: byte 16b + j holds row 32b + j in
//           its low nibble and row 32b + j + 16 in its high nibble (GGUF's packing);
//           W[k, n] = nibble * scale[k/32, n] + offset[k/32, n]
//
// The blocked formats are evaluated per block as GGUF defines them: for each block b,
// y += scale[b] * (sum_j x_j q_j) + offset[b] * (sum_j x_j). Sums are float32, in a fixed
// order that does not depend on the thread count (each output column is computed by one
// thread), so results are reproducible run to run.
//
// Work is split into units of consecutive output columns (their count depends on N only, so
// the split, and every sum, is the same on any number of threads). The calling thread and
// the tasks it schedules on XLA's intra-op thread pool claim units from a shared counter; a
// task that starts late finds nothing left and returns (no waiting on a busy pool). A unit
// walks the weights block by block (32 input rows) in storage order, so each thread reads
// a few long runs of consecutive bytes; per block and TILE = 64 columns the products are
// summed in registers and added to the unit's float32 accumulators. With AVX-512 (compiled
// with -march=native on the machine that runs it) the block loops are intrinsics, two rows
// of x sharing each decoded weight vector; elsewhere they are plain loops.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t TILE = 64;      // output columns per micro-kernel call
constexpr int64_t QK = 32;        // input rows per block (GGUF's block size)
constexpr int64_t UNITS = 8;      // column units per matrix (fewer when N has fewer tiles)
constexpr int64_t PREFETCH_AHEAD = 2;   // blocks

inline float f16_to_f32(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

struct Problem {
  const float* x;      // (M, K)
  int64_t M, K, N;
  float* y;            // (M, N)
};

// -- formats: W[k, n0 + t] for one block of input rows, and the per-block epilogue ------------
// weight(k, n) is the scalar definition; the AVX-512 kernels below read the same bytes.

struct F32 {
  const float* w; int64_t N;
  float weight(int64_t k, int64_t n) const { return w[k * N + n]; }
};

struct BF16 {
  const uint16_t* w; int64_t N;
  float weight(int64_t k, int64_t n) const { return bf16_to_f32(w[k * N + n]); }
};

struct I8Channel {                  // the scale is applied when the unit is stored
  const int8_t* q; const float* scale; int64_t N;
  float weight(int64_t k, int64_t n) const { return static_cast<float>(q[k * N + n]); }
};

// Scalar block kernel (any CPU): acc[r][t] += sum over the block's rows k of x[m + r, k] W[k, n0 + t],
// for the blocked formats as scale * sum(x q) (+ offset * sum x).
template <class Fmt>
void block_plain(const Fmt& f, const Problem& p, int64_t b, int64_t n0, int64_t m, int R, float* const* acc) {
  const int64_t k0 = b * QK, k1 = std::min(p.K, k0 + QK);
  for (int r = 0; r < R; ++r)
    for (int64_t k = k0; k < k1; ++k) {
      const float xv = p.x[(m + r) * p.K + k];
      for (int64_t t = 0; t < TILE; ++t) acc[r][t] += xv * f.weight(k, n0 + t);
    }
}

struct Q8_0 {
  const int8_t* q; const uint16_t* scale; int64_t N;
};

struct Q4_1 {
  const uint8_t* q; const uint16_t* scale; const uint16_t* offset; const float* xsum; int64_t N;
};

void block_q8_0(const Q8_0& f, const Problem& p, int64_t b, int64_t n0, int64_t m, int R, float* const* acc) {
  alignas(64) float part[TILE];
  for (int r = 0; r < R; ++r) {
    for (int64_t t = 0; t < TILE; ++t) part[t] = 0.f;
    for (int64_t j = 0; j < QK; ++j) {
      const float xv = p.x[(m + r) * p.K + b * QK + j];
      const int8_t* src = f.q + (b * QK + j) * f.N + n0;
      for (int64_t t = 0; t < TILE; ++t) part[t] += xv * static_cast<float>(src[t]);
    }
    for (int64_t t = 0; t < TILE; ++t) acc[r][t] += part[t] * f16_to_f32(f.scale[b * f.N + n0 + t]);
  }
}

void block_q4_1(const Q4_1& f, const Problem& p, int64_t b, int64_t n0, int64_t m, int R, float* const* acc) {
  alignas(64) float part[TILE];
  const int64_t nb = p.K / QK;
  for (int r = 0; r < R; ++r) {
    for (int64_t t = 0; t < TILE; ++t) part[t] = 0.f;
    const float* xr = p.x + (m + r) * p.K + b * QK;
    for (int64_t j = 0; j < QK / 2; ++j) {
      const uint8_t* src = f.q + (b * (QK / 2) + j) * f.N + n0;
      for (int64_t t = 0; t < TILE; ++t)
        part[t] += xr[j] * static_cast<float>(src[t] & 15) + xr[j + QK / 2] * static_cast<float>(src[t] >> 4);
    }
    const float xs = f.xsum[(m + r) * nb + b];
    for (int64_t t = 0; t < TILE; ++t)
      acc[r][t] += part[t] * f16_to_f32(f.scale[b * f.N + n0 + t]) + xs * f16_to_f32(f.offset[b * f.N + n0 + t]);
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define TLALOC_AVX512 1
#include <immintrin.h>

inline __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Unblocked formats: load(k, v) is W[k, n0 + 16 v : n0 + 16 v + 16]; even and odd rows k
// go to separate accumulators (FMA latency), added at the end of the block.
template <int R, class Load>
void avx_plain(Load load, const Problem& p, int64_t b, int64_t m, float* const* acc) {
  const int64_t k0 = b * QK, k1 = std::min(p.K, k0 + QK);
  __m512 ae[R][4], ao[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) ae[r][v] = ao[r][v] = _mm512_setzero_ps();
  int64_t k = k0;
  for (; k + 1 < k1; k += 2) {
    __m512 x0[R], x1[R];
    for (int r = 0; r < R; ++r) {
      x0[r] = _mm512_set1_ps(p.x[(m + r) * p.K + k]);
      x1[r] = _mm512_set1_ps(p.x[(m + r) * p.K + k + 1]);
    }
    for (int v = 0; v < 4; ++v) {
      const __m512 w0 = load(k, v), w1 = load(k + 1, v);
      for (int r = 0; r < R; ++r) {
        ae[r][v] = _mm512_fmadd_ps(x0[r], w0, ae[r][v]);
        ao[r][v] = _mm512_fmadd_ps(x1[r], w1, ao[r][v]);
      }
    }
  }
  if (k < k1)
    for (int v = 0; v < 4; ++v) {
      const __m512 w0 = load(k, v);
      for (int r = 0; r < R; ++r) ae[r][v] = _mm512_fmadd_ps(_mm512_set1_ps(p.x[(m + r) * p.K + k]), w0, ae[r][v]);
    }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v)
      _mm512_storeu_ps(acc[r] + 16 * v, _mm512_add_ps(_mm512_loadu_ps(acc[r] + 16 * v), _mm512_add_ps(ae[r][v], ao[r][v])));
}

template <int R>
void avx_q8_0(const Q8_0& f, const Problem& p, int64_t b, int64_t n0, int64_t m, float* const* acc) {
  __m512 be[R][4], bo[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) be[r][v] = bo[r][v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < QK; j += 2) {
    const int8_t* src = f.q + (b * QK + j) * f.N + n0;
    __m512 x0[R], x1[R];
    for (int r = 0; r < R; ++r) {
      const float* xr = p.x + (m + r) * p.K + b * QK + j;
      x0[r] = _mm512_set1_ps(xr[0]);
      x1[r] = _mm512_set1_ps(xr[1]);
    }
    for (int v = 0; v < 4; ++v) {
      const __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16 * v))));
      const __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + f.N + 16 * v))));
      for (int r = 0; r < R; ++r) {
        be[r][v] = _mm512_fmadd_ps(x0[r], w0, be[r][v]);
        bo[r][v] = _mm512_fmadd_ps(x1[r], w1, bo[r][v]);
      }
    }
  }
  for (int v = 0; v < 4; ++v) {
    const __m512 s = load_f16x16(f.scale + b * f.N + n0 + 16 * v);
    for (int r = 0; r < R; ++r)
      _mm512_storeu_ps(acc[r] + 16 * v, _mm512_fmadd_ps(_mm512_add_ps(be[r][v], bo[r][v]), s, _mm512_loadu_ps(acc[r] + 16 * v)));
  }
}

template <int R>
void avx_q4_1(const Q4_1& f, const Problem& p, int64_t b, int64_t n0, int64_t m, float* const* acc) {
  const int64_t nb = p.K / QK;
  const __m512i low4 = _mm512_set1_epi32(15);
  __m512 blo[R][4], bhi[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) blo[r][v] = bhi[r][v] = _mm512_setzero_ps();
  const uint8_t* base = f.q + b * (QK / 2) * f.N + n0;
  for (int64_t j = 0; j < QK / 2; ++j) {
    const uint8_t* src = base + j * f.N;
    __m512 x0[R], x1[R];
    for (int r = 0; r < R; ++r) {
      const float* xr = p.x + (m + r) * p.K + b * QK;
      x0[r] = _mm512_set1_ps(xr[j]);
      x1[r] = _mm512_set1_ps(xr[j + QK / 2]);
    }
    for (int v = 0; v < 4; ++v) {
      const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16 * v)));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(bytes, low4));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(bytes, 4));
      for (int r = 0; r < R; ++r) {
        blo[r][v] = _mm512_fmadd_ps(x0[r], lo, blo[r][v]);
        bhi[r][v] = _mm512_fmadd_ps(x1[r], hi, bhi[r][v]);
      }
    }
  }
  for (int v = 0; v < 4; ++v) {
    const __m512 s = load_f16x16(f.scale + b * f.N + n0 + 16 * v);
    const __m512 o = load_f16x16(f.offset + b * f.N + n0 + 16 * v);
    for (int r = 0; r < R; ++r) {
      const __m512 xs = _mm512_set1_ps(f.xsum[(m + r) * nb + b]);
      const __m512 a = _mm512_fmadd_ps(xs, o, _mm512_loadu_ps(acc[r] + 16 * v));
      _mm512_storeu_ps(acc[r] + 16 * v, _mm512_fmadd_ps(_mm512_add_ps(blo[r][v], bhi[r][v]), s, a));
    }
  }
}

// The AVX-512 block kernel of each format, for R = 1 or 2 rows.
template <int R> void avx_block(const F32& f, const Problem& p, int64_t b, int64_t n0, int64_t m, float* const* acc) {
  avx_plain<R>([&](int64_t k, int v) { return _mm512_loadu_ps(f.w + k * f.N + n0 + 16 * v); }, p, b, m, acc);
}
template <int R> void avx_block(const BF16& f, const Problem& p, int64_t b, int64_t n0, int64_t m, float* const* acc) {
  avx_plain<R>([&](int64_t k, int v) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f.w + k * f.N + n0 + 16 * v));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }, p, b, m, acc);
}
template <int R> void avx_block(const I8Channel& f, const Problem& p, int64_t b, int64_t n0, int64_t m, float* const* acc) {
  avx_plain<R>([&](int64_t k, int v) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(f.q + k * f.N + n0 + 16 * v));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
  }, p, b, m, acc);
}
template <int R> void avx_block(const Q8_0& f, const Problem& p, int64_t b, int64_t n0, int64_t m, float* const* acc) {
  avx_q8_0<R>(f, p, b, n0, m, acc);
}
template <int R> void avx_block(const Q4_1& f, const Problem& p, int64_t b, int64_t n0, int64_t m, float* const* acc) {
  avx_q4_1<R>(f, p, b, n0, m, acc);
}
#endif

template <class Fmt> void scalar_block(const Fmt& f, const Problem& p, int64_t b, int64_t n0, int64_t m, int R,
                                       float* const* acc) { block_plain(f, p, b, n0, m, R, acc); }
void scalar_block(const Q8_0& f, const Problem& p, int64_t b, int64_t n0, int64_t m, int R, float* const* acc) {
  block_q8_0(f, p, b, n0, m, R, acc);
}
void scalar_block(const Q4_1& f, const Problem& p, int64_t b, int64_t n0, int64_t m, int R, float* const* acc) {
  block_q4_1(f, p, b, n0, m, R, acc);
}

// Software prefetch of block b's weight bytes in columns [c0, c1): each row of a block is
// only (c1 - c0) columns long, too short for the hardware prefetcher to follow.
inline void prefetch_rows(const void* base, int64_t rows, int64_t row_bytes, int64_t offset, int64_t bytes) {
  const char* p = static_cast<const char*>(base) + offset;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(p + r * row_bytes + i);
}
inline int64_t block_rows(int64_t K, int64_t b) { return std::min(QK, K - b * QK); }
void prefetch(const F32& f, const Problem& p, int64_t b, int64_t c0, int64_t c1) {
  prefetch_rows(f.w + b * QK * f.N, block_rows(p.K, b), 4 * f.N, 4 * c0, 4 * (c1 - c0));
}
void prefetch(const BF16& f, const Problem& p, int64_t b, int64_t c0, int64_t c1) {
  prefetch_rows(f.w + b * QK * f.N, block_rows(p.K, b), 2 * f.N, 2 * c0, 2 * (c1 - c0));
}
void prefetch(const I8Channel& f, const Problem& p, int64_t b, int64_t c0, int64_t c1) {
  prefetch_rows(f.q + b * QK * f.N, block_rows(p.K, b), f.N, c0, c1 - c0);
}
void prefetch(const Q8_0& f, const Problem& p, int64_t b, int64_t c0, int64_t c1) {
  prefetch_rows(f.q + b * QK * f.N, QK, f.N, c0, c1 - c0);
  prefetch_rows(f.scale + b * f.N, 1, 0, 2 * c0, 2 * (c1 - c0));
}
void prefetch(const Q4_1& f, const Problem& p, int64_t b, int64_t c0, int64_t c1) {
  prefetch_rows(f.q + b * (QK / 2) * f.N, QK / 2, f.N, c0, c1 - c0);
  prefetch_rows(f.scale + b * f.N, 1, 0, 2 * c0, 2 * (c1 - c0));
  prefetch_rows(f.offset + b * f.N, 1, 0, 2 * c0, 2 * (c1 - c0));
}

// One unit: output columns [c0, c1) (whole tiles) of every row. acc is (M, c1 - c0).
template <class Fmt>
void run_unit(const Fmt& f, const Problem& p, int64_t c0, int64_t c1, float* acc) {
  const int64_t W = c1 - c0, blocks = (p.K + QK - 1) / QK;
  std::memset(acc, 0, sizeof(float) * p.M * W);
  for (int64_t b = 0; b < blocks; ++b) {
    if (b + PREFETCH_AHEAD < blocks) prefetch(f, p, b + PREFETCH_AHEAD, c0, c1);
    for (int64_t n0 = c0; n0 < c1; n0 += TILE) {
      int64_t m = 0;
#ifdef TLALOC_AVX512
      for (; m + 1 < p.M; m += 2) {
        float* rows[2] = {acc + m * W + (n0 - c0), acc + (m + 1) * W + (n0 - c0)};
        avx_block<2>(f, p, b, n0, m, rows);
      }
      if (m < p.M) {
        float* rows[1] = {acc + m * W + (n0 - c0)};
        avx_block<1>(f, p, b, n0, m, rows);
      }
#else
      for (; m < p.M; ++m) {
        float* rows[1] = {acc + m * W + (n0 - c0)};
        scalar_block(f, p, b, n0, m, 1, rows);
      }
#endif
    }
  }
}

// Splits N into units (a count that depends on N only), runs them on this thread and on
// tasks of XLA's intra-op pool, and stores each unit with store(c0, c1, acc).
template <class Fmt, class Store>
void run(ffi::ThreadPool& pool, const Fmt& f, const Problem& p, Store store) {
  const int64_t tiles = p.N / TILE;
  const int64_t per_unit = (tiles + UNITS - 1) / UNITS;
  const int64_t units = (tiles + per_unit - 1) / per_unit;
  struct Shared {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto shared = std::make_shared<Shared>();
  auto work = [shared, units, per_unit, tiles, &f, &p, store]() {
    std::unique_ptr<float[]> acc;
    for (;;) {
      const int64_t u = shared->next.fetch_add(1, std::memory_order_relaxed);
      if (u >= units) return;          // a late task: nothing left; it touches only `shared`
      const int64_t c0 = u * per_unit * TILE, c1 = std::min(tiles, (u + 1) * per_unit) * TILE;
      if (!acc) acc.reset(new float[p.M * per_unit * TILE]);
      run_unit(f, p, c0, c1, acc.get());
      store(c0, c1, acc.get());
      shared->done.fetch_add(1, std::memory_order_release);
    }
  };
#ifdef TLALOC_ONE_THREAD
  const int64_t helpers = 0;
#else
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), units) - 1;
#endif
  for (int64_t h = 0; h < helpers; ++h) pool.Schedule([work]() { work(); });
  work();
  // Every unit is claimed; wait for those other threads are still computing. Until then
  // this frame (f, p, store) is alive, which is all a running unit reads.
  while (shared->done.load(std::memory_order_acquire) < units) std::this_thread::yield();
}

// y[m, c0:c1] = acc[m] (times the per-channel scale when given).
struct Store {
  const Problem* p;
  const float* channel_scale;
  void operator()(int64_t c0, int64_t c1, const float* acc) const {
    const int64_t W = c1 - c0;
    for (int64_t m = 0; m < p->M; ++m) {
      float* dst = p->y + m * p->N + c0;
      const float* src = acc + m * W;
      if (channel_scale)
        for (int64_t t = 0; t < W; ++t) dst[t] = src[t] * channel_scale[c0 + t];
      else
        std::memcpy(dst, src, sizeof(float) * W);
    }
  }
};

Problem problem(ffi::Buffer<ffi::F32>& x, ffi::ResultBuffer<ffi::F32>& y) {
  auto dims = x.dimensions();
  int64_t M = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) M *= dims[i];
  const int64_t K = dims.size() ? dims[dims.size() - 1] : 1;
  auto ydims = y->dimensions();
  const int64_t N = ydims.size() ? ydims[ydims.size() - 1] : 1;
  return Problem{x.typed_data(), M, K, N, y->typed_data()};
}

ffi::Error check(const Problem& p, int64_t k_stored, int64_t n_stored, bool blocked) {
  if (p.N % TILE != 0)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul: the output width must be a multiple of 64");
  if (k_stored != p.K || n_stored != p.N)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul: x's last dimension or y's does not match the weights");
  if (blocked && p.K % QK != 0)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul: a blocked format needs K a multiple of 32");
  return ffi::Error::Success();
}

ffi::Error MatmulF32(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w,
                     ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = w.dimensions();
  if (auto e = check(p, d[0], d[1], false); e.failure()) return e;
  run(pool, F32{w.typed_data(), p.N}, p, Store{&p, nullptr});
  return ffi::Error::Success();
}

ffi::Error MatmulBF16(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::BF16> w,
                      ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = w.dimensions();
  if (auto e = check(p, d[0], d[1], false); e.failure()) return e;
  run(pool, BF16{reinterpret_cast<const uint16_t*>(w.untyped_data()), p.N}, p, Store{&p, nullptr});
  return ffi::Error::Success();
}

ffi::Error MatmulI8Channel(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> q,
                           ffi::Buffer<ffi::F32> scale, ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = q.dimensions();
  if (auto e = check(p, d[0], d[1], false); e.failure()) return e;
  run(pool, I8Channel{q.typed_data(), scale.typed_data(), p.N}, p, Store{&p, scale.typed_data()});
  return ffi::Error::Success();
}

ffi::Error MatmulQ8_0(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> q,
                      ffi::Buffer<ffi::F16> scale, ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = q.dimensions();
  if (auto e = check(p, d[0], d[1], true); e.failure()) return e;
  run(pool, Q8_0{q.typed_data(), reinterpret_cast<const uint16_t*>(scale.untyped_data()), p.N}, p,
      Store{&p, nullptr});
  return ffi::Error::Success();
}

ffi::Error MatmulQ4_1(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::U8> q,
                      ffi::Buffer<ffi::F16> scale, ffi::Buffer<ffi::F16> offset, ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = q.dimensions();
  if (auto e = check(p, 2 * d[0], d[1], true); e.failure()) return e;
  const int64_t nb = p.K / QK;
  std::unique_ptr<float[]> xsum(new float[p.M * nb]);          // sum of x over each (row, block)
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      float s = 0.f;
      for (int64_t j = 0; j < QK; ++j) s += p.x[m * p.K + b * QK + j];
      xsum[m * nb + b] = s;
    }
  Q4_1 f{q.typed_data(), reinterpret_cast<const uint16_t*>(scale.untyped_data()),
         reinterpret_cast<const uint16_t*>(offset.untyped_data()), xsum.get(), p.N};
  run(pool, f, p, Store{&p, nullptr});
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_f32, MatmulF32,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_bf16, MatmulBF16,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_i8ch, MatmulI8Channel,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_q8_0, MatmulQ8_0,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S8>>()
                                  .Arg<ffi::Buffer<ffi::F16>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_q4_1, MatmulQ4_1,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::U8>>()
                                  .Arg<ffi::Buffer<ffi::F16>>()
                                  .Arg<ffi::Buffer<ffi::F16>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
