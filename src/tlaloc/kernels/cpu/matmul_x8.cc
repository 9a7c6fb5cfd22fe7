// CPU kernels for x @ W with 8-bit activations: x is quantised per block of 32 input rows to
// int8 and multiplied by W's integers with integer dot products, as llama.cpp multiplies its
// Q4_1 and Q8_0 weights by Q8_1/Q8_0 activations (ggml-quants.c, quantize_row_q8_1 and
// ggml_vec_dot_q4_1_q8_1). Typed-FFI custom-call targets, built and registered with matmul.cc's
// by tlaloc/_runtime/cpu_kernels.py; the runtime calls them in place of matmul.cc's _p64
// targets when an engine is asked for int8 activations (activations="int8").
//
//   q4_1_x8   q (K/2, N) uint8 nibble bytes, scale, offset (K/G, N): matmul.cc's q4_1, G = 32 or 64
//   q8_0_x8   q (K, N) int8, scale (K/32, N) float16 or (K/16, N) float32: matmul.cc's q8_0
//   i8ch_x8   q (K, N) int8, scale (N,) float32: matmul.cc's i8ch
//
// Activations. Each row of x (M, K), per block b of 32 elements: d = max |x_j| / 127 and
// q_j = nearbyint(x_j / d) (to nearest, ties to even; computed as x_j * (1 / d), as llama.cpp
// does), so |x_j - d q_j| <= d / 2 = max |x| / 254 per block. An all-zero block has d = 0 and
// q = 0. A block holding an infinity or a NaN gets d = NaN: every output of its row is NaN
// (the float kernels would give an infinity or a NaN; a finite number would be a silent lie).
// q4_1's offsets multiply the sum of the block's quantised x, xsum = d * sum(q) (llama.cpp's
// Q8_1 s), so that the block's error is sum((x - d q) W), not sum((x - d q)(W - offset)): with the
// exact sum of x, SmolLM2's Q4_1 perplexity rose 3.2% over float32 activations' (the nibbles'
// offset-free values, 0..15 times the scale, are twice the weights' magnitude on average).
//
// Sums. Per block (per 16-row group for q8_0 with G = 16) the integer sum of q_x * q_w is exact
// (int32). Each output is then, block by block in the order of K:
//   q4_1:  acc = fma(scale * d, float(isum), acc); acc = fma(offset, xsum, acc)
//   q8_0:  acc = fma(scale * d, float(isum), acc)          (per group of 16 with G = 16)
//   i8ch:  acc = fma(d, float(isum), acc); y = acc * scale[n] at the end
// in float32; the AVX2 code and the plain loops compute exactly these operations, so both give
// the same bits (tests/kernels/test_cpu_matmul_x8.py builds both and compares them), and a
// row's result does not depend on the batch it is in or on the threads.
//
// Layout. The integer arrays (q) come in "k4" panel order (tlaloc._runtime.cpu_kernels.pack_k4):
// panels of 64 columns, and in each panel, per 4 consecutive rows, each column's 4 bytes
// together: the bytes of the (N/64, R/4, 64, 4) array a.reshape(R/4, 4, N/64, 64).transpose(2, 0, 3, 1).
// One 32-byte load then holds 8 columns x 4 rows, the operand of vpmaddubsw + vpmaddwd (x's 4
// values of those rows broadcast), an int32 sum per column. q4_1's byte row 16b + j holds
// input rows 32b + j (low nibble) and 32b + 16 + j (high nibble), as GGUF packs them, so byte
// rows 16b + 4g .. + 3 give rows 32b + 4g .. + 3 (low) and 32b + 16 + 4g .. + 3 (high). The
// scales and offsets are in matmul.cc's panel order.
#include <cmath>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <limits>
#include <type_traits>
#include <vector>

#include "common.h"
#include "matmul_x8.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t TILE = 64;      // output columns per panel
constexpr int64_t QK = 32;        // input rows per activation block

using tlaloc_cpu::f16_to_f32;
using tlaloc_cpu::Problem;
using tlaloc_cpu::problem;

// x quantised: q (M, K) int8, d and sum = d * sum(q) (M, K/32) float32.
struct XQ {
  std::vector<int8_t> q;
  std::vector<float> d, sum;
};

// One block of 32: d, and the block's q (nearbyint(x * (1 / d)), clamped to [-127, 127]) into
// q; returns sum(q). A block with an infinity or a NaN: d = NaN, q = 0. With d subnormal, 1 / d
// can overflow and a zero x times it is a NaN: that q is 0. The AVX2 code computes the same
// operations 8 at a time (max and the integer sum do not depend on the order): the same bits.
inline int32_t quantize_block(const float* xr, int8_t* q, float& d) {
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), inf = _mm256_set1_ps(INFINITY);
  __m256 v[4], amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(xr + 8 * k);
    const __m256 a = _mm256_and_ps(v[k], abs_mask);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));   // |x| >= inf or NaN
    amax = _mm256_max_ps(amax, a);
  }
  if (!_mm256_testz_ps(bad, bad)) {
    d = std::numeric_limits<float>::quiet_NaN();
    std::memset(q, 0, QK);
    return 0;
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  d = _mm_cvtss_f32(m4) / 127.f;
  const __m256 id = _mm256_set1_ps(d != 0.f ? 1.f / d : 0.f), lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
  __m256i i32[4];
  for (int k = 0; k < 4; ++k) {      // to nearest, ties to even, as nearbyint in the default rounding mode
    __m256 r = _mm256_round_ps(_mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));                 // NaN (0 * inf) -> 0
    i32[k] = _mm256_cvtps_epi32(_mm256_min_ps(hi, _mm256_max_ps(lo, r)));
  }
  const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]), i16b = _mm256_packs_epi32(i32[2], i32[3]);
  const __m256i i8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i16a, i16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), i8);
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  return _mm_cvtsi128_si32(s4);
#else
  float amax = 0.f;
  bool finite = true;
  for (int64_t j = 0; j < QK; ++j) {
    finite = finite && std::isfinite(xr[j]);
    amax = std::max(amax, std::fabs(xr[j]));
  }
  if (!finite) {
    d = std::numeric_limits<float>::quiet_NaN();
    std::memset(q, 0, QK);
    return 0;
  }
  d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  int32_t sum = 0;
  for (int64_t j = 0; j < QK; ++j) {
    const float r = std::nearbyint(xr[j] * id);
    q[j] = std::isnan(r) ? 0 : static_cast<int8_t>(std::min(127.f, std::max(-127.f, r)));
    sum += q[j];
  }
  return sum;
#endif
}

// x quantised into x's buffers (resized, not reallocated, from call to call of one thread).
void quantize(const Problem& p, XQ& x) {
  const int64_t nb = p.K / QK;
  x.q.resize(p.M * p.K), x.d.resize(p.M * nb), x.sum.resize(p.M * nb);
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      float d;
      const int32_t sum = quantize_block(p.x + m * p.K + b * QK, x.q.data() + m * p.K + b * QK, d);
      x.d[m * nb + b] = d;
      x.sum[m * nb + b] = d * static_cast<float>(sum);
    }
}

// Element (r, n) of an (R, N) array in matmul.cc's panel order; the start of 4-row group r/4 of
// n's panel in k4 order.
inline int64_t at(int64_t r, int64_t n, int64_t R) { return ((n / TILE) * R + r) * TILE + n % TILE; }
inline int64_t k4_group(int64_t r, int64_t n, int64_t R) { return ((n / TILE) * (R / 4) + r / 4) * TILE * 4; }

inline float side(const void* a, bool f32, int64_t i) {
  return f32 ? static_cast<const float*>(a)[i] : f16_to_f32(static_cast<const uint16_t*>(a)[i]);
}

struct Q4_1 { const uint8_t* q; const void* scale; const void* offset; bool f32; int64_t per, groups; };
struct Q8 { const int8_t* q; const void* scale; bool f32; int64_t G; };   // G = 32 (float16) or 16 (float32)
struct I8Channel { const int8_t* q; const float* scale; };

// -- integer sums of one block, 8 columns: plain loops -------------------------------------------
// isum[c] (c < 8) = sum over the block's rows of x's q times W's integer, columns n .. n + 7.
inline void isums(const Q4_1& f, const Problem& p, const int8_t* xq, int64_t b, int64_t n, int32_t* isum) {
  const uint8_t* base = f.q + k4_group(16 * b, n, p.K / 2) + (n % TILE) * 4;
  for (int c = 0; c < 8; ++c) isum[c] = 0;
  for (int g = 0; g < 4; ++g)
    for (int c = 0; c < 8; ++c)
      for (int i = 0; i < 4; ++i) {
        const uint8_t w = base[g * TILE * 4 + c * 4 + i];
        isum[c] += (w & 15) * xq[4 * g + i] + (w >> 4) * xq[16 + 4 * g + i];
      }
}

// rows r0 .. r0 + rows - 1 of an int8 k4 array (R = K rows)
inline void isums_i8(const int8_t* q, int64_t K, const int8_t* xq, int64_t r0, int64_t rows, int64_t n, int32_t* isum) {
  const int8_t* base = q + k4_group(r0, n, K) + (n % TILE) * 4;
  for (int c = 0; c < 8; ++c) isum[c] = 0;
  for (int64_t g = 0; g < rows / 4; ++g)
    for (int c = 0; c < 8; ++c)
      for (int i = 0; i < 4; ++i) isum[c] += base[g * TILE * 4 + c * 4 + i] * xq[4 * g + i];
}

#if defined(__AVX2__) && defined(__FMA__)
inline int32_t load4(const int8_t* a) { int32_t v; std::memcpy(&v, a, 4); return v; }

inline __m256 load_side8(const void* a, bool f32, int64_t i) {
  if (f32) return _mm256_loadu_ps(static_cast<const float*>(a) + i);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(a) + i)));
}
#endif

// -- one block of rows m .. m + NR - 1, the panel's 64 columns: acc (row stride TILE) updated as
// the header says. The AVX2 code broadcasts each row's x bytes once per block and shares each
// loaded (and, for q4_1, unpacked) weight vector between the NR rows.
#if defined(__AVX2__) && defined(__FMA__)
template <int NR>
inline void panel_block(const Q4_1& f, const Problem& p, const XQ& x, int64_t m, int64_t b, int64_t n0, float* acc) {
  const int64_t nb = p.K / QK, s = at(b / f.per, n0, f.groups);
  const uint8_t* base = f.q + k4_group(16 * b, n0, p.K / 2);
  const __m256i low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  __m256i xl[NR][4], xh[NR][4];
  __m256 d[NR], xs[NR];
  for (int i = 0; i < NR; ++i) {
    const int8_t* xq = x.q.data() + (m + i) * p.K + b * QK;
    for (int g = 0; g < 4; ++g) xl[i][g] = _mm256_set1_epi32(load4(xq + 4 * g)), xh[i][g] = _mm256_set1_epi32(load4(xq + 16 + 4 * g));
    d[i] = _mm256_set1_ps(x.d[(m + i) * nb + b]), xs[i] = _mm256_set1_ps(x.sum[(m + i) * nb + b]);
  }
  for (int v = 0; v < TILE / 8; ++v) {
    __m256i s16[NR];                                  // 4 groups x 2 x 2 x 15 x 127 = 30480 < 32767
    for (int i = 0; i < NR; ++i) s16[i] = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + g * TILE * 4 + v * 32));
      const __m256i lo = _mm256_and_si256(w, low4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
      for (int i = 0; i < NR; ++i)
        s16[i] = _mm256_add_epi16(s16[i], _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl[i][g]), _mm256_maddubs_epi16(hi, xh[i][g])));
    }
    const __m256 scale = load_side8(f.scale, f.f32, s + 8 * v), offset = load_side8(f.offset, f.f32, s + 8 * v);
    for (int i = 0; i < NR; ++i) {
      float* a = acc + i * TILE + 8 * v;
      const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[i], ones));
      _mm256_storeu_ps(a, _mm256_fmadd_ps(offset, xs[i], _mm256_fmadd_ps(_mm256_mul_ps(scale, d[i]), isum, _mm256_loadu_ps(a))));
    }
  }
}

// int8 weights (q8_0, i8ch): rows r0 .. r0 + rows - 1 (one scale group, rows <= 32), then
// done(i, v, isum) per row i and column vector v with its int32 sums; the signs of w moved onto
// x (vpsignb) so that vpmaddubsw multiplies |w| (unsigned; |w| <= 128, |x| <= 127: no saturation).
template <int NR, class Done>
inline void i8_group(const int8_t* q, int64_t K, const XQ& x, int64_t m, int64_t r0, int64_t rows, int64_t n0, Done done) {
  const int8_t* base = q + k4_group(r0, n0, K);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i xv[NR][QK / 4];
  for (int i = 0; i < NR; ++i)
    for (int64_t g = 0; g < rows / 4; ++g) xv[i][g] = _mm256_set1_epi32(load4(x.q.data() + (m + i) * K + r0 + 4 * g));
  for (int v = 0; v < TILE / 8; ++v) {
    __m256i isum[NR];
    for (int i = 0; i < NR; ++i) isum[i] = _mm256_setzero_si256();
    for (int64_t g = 0; g < rows / 4; ++g) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + g * TILE * 4 + v * 32));
      const __m256i aw = _mm256_abs_epi8(w);
      for (int i = 0; i < NR; ++i)
        isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv[i][g], w)), ones));
    }
    for (int i = 0; i < NR; ++i) done(i, v, isum[i]);
  }
}

template <int NR>
inline void panel_block(const Q8& f, const Problem& p, const XQ& x, int64_t m, int64_t b, int64_t n0, float* acc) {
  const int64_t nb = p.K / QK;
  __m256 d[NR];
  for (int i = 0; i < NR; ++i) d[i] = _mm256_set1_ps(x.d[(m + i) * nb + b]);
  for (int64_t r0 = b * QK; r0 < (b + 1) * QK; r0 += f.G) {    // one group (G = 32) or two (G = 16)
    const int64_t s = at(r0 / f.G, n0, p.K / f.G);
    i8_group<NR>(f.q, p.K, x, m, r0, f.G, n0, [&](int i, int v, __m256i isum) {
      float* a = acc + i * TILE + 8 * v;
      const __m256 sd = _mm256_mul_ps(load_side8(f.scale, f.f32, s + 8 * v), d[i]);
      _mm256_storeu_ps(a, _mm256_fmadd_ps(sd, _mm256_cvtepi32_ps(isum), _mm256_loadu_ps(a)));
    });
  }
}

template <int NR>
inline void panel_block(const I8Channel& f, const Problem& p, const XQ& x, int64_t m, int64_t b, int64_t n0, float* acc) {
  const int64_t nb = p.K / QK;
  __m256 d[NR];
  for (int i = 0; i < NR; ++i) d[i] = _mm256_set1_ps(x.d[(m + i) * nb + b]);
  i8_group<NR>(f.q, p.K, x, m, b * QK, QK, n0, [&](int i, int v, __m256i isum) {
    float* a = acc + i * TILE + 8 * v;
    _mm256_storeu_ps(a, _mm256_fmadd_ps(d[i], _mm256_cvtepi32_ps(isum), _mm256_loadu_ps(a)));
  });
}
#else
// Plain loops: the same operations, column by column.
template <int NR>
inline void panel_block(const Q4_1& f, const Problem& p, const XQ& x, int64_t m, int64_t b, int64_t n0, float* acc) {
  const int64_t nb = p.K / QK, s = at(b / f.per, n0, f.groups);
  for (int i = 0; i < NR; ++i) {
    const int8_t* xq = x.q.data() + (m + i) * p.K + b * QK;
    const float d = x.d[(m + i) * nb + b], xs = x.sum[(m + i) * nb + b];
    for (int64_t c = 0; c < TILE; c += 8) {
      int32_t isum[8];
      isums(f, p, xq, b, n0 + c, isum);
      for (int j = 0; j < 8; ++j) {
        float& a = acc[i * TILE + c + j];
        a = std::fma(side(f.scale, f.f32, s + c + j) * d, static_cast<float>(isum[j]), a);
        a = std::fma(side(f.offset, f.f32, s + c + j), xs, a);
      }
    }
  }
}

template <int NR>
inline void panel_block(const Q8& f, const Problem& p, const XQ& x, int64_t m, int64_t b, int64_t n0, float* acc) {
  const int64_t nb = p.K / QK;
  for (int i = 0; i < NR; ++i) {
    const float d = x.d[(m + i) * nb + b];
    for (int64_t r0 = b * QK; r0 < (b + 1) * QK; r0 += f.G) {
      const int64_t s = at(r0 / f.G, n0, p.K / f.G);
      for (int64_t c = 0; c < TILE; c += 8) {
        int32_t isum[8];
        isums_i8(f.q, p.K, x.q.data() + (m + i) * p.K + r0, r0, f.G, n0 + c, isum);
        for (int j = 0; j < 8; ++j) acc[i * TILE + c + j] = std::fma(side(f.scale, f.f32, s + c + j) * d, static_cast<float>(isum[j]), acc[i * TILE + c + j]);
      }
    }
  }
}

template <int NR>
inline void panel_block(const I8Channel& f, const Problem& p, const XQ& x, int64_t m, int64_t b, int64_t n0, float* acc) {
  const int64_t nb = p.K / QK;
  for (int i = 0; i < NR; ++i) {
    const float d = x.d[(m + i) * nb + b];
    for (int64_t c = 0; c < TILE; c += 8) {
      int32_t isum[8];
      isums_i8(f.q, p.K, x.q.data() + (m + i) * p.K + b * QK, b * QK, QK, n0 + c, isum);
      for (int j = 0; j < 8; ++j) acc[i * TILE + c + j] = std::fma(d, static_cast<float>(isum[j]), acc[i * TILE + c + j]);
    }
  }
}
#endif

inline float channel_scale(const I8Channel& f, int64_t n) { return f.scale[n]; }
template <class Fmt> float channel_scale(const Fmt&, int64_t) { return 1.f; }

// Panels [t0, t1): per panel, block by block (the panel's bytes in storage order), every row of
// x, 8 columns at a time; the sums in acc (M, 64), stored into y when the panel is done.
template <class Fmt>
void run_panels(const Fmt& f, const Problem& p, const XQ& x, int64_t t0, int64_t t1, float* acc) {
  const int64_t nb = p.K / QK;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t n0 = t * TILE;
    std::memset(acc, 0, sizeof(float) * p.M * TILE);
    for (int64_t b = 0; b < nb; ++b) {
      int64_t m = 0;
      for (; m + 4 <= p.M; m += 4) panel_block<4>(f, p, x, m, b, n0, acc + m * TILE);
      for (; m < p.M; ++m) panel_block<1>(f, p, x, m, b, n0, acc + m * TILE);
    }
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t c = 0; c < TILE; ++c) p.y[m * p.N + n0 + c] = acc[m * TILE + c] * channel_scale(f, n0 + c);
  }
}

// Pool: pool.h's HelperPool, or anything with its num_threads() and Schedule(task)
// (tests/kernels/x8_isa_check.cc runs these loops on a pool of its own).
template <class Pool, class Fmt>
void run(Pool& pool, const Fmt& f, const Problem& p) {
  thread_local XQ mine;           // this thread's buffers, reused from call to call
  const XQ* x = &mine;            // a pointer: a lambda's [&mine] would name each helper's own (empty) one
  quantize(p, mine);
  tlaloc_cpu::run_and_steal(pool, p.N / TILE, 1, 1, tlaloc_cpu::threads_for(p, pool.num_threads()), [&f, &p, x](int64_t t0, int64_t t1) {
    thread_local std::vector<float> acc;
    acc.resize(p.M * TILE);
    run_panels(f, p, *x, t0, t1, acc.data());
  });
}

}  // namespace

namespace tlaloc_cpu {

void matmul_q4_1_x8(ffi::ThreadPool& pool, const Problem& p, const uint8_t* q, const void* scale, const void* offset,
                    bool f32, int64_t G, int64_t groups) {
  run(tlaloc_cpu::helpers(pool), Q4_1{q, scale, offset, f32, G / QK, groups}, p);
}

void matmul_q8_0_x8(ffi::ThreadPool& pool, const Problem& p, const int8_t* q, const void* scale, bool f32, int64_t G) {
  run(tlaloc_cpu::helpers(pool), Q8{q, scale, f32, G}, p);
}

void matmul_i8ch_x8(ffi::ThreadPool& pool, const Problem& p, const int8_t* q, const float* scale) {
  run(tlaloc_cpu::helpers(pool), I8Channel{q, scale}, p);
}

}  // namespace tlaloc_cpu
