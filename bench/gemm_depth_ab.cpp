// The packed GEMM's fp32 depth block, A against B in one process: src/simd/gemm_impl.h compiled
// twice for AVX-512, once with tuning::gemm_depth_block() (A) and once with
// HC_GEMM_DEPTH_OVERRIDE (B), both run on the four MiniLM projections (W_qkv 384x1152, W_o
// 384x384, W_up 384x1536 with the GELU epilogue, W_down 1536x384) at M rows, one thread, tasks
// in packed_gemm's order (panels outside, 96-row blocks inside), A and B alternating each
// round, each first in every other round, so that neither the host's drift nor the cache
// the first leaves the second favours one side. Prints the median and quartiles of time(A) /
// time(B) per projection and for all four, and whether A and B wrote the same bits (they
// must: the partial sums between blocks are exact). With M = 0 it prints instead the rate of
// one 96-row task on data that stays in cache (the kernel's ceiling on this core).
// Standalone, not in the CMake build (needs AVX-512); bench/gemm_depth_ab.sh builds the three
// pieces (this file as side A, as side B, and as the driver) and runs it:
//   bench/gemm_depth_ab.sh DEPTH_B M [ROUNDS=40]
#if defined(HC_AB_SIDE)
#define HC_ISA Isa::avx512
#define HC_VEC_FLOATS 16
#define HC_TILE_ACC 24
#define HC_TILE_VECS 4
#if HC_AB_SIDE == 1
#define HC_ISA_NS ab_side_a
#undef HC_GEMM_DEPTH_OVERRIDE
#else
#define HC_ISA_NS ab_side_b
#endif
#include "simd/gemm_impl.h"
namespace headcount::simd {
#if HC_AB_SIDE == 1
const GemmKernels& side_a() { return ab_side_a::gemm_table(); }
#else
const GemmKernels& side_b() { return ab_side_b::gemm_table(); }
#endif
}  // namespace headcount::simd
#else
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "simd/gemm.h"
#include "simd/tuning.h"

namespace headcount::simd {
const GemmKernels& side_a();
const GemmKernels& side_b();
}  // namespace headcount::simd

using namespace headcount::simd;

namespace {

struct Projection {
  long k, n;
  GemmEpilogue epilogue;
  const char* name;
};

// 64-byte aligned floats, as the library's tensors and workspaces are: with std::vector's
// 16-byte alignment every 64-byte panel load split across two cache lines, and deep blocks
// (whose panel streams from L2) lost up to 16% that the library never sees.
struct Floats {
  explicit Floats(std::size_t n = 0)
      : size(n),
        data(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64))) {
    std::fill_n(data, n, 0.0f);
  }
  Floats(const Floats&) = delete;
  Floats& operator=(const Floats&) = delete;
  Floats& operator=(Floats&& o) noexcept {
    std::swap(size, o.size);
    std::swap(data, o.data);
    return *this;
  }
  ~Floats() { std::free(data); }
  float* begin() const { return data; }
  float* end() const { return data + size; }
  bool operator==(const Floats& o) const {
    return size == o.size && std::equal(begin(), end(), o.begin());
  }
  std::size_t size;
  float* data;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double ratio_quartile(std::vector<double> v, int q) {
  std::sort(v.begin(), v.end());
  return v[v.size() * static_cast<std::size_t>(q) / 4];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s M [ROUNDS]\n", argv[0]);
    return 2;
  }
  const long m = std::atol(argv[1]);
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 40;
  if (m < 0 || rounds < 1) {
    std::fprintf(stderr, "gemm_depth_ab: M >= 0 and ROUNDS >= 1 expected\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  if (m == 0) {  // the ceiling: one task's 96 rows x 64 columns, k 384, again and again
    const long rows = 96, k = 384, calls = 2000;
    Floats x(rows * k), w(k * 64), y(rows * 64), bias(64);
    for (float& v : x) v = uniform(rng);
    for (float& v : w) v = uniform(rng);
    double best = 1e30;
    for (int r = 0; r < rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < calls; ++i)
        side_a().panel(x.data, k, rows, w.data, k, bias.data, y.data, 64, 64, GemmEpilogue::none);
      best = std::min(best, seconds_since(t0));
    }
    std::printf("one task in cache (96 x 64, k 384), fastest of %d rounds: %.1f GFLOP/s\n", rounds,
                2.0 * rows * k * 64 * calls / best / 1e9);
    return 0;
  }
  const Projection projections[4] = {{384, 1152, GemmEpilogue::none, "qkv"},
                                     {384, 384, GemmEpilogue::none, "o"},
                                     {384, 1536, GemmEpilogue::gelu_erf, "up"},
                                     {1536, 384, GemmEpilogue::none, "down"}};
  Floats w[4], x[4], ya[4], yb[4], bias[4], packed[4];
  for (int i = 0; i < 4; ++i) {
    const long k = projections[i].k, n = projections[i].n;
    w[i] = Floats(k * n);
    x[i] = Floats(m * k);
    for (float& v : w[i]) v = uniform(rng);
    for (float& v : x[i]) v = uniform(rng);
    ya[i] = Floats(m * n);
    yb[i] = Floats(m * n);
    bias[i] = Floats(n);
    std::fill(bias[i].begin(), bias[i].end(), 0.1f);
    // The weights packed as pack_weights lays them out: panels of 64 columns, [k, 64] each.
    packed[i] = Floats(k * n);
    for (long p = 0; p < n / 64; ++p)
      for (long d = 0; d < k; ++d)
        std::copy_n(w[i].data + d * n + p * 64, 64, packed[i].data + (p * k + d) * 64);
  }
  auto pass = [&](const GemmKernels& kernels, int i, Floats& y) {
    const long k = projections[i].k, n = projections[i].n, blocks = (m + 95) / 96;
    const auto t0 = std::chrono::steady_clock::now();
    for (long t = 0; t < n / 64 * blocks; ++t) {
      const long p = t / blocks, r0 = (t % blocks) * 96, rows = std::min(96L, m - r0);
      kernels.panel(x[i].data + r0 * k, k, rows, packed[i].data + p * k * 64, k,
                    bias[i].data + p * 64, y.data + r0 * n + p * 64, n, 64,
                    projections[i].epilogue);
    }
    return seconds_since(t0);
  };
  std::vector<double> ratios[5];
  for (int r = 0; r < rounds; ++r) {
    double total_a = 0, total_b = 0;
    for (int i = 0; i < 4; ++i) {
      // A first in even rounds, B first in odd ones: the second pass finds x in cache (W_o
      // ran ~13% faster second with the same depth on both sides).
      double a = 0, b = 0;
      if (r % 2 == 0) {
        a = pass(side_a(), i, ya[i]);
        b = pass(side_b(), i, yb[i]);
      } else {
        b = pass(side_b(), i, yb[i]);
        a = pass(side_a(), i, ya[i]);
      }
      ratios[i].push_back(a / b);
      total_a += a;
      total_b += b;
    }
    ratios[4].push_back(total_a / total_b);
  }
  bool same = true;
  for (int i = 0; i < 4; ++i) same = same && ya[i] == yb[i];
  std::printf(
      "m %ld, one thread, %d rounds, depth block A %ld, B %ld; time(A) / time(B), median [q1 "
      "q3]:\n",
      m, rounds, static_cast<long>(headcount::tuning::gemm_depth_block()),
      static_cast<long>(HC_GEMM_DEPTH_OVERRIDE));
  const char* names[5] = {"qkv", "o", "up", "down", "all four"};
  for (int i = 0; i < 5; ++i)
    std::printf("  %-8s %.3f [%.3f %.3f]\n", names[i], ratio_quartile(ratios[i], 2),
                ratio_quartile(ratios[i], 1), ratio_quartile(ratios[i], 3));
  std::printf("  A and B bitwise the same: %s\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}

#endif  // HC_AB_SIDE
