// Ring attention at a long sequence over the ranks of mpirun, against one process
// (a measurement, not a test). Built with -DHEADCOUNT_MPI=ON as build/headcount_ring_bench:
//   mpirun --oversubscribe -n 4 build/headcount_ring_bench N HEADS HEAD_DIM CAUSAL THREADS
// Each rank makes only its own zig-zag rows of Q, K, V (a hash of the global index, so one
// process can make the same whole tensors), runs ring_attention, and records its peak
// resident memory (getrusage ru_maxrss) and the time it waited for messages. Then rank 0
// runs the one-process streaming kernel over the whole sequence (THREADS workers, the other
// ranks waiting in a barrier), receives every rank's rows of out and lse and reports the
// largest differences against the bound of tests/mpi/test_ring.cpp. JSON on stdout.
// With a last argument `one` (no mpirun needed) it runs only the one-process kernel and reports
// that process's peak memory and time: the figure to read the ranks' peaks against.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "headcount/cost.h"
#include "headcount/distributed.h"

using namespace headcount;
using i64 = std::int64_t;

namespace {

// Uniform in [-1, 1) from the element's global index and the tensor's seed.
float value(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z =
      index * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 40) / static_cast<double>(1ull << 23) - 1.0);
}

// [1, rows, heads, dim] where local row t is global row row_of(t).
template <class RowOf>
Tensor make(std::uint64_t seed, i64 rows, i64 heads, i64 dim, RowOf row_of) {
  Tensor t(DType::f32, {1, rows, heads, dim});
  for (i64 r = 0; r < rows; ++r)
    for (i64 i = 0; i < heads * dim; ++i)
      t.data<float>()[r * heads * dim + i] =
          value(seed, static_cast<std::uint64_t>(row_of(r) * heads * dim + i));
  return t;
}

double peak_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (argc != 6 && !(argc == 7 && std::string(argv[6]) == "one")) {
    if (rank == 0)
      std::fprintf(stderr, "usage: headcount_ring_bench N HEADS HEAD_DIM CAUSAL THREADS [one]\n");
    MPI_Finalize();
    return 2;
  }
  const i64 n = std::atoll(argv[1]), H = std::atoll(argv[2]), D = std::atoll(argv[3]);
  const bool causal = std::atoi(argv[4]) != 0;
  const int threads = std::atoi(argv[5]);
  const double baseline = peak_mib();  // the process with MPI started, before any tensor
  if (argc ==
      7) {  // one process alone, for its peak memory: `headcount_ring_bench ... one`, no mpirun
    auto whole = [](i64 t) { return t; };
    const Tensor q1 = make(1, n, H, D, whole), k1 = make(2, n, H, D, whole),
                 v1 = make(3, n, H, D, whole);
    Tensor out1(DType::f32, {1, n, H, D}), lse1(DType::f32, {1, H, n});
    AttentionParams p1;
    p1.q = q1.view();
    p1.k = k1.view();
    p1.v = v1.view();
    p1.out = out1.view();
    p1.lse = lse1.view();
    p1.causal = causal;
    Context ctx1(ContextOptions{.threads = threads});
    const auto start = std::chrono::steady_clock::now();
    attention_streaming(ctx1, p1);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "{\"n\": %lld, \"one_process_threads\": %d, \"seconds\": %.3f, \"peak_mib\": %.1f, "
        "\"baseline_mib\": %.1f}\n",
        static_cast<long long>(n), threads, seconds, peak_mib(), baseline);
    MPI_Finalize();
    return 0;
  }
  try {
    const distributed::RingLayout lay = distributed::ring_layout(n, P, rank);
    const i64 L2 = lay.local_rows();
    auto global = [&](i64 t) { return lay.global_row(t); };
    const Tensor q = make(1, L2, H, D, global), k = make(2, L2, H, D, global),
                 v = make(3, L2, H, D, global);
    Tensor out(DType::f32, {1, L2, H, D}), lse(DType::f32, {1, H, L2});
    AttentionParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.lse = lse.view();
    p.causal = causal;
    Context ctx(ContextOptions{.threads = 1});
    MPI_Barrier(MPI_COMM_WORLD);
    distributed::CommStats comm;
    distributed::ring_attention(MPI_COMM_WORLD, ctx, p, &comm);
    const double ring_peak = peak_mib();

    // Per rank: peak MiB, seconds, waiting seconds, bytes sent; gathered on rank 0.
    double mine[5] = {ring_peak, comm.total_seconds, comm.wait_seconds,
                      static_cast<double>(comm.bytes_sent), baseline};
    std::vector<double> all(static_cast<std::size_t>(5 * P));
    MPI_Gather(mine, 5, MPI_DOUBLE, all.data(), 5, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    const CommunicationCost cost = communication_cost(
        {.d_model = H * D, .heads = H, .kv_heads = H, .head_dim = D, .seq_len = n}, P);

    MPI_Barrier(MPI_COMM_WORLD);  // the other ranks wait here while rank 0 runs one process
    if (rank != 0) {
      MPI_Send(out.data<float>(), static_cast<int>(out.numel()), MPI_FLOAT, 0, 9, MPI_COMM_WORLD);
      MPI_Send(lse.data<float>(), static_cast<int>(lse.numel()), MPI_FLOAT, 0, 9, MPI_COMM_WORLD);
      MPI_Finalize();
      return 0;
    }
    auto whole = [](i64 t) { return t; };
    const Tensor q1 = make(1, n, H, D, whole), k1 = make(2, n, H, D, whole),
                 v1 = make(3, n, H, D, whole);
    Tensor out1(DType::f32, {1, n, H, D}), lse1(DType::f32, {1, H, n});
    AttentionParams p1 = p;
    p1.q = q1.view();
    p1.k = k1.view();
    p1.v = v1.view();
    p1.out = out1.view();
    p1.lse = lse1.view();
    Context ctx1(ContextOptions{.threads = threads});
    const auto start = std::chrono::steady_clock::now();
    attention_streaming(ctx1, p1);
    const double one_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // The bound of tests/mpi/test_ring.cpp, with G <= scale * sum_d max|q_d| max|k_d| <= scale * D.
    const double u = std::ldexp(1.0, -24);
    auto gamma = [&](double m) { return m * u / (1 - m * u); };
    const double G = D / std::sqrt(static_cast<double>(D)), Vmax = 1.0;
    double Lmax = 0;
    for (i64 i = 0; i < lse1.numel(); ++i)
      Lmax = std::max(Lmax, std::fabs(double(lse1.data<float>()[i])));
    const double eta = 2 * (gamma(D + 1) * G + 2 * u * G) + 4 * u;
    const double eps_o = (2 * eta + gamma(3.0 * n + 2)) * Vmax,
                 eps_l = eta + gamma(2.0 * n) + 2 * u * Lmax;
    const double K = 1 + double(P - 1) * double(distributed::ring_layout(n, P, 0).pieces());
    const double bound_o = 2 * eps_o + (2 * eps_l + (2 * K + 4) * u) * Vmax;
    const double bound_l = 2 * eps_l + gamma(K + 2) + 2 * u * Lmax;

    double max_o = 0, max_l = 0;
    i64 bitwise_differ = 0;
    std::vector<float> ro(static_cast<std::size_t>(out.numel())),
        rl(static_cast<std::size_t>(lse.numel()));
    for (int r = 0; r < P; ++r) {
      if (r == 0) {
        std::copy_n(out.data<float>(), out.numel(), ro.data());
        std::copy_n(lse.data<float>(), lse.numel(), rl.data());
      } else {
        MPI_Recv(ro.data(), static_cast<int>(ro.size()), MPI_FLOAT, r, 9, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        MPI_Recv(rl.data(), static_cast<int>(rl.size()), MPI_FLOAT, r, 9, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
      }
      const distributed::RingLayout lr = distributed::ring_layout(n, P, r);
      for (i64 t = 0; t < L2; ++t) {
        const i64 g = lr.global_row(t);
        for (i64 i = 0; i < H * D; ++i) {
          const float a = ro[static_cast<std::size_t>(t * H * D + i)],
                      b = out1.data<float>()[g * H * D + i];
          max_o = std::max(max_o, std::fabs(double(a) - b));
          bitwise_differ += a != b;
        }
        for (i64 h = 0; h < H; ++h)
          max_l = std::max(max_l, std::fabs(double(rl[static_cast<std::size_t>(h * L2 + t)]) -
                                            lse1.data<float>()[h * n + g]));
      }
    }
    std::printf(
        "{\"n\": %lld, \"heads\": %lld, \"head_dim\": %lld, \"causal\": %s, \"ranks\": %d, "
        "\"one_process_threads\": %d,\n",
        static_cast<long long>(n), static_cast<long long>(H), static_cast<long long>(D),
        causal ? "true" : "false", P, threads);
    std::printf(" \"one_process_seconds\": %.3f, \"one_process_peak_mib\": %.1f,\n", one_seconds,
                peak_mib());
    std::printf(
        " \"max_abs_diff_out\": %.3e, \"bound_out\": %.3e, \"max_abs_diff_lse\": %.3e, "
        "\"bound_lse\": %.3e, "
        "\"out_elements_not_bitwise\": %lld, \"within_bound\": %s,\n",
        max_o, bound_o, max_l, bound_l, static_cast<long long>(bitwise_differ),
        max_o <= bound_o && max_l <= bound_l ? "true" : "false");
    std::printf(" \"cost_model_ring_bytes_per_rank\": %lld,\n \"ranks_detail\": [",
                static_cast<long long>(cost.ring_bytes));
    for (int r = 0; r < P; ++r)
      std::printf(
          "%s\n  {\"rank\": %d, \"peak_mib\": %.1f, \"baseline_mib\": %.1f, \"seconds\": %.3f, "
          "\"wait_seconds\": %.6f, \"wait_fraction\": %.2e, \"bytes_sent\": %.0f}",
          r ? "," : "", r, all[5 * r], all[5 * r + 4], all[5 * r + 1], all[5 * r + 2],
          all[5 * r + 2] / all[5 * r + 1], all[5 * r + 3]);
    std::printf("]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "headcount_ring_bench (rank %d): %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return 0;
}
