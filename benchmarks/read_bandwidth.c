/* The machine's read roofline: GB/s of summing a large float32 array with N OpenMP threads.
   Built and run by benchmarks/roofline.py (gcc -O3 -march=native -fopenmp):
   read_bandwidth BYTES [huge]. With "huge" the array asks for 2 MiB transparent huge pages
   (madvise MADV_HUGEPAGE), as tlaloc's CPU weights do (tlaloc/_runtime/host_arena.py): with 4 KiB
   pages every 4 KiB of the stream costs a TLB miss and the prefetchers stop at each page end.
   Prints one line: "<GB/s> <threads> <MB>" (best of 10 passes). */
#include <omp.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef float v16 __attribute__((vector_size(64)));  /* GCC vector extension: 16 floats */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? (size_t)atoll(argv[1]) : ((size_t)512 << 20);
  size_t n = bytes / sizeof(float) / 64 * 64;
  const int huge = argc > 2 && argv[2][0] == 'h';
  const size_t align = huge ? ((size_t)2 << 20) : 64;
  float* a = aligned_alloc(align, (n * sizeof(float) + align - 1) / align * align);
#ifdef MADV_HUGEPAGE
  if (huge) madvise(a, n * sizeof(float), MADV_HUGEPAGE);
#endif
  for (size_t i = 0; i < n; ++i) a[i] = (float)(i & 1023) * 1e-3f;
  double best = 1e30, keep = 0;
  for (int rep = 0; rep < 10; ++rep) {
    double t = now(), total = 0;
#pragma omp parallel reduction(+ : total)
    {
      /* four independent vector sums: one would be bound by the add latency, not by memory */
      v16 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
#pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += 64) {
        const v16* p = (const v16*)(a + i);
        s0 += p[0];
        s1 += p[1];
        s2 += p[2];
        s3 += p[3];
      }
      v16 s = s0 + s1 + s2 + s3;
      for (int j = 0; j < 16; ++j) total += s[j];
    }
    t = now() - t;
    if (t < best) best = t;
    keep += total;
  }
  printf("%.3f %d %zu%s\n", n * sizeof(float) / best / 1e9, omp_get_max_threads(), n * sizeof(float) >> 20,
         keep == -1 ? "!" : "");
  free(a);
  return 0;
}
