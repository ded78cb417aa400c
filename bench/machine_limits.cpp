// What one core of this host can do at most, to read the encoder's figures against:
// the fp32 multiply-add rate with 512-bit and with 256-bit vectors (24 independent chains,
// enough to hide the latency on every x86 core we run on) and the sequential read bandwidth
// from memory with 1 and 2 threads (256 MiB per thread, well past any L3), and the 512-bit
// rate of two threads at once.
// Build and run (not part of the CMake build: it needs AVX-512 and says nothing about headcount):
//   g++ -O3 -march=x86-64-v4 -pthread bench/machine_limits.cpp -o build/machine_limits &&
//   build/machine_limits
// Whether a 512-bit FMA issues at two per cycle (Intel server cores, Zen 5) or one (Zen 4,
// which splits it in two halves) shows as the zmm rate being twice the ymm rate, or the same.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

template <typename V, typename Fma, typename Set>
double fma_rate(int lanes, Fma fma, Set set) {
  V a[24];
  for (int i = 0; i < 24; ++i) a[i] = set(1.0f + static_cast<float>(i) * 1e-7f);
  const V m = set(0.999999f), c = set(1e-7f);
  const long steps = 20000000;
  const auto t0 = Clock::now();
  for (long s = 0; s < steps; ++s) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) a[i] = fma(a[i], m, c);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  float sink = 0;
  for (int i = 0; i < 24; ++i) sink += reinterpret_cast<const float*>(&a[i])[0];
  if (sink == 42.0f) std::printf(" ");  // keeps the chains alive
  return static_cast<double>(steps) * 24 * lanes * 2 / seconds / 1e9;
}

double read_bandwidth(int threads, std::size_t bytes_per_thread) {
  const std::size_t n = bytes_per_thread / sizeof(float);
  std::vector<float*> buffers(static_cast<std::size_t>(threads));
  for (float*& b : buffers) {
    b = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
    if (b == nullptr) {
      std::fprintf(stderr,
                   "machine_limits: cannot allocate %zu MiB per thread for the bandwidth test\n",
                   bytes_per_thread >> 20);
      std::exit(1);
    }
    std::fill_n(b, n, 1.0f);
  }
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> sums(static_cast<std::size_t>(threads));
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const float* p = buffers[static_cast<std::size_t>(t)];
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (std::size_t i = 0; i < n; i += 64) {
          s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
          s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
          s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
          s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
        }
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
        sums[static_cast<std::size_t>(t)] = lanes[0];
      });
    for (std::thread& th : pool) th.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(threads) * static_cast<double>(n * sizeof(float)) /
                              seconds / 1e9);
  }
  for (float* b : buffers) std::free(b);
  return best;
}

// The 512-bit rate with `threads` threads at once, each running fma_rate's chains: on a host
// whose two vCPUs are the two hyperthreads of one physical core it is about the one-thread
// rate (they share the FMA units), on two real cores about twice it. Every figure of a
// 2-thread run should be read against this, not against twice the one-core rate.
double fma_rate_threads(int threads) {
  std::vector<double> rates(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&rates, t] {
      rates[static_cast<std::size_t>(t)] = fma_rate<__m512>(
          16, [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); },
          [](float f) { return _mm512_set1_ps(f); });
    });
  for (std::thread& th : pool) th.join();
  double total = 0;
  for (double r : rates) total += r;
  return total;
}

}  // namespace

int main() {
  const double zmm = fma_rate<__m512>(
      16, [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); },
      [](float f) { return _mm512_set1_ps(f); });
  const double ymm = fma_rate<__m256>(
      8, [](__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); },
      [](float f) { return _mm256_set1_ps(f); });
  std::printf("fp32 FMA, one core: 512-bit %.1f GFLOP/s, 256-bit %.1f GFLOP/s (ratio %.2f)\n", zmm,
              ymm, zmm / ymm);
  const double two = fma_rate_threads(2);
  std::printf("fp32 FMA, two threads at once: 512-bit %.1f GFLOP/s in all (%.2fx one thread)\n",
              two, two / zmm);
  const std::size_t bytes = std::size_t{256} << 20;
  std::printf("sequential read from memory: 1 thread %.1f GB/s, 2 threads %.1f GB/s (best of 3)\n",
              read_bandwidth(1, bytes), read_bandwidth(2, bytes));
}
