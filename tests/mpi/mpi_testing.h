// Helpers of the MPI tests: the communicator's size and rank, seeded inputs (every rank makes
// the same whole tensors, then takes its part), and the fp32 error terms the bounds use.
#pragma once

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "headcount/tensor.h"
#include "headcount/train/model.h"

namespace headcount::testing {

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline Tensor uniform(std::vector<std::int64_t> shape, std::uint64_t seed, float bound = 1.0f) {
  Tensor t(DType::f32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-bound, bound);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// The unit roundoff of fp32 and gamma_n = n u / (1 - n u), the bound on the relative error of
// n roundings (Higham, Accuracy and Stability of Numerical Algorithms, 3.1).
constexpr double kU = 1.0 / (1 << 24);
inline double gamma_n(double n) { return n * kU / (1.0 - n * kU); }
// The same in double (u = 2^-53), for sums kept in double (the losses).
inline double gamma_d(double n) {
  const double u = std::ldexp(1.0, -53);
  return n * u / (1 - n * u);
}

// Whether every rank holds bitwise the same values of the parameters `keep` selects (all by
// default): the smallest and largest FNV-1a hash over the ranks agree.
inline bool same_on_every_rank(const std::vector<train::Parameter>& params,
                               const std::function<bool(const std::string&)>& keep = {}) {
  std::uint64_t h = 1469598103934665603ull;
  for (const train::Parameter& p : params) {
    if (keep && !keep(p.name)) continue;
    const auto* bytes = reinterpret_cast<const unsigned char*>(p.value.data<const float>());
    for (std::int64_t i = 0; i < p.value.numel() * 4; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  std::uint64_t lo = h, hi = h;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

}  // namespace headcount::testing
