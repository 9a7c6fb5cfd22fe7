// Paged attention on the CPU, reading the KV pools in place: the ``paged_attention`` serving
// op (tlaloc/_prims/serving.py) as an XLA typed-FFI target, for float32 or bfloat16 pools.
//
//   q (B, T, H, E) f32; k_cache, v_cache (P, BS, K, E) f32 or bf16; block_tables (B, M) s32;
//   seq_lens (B,) s32; positions (B, T) s32; attributes scale (f32), window (s64, < 0: none)
//   -> out (B, T, H, E) f32.
//
// Query t of row b (at position p = positions[b, t]) sees key j when j < seq_lens[b],
// j <= p and, with a window W, p - W < j; key j is slot j % BS of page
// block_tables[b, j / BS]. Query head h reads kv head h / (H / K). As the reference does,
// scores are scale * (q . k_j), probabilities exp(s_j - max s) / sum exp(s - max s), and
// the output sum_j prob_j v_j; a query that sees no key gets the mean of the values of all
// M * BS slots (the reference's softmax of equal masked scores). Only the pages a row
// uses are read, where they are: no gathered copy of the cache.
//
// Each (row, kv head) is computed by one thread; rows x kv heads are shared between the
// calling thread and tasks of XLA's intra-op pool as in matmul.cc.
#include <cmath>
#include <type_traits>
#include <vector>

#include "common.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t LANES = 16;

template <class T> inline float value(const T* p, int64_t i);
template <> inline float value<float>(const float* p, int64_t i) { return p[i]; }
template <> inline float value<uint16_t>(const uint16_t* p, int64_t i) { return tlaloc_cpu::bf16_to_f32(p[i]); }

struct Shape {
  int64_t B, T, H, E, P, BS, K, M;
};

// q . k in 16 partial sums (lanes k mod 16), then the lanes in order: vectorised without
// reassociating float additions differently from run to run.
template <class T>
inline float dot(const float* q, const T* k, int64_t E) {
  float lanes[LANES] = {0};
  int64_t e = 0;
  for (; e + LANES <= E; e += LANES)
    for (int64_t l = 0; l < LANES; ++l) lanes[l] += q[e + l] * value(k, e + l);
  for (int64_t l = 0; e + l < E; ++l) lanes[l] += q[e + l] * value(k, e + l);
  float total = 0.f;
  for (int64_t l = 0; l < LANES; ++l) total += lanes[l];
  return total;
}

template <class T>
void attend_one(const Shape& s, const float* q, const T* kc, const T* vc, const int32_t* tables,
                const int32_t* lens, const int32_t* positions, float scale, int64_t window, int64_t b, int64_t g,
                float* out, std::vector<float>& scores) {
  const int64_t G = s.H / s.K, S = s.M * s.BS;
  const int32_t* table = tables + b * s.M;
  auto slot = [&](int64_t j) -> int64_t {        // element offset of key j's (kv head g) vector
    return ((static_cast<int64_t>(table[j / s.BS]) * s.BS + j % s.BS) * s.K + g) * s.E;
  };
  for (int64_t t = 0; t < s.T; ++t) {
    const int64_t p = positions[b * s.T + t];
    int64_t hi = std::min<int64_t>(lens[b], p + 1);
    int64_t lo = window >= 0 ? std::max<int64_t>(0, p - window + 1) : 0;
    hi = std::min(hi, S);
    for (int64_t h = g * G; h < (g + 1) * G; ++h) {
      const float* qh = q + ((b * s.T + t) * s.H + h) * s.E;
      float* oh = out + ((b * s.T + t) * s.H + h) * s.E;
      for (int64_t e = 0; e < s.E; ++e) oh[e] = 0.f;
      if (lo >= hi) {                               // sees no key: mean of all slots' values
        for (int64_t j = 0; j < S; ++j) {
          const T* v = vc + slot(j);
          for (int64_t e = 0; e < s.E; ++e) oh[e] += value(v, e) / static_cast<float>(S);
        }
        continue;
      }
      scores.resize(hi - lo);
      float mx = -INFINITY;
      for (int64_t j = lo; j < hi; ++j) {
        const float sc = dot(qh, kc + slot(j), s.E) * scale;
        scores[j - lo] = sc;
        mx = std::max(mx, sc);
      }
      float sum = 0.f;
      for (int64_t j = lo; j < hi; ++j) {
        scores[j - lo] = std::exp(scores[j - lo] - mx);
        sum += scores[j - lo];
      }
      for (int64_t j = lo; j < hi; ++j) {
        const float prob = scores[j - lo] / sum;
        const T* v = vc + slot(j);
        for (int64_t e = 0; e < s.E; ++e) oh[e] += prob * value(v, e);
      }
    }
  }
}

template <class T>
void run(ffi::ThreadPool& pool, const Shape& s, const float* q, const T* kc, const T* vc, const int32_t* tables,
         const int32_t* lens, const int32_t* positions, float scale, int64_t window, float* out) {
  const int64_t units = s.B * s.K;
  // one (row, kv head) is ~T * S * E * 2 * G multiply-adds: hand out work only when it pays
  const int64_t work_size = s.T * s.M * s.BS * s.E * (s.H / s.K) * units;
  tlaloc_cpu::run_units(pool, units, work_size < (1 << 18) ? 1 : units, [&](int64_t u) {
    thread_local std::vector<float> scores;
    attend_one(s, q, kc, vc, tables, lens, positions, scale, window, u / s.K, u % s.K, out, scores);
  });
}

template <ffi::DataType KV>
ffi::Error PagedAttention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<KV> k_cache,
                          ffi::Buffer<KV> v_cache, ffi::Buffer<ffi::S32> block_tables,
                          ffi::Buffer<ffi::S32> seq_lens, ffi::Buffer<ffi::S32> positions,
                          ffi::ResultBuffer<ffi::F32> out, float scale, int64_t window) {
  auto qd = q.dimensions(), kd = k_cache.dimensions(), td = block_tables.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || td.size() != 2)
    return ffi::Error::InvalidArgument("tlaloc cpu paged attention: q, the pools and block_tables have the wrong rank");
  Shape s{qd[0], qd[1], qd[2], qd[3], kd[0], kd[1], kd[2], td[1]};
  if (kd[3] != s.E || s.H % s.K != 0)
    return ffi::Error::InvalidArgument("tlaloc cpu paged attention: head_dim or head counts do not fit");
  using T = std::conditional_t<KV == ffi::F32, float, uint16_t>;
  run<T>(pool, s, q.typed_data(), reinterpret_cast<const T*>(k_cache.untyped_data()),
         reinterpret_cast<const T*>(v_cache.untyped_data()), block_tables.typed_data(), seq_lens.typed_data(),
         positions.typed_data(), scale, window, out->typed_data());
  return ffi::Error::Success();
}

}  // namespace

#define TLALOC_PAGED_ATTENTION(NAME, KV)                                                        \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME, PagedAttention<KV>,                                       \
                                ffi::Ffi::Bind()                                                \
                                    .Ctx<ffi::ThreadPool>()                                     \
                                    .Arg<ffi::Buffer<ffi::F32>>()                               \
                                    .Arg<ffi::Buffer<KV>>()                                     \
                                    .Arg<ffi::Buffer<KV>>()                                     \
                                    .Arg<ffi::Buffer<ffi::S32>>()                               \
                                    .Arg<ffi::Buffer<ffi::S32>>()                               \
                                    .Arg<ffi::Buffer<ffi::S32>>()                               \
                                    .Ret<ffi::Buffer<ffi::F32>>()                               \
                                    .Attr<float>("scale")                                       \
                                    .Attr<int64_t>("window"))

TLALOC_PAGED_ATTENTION(tlaloc_cpu_paged_attention_f32, ffi::F32);
TLALOC_PAGED_ATTENTION(tlaloc_cpu_paged_attention_bf16, ffi::BF16);
