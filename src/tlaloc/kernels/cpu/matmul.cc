// CPU kernels for x @ W with W kept as stored: float32, bfloat16, int8 per output channel,
// and GGUF's Q8_0 and Q4_1 blocks. Registered with XLA as typed-FFI custom-call targets
// (xla/ffi/api/ffi.h, shipped in jaxlib's include directory); built and registered by tlaloc/_runtime/cpu_kernels.py.
//
// Every target computes y (M, N) float32 = x (M, K) float32 @ W (K, N), where M is the
// product of x's leading dimensions. W's arrays are the serving artifacts' (in, out) arrays:
//
//   f32     w (K, N) float32
//   bf16    w (K, N) bfloat16 (uint16 bit patterns)
//   i8ch    q (K, N) int8, scale (N,) float32:              W[k, n] = q[k, n] * scale[n]
//   q8_0    q (K, N) int8, scale (K/G, N): G = 32 rows per scale in float16 (GGUF's Q8_0), or
//           G = 16 in float32 (ggml's Q6_K kept exactly: d * sc per 16 rows, q - 32 as int8;
//           G = K / scale's rows, any other pairing refused): W[k, n] = q[k, n] * scale[k/G, n]
//   q4_1    q (K/2, N) uint8, scale, offset (K/G, N) float16 or float32 (both alike), G = 32 or
//           64 rows per group (G = K / scale's rows): byte 16b + j holds row 32b + j in its low
//           nibble and row 32b + j + 16 in its high nibble (GGUF's packing, per 32 rows whatever G);
//           W[k, n] = nibble * scale[k/G, n] + offset[k/G, n]. G = 32 with float16 is GGUF's Q4_1,
//           G = 64 the artifacts' int4 group 64, float32 sides ggml's Q4_K (d * sc, -dmin * m).
//
// Panel layout. Each two-dimensional array A (R, N) above comes in panel order: its columns in
// panels of PANEL = 64, each panel's R rows stored one after the other, i.e. the bytes of the
// (N/64, R, 64) array A.reshape(R, N/64, 64).transpose(1, 0, 2) (tlaloc._runtime.cpu_kernels.
// pack_panels; the executor uploads the weights this way for these targets). A unit of work
// (whole panels) then reads one contiguous run of bytes, which the hardware prefetchers follow
// at memory speed: with the plain (R, N) layout a unit read short runs N bytes apart and
// decoded SmolLM2's Q4_1 layers at half the speed (benchmarks/RESULTS.md, issue 18). q4_1's
// bytes (K/2 rows) also pair their rows within a panel: the (N/64, K/4, 64, 2) array
// q.reshape(K/4, 2, N/64, 64).transpose(2, 0, 3, 1), so that byte rows 2i and 2i + 1 of a column
// are adjacent (q4_at; pack_panels does this for every uint8 array).
//
// The blocked formats are evaluated per block as GGUF defines them: for each block b,
// y += scale[b] * (sum_j x_j q_j) + offset[b] * (sum_j x_j) (q4_1 with G = 64: each 32-row block's
// partial sums scaled with its group's scale and offset, the same math; q8_0 with G = 16: each
// 16-row group's sum scaled with its own scale, two groups a block). x is never rounded: every product
// is a float32 x times an exactly converted weight, summed in float32. The one exception is q4_1
// on a CPU with AVX512_BF16: there x is split into two bfloat16 parts, x = hi + lo + e with
// hi = bf16(x), lo = bf16(x - hi), |e| <= 2^-17 |x| (each part rounds to nearest, 8 significant
// bits; a finite |x| above bfloat16's largest, 3.3895e38, takes that largest as hi: |e| <= 2^-15 |x|;
// below 2^-117, ~6e-36, lo is a bfloat16 denormal, which vdpbf16ps reads as 0: |e| <= 2^-9 |x|), and the nibbles (exact in bfloat16) are multiplied by hi and lo with vdpbf16ps: each
// product exact, summed in float32. 2^-17 is 128 float32 ulps of x, and a thousandth of what
// llama.cpp's 8-bit activations (Q8_1) give up; it made the Q4_1 loop 1.25-1.3x faster at
// M = 1 with the weights in DRAM (three parts, which are exact, gained ~5%: benchmarks/RESULTS.md).
//
// Sums. Each output element is summed by one thread, in an order fixed by K alone: per block
// of 32 input rows (per group of 16 for q8_0 with G = 16), one float32 chain over its row pairs
// (both rows of each pair in turn; q4_1 with bfloat16 dots: per pair of byte rows, the four
// vdpbf16ps of hi and lo in a fixed order), then (blocked formats) scaled into the element's running total. Neither the thread count, the split of
// the work, nor M changes any sum: results are reproducible, and a row's result is the same
// whatever the batch it is in (benchmarks/cpu_kernels.py checks this bit for bit).
//
// Work. The calling thread and the tasks it hands to the helper threads (pool.h) each walk a range
// of panels of their own, forward, then take panels from the far ends of the others' ranges
// (see run): each thread reads one contiguous
// stretch, and a task that starts late leaves its range's tail to the others. A run of columns
// is walked block by block, in storage order; per block a micro-kernel sums in registers and
// adds into the run's float32 sums.
//
// Micro-kernels. With AVX-512 (compiled with -march=native on the machine that runs it) each
// format converts its weight vectors exactly to float32 (pair), the shared loop
// (avx_pair_sums) uses each converted vector for up to 4 rows of x, and the format's finish
// applies the block's scale (and offset). x is never rounded. Elsewhere plain loops compute
// the same sums in another order (also fixed by K alone); with AVX2 the float32, bfloat16 and
// int8-per-channel ones hold up to 6 rows' sums in registers (strip, rows_avx2), the same bits.
#include <cmath>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <type_traits>
#include <utility>
#include <vector>

#include "common.h"
#include "matmul_x8.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t TILE = 64;      // output columns per micro-kernel call: one panel
constexpr int64_t QK = 32;        // input rows per block (GGUF's block size)

// Element (r, n) of an (R, N) array in panel order (see the header).
inline int64_t at(int64_t r, int64_t n, int64_t R) { return ((n / TILE) * R + r) * TILE + n % TILE; }
// Byte (r, n) of q4_1's (R, N) bytes, R even: panels, and in each the rows in pairs (see the header).
inline int64_t q4_at(int64_t r, int64_t n, int64_t R) { return (((n / TILE) * (R / 2) + r / 2) * TILE + n % TILE) * 2 + r % 2; }

using tlaloc_cpu::bf16_to_f32;
using tlaloc_cpu::f16_to_f32;

using tlaloc_cpu::Problem;
using tlaloc_cpu::problem;

// The rows of block b (fewer than QK only in an unblocked format's last block).
inline int64_t rows_in_block(int64_t K, int64_t b) { return std::min(QK, K - b * QK); }

struct F32 { const float* w; };
struct BF16 { const uint16_t* w; };
struct I8Channel { const int8_t* q; const float* scale; };
struct Q8_0 { const int8_t* q; const uint16_t* scale; };
// q8_0 with G = 16 and float32 scales (K/16, N): ggml's Q6_K, whose d * sc is exact in float32.
struct Q8_16 { const int8_t* q; const float* scale; };
constexpr int64_t QG16 = 16;      // input rows per scale of Q8_16: two groups a block
// Q4_1 and its variants: scale and offset float16 (bits) or float32 (f32), one row of them per
// group of `per` blocks, `groups` = K / G rows in all.
// xh, xl: x's bfloat16 parts (hi and lo, see the header; M x K bits), used with AVX512_BF16.
struct Q4_1 {
  const uint8_t* q; const void* scale; const void* offset; const float* xsum;
  bool f32; int64_t per; int64_t groups;
  const uint16_t* xh = nullptr; const uint16_t* xl = nullptr;
  int64_t side_at(int64_t b, int64_t n) const { return at(b / per, n, groups); }
  float side(const void* a, int64_t i) const {
    return f32 ? static_cast<const float*>(a)[i] : f16_to_f32(static_cast<const uint16_t*>(a)[i]);
  }
};

// A format's weight bytes as the panels store them: rows of TILE columns, row_bytes each, rows
// per panel, rows_per_block per block of QK input rows; a blocked format's scales in a stream
// of their own, side_bytes<Fmt> per block: one TILE-wide row of float16 (128 bytes) for Q8_0,
// two rows of float32 (512 bytes) for Q8_16. ahead: how far ahead of the block being read to
// request bytes (see Prefetch): one block, and at least 4 KB.
struct Stream {
  const char* base;
  int64_t rows, rows_per_block, row_bytes, ahead;
  const char* side = nullptr;
};
// The side stream's bytes per block (compile-time, so that Q8_0's two requests stay unrolled).
template <class Fmt> constexpr int64_t side_bytes = 2 * TILE;
template <> constexpr int64_t side_bytes<Q8_16> = (QK / QG16) * 4 * TILE;
inline int64_t ahead(int64_t block_bytes) { return std::max<int64_t>(block_bytes, 4096); }
inline Stream stream(const F32& f, const Problem& p) { return {reinterpret_cast<const char*>(f.w), p.K, QK, 4 * TILE, ahead(QK * 4 * TILE)}; }
inline Stream stream(const BF16& f, const Problem& p) { return {reinterpret_cast<const char*>(f.w), p.K, QK, 2 * TILE, ahead(QK * 2 * TILE)}; }
inline Stream stream(const I8Channel& f, const Problem& p) { return {reinterpret_cast<const char*>(f.q), p.K, QK, TILE, ahead(QK * TILE)}; }
inline Stream stream(const Q8_0& f, const Problem& p) {
  return {reinterpret_cast<const char*>(f.q), p.K, QK, TILE, ahead(QK * TILE), reinterpret_cast<const char*>(f.scale)};
}
inline Stream stream(const Q8_16& f, const Problem& p) {
  return {reinterpret_cast<const char*>(f.q), p.K, QK, TILE, ahead(QK * TILE), reinterpret_cast<const char*>(f.scale)};
}
inline Stream stream(const Q4_1&, const Problem&) { return {}; }
// Q4_1 is bound by its nibble conversions, not by memory, at M >= 8: the prefetching
// micro-kernel made it slower there (74 -> 60 GMAC/s at M = 16), so it keeps the plain one.
template <class Fmt> constexpr bool ahead_pays = !std::is_same_v<Fmt, Q4_1>;

// -- portable block kernels (any CPU) -----------------------------------------------------------
// acc[r * lda + t] += the sum over block b's rows of x[m + r, k] W[k, n0 + t], t < TILE, for the
// blocked formats as scale * sum(x q) (+ offset * sum x). Plain loops over t that the compiler
// vectorises (AVX2, NEON): the columns n0 .. n0 + width - 1 lie within one panel, so each weight
// row's run is contiguous (row_at). Each output's sum runs over k in the order below whatever
// the vector width: the reproducibility of the header holds here too. Written as per-column
// loops over a row pointer they were 4-6x faster on an AVX2 EPYC than with at() per element,
// which the compiler left scalar (benchmarks/RESULTS.md, session 18).

// The start of row k's run of columns n0 .. (within n0's panel) of an (R, N) array in panel order.
template <class T> inline const T* row_at(const T* a, int64_t k, int64_t n0, int64_t R) { return a + at(k, n0, R); }

inline float to_f32(float w) { return w; }
inline float to_f32(uint16_t w) { return bf16_to_f32(w); }
inline float to_f32(int8_t w) { return static_cast<float>(w); }
inline const float* weights(const F32& f) { return f.w; }
inline const uint16_t* weights(const BF16& f) { return f.w; }
inline const int8_t* weights(const I8Channel& f) { return f.q; }

#if defined(__AVX2__) && defined(__FMA__)
#define TLALOC_AVX2_INLINE inline __attribute__((always_inline))
inline __m256 load8_f32(const float* w) { return _mm256_loadu_ps(w); }
inline __m256 load8_f32(const uint16_t* w) {          // bfloat16 -> float32 is exact: the high half
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))), 16));
}
inline __m256 load8_f32(const int8_t* w) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w))));
}

// The plain loops below with the sums in registers: NR <= 6 rows x 8 V columns per pass over the
// block's rows k0 .. k1 - 1, each sum fma(x, w, acc) in the order of k, as the plain loops'
// acc += x * w compile with FMA (GCC contracts it by default, -ffp-contract=fast): the same bits,
// which test_cpu_matmul.py checks row by row. The plain loops keep their sums in memory, a load and
// a store per sum and row of W; at 16 rows that bound them (~2x slower than XLA's float32 dot,
// session 18), while here a block's 32 rows pass in registers. Six rows x 16 columns is the
// classic AVX2 register block (BLIS's Haswell sgemm micro-kernel, Van Zee and van de Geijn,
// ACM TOMS 41(3), 2015): 12 sums, 2 weight vectors and a broadcast x take 15 of the 16
// registers, and 12 independent FMA chains cover the FMA latency on both pipes, where four
// rows' 8 chains did not (16 rows: see RESULTS.md, session 21).
// pf: n_pf cache lines to ask for into L2, one per row k (see scalar_block).
template <int NR, int V, class T>
TLALOC_AVX2_INLINE void strip(const T* w, const Problem& p, int64_t k0, int64_t k1, int64_t n0, int64_t c,
                              const float* xr, float* acc, int64_t lda, const char* pf, int64_t n_pf) {
  __m256 a[NR][V];
  for (int i = 0; i < NR; ++i)
    for (int v = 0; v < V; ++v) a[i][v] = _mm256_loadu_ps(acc + i * lda + c + 8 * v);
  const T* wk = row_at(w, k0, n0, p.K) + c;
  const float* xk = xr + k0;
  for (int64_t k = k0, j = 0; k < k1; ++k, ++j, wk += TILE, ++xk) {
    if (j < n_pf) asm volatile("prefetcht1 %0" : : "m"(*(pf + 64 * j)));   // GCC drops __builtin_prefetch here
    __m256 wv[V];
    for (int v = 0; v < V; ++v) wv[v] = load8_f32(wk + 8 * v);
    for (int i = 0; i < NR; ++i) {
      const __m256 b = _mm256_broadcast_ss(xk + i * p.K);
      for (int v = 0; v < V; ++v) a[i][v] = _mm256_fmadd_ps(b, wv[v], a[i][v]);
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc + i * lda + c + 8 * v, a[i][v]);
}

// NR rows of x through block b's rows k0 .. k1 - 1, columns 0 .. width - 1 (a multiple of 8)
// of the run at n0, in strips of 16 columns (strips of 24 with four rows, 12 sums, were no faster
// for float32 and 2x slower for bfloat16 and int8, whose conversions then spilled; session 20),
// asking for the n_pf lines at pf spread over the strips.
template <int NR, class T>
void rows_avx2(const T* w, const Problem& p, int64_t k0, int64_t k1, int64_t n0, int64_t width, const float* xr,
               float* acc, int64_t lda, const char* pf, int64_t n_pf) {
  const int64_t strips = (width + 15) / 16, per = (n_pf + strips - 1) / strips;
  int64_t c = 0;
  for (; c + 16 <= width; c += 16, pf += 64 * per, n_pf -= per) strip<NR, 2>(w, p, k0, k1, n0, c, xr, acc, lda, pf, std::min(per, n_pf));
  if (c + 8 <= width) strip<NR, 1>(w, p, k0, k1, n0, c, xr, acc, lda, pf, std::min(per, n_pf)), c += 8;
}

// Rows r .. r + n - 1 (1 <= n <= 6) of the block through rows_avx2.
template <class T>
void rows_avx2_n(int n, const T* w, const Problem& p, int64_t k0, int64_t k1, int64_t n0, int64_t width, const float* xr,
                 float* acc, int64_t lda, const char* pf, int64_t n_pf) {
  switch (n) {
    case 6: rows_avx2<6>(w, p, k0, k1, n0, width, xr, acc, lda, pf, n_pf); break;
    case 5: rows_avx2<5>(w, p, k0, k1, n0, width, xr, acc, lda, pf, n_pf); break;
    case 4: rows_avx2<4>(w, p, k0, k1, n0, width, xr, acc, lda, pf, n_pf); break;
    case 3: rows_avx2<3>(w, p, k0, k1, n0, width, xr, acc, lda, pf, n_pf); break;
    case 2: rows_avx2<2>(w, p, k0, k1, n0, width, xr, acc, lda, pf, n_pf); break;
    default: rows_avx2<1>(w, p, k0, k1, n0, width, xr, acc, lda, pf, n_pf); break;
  }
}
#endif

constexpr int64_t AHEAD_GROUPS = 4;   // how many st.ahead the register loops ask ahead (see scalar_block)

template <class Fmt>
void scalar_block(const Fmt& f, const Problem& p, int64_t b, int64_t n0, int64_t width, int64_t m, int R, float* acc, int64_t lda) {
  const int64_t k0 = b * QK, k1 = b * QK + rows_in_block(p.K, b);
  int r = 0;
#if defined(__AVX2__) && defined(__FMA__)
  // One row of float32 weights keeps the plain loop below: the full SmolLM2 step at batch 1 decoded
  // at 44-45 tokens/s with it against 42-43 with the register loop (interleaved, session 21); one
  // row of bfloat16 or int8 weights, whose conversions bound it, is faster in registers
  // (benchmarks/cpu_kernels.py at M = 1: 27-40 against 20-28 GB/s, and 14-24 against 11-16).
  constexpr bool four_bytes = sizeof(*weights(f)) == 4;
  if (width % 8 == 0 && (R > 1 || !four_bytes)) {     // in groups of at most 6 rows, as even as they come (16: 6, 5, 5)
    // Ahead: the groups ask for a block's bytes AHEAD_GROUPS * st.ahead past this block's, into L2,
    // a share each: the later groups read this block from L1, and without the requests memory
    // idled during them. 16 rows, 12 SmolLM2-sized float32 layers (benchmarks/cpu_kernels.py):
    // 6-9 GB/s of weights with four-row groups and the first group asking for the next block
    // alone, 11-15 with the requests spread over the groups, 14-17 four blocks ahead (session 21).
    // Row k of a panel's run starts TILE elements after row k - 1, so a block is one run of bytes.
    const Stream st = stream(f, p);
    const char* pf = st.base + ((n0 / TILE) * st.rows + k0) * st.row_bytes + AHEAD_GROUPS * st.ahead;
    const int groups = (R + 5) / 6;
    const int64_t lines = (k1 - k0) * st.row_bytes / 64, per = (lines + groups - 1) / groups;
    for (int g = 0; g < groups; ++g, pf += 64 * per) {
      const int n = R / groups + (g < R % groups ? 1 : 0);
      rows_avx2_n(n, weights(f), p, k0, k1, n0, width, p.x + (m + r) * p.K, acc + r * lda, lda, pf,
                  std::max<int64_t>(0, std::min(per, lines - g * per)));
      r += n;
    }
  }
#endif
  for (; r + 4 <= R; r += 4) {                        // four rows share each converted weight
    float* __restrict a0 = acc + r * lda;
    float* __restrict a1 = a0 + lda;
    float* __restrict a2 = a1 + lda;
    float* __restrict a3 = a2 + lda;
    const float* xr = p.x + (m + r) * p.K;
    for (int64_t k = k0; k < k1; ++k) {
      const float x0 = xr[k], x1 = xr[p.K + k], x2 = xr[2 * p.K + k], x3 = xr[3 * p.K + k];
      const auto* __restrict w = row_at(weights(f), k, n0, p.K);
      for (int64_t t = 0; t < width; ++t) {
        const float wt = to_f32(w[t]);
        a0[t] += x0 * wt;
        a1[t] += x1 * wt;
        a2[t] += x2 * wt;
        a3[t] += x3 * wt;
      }
    }
  }
  for (; r < R; ++r) {                                // the same chain per output, one row at a time
    float* __restrict a = acc + r * lda;
    const float* xr = p.x + (m + r) * p.K;
    for (int64_t k = k0; k < k1; ++k) {
      const float xk = xr[k];
      const auto* __restrict w = row_at(weights(f), k, n0, p.K);
      for (int64_t t = 0; t < width; ++t) a[t] += xk * to_f32(w[t]);
    }
  }
}

// part[t] += the sum over rows k0 .. k1 - 1 of x[k] q[k, n0 + t] (int8 weights, one chain per column).
inline void int8_rows(const int8_t* q, const float* xr, int64_t k0, int64_t k1, int64_t n0, int64_t width, int64_t K,
                      float* __restrict part) {
  for (int64_t k = k0; k < k1; ++k) {
    const float xk = xr[k];
    const int8_t* __restrict w = row_at(q, k, n0, K);
    for (int64_t t = 0; t < width; ++t) part[t] += xk * static_cast<float>(w[t]);
  }
}

void scalar_block(const Q8_0& f, const Problem& p, int64_t b, int64_t n0, int64_t width, int64_t m, int R, float* acc, int64_t lda) {
  const uint16_t* scale = row_at(f.scale, b, n0, p.K / QK);
  for (int r = 0; r < R; ++r) {
    float part[TILE] = {};
    int8_rows(f.q, p.x + (m + r) * p.K, b * QK, (b + 1) * QK, n0, width, p.K, part);
    for (int64_t t = 0; t < width; ++t) acc[r * lda + t] += part[t] * f16_to_f32(scale[t]);
  }
}

void scalar_block(const Q8_16& f, const Problem& p, int64_t b, int64_t n0, int64_t width, int64_t m, int R, float* acc, int64_t lda) {
  for (int r = 0; r < R; ++r)
    for (int64_t g = b * (QK / QG16); g < (b + 1) * (QK / QG16); ++g) {   // the block's two groups in turn
      float part[TILE] = {};
      int8_rows(f.q, p.x + (m + r) * p.K, g * QG16, (g + 1) * QG16, n0, width, p.K, part);
      const float* scale = row_at(f.scale, g, n0, p.K / QG16);
      for (int64_t t = 0; t < width; ++t) acc[r * lda + t] += part[t] * scale[t];
    }
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "q4_1's portable loop reads byte pairs as little-endian words");

// Rows m .. m + NR - 1 of x through block b: the nibbles of each 8 columns are converted once for
// the NR rows; each output's chain is the one of a single row, so a row's result does not depend
// on the batch it is in.
template <int NR>
void q4_1_rows(const Q4_1& f, const Problem& p, int64_t b, int64_t n0, int64_t width, int64_t m, float* acc, int64_t lda) {
  const int64_t R2 = p.K / 2;
  float part[NR][TILE] = {};
  for (int64_t j = 0; j < QK / 2; j += 2) {
    // byte rows j and j + 1 of a column are adjacent (q4_at): one little-endian 16-bit word per
    // column; its nibbles are input rows j, j + 16 (low byte), j + 1, j + 17
    const uint8_t* q = f.q + q4_at(b * (QK / 2) + j, n0, R2);
    float x0[NR], x16[NR], x1[NR], x17[NR];
    for (int i = 0; i < NR; ++i) {
      const float* xr = p.x + (m + i) * p.K + b * QK;
      x0[i] = xr[j], x16[i] = xr[j + QK / 2], x1[i] = xr[j + 1], x17[i] = xr[j + 1 + QK / 2];
    }
    int64_t t = 0;
#if defined(__AVX2__) && defined(__FMA__)
    // 8 columns at a time; per column the same chain as the loop below
    __m256 v0[NR], v16[NR], v1[NR], v17[NR];
    for (int i = 0; i < NR; ++i)
      v0[i] = _mm256_set1_ps(x0[i]), v16[i] = _mm256_set1_ps(x16[i]), v1[i] = _mm256_set1_ps(x1[i]), v17[i] = _mm256_set1_ps(x17[i]);
    const __m256i low4 = _mm256_set1_epi32(15);
    for (; t + 8 <= width; t += 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 2 * t)));
      const __m256 n0 = _mm256_cvtepi32_ps(_mm256_and_si256(w, low4));
      const __m256 n1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 4), low4));
      const __m256 n2 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 8), low4));
      const __m256 n3 = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 12));
      for (int i = 0; i < NR; ++i) {
        __m256 s = _mm256_loadu_ps(part[i] + t);
        s = _mm256_add_ps(s, _mm256_fmadd_ps(v16[i], n1, _mm256_mul_ps(v0[i], n0)));
        s = _mm256_add_ps(s, _mm256_fmadd_ps(v17[i], n3, _mm256_mul_ps(v1[i], n2)));
        _mm256_storeu_ps(part[i] + t, s);
      }
    }
#endif
    for (; t < width; ++t) {
      const int32_t v = q[2 * t] | (q[2 * t + 1] << 8);
      for (int i = 0; i < NR; ++i) {
        part[i][t] += std::fma(x16[i], static_cast<float>((v >> 4) & 15), x0[i] * static_cast<float>(v & 15));
        part[i][t] += std::fma(x17[i], static_cast<float>(v >> 12), x1[i] * static_cast<float>((v >> 8) & 15));
      }
    }
  }
  for (int i = 0; i < NR; ++i) {
    const float xs = f.xsum[(m + i) * (p.K / QK) + b];
    for (int64_t t = 0; t < width; ++t)
      acc[i * lda + t] += part[i][t] * f.side(f.scale, f.side_at(b, n0 + t)) + xs * f.side(f.offset, f.side_at(b, n0 + t));
  }
}

void scalar_block(const Q4_1& f, const Problem& p, int64_t b, int64_t n0, int64_t width, int64_t m, int R, float* acc, int64_t lda) {
  int r = 0;
  for (; r + 4 <= R; r += 4) q4_1_rows<4>(f, p, b, n0, width, m + r, acc + r * lda, lda);
  for (; r < R; ++r) q4_1_rows<1>(f, p, b, n0, width, m + r, acc + r * lda, lda);
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define TLALOC_AVX512 1
#include <immintrin.h>

using Rows = std::pair<int64_t, int64_t>;   // the two input rows k of a row pair
// The pieces of a micro-kernel must be inlined into its loops (a call would pass the vectors
// through memory): GCC and Clang otherwise decline for the larger ones.
#define TLALOC_INLINE inline __attribute__((always_inline))
#define TLALOC_INLINE_LAMBDA __attribute__((always_inline))

TLALOC_INLINE __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
TLALOC_INLINE __m512 load_i8x16(const int8_t* q) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
}

// -- one micro-kernel per format, in three parts ------------------------------------------------
// row(f, p, k, n, w): the exact float32 vectors w[v] = W[k, n + 16 v : n + 16 v + 16], v < V
//   (unblocked formats; a row pair is two consecutive rows, and an odd K leaves a last row alone);
// pair(f, p, b, n, j, wa, wb): the vectors of the j-th row pair of block b, returning its rows;
// finish(f, p, b, n, m, s, acc, lda): acc[r * lda + 16 v + t] += block b's part given its sums
//   s[r][v] = sum over the block of x[m + r, k] * (converted weight).

template <int V> TLALOC_INLINE void row(const F32& f, const Problem& p, int64_t k, int64_t n, __m512* w) {
  for (int v = 0; v < V; ++v) w[v] = _mm512_loadu_ps(f.w + at(k, n, p.K) + 16 * v);
}
// bfloat16 -> float32 is exact: the 16 bits become the high half of the float.
template <int V> TLALOC_INLINE void row(const BF16& f, const Problem& p, int64_t k, int64_t n, __m512* w) {
  for (int v = 0; v < V; ++v) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(f.w + at(k, n, p.K) + 16 * v));
    w[v] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
// int8 per channel: sums of x * q; the scale multiplies the finished sum when it is stored.
template <int V> TLALOC_INLINE void row(const I8Channel& f, const Problem& p, int64_t k, int64_t n, __m512* w) {
  for (int v = 0; v < V; ++v) w[v] = load_i8x16(f.q + at(k, n, p.K) + 16 * v);
}
template <int V, class Fmt> TLALOC_INLINE Rows pair(const Fmt& f, const Problem& p, int64_t b, int64_t n, int64_t j, __m512* wa, __m512* wb) {
  const int64_t k = b * QK + 2 * j;
  row<V>(f, p, k, n, wa);
  row<V>(f, p, k + 1, n, wb);
  return {k, k + 1};
}
template <int R, int V, class Fmt>
TLALOC_INLINE void finish(const Fmt&, const Problem&, int64_t, int64_t, int64_t, __m512 s[R][V], float* acc, int64_t lda) {
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      float* a = acc + r * lda + 16 * v;
      _mm512_storeu_ps(a, _mm512_add_ps(_mm512_loadu_ps(a), s[r][v]));
    }
}

// Q8_0: acc += (sum over the block of x * q) * scale.
template <int V> TLALOC_INLINE Rows pair(const Q8_0& f, const Problem& p, int64_t b, int64_t n, int64_t j, __m512* wa, __m512* wb) {
  const int64_t k = b * QK + 2 * j;
  for (int v = 0; v < V; ++v) wa[v] = load_i8x16(f.q + at(k, n, p.K) + 16 * v), wb[v] = load_i8x16(f.q + at(k + 1, n, p.K) + 16 * v);
  return {k, k + 1};
}
template <int R, int V>
TLALOC_INLINE void finish(const Q8_0& f, const Problem& p, int64_t b, int64_t n, int64_t, __m512 s[R][V], float* acc, int64_t lda) {
  for (int v = 0; v < V; ++v) {
    const __m512 scale = load_f16x16(f.scale + at(b, n, p.K / QK) + 16 * v);
    for (int r = 0; r < R; ++r) {
      float* a = acc + r * lda + 16 * v;
      _mm512_storeu_ps(a, _mm512_fmadd_ps(s[r][v], scale, _mm512_loadu_ps(a)));
    }
  }
}

// Q8_16: the same int8 pairs; finish is given a group g (two a block, see avx_rows) and applies
// its float32 scale: acc += (sum over the group of x * q) * scale[g].
template <int V> TLALOC_INLINE Rows pair(const Q8_16& f, const Problem& p, int64_t b, int64_t n, int64_t j, __m512* wa, __m512* wb) {
  const int64_t k = b * QK + 2 * j;
  for (int v = 0; v < V; ++v) wa[v] = load_i8x16(f.q + at(k, n, p.K) + 16 * v), wb[v] = load_i8x16(f.q + at(k + 1, n, p.K) + 16 * v);
  return {k, k + 1};
}
template <int R, int V>
TLALOC_INLINE void finish(const Q8_16& f, const Problem& p, int64_t g, int64_t n, int64_t, __m512 s[R][V], float* acc, int64_t lda) {
  for (int v = 0; v < V; ++v) {
    const __m512 scale = _mm512_loadu_ps(f.scale + at(g, n, p.K / QG16) + 16 * v);
    for (int r = 0; r < R; ++r) {
      float* a = acc + r * lda + 16 * v;
      _mm512_storeu_ps(a, _mm512_fmadd_ps(s[r][v], scale, _mm512_loadu_ps(a)));
    }
  }
}

// Q4_1: byte row j of a block holds rows j (low nibbles) and j + 16 (high): a natural pair. A
// nibble becomes a float by table lookup: vpermps reads only the low 4 bits of each index lane,
// so the low nibble needs no mask and the high one a shift (cheaper than masking and an
// int -> float conversion each). acc += (sum x * nibble) * scale + (sum x) * offset.
// In the paired layout byte row j's bytes alternate with row j ^ 1's: each 16-bit word holds a
// column's rows 2i (low byte) and 2i + 1 (high byte); an odd j takes the high byte by a shift.
template <int V> TLALOC_INLINE Rows pair(const Q4_1& f, const Problem& p, int64_t b, int64_t n, int64_t j, __m512* wa, __m512* wb) {
  const __m512 nibble = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const uint8_t* src = f.q + q4_at(b * (QK / 2) + (j & ~int64_t(1)), n, p.K / 2);
  const int shift = 8 * static_cast<int>(j & 1);
  for (int v = 0; v < V; ++v) {
    const __m512i words = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32 * v)));
    const __m512i bytes = _mm512_srli_epi32(words, shift);
    wa[v] = _mm512_permutexvar_ps(bytes, nibble);
    wb[v] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), nibble);
  }
  return {b * QK + j, b * QK + j + QK / 2};
}
TLALOC_INLINE __m512 load_side16(const Q4_1& f, const void* a, int64_t i) {
  return f.f32 ? _mm512_loadu_ps(static_cast<const float*>(a) + i) : load_f16x16(static_cast<const uint16_t*>(a) + i);
}
template <int R, int V>
TLALOC_INLINE void finish(const Q4_1& f, const Problem& p, int64_t b, int64_t n, int64_t m, __m512 s[R][V], float* acc, int64_t lda) {
  for (int v = 0; v < V; ++v) {
    const __m512 scale = load_side16(f, f.scale, f.side_at(b, n) + 16 * v), offset = load_side16(f, f.offset, f.side_at(b, n) + 16 * v);
    for (int r = 0; r < R; ++r) {
      float* a = acc + r * lda + 16 * v;
      const __m512 xs = _mm512_set1_ps(f.xsum[(m + r) * (p.K / QK) + b]);
      _mm512_storeu_ps(a, _mm512_fmadd_ps(s[r][v], scale, _mm512_fmadd_ps(xs, offset, _mm512_loadu_ps(a))));
    }
  }
}

// -- the shared sums ----------------------------------------------------------------------------

// out[r][v] = sum over the pairs j < pairs of x[r, ka] wa[v] + x[r, kb] wb[v], where
// {ka, kb} = pair(j, wa, wb); each converted vector serves R rows of x. One float32 chain per
// output vector, through both rows of each pair in turn: with R V >= 4 independent chains the
// FMA latency is hidden, and one chain (rather than one per row of the pair) leaves registers
// for R = 4 rows times V = 4 vectors, which converts each weight vector once for 4 rows of x
// and 64 columns (15% more multiply-adds per second than 4 x 32 at batch 16, Q4_1 on Zen 4).
// The order of the sums depends on K only: a row's result does not depend on M, nor on R or V.
// An empty asm that keeps the weight vectors in registers. A float32 weight needs no conversion,
// so the compiler folds its load into each row's FMA as a memory operand, loading the same 64
// bytes R times: float32 at batch 16 ran at 29 GMAC/s per core that way, 47-52 with one load
// (benchmarks/cpu_kernels_native.cc). With one row the folded load is the faster form.
template <int V> TLALOC_INLINE void keep_in_registers(__m512* wa, __m512* wb) {
  for (int v = 0; v < V; ++v) asm("" : "+v"(wa[v]), "+v"(wb[v]));
}

// Requests for the next block's weight bytes, spread over the passes that read this block.
// With M >= 8 the rows of x pass over each block (held in L1) M / 4 times, and only the first
// pass reads new bytes: consumed that way, in bursts, memory and arithmetic took turns instead
// of overlapping (float32 at M = 16: 61 GMAC/s on 2 cores with the weights in DRAM, against 99
// with them in L3). Spreading a request for each of the next block's cache lines evenly over
// every pass's pair steps keeps the memory busy all along: 92 GMAC/s
// (benchmarks/cpu_kernels_native.cc's chain; RESULTS.md, session 9). A prefetch is a hint:
// it never faults and changes no result.
struct Prefetch {
  const char* next = nullptr;   // this pass's first line to request
  int64_t lines = 0;            // lines to request during this pass, over its QK / 2 pair steps
  TLALOC_INLINE void at(int64_t j) const {
    for (int64_t i = j * lines / (QK / 2); i < (j + 1) * lines / (QK / 2); ++i)
      asm volatile("prefetcht1 %0" : : "m"(*(next + 64 * i)));   // GCC drops __builtin_prefetch here
  }
};

// j0: the block's pair steps already taken (Q8_16's second group), for the prefetch's spread.
template <int R, int V, bool Ahead, class Pair>
TLALOC_INLINE void avx_pair_sums(const float* x, int64_t ldx, int64_t pairs, Pair pair, __m512 out[R][V], const Prefetch& pf,
                                 int64_t j0 = 0) {
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) out[r][v] = _mm512_setzero_ps();
  for (int64_t j = 0; j < pairs; ++j) {
    if constexpr (Ahead) pf.at(j0 + j);
    __m512 wa[V], wb[V];
    const auto [ka, kb] = pair(j, wa, wb);
    if constexpr (R > 1) keep_in_registers<V>(wa, wb);
    for (int r = 0; r < R; ++r) {
      const __m512 xa = _mm512_set1_ps(x[r * ldx + ka]), xb = _mm512_set1_ps(x[r * ldx + kb]);
      for (int v = 0; v < V; ++v) out[r][v] = _mm512_fmadd_ps(xb, wb[v], _mm512_fmadd_ps(xa, wa[v], out[r][v]));
    }
  }
}

// An unblocked format's odd last row, added alone after the pairs.
template <int R, int V, class Fmt>
TLALOC_INLINE void add_last_row(const Fmt& f, const Problem& p, int64_t b, int64_t n, int64_t m, __m512 s[R][V]) {
  if constexpr (!std::is_same_v<Fmt, Q8_0> && !std::is_same_v<Fmt, Q8_16> && !std::is_same_v<Fmt, Q4_1>) {
    const int64_t rows = rows_in_block(p.K, b);
    if (rows % 2 == 0) return;
    __m512 w[V];
    row<V>(f, p, b * QK + rows - 1, n, w);
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) s[r][v] = _mm512_fmadd_ps(_mm512_set1_ps(p.x[(m + r) * p.K + b * QK + rows - 1]), w[v], s[r][v]);
  }
}

#ifdef __AVX512BF16__
// Q4_1 with bfloat16 dot products (see the header). Pair i < 8 of block b's byte rows (2i, 2i + 1):
// each 32-bit lane of a column holds its rows 32b + 2i, 32b + 2i + 1 (the low nibbles) or
// 32b + 16 + 2i, 32b + 17 + 2i (the high ones) as two exact bfloat16 values, and vdpbf16ps adds
// both (exact) products with x's parts of the same two rows, low nibbles first: the hi parts into
// one float32 chain and the lo parts into another (the lo chain's roundings are 2^-8 smaller, so
// the block's sum is as accurate as one chain over float32 x; two chains also hide the latency),
// added once at the block's end. These sums s[r][v] are those finish() scales; their order depends
// on K only, as elsewhere.
alignas(64) constexpr uint16_t kNibbleBF16[32] = {   // bfloat16 bits of i & 15: vpermw reads 5 index bits
    0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0,
    0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170,
    0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0,
    0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170};

TLALOC_INLINE __m512bh bf16_pair(const uint16_t* x) {   // x[0], x[1] in every 32-bit lane
  uint32_t two;
  std::memcpy(&two, x, sizeof two);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(two));
}

template <int R, int V>
TLALOC_INLINE void q4_1_bf16_sums(const Q4_1& f, const Problem& p, int64_t b, int64_t n, int64_t m, __m512 s[R][V]) {
  const __m512i table = _mm512_load_si512(kNibbleBF16);
  __m512 lo[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) s[r][v] = lo[r][v] = _mm512_setzero_ps();
  const uint8_t* block = f.q + q4_at(b * (QK / 2), n, p.K / 2);
  for (int64_t i = 0; i < QK / 4; ++i) {
    __m512bh wa[V], wb[V];
    for (int v = 0; v < V; ++v) {
      const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2 * TILE * i + 32 * v)));
      wa[v] = (__m512bh)_mm512_permutexvar_epi16(w, table);
      wb[v] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), table);
    }
    for (int r = 0; r < R; ++r) {
      const int64_t k = (m + r) * p.K + b * QK + 2 * i;
      const __m512bh ha = bf16_pair(f.xh + k), hb = bf16_pair(f.xh + k + QK / 2);
      const __m512bh la = bf16_pair(f.xl + k), lb = bf16_pair(f.xl + k + QK / 2);
      for (int v = 0; v < V; ++v) {
        s[r][v] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(s[r][v], wa[v], ha), wb[v], hb);
        lo[r][v] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(lo[r][v], wa[v], la), wb[v], lb);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) s[r][v] = _mm512_add_ps(s[r][v], lo[r][v]);
}
#endif

// Rows m .. m + R - 1 of x for columns n0 .. n0 + width - 1 of one tile (width a multiple of
// 16 V), 16 V columns at a time: each weight vector is converted once and used straight from
// registers for the R rows (R V <= 16 keeps the R V sums and the 2 V weight vectors in registers).
// Q8_16: the block's two groups of 16 rows one after the other, each its own chain of 8 pairs finished with its own scale.
template <int R, int V, class Fmt, bool Ahead = false>
void avx_rows(const Fmt& f, const Problem& p, int64_t b, int64_t n0, int64_t width, int64_t m, float* acc, int64_t lda,
              const Prefetch& pf = {}) {
#ifdef __AVX512BF16__
  if constexpr (std::is_same_v<Fmt, Q4_1>) {
    constexpr int W = R >= 3 ? 2 : V;             // 2 R W sums, 2 W weight vectors in 32 registers
    for (int64_t c = 0; c < width; c += 16 * W) {
      __m512 s[R][W];
      q4_1_bf16_sums<R, W>(f, p, b, n0 + c, m, s);
      finish<R, W>(f, p, b, n0 + c, m, s, acc + c, lda);
    }
    return;
  }
#endif
  if constexpr (std::is_same_v<Fmt, Q8_16>) {
    constexpr int64_t pairs = QG16 / 2;
    for (int64_t c = 0; c < width; c += 16 * V)
      for (int64_t h = 0; h < QK / QG16; ++h) {
        __m512 s[R][V];
        avx_pair_sums<R, V, Ahead>(p.x + m * p.K, p.K, pairs,
                            [&](int64_t j, __m512* wa, __m512* wb) TLALOC_INLINE_LAMBDA { return pair<V>(f, p, b, n0 + c, h * pairs + j, wa, wb); },
                            s, pf, h * pairs);
        finish<R, V>(f, p, b * (QK / QG16) + h, n0 + c, m, s, acc + c, lda);
      }
    return;
  }
  for (int64_t c = 0; c < width; c += 16 * V) {
    __m512 s[R][V];
    avx_pair_sums<R, V, Ahead>(p.x + m * p.K, p.K, rows_in_block(p.K, b) / 2,
                        [&](int64_t j, __m512* wa, __m512* wb) TLALOC_INLINE_LAMBDA { return pair<V>(f, p, b, n0 + c, j, wa, wb); }, s, pf);
    add_last_row<R, V>(f, p, b, n0 + c, m, s);
    finish<R, V>(f, p, b, n0 + c, m, s, acc + c, lda);
  }
}
#endif

inline float channel_scale(const I8Channel& f, int64_t n) { return f.scale[n]; }
template <class Fmt> float channel_scale(const Fmt&, int64_t) { return 1.f; }

#ifdef TLALOC_AVX512
// Block b of the tile piece n0 .. n0 + width - 1 for every row of x, V = 64 / 16 vectors wide at
// most (a half tile: V = 2).
template <int V, class Fmt>
void avx_block(const Fmt& f, const Problem& p, int64_t b, int64_t n0, int64_t width, float* a, int64_t W) {
  int64_t m = 0;
  if (p.M >= 8 && ahead_pays<Fmt>) {   // two or more passes of 4 rows: see Prefetch
    const Stream st = stream(f, p);
    const int64_t lines = st.rows_per_block * st.row_bytes / 64, passes = p.M / 4;
    Prefetch pf{st.base + ((n0 / TILE) * st.rows + b * st.rows_per_block) * st.row_bytes + st.ahead,
                (lines + passes - 1) / passes};
    if (st.side) for (int64_t i = 0; i < side_bytes<Fmt> / 64; ++i)   // the next block's scales: a stream of their own
      asm volatile("prefetcht1 %0" : : "m"(*(st.side + ((n0 / TILE) * (p.K / QK) + b + 1) * side_bytes<Fmt> + 64 * i)));
    for (; m + 4 <= p.M; m += 4, pf.next += 64 * pf.lines) avx_rows<4, V, Fmt, true>(f, p, b, n0, width, m, a + m * W, W, pf);
  }
  for (; m + 4 <= p.M; m += 4) avx_rows<4, V>(f, p, b, n0, width, m, a + m * W, W);
  switch (p.M - m) {
    case 3: avx_rows<3, 2>(f, p, b, n0, width, m, a + m * W, W); break;
    case 2: avx_rows<2, V>(f, p, b, n0, width, m, a + m * W, W); break;
    case 1: avx_rows<1, V>(f, p, b, n0, width, m, a + m * W, W); break;
  }
}
#endif

// One run: output columns [c0, c1) (multiples of 32: whole tiles, and a half tile at either
// end; run gives whole tiles) of every row, tile by tile and each tile block by block (one contiguous run of bytes),
// summed into acc (M, TILE) and stored into y when the tile is done. On AVX-512 four rows of x
// share each converted weight vector, the tile's 64 columns at once (three rows: in strips of
// 32 columns, so that the sums stay in registers).
template <class Fmt>
void run_unit(const Fmt& f, const Problem& p, int64_t c0, int64_t c1, float* acc) {
  const int64_t blocks = (p.K + QK - 1) / QK;
  for (int64_t n0 = c0; n0 < c1;) {
    const int64_t width = std::min(c1, (n0 / TILE + 1) * TILE) - n0;   // to the end of n0's tile
    std::memset(acc, 0, sizeof(float) * p.M * width);
    for (int64_t b = 0; b < blocks; ++b) {
#ifdef TLALOC_AVX512
      if (width == TILE) avx_block<4>(f, p, b, n0, width, acc, width);
      else avx_block<2>(f, p, b, n0, width, acc, width);
#else
      scalar_block(f, p, b, n0, width, 0, static_cast<int>(p.M), acc, width);
#endif
    }
    for (int64_t m = 0; m < p.M; ++m)
      for (int64_t t = 0; t < width; ++t) p.y[m * p.N + n0 + t] = acc[m * width + t] * channel_scale(f, n0 + t);
    n0 += width;
  }
}

// Splits N into tiles and runs them on this thread and on tasks of the helper threads (pool.h), each
// thread walking a contiguous range of the panels' bytes and then taking tiles the others have
// not reached (tlaloc_cpu::run_and_steal). No sum depends on the split (each output column is
// summed whole, in an order fixed by K), so it is chosen for speed. The threads meet on a tile
// boundary: splitting the last tile into halves, one per thread, balanced SmolLM2's 9-tile
// projections but made the float32 chain 5-7% slower (two threads reading alternate halves of
// the same rows; benchmarks/RESULTS.md, session 10). The sums of a tile (M rows) stay within
// L1 / L2 whatever M.
template <class Fmt>
void run(ffi::ThreadPool& pool, const Fmt& f, const Problem& p) {
  const int64_t tiles = p.N / TILE;
#ifdef TLALOC_ONE_THREAD
  const int64_t threads = 1;
#else
  const int64_t threads = tlaloc_cpu::threads_for(p, pool.num_threads());
#endif
  tlaloc_cpu::run_and_steal(tlaloc_cpu::helpers(pool), tiles, 1, 1, threads, [&f, &p](int64_t t0, int64_t t1) {
    thread_local std::vector<float> acc;
    acc.resize(p.M * TILE);
    run_unit(f, p, t0 * TILE, t1 * TILE, acc.data());
  });
}

ffi::Error check(const Problem& p, int64_t k_stored, int64_t n_stored, bool blocked) {
  if (p.N % TILE != 0)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul: the output width must be a multiple of 64");
  if (p.y_rows != p.M)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul: y's leading dimensions must hold x's rows (M)");
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
  run(pool, F32{w.typed_data()}, p);
  return ffi::Error::Success();
}

ffi::Error MatmulBF16(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::BF16> w,
                      ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = w.dimensions();
  if (auto e = check(p, d[0], d[1], false); e.failure()) return e;
  run(pool, BF16{reinterpret_cast<const uint16_t*>(w.untyped_data())}, p);
  return ffi::Error::Success();
}

// X8: the int8-activation twin (matmul_x8.cc), which reads q in k4 order and needs K a
// multiple of 32; the other arguments and their checks are the same.
template <bool X8>
ffi::Error MatmulI8Channel(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> q,
                           ffi::Buffer<ffi::F32> scale, ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = q.dimensions();
  if (auto e = check(p, d[0], d[1], X8); e.failure()) return e;
  if (scale.dimensions().size() != 1 || scale.dimensions()[0] != p.N)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul i8ch: scale must be (N,) float32, one per output column");
  if constexpr (X8) tlaloc_cpu::matmul_i8ch_x8(pool, p, q.typed_data(), scale.typed_data());
  else run(pool, I8Channel{q.typed_data(), scale.typed_data()}, p);
  return ffi::Error::Success();
}

// The group G = K / (scale's rows) is inferred with the scale's dtype: 32 rows per float16
// scale (GGUF's Q8_0) or 16 per float32 scale (Q6_K's d * sc); anything else is refused.
template <bool X8>
ffi::Error MatmulQ8_0(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::S8> q,
                      ffi::AnyBuffer scale, ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = q.dimensions();
  if (auto e = check(p, d[0], d[1], true); e.failure()) return e;
  auto ds = scale.dimensions();
  if (ds.size() != 2 || ds[1] != p.N || ds[0] < 1)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul q8_0: scale must be (K/32, N) float16 or (K/16, N) float32");
  const int64_t G = p.K / ds[0];
  const ffi::DataType ts = scale.element_type();
  if (G * ds[0] != p.K || !((G == 32 && ts == ffi::DataType::F16) || (G == 16 && ts == ffi::DataType::F32)))
    return ffi::Error::InvalidArgument("tlaloc cpu matmul q8_0: the group (K / scale rows) must be 32 with float16 "
                                       "scales or 16 with float32 scales");
  if constexpr (X8)
    tlaloc_cpu::matmul_q8_0_x8(pool, p, q.typed_data(), scale.untyped_data(), G == 16, G);
  else if (G == 32)
    run(pool, Q8_0{q.typed_data(), reinterpret_cast<const uint16_t*>(scale.untyped_data())}, p);
  else
    run(pool, Q8_16{q.typed_data(), static_cast<const float*>(scale.untyped_data())}, p);
  return ffi::Error::Success();
}

// The group G = K / (scale's rows) is inferred (32 or 64; anything else is refused), and the
// sides' dtype read at run time (float16 or float32, scale and offset alike).
template <bool X8>
ffi::Error MatmulQ4_1(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::U8> q,
                      ffi::AnyBuffer scale, ffi::AnyBuffer offset, ffi::ResultBuffer<ffi::F32> y) {
  Problem p = problem(x, y);
  auto d = q.dimensions();
  if (auto e = check(p, 2 * d[0], d[1], true); e.failure()) return e;
  auto ds = scale.dimensions(), dm = offset.dimensions();
  if (ds.size() != 2 || dm.size() != 2 || ds[0] != dm[0] || ds[1] != p.N || dm[1] != p.N || ds[0] < 1)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul q4_1: scale and offset must both be (K/32, N) or (K/64, N)");
  const int64_t G = p.K / ds[0];
  if ((G != 32 && G != 64) || G * ds[0] != p.K)
    return ffi::Error::InvalidArgument("tlaloc cpu matmul q4_1: the group (K / scale rows) must be 32 or 64");
  const ffi::DataType ts = scale.element_type();
  if (ts != offset.element_type() || (ts != ffi::DataType::F16 && ts != ffi::DataType::F32))
    return ffi::Error::InvalidArgument("tlaloc cpu matmul q4_1: scale and offset must both be float16 or both float32");
  if constexpr (X8) {
    tlaloc_cpu::matmul_q4_1_x8(pool, p, q.typed_data(), scale.untyped_data(), offset.untyped_data(),
                               ts == ffi::DataType::F32, G, ds[0]);
    return ffi::Error::Success();
  }
  const int64_t nb = p.K / QK;
  std::unique_ptr<float[]> xsum(new float[p.M * nb]);          // sum of x over each (row, block)
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t b = 0; b < nb; ++b) {
      float s = 0.f;
      for (int64_t j = 0; j < QK; ++j) s += p.x[m * p.K + b * QK + j];
      xsum[m * nb + b] = s;
    }
  Q4_1 f{q.typed_data(), scale.untyped_data(), offset.untyped_data(), xsum.get(),
         ts == ffi::DataType::F32, G / QK, ds[0]};
#if defined(TLALOC_AVX512) && defined(__AVX512BF16__)
  std::unique_ptr<uint16_t[]> xh(new uint16_t[p.M * p.K]), xl(new uint16_t[p.M * p.K]);   // x = hi + lo (+ e)
  for (int64_t i = 0; i < p.M * p.K; ++i) {
    uint16_t hi = tlaloc_cpu::f32_to_bf16(p.x[i]);
    if ((hi & 0x7FFF) == 0x7F80 && std::isfinite(p.x[i])) hi -= 1;   // |x| > bf16's largest: round down, not to inf
    xh[i] = hi;
    xl[i] = tlaloc_cpu::f32_to_bf16(p.x[i] - bf16_to_f32(hi));
  }
  f.xh = xh.get(), f.xl = xl.get();
#endif
  run(pool, f, p);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_f32_p64, MatmulF32,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_bf16_p64, MatmulBF16,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::BF16>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

// The arguments of the stored formats' targets, shared by the _p64 and _x8 twins.
static auto bind_i8ch() {
  return ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<ffi::F32>>().Arg<ffi::Buffer<ffi::S8>>()
      .Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>();
}
static auto bind_q8_0() {
  return ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<ffi::F32>>().Arg<ffi::Buffer<ffi::S8>>()
      .Arg<ffi::AnyBuffer>().Ret<ffi::Buffer<ffi::F32>>();
}
static auto bind_q4_1() {
  return ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().Arg<ffi::Buffer<ffi::F32>>().Arg<ffi::Buffer<ffi::U8>>()
      .Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Ret<ffi::Buffer<ffi::F32>>();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_i8ch_p64, MatmulI8Channel<false>, bind_i8ch());
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_i8ch_x8, MatmulI8Channel<true>, bind_i8ch());
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_q8_0_p64, MatmulQ8_0<false>, bind_q8_0());
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_q8_0_x8, MatmulQ8_0<true>, bind_q8_0());
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_q4_1_p64, MatmulQ4_1<false>, bind_q4_1());
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_matmul_q4_1_x8, MatmulQ4_1<true>, bind_q4_1());
