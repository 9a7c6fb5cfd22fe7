// Checks tlaloc_cpu::run_and_steal (src/tlaloc/kernels/cpu/common.h) with a pool of real
// threads whose tasks start after random delays (some before the caller, some after every item
// is claimed and the call has returned): every item is computed exactly once, in runs of a
// multiple of `step` items (or of at most `fine`, near the meeting points), whatever the thread
// count. Prints "ok" and the
// number of cases, or the first failure. Then the same for the kernels' HelperPool (pool.h): items
// once, work reaching its helpers, helpers woken after sleeping, and a forked child's own helpers.
// Built and run by test_cpu_work_split.py.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

struct Pool {
  int64_t threads;
  std::vector<std::thread> started;
  std::mt19937 rng{7};
  int64_t num_threads() const { return threads; }
  void Schedule(std::function<void()> task) {
    const int delay_us = static_cast<int>(rng() % 300);
    started.emplace_back([task, delay_us] {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      task();
    });
  }
  void join() {
    for (auto& t : started) t.join();
    started.clear();
  }
};

// Whether counts holds exactly one claim per item (the property checked).
bool each_once(const std::vector<std::atomic<int>>& counts) {
  for (const auto& c : counts)
    if (c.load() != 1) return false;
  return true;
}

int main() {
  int64_t cases = 0;
  for (int64_t threads : {1, 2, 3, 4, 5, 8})
    for (int64_t items : {1, 2, 3, 17, 18, 64, 1001})
      for (int64_t step : {1, 2, 7, 256})
        for (int64_t fine : {int64_t{1}, step}) {
          Pool pool{threads};
          std::vector<std::atomic<int>> counts(items);
          std::atomic<bool> bad_run{false};
          tlaloc_cpu::run_and_steal(pool, items, step, fine, threads, [&](int64_t i0, int64_t i1) {
            if (i1 <= i0 || (i1 - i0 > fine && (i1 - i0) % step != 0)) bad_run = true;
            for (int64_t i = i0; i < i1; ++i) counts[i].fetch_add(1);
            std::this_thread::sleep_for(std::chrono::microseconds((i0 * 7) % 40));
          });
          const bool ok = each_once(counts) && !bad_run;   // read before the late tasks are joined
          pool.join();
          if (!ok) {
            std::printf("FAIL threads=%ld items=%ld step=%ld fine=%ld\n", long(threads), long(items), long(step), long(fine));
            return 1;
          }
          ++cases;
        }
  // The kernels' own pool (pool.h): helpers that spin, sleep after SPIN_NS idle and are woken by
  // the next call; after fork() the child starts helpers of its own. Every item once, and some
  // run on a helper (the pool is not just the caller).
  for (int64_t threads : {1, 2, 4}) {
    tlaloc_cpu::HelperPool pool(threads);
    const std::thread::id caller = std::this_thread::get_id();
    int64_t on_helpers = 0;
    auto check = [&](int64_t calls, int64_t gap_us) {
      for (int64_t c = 0; c < calls; ++c) {
        const int64_t items = 1 + (c * 37) % 200;
        std::vector<std::atomic<int>> counts(items);
        std::atomic<int64_t> helped{0};
        tlaloc_cpu::run_and_steal(pool, items, 1, 1, threads, [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) counts[i].fetch_add(1);
          if (std::this_thread::get_id() != caller) helped += i1 - i0;
          std::this_thread::sleep_for(std::chrono::microseconds(5));
        });
        if (!each_once(counts)) return false;
        on_helpers += helped.load();
        if (gap_us) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
      }
      return true;
    };
    const int64_t asleep_us = tlaloc_cpu::HelperPool::SPIN_NS / 1000 * 3;
    if (!check(200, 0) || !check(5, asleep_us)) {
      std::printf("FAIL HelperPool threads=%ld\n", long(threads));
      return 1;
    }
    if ((threads > 1) != (on_helpers > 0)) {
      std::printf("FAIL HelperPool threads=%ld: %ld items on helpers\n", long(threads), long(on_helpers));
      return 1;
    }
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      on_helpers = 0;
      const bool ok = check(50, 0) && (threads > 1) == (on_helpers > 0);
      std::_Exit(ok ? 0 : 3);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("FAIL HelperPool threads=%ld after fork (status %d)\n", long(threads), status);
      return 1;
    }
  }
  // Negative control: the check sees an item claimed twice, and one never claimed.
  std::vector<std::atomic<int>> twice(3);
  twice[0] = 1, twice[1] = 2, twice[2] = 1;
  std::vector<std::atomic<int>> missed(3);
  missed[0] = 1, missed[1] = 0, missed[2] = 1;
  if (each_once(twice) || each_once(missed)) {
    std::printf("FAIL the check passed a double or missing claim\n");
    return 1;
  }
  std::printf("ok %ld\n", long(cases));
  return 0;
}
