// Native timing of the CPU matmul kernels (src/tlaloc/kernels/cpu/matmul.cc) without XLA: the
// kernel source is included and its run_unit called directly, on the calling thread and (with
// -DTHREADS=2) one helper thread that is already awake, the two claiming SPLIT column units from
// a shared counter, as the FFI handlers do on XLA's pool. Each of L matrices (K, N) is timed
// alone; the figure is the sum over the matrices of each one's best time over the repeats (short
// intervals are robust to other processes taking the cores, which chain timings are not; with
// two threads on a loaded machine some matrices still never see both cores free: a figure far
// above the single-thread one is such a stall, not the kernel).
//
//   g++ -O3 -march=native -std=c++17 -pthread -w -I. -I.venv/lib/python3.11/site-packages/jaxlib/include \
//       -DKERNELS='"src/tlaloc/kernels/cpu/matmul.cc"' -DTHREADS=2 -DSPLIT=2 \
//       benchmarks/cpu_kernels_native.cc -o /tmp/kernels_native
//   K=576 N=3072 /tmp/kernels_native [M=1] [L=12] [repeats=60]
//
// Kernels since 2026-12-06 (q4_1's bfloat16 dot products) read x's bfloat16 parts: build them with
// -DTLALOC_Q4_1_BF16_PARTS (their Q4_1 struct has xh and xl; the older ones have not).
// -DOLD_FORMATS builds against the kernels before commit 0136a8e (format structs carried N;
// use -DSPLIT=8, their split). Weights are arbitrary bytes (bf16 kept finite and normal);
// correctness is benchmarks/cpu_kernels.py's job.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include KERNELS

#ifndef THREADS
#define THREADS 1
#endif
#ifndef SPLIT
#define SPLIT THREADS
#endif
#ifdef OLD_FORMATS
#define AND_N , N
#else
#define AND_N
#endif

// A helper thread spinning until it is given a job (a pool thread that is already awake).
struct Helper {
  std::atomic<int64_t> given{0}, done{0};
  std::atomic<bool> stop{false};
  std::function<void()> job;
  std::thread thread{[this] {
    for (int64_t seen = 0; !stop;)
      if (const int64_t g = given.load(); g != seen) job(), seen = g, done.store(g);
  }};
  ~Helper() { stop = true; thread.join(); }
};

template <class Fmt>
double best_total(const std::vector<Fmt>& fs, const Problem& p, int reps) {
  static Helper* helper = THREADS > 1 ? new Helper : nullptr;
  static std::vector<float> acc0(p.M * p.N), acc1(p.M * p.N);
  const int64_t tiles = p.N / TILE;
  std::vector<double> best(fs.size(), 1e30);
  for (int it = 0; it < reps; ++it)
    for (size_t i = 0; i < fs.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      std::atomic<int64_t> next{0};
      auto work = [&](float* acc) {
        for (int64_t u; (u = next.fetch_add(1)) < SPLIT;)
          run_unit(fs[i], p, u * tiles / SPLIT * TILE, (u + 1) * tiles / SPLIT * TILE, acc);
      };
      if (helper) helper->job = [&] { work(acc1.data()); }, helper->given.fetch_add(1);
      work(acc0.data());
      if (helper)
        while (helper->done.load() != helper->given.load()) {}
      best[i] = std::min(best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  double total = 0;
  for (double b : best) total += b;
  return total;
}

int main(int argc, char** argv) {
  const int64_t M = argc > 1 ? atoi(argv[1]) : 1, L = argc > 2 ? atoi(argv[2]) : 12;
  const int reps = argc > 3 ? atoi(argv[3]) : 60;
  const int64_t K = getenv("K") ? atoi(getenv("K")) : 576, N = getenv("N") ? atoi(getenv("N")) : 3072;
  std::mt19937 rng(0);
  std::vector<float> x(M * K), y(M * N), xsum(M * K / 32, 0.5f);
  for (auto& v : x) v = (rng() % 1000) / 500.0f - 1;
#ifdef TLALOC_Q4_1_BF16_PARTS
  std::vector<uint16_t> xh(M * K), xl(M * K);
  for (int64_t i = 0; i < M * K; ++i)
    xh[i] = tlaloc_cpu::f32_to_bf16(x[i]), xl[i] = tlaloc_cpu::f32_to_bf16(x[i] - tlaloc_cpu::bf16_to_f32(xh[i]));
#endif
  std::vector<std::vector<uint8_t>> store;
  auto bytes = [&](size_t n) { store.emplace_back(n); for (auto& b : store.back()) b = rng(); return store.back().data(); };
  std::vector<F32> f32; std::vector<BF16> bf16; std::vector<I8Channel> i8ch; std::vector<Q8_0> q8_0; std::vector<Q4_1> q4_1;
#ifndef OLD_FORMATS
  std::vector<Q8_16> q6_k;                                             // q8_0 with float32 scales per 16 rows
#endif
  for (int64_t l = 0; l < L; ++l) {
    float* w = reinterpret_cast<float*>(bytes(4 * K * N));
    for (int64_t i = 0; i < K * N; ++i) w[i] = (i % 7) * 0.1f;
    uint16_t* h = reinterpret_cast<uint16_t*>(bytes(2 * K * N));
    for (int64_t i = 0; i < K * N; ++i) h[i] = 0x3F00 | (h[i] & 0x80FF);
    uint16_t* s = reinterpret_cast<uint16_t*>(bytes(2 * (K / 32) * N));
    for (int64_t i = 0; i < K / 32 * N; ++i) s[i] = 0x3C00;            // float16 1.0
    f32.push_back({w AND_N});
    bf16.push_back({h AND_N});
    i8ch.push_back({reinterpret_cast<int8_t*>(bytes(K * N)), w AND_N});
    q8_0.push_back({reinterpret_cast<int8_t*>(bytes(K * N)), s AND_N});
    q4_1.push_back({bytes(K / 2 * N), s, s, xsum.data(), false, 1, K / 32 AND_N});
#ifdef TLALOC_Q4_1_BF16_PARTS
    q4_1.back().xh = xh.data(), q4_1.back().xl = xl.data();          // x's bfloat16 parts (kernels after 2026-12-06)
#endif
#ifndef OLD_FORMATS
    float* s32 = reinterpret_cast<float*>(bytes(4 * (K / 16) * N));
    for (int64_t i = 0; i < K / 16 * N; ++i) s32[i] = 1.0f;
    q6_k.push_back({reinterpret_cast<int8_t*>(bytes(K * N)), s32});
#endif
  }
  const Problem p{x.data(), M, K, N, y.data()};
  const double macs = double(M) * K * N * L;
  auto report = [&](const char* name, double bytes_per_weight, double t) {
    printf("%-5s %8.3f ms %7.2f GB/s %7.2f GMAC/s\n", name, t * 1e3, bytes_per_weight * K * N * L / t / 1e9, macs / t / 1e9);
  };
  printf("M=%ld K=%ld N=%ld L=%ld threads=%d units=%d\n", long(M), long(K), long(N), long(L), THREADS, SPLIT);
  report("f32", 4, best_total(f32, p, reps));
  report("bf16", 2, best_total(bf16, p, reps));
  report("i8ch", 1 + 4.0 / K, best_total(i8ch, p, reps));
  report("q8_0", 1 + 2.0 / 32, best_total(q8_0, p, reps));
  report("q4_1", 0.5 + 4.0 / 32, best_total(q4_1, p, reps));
#ifndef OLD_FORMATS
  report("q6_k", 1 + 4.0 / 16, best_total(q6_k, p, reps));              // Q6_K kept as int8 + float32 d * sc
#endif
}
