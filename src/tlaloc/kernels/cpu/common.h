// What the CPU kernels of this directory share: half-precision conversions and the way work
// is split between the calling thread and XLA's intra-op thread pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

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

// y (M, N) float32 = x (M, K) float32 times a weight: M is the product of x's leading dimensions.
struct Problem {
  const float* x;    // (M, K)
  int64_t M, K, N;
  float* y;          // (M, N)
};

inline Problem problem(xla::ffi::Buffer<xla::ffi::F32>& x, xla::ffi::ResultBuffer<xla::ffi::F32>& y) {
  auto dims = x.dimensions();
  int64_t M = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) M *= dims[i];
  const int64_t K = dims.size() ? dims[dims.size() - 1] : 1;
  auto ydims = y->dimensions();
  const int64_t N = ydims.size() ? ydims[ydims.size() - 1] : 1;
  return Problem{x.typed_data(), M, K, N, y->typed_data()};
}

// Runs unit(u) for every u in [0, units): the calling thread and up to threads - 1 tasks
// scheduled on XLA's intra-op pool claim units from a shared counter. A task that starts
// after every unit is claimed returns at once, touching only the counter (kept alive by the
// shared_ptr), so the caller never waits for a task that has not started: it waits only for
// units being computed, and until then its frame (all that unit reads) is alive.
template <class Unit>
void run_units(xla::ffi::ThreadPool& pool, int64_t units, int64_t threads, Unit unit) {
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

// Runs piece(i0, i1) over every item of [0, items), in runs of at most `step` consecutive items
// (of at most `fine` once no more than `step` are left in a segment, so that the two threads
// meeting there share the last step's worth), on the calling thread and up to threads - 1
// tasks scheduled on XLA's intra-op pool. The items are cut into one segment per two threads (T threads in all: ceil(T / 2) segments, sized in
// proportion to their threads), and a segment is eaten from both ends: the first thread of a
// segment claims runs from its left end, the second from its right end, each walking inward,
// until they meet. So each thread reads one contiguous stretch of the weights (the hardware
// prefetchers follow it), and the two meet wherever their speeds make them meet: a task that
// starts late (XLA's pool wakes a sleeping thread in 5 to over 200 microseconds) or runs slower
// leaves more to its partner instead of leaving the caller to wait for it at the end, as fixed
// shares did (1.0-1.5 ms of an 18 ms float32 decode step; benchmarks/RESULTS.md, session 10).
// A thread whose segment is empty claims from the others'. A task that starts after every item
// is claimed returns at once, touching only the shared state (kept alive by the shared_ptr), and
// the caller waits only for claimed runs being computed; until then its frame is alive.
// Pool: XLA's ffi::ThreadPool, or anything with its num_threads() and Schedule(task).
template <class Pool, class Piece>
void run_from_both_ends(Pool& pool, int64_t items, int64_t step, int64_t fine, int64_t threads, Piece piece) {
  if (items <= 0) return;
  const int64_t runs = (items + step - 1) / step;
  const int64_t T = std::max<int64_t>(1, std::min<int64_t>(std::min<int64_t>(threads, pool.num_threads()), runs));
  const int64_t S = (T + 1) / 2;
  struct Shared {
    std::atomic<int64_t> arrived{0}, done{0};
    std::unique_ptr<std::atomic<uint64_t>[]> ends;   // per segment: its unclaimed [lo, hi) as lo | hi << 32
  };
  auto shared = std::make_shared<Shared>();
  shared->ends.reset(new std::atomic<uint64_t>[S]);
  for (int64_t g = 0; g < S; ++g) {                    // segment g starts after the 2 g threads before it
    const uint64_t lo = items * (2 * g) / T, hi = g + 1 == S ? items : items * (2 * g + 2) / T;
    shared->ends[g].store(lo | hi << 32, std::memory_order_relaxed);
  }
  auto work = [shared, step, fine, S, piece]() {
    const int64_t slot = shared->arrived.fetch_add(1, std::memory_order_relaxed);
    const bool right = slot % 2 == 1;
    for (int64_t k = 0; k < S; ++k) {
      std::atomic<uint64_t>& ends = shared->ends[(slot / 2 + k) % S];
      uint64_t cur = ends.load(std::memory_order_relaxed);
      for (;;) {
        const int64_t lo = static_cast<int64_t>(cur & 0xffffffffu), hi = static_cast<int64_t>(cur >> 32);
        if (lo >= hi) break;
        const int64_t n = hi - lo > step ? step : std::min(fine, hi - lo), i0 = right ? hi - n : lo;
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
