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

}  // namespace tlaloc_cpu
