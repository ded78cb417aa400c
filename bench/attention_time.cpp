// Times the streaming attention kernel on one shape, many calls, from C++ (no Python, no
// peers): the driver for `perf record` profiles of the kernel. Standalone, not in the CMake
// build; links the Release tree's library (bench/README.md has the build line).
//   attention_time N HEADS HEAD_DIM THREADS [CALLS] [CAUSAL 0|1]
// Prints the median and fastest call after two warm-up calls, the GFLOP/s the kernel's own
// multiply-add count gives at the median, and a checksum of the output (equal across runs
// and thread counts: the kernel is bitwise deterministic).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/error.h"

using namespace headcount;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s N HEADS HEAD_DIM THREADS [CALLS] [CAUSAL 0|1]\n", argv[0]);
    return 2;
  }
  const long n = std::atol(argv[1]), h = std::atol(argv[2]), d = std::atol(argv[3]);
  const int threads = std::atoi(argv[4]);
  const int calls = argc > 5 ? std::atoi(argv[5]) : 15;
  const bool causal = argc > 6 && std::atoi(argv[6]) != 0;
  if (n < 1 || h < 1 || d < 1 || calls < 1 || n * h * d > (1L << 30)) {
    std::fprintf(stderr,
                 "attention_time: expected N, HEADS, HEAD_DIM, CALLS >= 1 and N*HEADS*HEAD_DIM <= "
                 "2^30, got %ld %ld %ld %d\n",
                 n, h, d, calls);
    return 2;
  }
  try {
    std::vector<float> q(n * h * d), k(n * h * d), v(n * h * d), o(n * h * d);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uniform(-2, 2);
    for (auto* x : {&q, &k, &v})
      for (float& e : *x) e = uniform(rng);
    Context ctx(ContextOptions{.threads = threads});
    AttentionParams p;
    p.q = TensorView::contiguous(q.data(), DType::f32, {1, n, h, d});
    p.k = TensorView::contiguous(k.data(), DType::f32, {1, n, h, d});
    p.v = TensorView::contiguous(v.data(), DType::f32, {1, n, h, d});
    p.out = TensorView::contiguous(o.data(), DType::f32, {1, n, h, d});
    p.causal = causal;
    std::vector<double> seconds;
    AttentionStats stats;
    for (int c = 0; c < calls + 2; ++c) {
      const auto start = std::chrono::steady_clock::now();
      stats = attention_streaming(ctx, p);
      const auto end = std::chrono::steady_clock::now();
      if (c >= 2) seconds.push_back(std::chrono::duration<double>(end - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    const double flops = 2.0 * static_cast<double>(stats.score_macs + stats.weighted_sum_macs);
    double checksum = 0;
    for (float x : o) checksum += x;
    std::printf(
        "n %ld heads %ld head_dim %ld threads %d causal %d: median %.3f ms, fastest %.3f ms, %.1f "
        "GFLOP/s (checksum %.6f)\n",
        n, h, d, threads, causal ? 1 : 0, median * 1e3, seconds[0] * 1e3, flops / median / 1e9,
        checksum);
  } catch (const Error& e) {
    std::fprintf(stderr, "attention_time: %s\n", e.what());
    return 2;
  }
  return 0;
}
