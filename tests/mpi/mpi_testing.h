// Helpers of the MPI tests: the communicator's size and rank, seeded inputs (every rank makes
// the same whole tensors, then takes its part), and the fp32 error terms the bounds use.
#pragma once

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "headcount/tensor.h"

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

}  // namespace headcount::testing
