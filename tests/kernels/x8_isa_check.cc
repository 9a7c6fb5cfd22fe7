// Runs the int8-activation kernels of src/tlaloc/kernels/cpu/matmul_x8.cc on fixed pseudo-random
// inputs (every format: Q4_1 with float16 and float32 sides, G = 32 and 64; Q8_0 with G = 32 and
// G = 16; int8 per channel; 5 rows of x: one with a block of subnormal d, then
// all-zero blocks (d = 0), one with a block of ties, one with an infinity) on a one-thread pool, and prints
// which code was compiled ("avx2" or "plain") and then the bits of every output. Built twice by
// test_cpu_matmul_x8.py, with and without AVX2, whose outputs must be equal bit for bit.
#include <cstdio>
#include <functional>

#include "matmul_x8.cc"

namespace {

struct Pool {
  int64_t num_threads() const { return 1; }
  void Schedule(std::function<void()> task) { task(); }
};

uint32_t state = 12345;
uint32_t next() { return state = state * 1664525u + 1013904223u; }
float uniform() { return static_cast<float>(next() >> 8) / 16777216.f * 2.f - 1.f; }   // [-1, 1)
uint16_t half_bits() { return static_cast<uint16_t>(0x1800 + next() % 0x1000); }         // ~1e-4 .. 3e-3, normal

template <class Fmt>
void print(const char* name, const Fmt& f, const Problem& p) {
  Pool pool;
  run(pool, f, p);
  std::printf("%s", name);
  for (int64_t i = 0; i < p.M * p.N; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &p.y[i], 4);
    std::printf(" %08x", bits);
  }
  std::printf("\n");
}

}  // namespace

int main() {
#if defined(__AVX2__) && defined(__FMA__)
  std::printf("avx2\n");
#else
  std::printf("plain\n");
#endif
  const int64_t M = 5, K = 128, N = 128;
  std::vector<float> x(M * K), y(M * N);
  for (int64_t i = 0; i < M * K; ++i) x[i] = uniform() * (i / K == 2 ? 50.f : 1.f);
  for (int64_t j = 0; j < 31; ++j) x[3 * K + 64 + j] = j % 2 ? j + 0.5f : -(j + 0.5f);   // ties: d = 1
  x[3 * K + 95] = 127.f;
  for (int64_t j = 0; j < K; ++j) x[1 * K + j] = j == 7 ? 1e-37f : 0.f;    // row 1: d subnormal (1 / d = inf), then 0
  x[4 * K + 100] = INFINITY;                                               // a row of NaNs
  const Problem p{x.data(), M, K, N, y.data()};
  std::vector<uint8_t> q4(K / 2 * N);
  std::vector<int8_t> q8(K * N);
  for (auto& b : q4) b = static_cast<uint8_t>(next());
  for (auto& b : q8) b = static_cast<int8_t>(next());
  std::vector<uint16_t> h1(K / 16 * N), h2(K / 16 * N);
  std::vector<float> f1(K / 16 * N), f2(K / 16 * N), channel(N);
  for (auto& v : h1) v = half_bits();
  for (auto& v : h2) v = static_cast<uint16_t>(half_bits() | 0x8000);    // negative offsets
  for (auto& v : f1) v = uniform() * 0.01f;
  for (auto& v : f2) v = uniform() * 0.05f;
  for (auto& v : channel) v = uniform() * 0.01f;
  print("q4_1-g32-f16", Q4_1{q4.data(), h1.data(), h2.data(), false, 1, K / 32}, p);
  print("q4_1-g64-f32", Q4_1{q4.data(), f1.data(), f2.data(), true, 2, K / 64}, p);
  print("q8_0-g32-f16", Q8{q8.data(), h1.data(), false, 32}, p);
  print("q8_0-g16-f32", Q8{q8.data(), f1.data(), true, 16}, p);
  print("i8ch", I8Channel{q8.data(), channel.data()}, p);
  return 0;
}
