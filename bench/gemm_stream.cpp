// Times the packed GEMM the way the encoder uses it at small batches: the four projections of
// LAYERS MiniLM-shaped layers (W_qkv 384x1152, W_o 384x384, W_up 384x1536, W_down 1536x384)
// one after the other on M rows, so that with 6 layers the 42 MB of fp32 weights (21 MB bf16,
// 11 MB int8)
// come from memory or L3, not from L2 as in `headcount bench --suite encoder`'s projection
// rows. Standalone, not in the CMake build; links the Release tree's library (bench/README.md
// has the build line).
//   gemm_stream LAYERS M THREADS [ROUNDS] [fp32|bf16|int8]
// Prints the median, first and third quartile of the time of one pass over all projections
// (each round: 20 passes, after one warm-up pass) and the GFLOP/s at the median; then each
// projection alone (layer 0's weights, 10 calls a round, so its weights stay in cache), its
// GFLOP/s at the median of the rounds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "headcount/context.h"
#include "headcount/error.h"
#include "layers/packed_gemm.h"

using namespace headcount;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s LAYERS M THREADS [ROUNDS] [fp32|bf16|int8]\n", argv[0]);
    return 2;
  }
  const int layers = std::atoi(argv[1]), threads = std::atoi(argv[3]);
  const long m = std::atol(argv[2]);
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 9;
  const std::string dtype_name = argc > 5 ? argv[5] : "fp32";
  if (layers < 1 || m < 1 || threads < 1 || rounds < 1 ||
      (dtype_name != "fp32" && dtype_name != "bf16" && dtype_name != "int8")) {
    std::fprintf(stderr,
                 "gemm_stream: LAYERS, M, THREADS, ROUNDS >= 1 and fp32, bf16 or int8 expected\n");
    return 2;
  }
  const DType dtype = dtype_name == "bf16"   ? DType::bf16
                      : dtype_name == "int8" ? DType::i8
                                             : DType::f32;
  try {
    Context ctx(ContextOptions{.threads = threads});
    struct Shape {
      long k, n;
    };
    const Shape shapes[4] = {{384, 1152}, {384, 384}, {384, 1536}, {1536, 384}};
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<Tensor> weights;
    for (int l = 0; l < layers; ++l)
      for (const Shape& s : shapes) {
        std::vector<float> raw(static_cast<std::size_t>(s.k * s.n));
        for (float& v : raw) v = uniform(rng);
        weights.push_back(layers::pack_weights(raw.data(), s.k, s.n, s.n, dtype));
      }
    std::vector<float> x(static_cast<std::size_t>(m * 1536)), y(static_cast<std::size_t>(m * 1536));
    for (float& v : x) v = uniform(rng);
    double flops = 0;
    for (const Shape& s : shapes) flops += 2.0 * static_cast<double>(m * s.k * s.n) * layers;
    auto gemm = [&](std::size_t w, int g) {
      layers::packed_gemm(ctx, {.m = m,
                                .x = x.data(),
                                .ldx = shapes[g].k,
                                .w = &weights[w],
                                .n = shapes[g].n,
                                .y = y.data(),
                                .ldy = shapes[g].n});
    };
    // One warm-up call of fn, then `rounds` rounds of `calls` calls: the sorted times of one call.
    auto sorted_times = [&](auto&& fn, int calls) {
      fn();
      std::vector<double> seconds;
      for (int r = 0; r < rounds; ++r) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) fn();
        seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
            calls);
      }
      std::sort(seconds.begin(), seconds.end());
      return seconds;
    };
    const std::vector<double> seconds = sorted_times(
        [&] {
          for (int l = 0; l < layers; ++l)
            for (int g = 0; g < 4; ++g) gemm(static_cast<std::size_t>(l * 4 + g), g);
        },
        20);
    const double median = seconds[seconds.size() / 2];
    std::printf(
        "layers %d, m %ld, %s, %d threads: median %.1f us a pass (q1 %.1f, q3 %.1f), %.1f "
        "GFLOP/s\n",
        layers, m, dtype_name.c_str(), threads, median * 1e6, seconds[seconds.size() / 4] * 1e6,
        seconds[3 * seconds.size() / 4] * 1e6, flops / median / 1e9);
    const char* names[4] = {"qkv", "o", "up", "down"};
    for (int g = 0; g < 4; ++g) {
      const std::vector<double> alone =
          sorted_times([&] { gemm(static_cast<std::size_t>(g), g); }, 10);
      std::printf(
          "  %-4s alone (k %ld, n %ld): %.1f GFLOP/s\n", names[g], shapes[g].k, shapes[g].n,
          2.0 * static_cast<double>(m * shapes[g].k * shapes[g].n) / alone[alone.size() / 2] / 1e9);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gemm_stream: %s\n", e.what());
    return 2;
  }
  return 0;
}
