// The helper threads the CPU kernels hand work to: one process-wide pool of spinning workers, in
// place of XLA's intra-op pool (xla::ffi::ThreadPool).
//
// Why not XLA's pool. A program runs on a thread of PJRT's own (not one of the intra-op pool's),
// so a kernel that schedules a task on the intra-op pool makes three busy threads: the caller, the
// worker that takes the task, and the pool's other worker, which spins looking for work (Eigen's
// GlobalSteal/PopBack) while the two compute. On a 2-core host that spinner took ~15% of the CPU
// in a SmolLM2 decode step (perf, benchmarks/RESULTS.md, session 20), time taken from the
// products and from the serial parts of the step (attention, XLA's fusions) alike. Here the
// caller and threads - 1 helpers run the work; XLA's workers stay parked.
//
// Waiting. A helper that runs out of tasks polls (yielding the core between polls, so that another
// runnable thread, such as a second process's on a 2-core host, is not kept off it) for up to
// SPIN_NS before it sleeps on a condition variable (pause instead of yield measured no faster):
// the products of one decode step come 5-50 microseconds apart, so a helper takes the next one at
// once, while an idle process keeps no core busy for longer than SPIN_NS.
// A task scheduled while every helper is busy or asleep just waits its turn; the kernels'
// run_and_steal (common.h) never waits for a task that has not started.
//
// Size. threads = the intra-op pool's size (what XLA chose for this process); helpers = threads - 1,
// started on first use. After fork() the child's first call starts helpers of its own (the
// parent's do not exist there). Nothing here is destroyed: helpers may be asleep in it at exit.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <pthread.h>

namespace tlaloc_cpu {

// Counts fork()s in this process's children (pthread_atfork's child handler): a pool made before
// the last fork has no helpers here and may hold a lock a helper held at the fork.
inline std::atomic<int64_t>& fork_generation() {
  static std::atomic<int64_t> generation{0};
  return generation;
}

class HelperPool {
 public:
  static constexpr int64_t SPIN_NS = 200000;

  explicit HelperPool(int64_t threads) : threads_(std::max<int64_t>(1, threads)) {
    static const int registered = pthread_atfork(nullptr, nullptr, [] { fork_generation().fetch_add(1); });
    (void)registered;
    state_.store(start());
  }

  // The caller plus the helpers: what run_and_steal may split work between.
  int64_t num_threads() const { return threads_; }

  void Schedule(std::function<void()> task) {
    State* st = state_.load(std::memory_order_acquire);
    if (st->generation != fork_generation().load(std::memory_order_relaxed)) st = restart();
    {
      std::lock_guard<std::mutex> lock(st->mu);
      st->tasks.push_back(std::move(task));
      st->pending.fetch_add(1, std::memory_order_release);
    }
    if (st->sleeping.load(std::memory_order_acquire) > 0) st->cv.notify_one();
  }

 private:
  // What the helpers of one process share. After a fork the child's copy is left as it was (its
  // mutex may be held by a helper that does not exist there) and a new one is made.
  struct State {
    int64_t generation;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    std::atomic<int64_t> pending{0};
    std::atomic<int64_t> sleeping{0};
  };

  State* start() {
    State* st = new State;
    st->generation = fork_generation().load();
    for (int64_t h = 0; h + 1 < threads_; ++h) std::thread([st] { loop(st); }).detach();
    return st;
  }

  // In a child of fork(): a new state and helpers (the old state is never freed: tasks in it
  // belong to the parent's calls, which did not wait for them).
  State* restart() {
    static std::mutex restarting;                     // only ever taken here, after a fork
    std::lock_guard<std::mutex> lock(restarting);
    State* st = state_.load(std::memory_order_acquire);
    if (st->generation != fork_generation().load()) {
      st = start();
      state_.store(st, std::memory_order_release);
    }
    return st;
  }

  static bool take(State* st, std::function<void()>& task) {
    if (st->pending.load(std::memory_order_acquire) == 0) return false;
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->tasks.empty()) return false;
    task = std::move(st->tasks.front());
    st->tasks.pop_front();
    st->pending.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }

  static void loop(State* st) {
    std::function<void()> task;
    for (;;) {
      const auto idle_since = std::chrono::steady_clock::now();
      while (!take(st, task)) {
        if (std::chrono::steady_clock::now() - idle_since < std::chrono::nanoseconds(SPIN_NS)) {
          std::this_thread::yield();      // a core wanted elsewhere (another process) goes there
          continue;
        }
        std::unique_lock<std::mutex> lock(st->mu);
        st->sleeping.fetch_add(1, std::memory_order_acq_rel);
        st->cv.wait(lock, [st] { return !st->tasks.empty(); });
        st->sleeping.fetch_sub(1, std::memory_order_acq_rel);
        break;                                        // take it (or lose the race and spin again)
      }
      if (task) {
        task();
        task = nullptr;
      }
    }
  }

  const int64_t threads_;
  std::atomic<State*> state_{nullptr};
};

// The process's pool, sized on first use by XLA's intra-op pool (the size XLA chose).
template <class XlaPool>
HelperPool& helpers(XlaPool& xla_pool) {
  static HelperPool* pool = new HelperPool(xla_pool.num_threads());    // never destroyed: see above
  return *pool;
}

}  // namespace tlaloc_cpu
