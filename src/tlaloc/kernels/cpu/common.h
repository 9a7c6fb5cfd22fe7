// What the CPU kernels of this directory share: half-precision conversions and the way work
// is split between the calling thread and a pool's threads (pool.h's HelperPool in the kernels).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "pool.h"
#include "xla/ffi/api/ffi.h"

namespace tlaloc_cpu {

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

// float32 -> bfloat16 bits, rounded to nearest even (a NaN stays a quiet NaN).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// y (M, N) float32 = x (M, K) float32 times a weight: M is the product of x's leading dimensions.
struct Problem {
  const float* x;    // (M, K)
  int64_t M, K, N;
  float* y;          // (M, N)
  int64_t y_rows = 0;  // the product of y's leading dimensions, which the targets check equals M
};

inline Problem problem(xla::ffi::Buffer<xla::ffi::F32>& x, xla::ffi::ResultBuffer<xla::ffi::F32>& y) {
  auto dims = x.dimensions();
  int64_t M = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) M *= dims[i];
  const int64_t K = dims.size() ? dims[dims.size() - 1] : 1;
  auto ydims = y->dimensions();
  const int64_t N = ydims.size() ? ydims[ydims.size() - 1] : 1;
  int64_t y_rows = 1;
  for (size_t i = 0; i + 1 < ydims.size(); ++i) y_rows *= ydims[i];
  return Problem{x.typed_data(), M, K, N, y->typed_data(), y_rows};
}

// The threads a product of p's size is split between: the pool's, or the calling thread alone
// below SHARE_MACS multiply-adds, where waking a helper (5 to over 200 microseconds when it
// sleeps, pool.h) costs more than the work (~5 microseconds on one core) and the woken helper
// then polls for SPIN_NS, taking CPU from whatever else runs: the tests' tiny models
// (hidden size 64) ran every product so, two xdist workers on two cores (session 21). SmolLM2's
// smallest product at one row, 576 x 960, is above it.
constexpr int64_t SHARE_MACS = 1 << 18;
inline int64_t threads_for(const Problem& p, int64_t threads) { return p.M * p.K * p.N < SHARE_MACS ? 1 : threads; }

// Runs unit(u) for every u in [0, units): the calling thread and up to threads - 1 tasks
// scheduled on the pool claim units from a shared counter. A task that starts
// after every unit is claimed returns at once, touching only the counter (kept alive by the
// shared_ptr), so the caller never waits for a task that has not started: it waits only for
// units being computed, and until then its frame (all that unit reads) is alive.
template <class Pool, class Unit>
void run_units(Pool& pool, int64_t units, int64_t threads, Unit unit) {
  struct Shared {
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };
  auto shared = std::make_shared<Shared>();
  auto work = [shared, units, unit]() {
    for (;;) {
      const int64_t u = shared->next.fetch_add(1, std::memory_order_relaxed);
      if (u >= units) return;
      unit(u);
      shared->done.fetch_add(1, std::memory_order_release);
    }
  };
  const int64_t helpers = std::min<int64_t>(std::min<int64_t>(threads, pool.num_threads()), units) - 1;
  for (int64_t h = 0; h < helpers; ++h) pool.Schedule([work]() { work(); });
  work();
  while (shared->done.load(std::memory_order_acquire) < units) std::this_thread::yield();
}

// Runs piece(i0, i1) over every item of [0, items), on the calling thread and up to threads - 1
// tasks scheduled on the pool. The items are cut into one range per thread (T in
// all). Each thread first walks a range of its own from its left end, so that it reads one
// contiguous stretch of the weights, forward (the hardware prefetchers follow it) as a static
// split would; when its range is done it takes runs from the right ends of the others', walking
// towards their owners, until nothing is left. A claim takes half of what is left of a range (a
// multiple of `step` items, at least `step`): few claims (each an atomic on a cache line the
// threads share; with a claim per panel, Q4_1's short panels ran ~9% slower at batch 1), shrinking
// towards the meeting point, where runs are at most `fine` items (no more than `step` left). A task that starts late (XLA's
// pool wakes a sleeping thread in 5 to over 200 microseconds), or runs slower, thus leaves its
// range's tail to the others instead of leaving the caller to wait for it at the end, as fixed
// shares did (1.0-1.8 ms of an 18 ms float32 decode step; benchmarks/RESULTS.md, session 10).
// A task that starts after every item is claimed returns at once, touching only the shared
// state (kept alive by the shared_ptr), and the caller waits only for claimed runs being
// computed; until then its frame (all that piece reads) is alive.
// Pool: pool.h's HelperPool, or anything with its num_threads() and Schedule(task).
template <class Pool, class Piece>
void run_and_steal(Pool& pool, int64_t items, int64_t step, int64_t fine, int64_t threads, Piece piece) {
  if (items <= 0) return;
  const int64_t runs = (items + step - 1) / step;
  const int64_t T = std::max<int64_t>(1, std::min<int64_t>(std::min<int64_t>(threads, pool.num_threads()), runs));
  struct Shared {
    std::atomic<int64_t> arrived{0}, done{0};
    std::unique_ptr<std::atomic<uint64_t>[]> ends;   // per range: its unclaimed [lo, hi) as lo | hi << 32
  };
  auto shared = std::make_shared<Shared>();
  shared->ends.reset(new std::atomic<uint64_t>[T]);
  for (int64_t g = 0; g < T; ++g) {                    // boundaries on multiples of step: whole runs
    const uint64_t lo = items * g / T / step * step, hi = g + 1 == T ? items : items * (g + 1) / T / step * step;
    shared->ends[g].store(lo | hi << 32, std::memory_order_relaxed);
  }
  auto work = [shared, step, fine, T, piece]() {
    const int64_t slot = shared->arrived.fetch_add(1, std::memory_order_relaxed);
    for (int64_t k = 0; k < T; ++k) {
      std::atomic<uint64_t>& ends = shared->ends[(slot + k) % T];
      const bool right = k > 0;                            // another thread's range: from its far end
      uint64_t cur = ends.load(std::memory_order_relaxed);
      for (;;) {
        const int64_t lo = static_cast<int64_t>(cur & 0xffffffffu), hi = static_cast<int64_t>(cur >> 32);
        if (lo >= hi) break;
        const int64_t n = hi - lo > step ? std::max(step, (hi - lo) / 2 / step * step) : std::min(fine, hi - lo);
        const int64_t i0 = right ? hi - n : lo;
        const uint64_t next = right ? (static_cast<uint64_t>(lo) | static_cast<uint64_t>(hi - n) << 32)
                                    : (static_cast<uint64_t>(lo + n) | static_cast<uint64_t>(hi) << 32);
        if (!ends.compare_exchange_weak(cur, next, std::memory_order_relaxed)) continue;   // cur reloaded
        piece(i0, i0 + n);
        shared->done.fetch_add(n, std::memory_order_release);
        cur = ends.load(std::memory_order_relaxed);
      }
    }
  };
  for (int64_t h = 0; h + 1 < T; ++h) pool.Schedule([work]() { work(); });
  work();
  while (shared->done.load(std::memory_order_acquire) < items) std::this_thread::yield();
}

}  // namespace tlaloc_cpu
