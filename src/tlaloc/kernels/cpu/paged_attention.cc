// Paged attention on the CPU, reading the KV pools in place: the ``paged_attention`` serving
// op (tlaloc/_prims/serving.py) as an XLA typed-FFI target, for float32 or bfloat16 pools.
//
//   q (B, T, H, E) f32; k_cache, v_cache (P, BS, K, E) f32 or bf16; block_tables (B, M) s32;
//   seq_lens (B,) s32; positions (B, T) s32; attributes scale (f32), window (s64, < 0: none)
//   -> out (B, T, H, E) f32.
//
// The ``_at`` targets take one more attribute, page_offset (s64): page p of a block table is
// page page_offset + p of the pools (pools that stack every layer's pages: layer l's start at
// l * P / L, so a program donates two pools rather than two per layer).
//
// Query t of row b (at position p = positions[b, t]) sees key j when j < seq_lens[b],
// j <= p and, with a window W, p - W < j; key j is slot j % BS of page
// block_tables[b, j / BS]. Query head h reads kv head h / (H / K). As the reference does,
// scores are scale * (q . k_j), probabilities exp(s_j - max s) / sum exp(s - max s), and
// the output sum_j prob_j v_j; a query that sees no key gets the mean of the values of all
// M * BS slots (the reference's softmax of equal masked scores). Only the pages a row
// uses are read, where they are: no gathered copy of the cache.
//
// Split softmax ("flash decoding": FlashAttention-2's split over keys, merged with the
// online-softmax rescaling of Milakov & Gimelshein 2018). Key positions are cut into chunks
// of CHUNK = 32 (chunk c: keys [32 c, 32 c + 32)); a unit of work is one (row, chunk) with
// a key some query of the row sees. A unit looks each of the chunk's pages up once,
// prefetches the chunk's keys and values into L2 and, for every query t of the row, kv
// head g and query head h of g's group, computes over the chunk's visible keys i the partial
//   m_c = max_i s_i,   l_c = sum_i exp(s_i - m_c),   a_c = sum_i exp(s_i - m_c) v_i,
// reading each key and value row once for up to HEADS_PER_PASS = 4 heads of the group (all
// of them for SmolLM2's 3). With AVX-512 a score is summed in 16 lanes (lane e mod 16) and
// l_c in 16 lanes (lane i mod 16), each then across its lanes in a fixed order; plain C++
// sums both in order of e or i. a_c is summed in key order. Then, on the calling thread,
// each (row, query, head) folds its chunks in increasing c: m = max(m, m_c),
// l = l exp(m_old - m) + l_c exp(m_c - m), likewise a; the output is a * (1 / l). Every float
// addition thus happens in an order fixed by the shapes, seq_lens and positions alone: the
// results do not depend on the thread count or on the other rows of the batch. The units
// go to the calling thread and tasks of the helper threads (pool.h) as in matmul.cc when the call
// has SPLIT_WORK multiply-adds or more; a smaller call (a short batch-1 decode) runs on the
// calling thread, which is faster than waking another. A query that sees no key is
// computed by the calling thread: the mean of its kv head's values, slot by slot.
//
// With AVX-512 (F and BW) scores are 16-lane dot products (masked for an E that is not a
// multiple of 16), exp is evaluated 16 scores at a time (exp16 below) and the values are
// accumulated 16 lanes at a time; with AVX2 and FMA the same in 8 lanes (exp8; a batch-1
// SmolLM2 decode step spent ~1 ms in the plain loops, 5.5% of its samples, session 20); without
// either, plain loops compute the same function.
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "common.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define TLALOC_AVX512 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__)
#define TLALOC_AVX2 1
#include <immintrin.h>
#endif

namespace ffi = xla::ffi;

namespace {

constexpr int64_t CHUNK = 32;           // keys per unit of work and per partial softmax
constexpr int64_t HEADS_PER_PASS = 4;   // query heads computed together against a key row
// Multiply-adds from which a call's units are shared with the pool. Measured on SmolLM2's
// shapes, 2 cores (benchmarks/attention_kernel.py): with the second core free, at 1 << 20
// batch 1 with 255 keys and batch 4 with 128 ran 1.4-1.6x slower on one thread, and at
// 1 << 16 batch 1-2 with 64-128 keys were no faster on two. With the second core busy
// (load average ~4) sharing costs more, a helper preempted mid-unit holding the call up:
// there 1 << 20 had the better medians.
constexpr int64_t SPLIT_WORK = 1 << 18;

// exp(r)'s Taylor coefficients, highest degree first (1/7! .. 1/0!), for exp16 and exp8 (Horner).
constexpr float EXP_TAYLOR[8] = {1.f / 5040, 1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};

template <class T> inline float value(const T* p, int64_t i);
template <> inline float value<float>(const float* p, int64_t i) { return p[i]; }
template <> inline float value<uint16_t>(const uint16_t* p, int64_t i) { return tlaloc_cpu::bf16_to_f32(p[i]); }

struct Shape {
  int64_t B, T, H, E, P, BS, K, M;
};

// chunk<NH>(q, krow, vrow, n, E, scale, part): one chunk of n <= CHUNK keys against NH
// query heads that share a kv head: q[h] the query vectors, krow[i] / vrow[i] the key /
// value vectors of the chunk's i-th visible key. Writes part[h] = {m, l, a[0..E)}: the
// chunk's max score, sum of exp(score - m) and sum of exp(score - m) v_i (summed in the
// orders the header comment gives).
#ifdef TLALOC_AVX512
inline __mmask16 lanes(int64_t e, int64_t E) {       // the lanes of [e, e + 16) below E
  return E - e >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (E - e)) - 1);
}
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const uint16_t* p, __mmask16 m) {   // bf16 -> f32 is exact: the high half
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// exp(x) for 16 x <= 0 at once: 2^n exp(r) with n = round(x / ln 2), r = x - n ln 2 in
// [-ln2 / 2, ln2 / 2] (ln 2 in two parts so n ln 2 is exact enough), exp(r) by its Taylor
// polynomial to degree 7 (remainder < 6e-9 relative, below float32 rounding), 2^n by
// scalef (exact, and underflows to 0 like exp). x is clamped at -104 (exp < the least
// subnormal) so that n stays small; a NaN passes through. 1.2-1.3x faster at batch 1 than
// std::exp on the scores one by one.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
  __m512 p = _mm512_set1_ps(EXP_TAYLOR[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_TAYLOR[i]));
  return _mm512_scalef_ps(p, n);
}

template <int NH, class T>
void chunk(const float* const q[], const T* const krow[], const T* const vrow[], int64_t n, int64_t E,
           float scale, float* const part[]) {
  alignas(64) float score[NH][CHUNK];
  for (int64_t i = 0; i < n; ++i) {                  // the key row is read once for the NH heads
    __m512 dot[NH];
    for (int h = 0; h < NH; ++h) dot[h] = _mm512_setzero_ps();
    for (int64_t e = 0; e < E; e += 16) {
      const __mmask16 m = lanes(e, E);
      const __m512 k = load16(krow[i] + e, m);
      for (int h = 0; h < NH; ++h) dot[h] = _mm512_fmadd_ps(load16(q[h] + e, m), k, dot[h]);
    }
    for (int h = 0; h < NH; ++h) score[h][i] = _mm512_reduce_add_ps(dot[h]) * scale;
  }
  for (int h = 0; h < NH; ++h) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16)
      mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, lanes(i, n), score[h] + i));
    const float top = _mm512_reduce_max_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = lanes(i, n);
      const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, score[h] + i), _mm512_set1_ps(top));
      const __m512 w = _mm512_maskz_mov_ps(m, exp16(x));     // lanes past n: 0, out of the sum
      _mm512_store_ps(score[h] + i, w);
      sum = _mm512_add_ps(sum, w);
    }
    part[h][0] = top;
    part[h][1] = _mm512_reduce_add_ps(sum);
  }
  for (int64_t e = 0; e < E; e += 16) {              // 16 output lanes of every head at a time
    const __mmask16 m = lanes(e, E);
    __m512 acc[NH];
    for (int h = 0; h < NH; ++h) acc[h] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m512 v = load16(vrow[i] + e, m);
      for (int h = 0; h < NH; ++h) acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(score[h][i]), v, acc[h]);
    }
    for (int h = 0; h < NH; ++h) _mm512_mask_storeu_ps(part[h] + 2 + e, m, acc[h]);
  }
}
#elif defined(TLALOC_AVX2)
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {             // bf16 -> f32 is exact: the high half
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// The 8 lanes' sum in a fixed order: (l0 + l4) + (l2 + l6) ... as the shuffles below pair them.
inline float sum8(__m256 v) {
  const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

// exp(x) for 8 x <= 0 at once: exp16 of the AVX-512 path (the same reduction and polynomial),
// with 2^n, n in [-151, 0], as the product of two normal powers of two 2^(n - n/2) 2^(n/2)
// (AVX2 has no scalef), so that a result below float32's normal range rounds as one product.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-104.f), x);      // a NaN x (the second operand) passes through
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);
  __m256 p = _mm256_set1_ps(EXP_TAYLOR[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_TAYLOR[i]));
  const __m256i ni = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(ni, 1), rest = _mm256_sub_epi32(ni, half);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, a), b);
}

// As the AVX-512 chunk, 8 lanes: a score is summed in 8 lanes (lane e mod 8, then sum8) plus
// E's tail past a multiple of 8 in order of e; l_c in 8 lanes (lane i mod 8) then sum8; a_c in
// key order, 8 output lanes at a time (the tail of E one by one).
template <int NH, class T>
void chunk(const float* const q[], const T* const krow[], const T* const vrow[], int64_t n, int64_t E,
           float scale, float* const part[]) {
  alignas(32) float score[NH][CHUNK];
  const int64_t E8 = E / 8 * 8;
  for (int64_t i = 0; i < n; ++i) {                  // the key row is read once for the NH heads
    __m256 dot[NH];
    for (int h = 0; h < NH; ++h) dot[h] = _mm256_setzero_ps();
    for (int64_t e = 0; e < E8; e += 8) {
      const __m256 k = load8(krow[i] + e);
      for (int h = 0; h < NH; ++h) dot[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q[h] + e), k, dot[h]);
    }
    for (int h = 0; h < NH; ++h) {
      float d = sum8(dot[h]);
      for (int64_t e = E8; e < E; ++e) d += q[h][e] * value(krow[i], e);
      score[h][i] = d * scale;
    }
  }
  const int64_t n8 = n / 8 * 8;
  for (int h = 0; h < NH; ++h) {
    float top = -INFINITY;
    for (int64_t i = 0; i < n; ++i) top = std::max(top, score[h][i]);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t i = 0; i < n8; i += 8) {
      const __m256 w = exp8(_mm256_sub_ps(_mm256_load_ps(score[h] + i), _mm256_set1_ps(top)));
      _mm256_store_ps(score[h] + i, w);
      sum = _mm256_add_ps(sum, w);
    }
    float l = sum8(sum);
    if (n8 < n) {                                    // the last n - n8 keys: lanes past n are 0
      alignas(32) float tail[8] = {};
      for (int64_t i = n8; i < n; ++i) tail[i - n8] = score[h][i] - top;
      alignas(32) float w[8];
      _mm256_store_ps(w, exp8(_mm256_load_ps(tail)));
      for (int64_t i = n8; i < n; ++i) score[h][i] = w[i - n8], l += w[i - n8];
    }
    part[h][0] = top;
    part[h][1] = l;
  }
  for (int64_t e = 0; e < E8; e += 8) {              // 8 output lanes of every head at a time
    __m256 acc[NH];
    for (int h = 0; h < NH; ++h) acc[h] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m256 v = load8(vrow[i] + e);
      for (int h = 0; h < NH; ++h) acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(score[h][i]), v, acc[h]);
    }
    for (int h = 0; h < NH; ++h) _mm256_storeu_ps(part[h] + 2 + e, acc[h]);
  }
  for (int64_t e = E8; e < E; ++e)
    for (int h = 0; h < NH; ++h) {
      float a = 0.f;
      for (int64_t i = 0; i < n; ++i) a = std::fma(score[h][i], value(vrow[i], e), a);
      part[h][2 + e] = a;
    }
}
#else
template <int NH, class T>
void chunk(const float* const q[], const T* const krow[], const T* const vrow[], int64_t n, int64_t E,
           float scale, float* const part[]) {
  float score[NH][CHUNK];
  for (int64_t i = 0; i < n; ++i) {                  // the key row is read once for the NH heads
    float dot[NH] = {};
    for (int64_t e = 0; e < E; ++e) {
      const float k = value(krow[i], e);
      for (int h = 0; h < NH; ++h) dot[h] += q[h][e] * k;
    }
    for (int h = 0; h < NH; ++h) score[h][i] = dot[h] * scale;
  }
  for (int h = 0; h < NH; ++h) {
    float top = -INFINITY, sum = 0.f;
    for (int64_t i = 0; i < n; ++i) top = std::max(top, score[h][i]);
    for (int64_t i = 0; i < n; ++i) {
      score[h][i] = std::exp(score[h][i] - top);
      sum += score[h][i];
    }
    part[h][0] = top;
    part[h][1] = sum;
    for (int64_t e = 0; e < E; ++e) part[h][2 + e] = 0.f;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < E; ++e) {
      const float v = value(vrow[i], e);
      for (int h = 0; h < NH; ++h) part[h][2 + e] += score[h][i] * v;
    }
}
#endif

// A request for p's cache line into L2. GCC 12 drops __builtin_prefetch (and _mm_prefetch,
// the same builtin) from the loop in Attention::prefetch once inlined: none were left in the
// library. An asm statement stays.
inline void prefetch_l2(const char* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht1 %0" : : "m"(*p));
#else
  __builtin_prefetch(p, 0, 2);
#endif
}

// The floats of one call's partial results, kept per calling thread between calls (a fresh
// allocation of this size would be mapped and faulted in at every call).
float* scratch(int64_t floats) {
  thread_local std::unique_ptr<float[]> buffer;
  thread_local int64_t size = 0;
  if (size < floats) {
    buffer.reset(new float[floats]);
    size = floats;
  }
  return buffer.get();
}

template <class T>
struct Attention {
  Shape s;
  const float* q;
  const T *kc, *vc;
  const int32_t *tables, *lens, *positions;
  float scale;
  int64_t window;
  float* out;
  int64_t page_offset;  // the pools' page of a block table's page 0

  int64_t S() const { return s.M * s.BS; }
  // the keys [lo, hi) query t of row b sees (lo >= hi: none)
  void keys(int64_t b, int64_t t, int64_t& lo, int64_t& hi) const {
    const int64_t p = positions[b * s.T + t];
    hi = std::min<int64_t>(std::min<int64_t>(lens[b], p + 1), S());
    lo = window >= 0 ? std::max<int64_t>(0, p - window + 1) : 0;
  }
  // element offset of slot j's vector of kv head g in row b's pages
  int64_t slot(int64_t b, int64_t j, int64_t g) const {
    return (((page_offset + tables[b * s.M + j / s.BS]) * s.BS + j % s.BS) * s.K + g) * s.E;
  }
  // where chunk c (unit u) of query t, head h keeps {m, l, a[E]}
  float* partial(float* parts, int64_t u, int64_t t, int64_t h) const {
    return parts + ((u * s.T + t) * s.H + h) * (s.E + 2);
  }

  // Asks for the n slots' keys and values (every kv head: they are adjacent) into L2 before
  // the first is read: the hardware prefetchers do not get far enough ahead in 32 rows at a
  // stride of K * E that start on scattered pages (about 10% faster at batch 16, 255 keys).
  void prefetch(const int64_t offset[], int64_t n) const {
    const int64_t bytes = s.K * s.E * sizeof(T);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t x = 0; x < bytes; x += 64) {
        prefetch_l2(reinterpret_cast<const char*>(kc + offset[i]) + x);
        prefetch_l2(reinterpret_cast<const char*>(vc + offset[i]) + x);
      }
  }

  // Unit u: chunk c of row b, every query of the row, every head.
  void unit(float* parts, int64_t u, int64_t b, int64_t c) const {
    const int64_t c0 = c * CHUNK, c1 = std::min(c0 + CHUNK, S()), G = s.H / s.K;
    int64_t offset[CHUNK];                           // slot j's vector of kv head 0, j in [c0, c1)
    for (int64_t j = c0; j < c1;) {                  // a page lookup per page, not per key
      const int64_t first = slot(b, j, 0), end = std::min(c1, (j / s.BS + 1) * s.BS);
      for (int64_t i = 0; j < end; ++i, ++j) offset[j - c0] = first + i * s.K * s.E;
    }
    prefetch(offset, c1 - c0);
    for (int64_t t = 0; t < s.T; ++t) {
      int64_t lo, hi;
      keys(b, t, lo, hi);
      const int64_t j0 = std::max(lo, c0), j1 = std::min(hi, c1);
      if (j0 >= j1) continue;
      for (int64_t g = 0; g < s.K; ++g) {
        const T* krow[CHUNK];
        const T* vrow[CHUNK];
        for (int64_t j = j0; j < j1; ++j) {
          krow[j - j0] = kc + offset[j - c0] + g * s.E;
          vrow[j - j0] = vc + offset[j - c0] + g * s.E;
        }
        for (int64_t h0 = g * G; h0 < (g + 1) * G; h0 += HEADS_PER_PASS) {
          const float* qh[HEADS_PER_PASS];
          float* ph[HEADS_PER_PASS];
          const int64_t nh = std::min(HEADS_PER_PASS, (g + 1) * G - h0);
          for (int64_t h = 0; h < nh; ++h) {
            qh[h] = q + ((b * s.T + t) * s.H + h0 + h) * s.E;
            ph[h] = partial(parts, u, t, h0 + h);
          }
          static_assert(HEADS_PER_PASS == 4, "one case per head count below");
          switch (nh) {
            case 1: chunk<1>(qh, krow, vrow, j1 - j0, s.E, scale, ph); break;
            case 2: chunk<2>(qh, krow, vrow, j1 - j0, s.E, scale, ph); break;
            case 3: chunk<3>(qh, krow, vrow, j1 - j0, s.E, scale, ph); break;
            default: chunk<4>(qh, krow, vrow, j1 - j0, s.E, scale, ph); break;
          }
        }
      }
    }
  }

  // Query t of row b, head h: its chunks' partials folded in increasing chunk order.
  void merge(float* parts, int64_t first_unit, int64_t first_chunk, int64_t b, int64_t t, int64_t h) const {
    float* oh = out + ((b * s.T + t) * s.H + h) * s.E;
    int64_t lo, hi;
    keys(b, t, lo, hi);
    if (lo >= hi) {                                  // sees no key: mean of all slots' values
      for (int64_t e = 0; e < s.E; ++e) oh[e] = 0.f;
      for (int64_t j = 0; j < S(); ++j) {
        const T* v = vc + slot(b, j, h / (s.H / s.K));
        for (int64_t e = 0; e < s.E; ++e) oh[e] += value(v, e) / static_cast<float>(S());
      }
      return;
    }
    const int64_t c_lo = lo / CHUNK, c_hi = (hi - 1) / CHUNK;
    const float* p = partial(parts, first_unit + c_lo - first_chunk, t, h);
    float m = p[0], l = p[1];
    for (int64_t e = 0; e < s.E; ++e) oh[e] = p[2 + e];
    for (int64_t c = c_lo + 1; c <= c_hi; ++c) {
      p = partial(parts, first_unit + c - first_chunk, t, h);
      const float top = std::max(m, p[0]), old = std::exp(m - top), now = std::exp(p[0] - top);
      l = l * old + p[1] * now;
      for (int64_t e = 0; e < s.E; ++e) oh[e] = oh[e] * old + p[2 + e] * now;
      m = top;
    }
    const float inverse = 1.f / l;
    for (int64_t e = 0; e < s.E; ++e) oh[e] *= inverse;
  }

  void run(ffi::ThreadPool& pool) const {
    // Row b's units are chunks [first_chunk[b], first_chunk[b] + count) of the keys its
    // queries see; they are units [first_unit[b], first_unit[b + 1]).
    std::vector<int64_t> first_chunk(s.B, 0), first_unit(s.B + 1, 0);
    int64_t work = 0;                                // multiply-adds: a dot and an axpy per key and head
    for (int64_t b = 0; b < s.B; ++b) {
      int64_t row_lo = S(), row_hi = 0;
      for (int64_t t = 0; t < s.T; ++t) {
        int64_t lo, hi;
        keys(b, t, lo, hi);
        if (lo >= hi) continue;
        row_lo = std::min(row_lo, lo);
        row_hi = std::max(row_hi, hi);
        work += 2 * (hi - lo) * s.H * s.E;
      }
      const int64_t count = row_lo < row_hi ? (row_hi - 1) / CHUNK - row_lo / CHUNK + 1 : 0;
      first_chunk[b] = row_lo < row_hi ? row_lo / CHUNK : 0;
      first_unit[b + 1] = first_unit[b] + count;
    }
    const int64_t units = first_unit[s.B];
    std::vector<int32_t> unit_row(units);
    for (int64_t b = 0; b < s.B; ++b)
      std::fill(unit_row.begin() + first_unit[b], unit_row.begin() + first_unit[b + 1], static_cast<int32_t>(b));
    float* parts = scratch(units * s.T * s.H * (s.E + 2));
    tlaloc_cpu::run_units(tlaloc_cpu::helpers(pool), units, work < SPLIT_WORK ? 1 : units, [&](int64_t u) {
      const int64_t b = unit_row[u];
      unit(parts, u, b, first_chunk[b] + u - first_unit[b]);
    });
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t t = 0; t < s.T; ++t)
        for (int64_t h = 0; h < s.H; ++h) merge(parts, first_unit[b], first_chunk[b], b, t, h);
  }
};

template <ffi::DataType KV>
ffi::Error PagedAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<KV> k_cache,
                          ffi::Buffer<KV> v_cache, ffi::Buffer<ffi::S32> block_tables,
                          ffi::Buffer<ffi::S32> seq_lens, ffi::Buffer<ffi::S32> positions,
                          ffi::ResultBuffer<ffi::F32> out, float scale, int64_t window, int64_t page_offset) {
  auto qd = q.dimensions(), kd = k_cache.dimensions(), td = block_tables.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || td.size() != 2)
    return ffi::Error::InvalidArgument("tlaloc cpu paged attention: q, the pools and block_tables have the wrong rank");
  Shape s{qd[0], qd[1], qd[2], qd[3], kd[0], kd[1], kd[2], td[1]};
  if (kd[3] != s.E || s.K <= 0 || s.H % s.K != 0)
    return ffi::Error::InvalidArgument("tlaloc cpu paged attention: head_dim or head counts do not fit");
  if (page_offset < 0 || page_offset >= s.P)
    return ffi::Error::InvalidArgument("tlaloc cpu paged attention: page_offset must be a page of the pools");
  using T = std::conditional_t<KV == ffi::F32, float, uint16_t>;
  const Attention<T> call{s, q.typed_data(), reinterpret_cast<const T*>(k_cache.untyped_data()),
                          reinterpret_cast<const T*>(v_cache.untyped_data()), block_tables.typed_data(),
                          seq_lens.typed_data(), positions.typed_data(), scale, window, out->typed_data(),
                          page_offset};
  call.run(pool);
  return ffi::Error::Success();
}

// The targets without page_offset (the programs of one pool per layer)
template <ffi::DataType KV>
ffi::Error PagedAttentionAt0(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<KV> k_cache,
                             ffi::Buffer<KV> v_cache, ffi::Buffer<ffi::S32> block_tables,
                             ffi::Buffer<ffi::S32> seq_lens, ffi::Buffer<ffi::S32> positions,
                             ffi::ResultBuffer<ffi::F32> out, float scale, int64_t window) {
  return PagedAttention<KV>(pool, q, k_cache, v_cache, block_tables, seq_lens, positions, out, scale, window, 0);
}

}  // namespace

// q, k_cache, v_cache, block_tables, seq_lens, positions -> out; scale, window
#define TLALOC_PAGED_ATTENTION_BINDING(KV)                                                      \
  ffi::Ffi::Bind()                                                                              \
      .Ctx<ffi::ThreadPool>()                                                                   \
      .Arg<ffi::Buffer<ffi::F32>>()                                                             \
      .Arg<ffi::Buffer<KV>>()                                                                   \
      .Arg<ffi::Buffer<KV>>()                                                                   \
      .Arg<ffi::Buffer<ffi::S32>>()                                                             \
      .Arg<ffi::Buffer<ffi::S32>>()                                                             \
      .Arg<ffi::Buffer<ffi::S32>>()                                                             \
      .Ret<ffi::Buffer<ffi::F32>>()                                                             \
      .Attr<float>("scale")                                                                     \
      .Attr<int64_t>("window")

XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_paged_attention_f32, PagedAttentionAt0<ffi::F32>,
                              TLALOC_PAGED_ATTENTION_BINDING(ffi::F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_paged_attention_bf16, PagedAttentionAt0<ffi::BF16>,
                              TLALOC_PAGED_ATTENTION_BINDING(ffi::BF16));
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_paged_attention_f32_at, PagedAttention<ffi::F32>,
                              TLALOC_PAGED_ATTENTION_BINDING(ffi::F32).Attr<int64_t>("page_offset"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(tlaloc_cpu_paged_attention_bf16_at, PagedAttention<ffi::BF16>,
                              TLALOC_PAGED_ATTENTION_BINDING(ffi::BF16).Attr<int64_t>("page_offset"));
