// Ring attention against the one-process streaming kernel, on every rank of MPI_COMM_WORLD.
//
// With one rank ring attention is one streaming call and a merge of one partial (x * 1 / 1):
// bitwise. With P ranks a row's keys are split into blocks whose partials (O_s, lse_s) are
// merged in fp32. The bound, from the arithmetic (u = 2^-24, gamma_n as in mpi_testing.h):
//  - a score s = scale * q.k has error <= gamma_(D+1) * G, G = max scale * sum_d |q_d k_d|;
//    the max subtracted (itself a score) and the subtraction add <= 2 u G. Each unnormalised
//    weight e^(s - m) is then off by a factor within 1 + eta, eta = 2 (gamma_(D+1) G + 2 u G)
//    + 4 u (the exponent's error counted for s and m, exp's 2 ulp).
//  - one kernel's output over m keys: the weights normalised by a sum of m terms rescaled
//    once per tile (< m), and P.V summed over m terms:
//      |O - O*| <= eps_O = (2 eta + gamma_(3m+2)) * Vmax,  |lse - lse*| <= eps_l = eta +
//      gamma_(2m) + 2 u Lmax.
//  - the merge of K partials (K = 1 + (P - 1) * pieces: the own block, then each other block in
//    RingLayout::pieces() pieces): weights e^(lse_s - M) / L off by 2 eps_l + (K + 3) u
//    relative (the lse errors, exp, a sum of K terms, the division), the weighted sum of K
//    terms (K + 1) u:  |O_ring - O*| <= eps_O + (2 eps_l + (2K + 4) u) Vmax,  |lse_ring - lse*|
//    <= eps_l + gamma_(K+2) + 2 u Lmax.
// So |O_ring - O_1| <= 2 eps_O + (2 eps_l + (2K + 4) u) Vmax and |lse_ring - lse_1| <= 2 eps_l +
// gamma_(K+2) + 2 u Lmax, m = n (the ring's partials see fewer keys). A lost or doubled piece,
// a wrong mask or a wrong merge weight errs by O(Vmax), far above it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "headcount/cost.h"
#include "headcount/distributed.h"
#include "headcount/error.h"
#include "mpi_testing.h"

namespace headcount::testing {
namespace {

struct RingCase {
  std::int64_t batch, chunk, heads, kv_heads, head_dim, v_head_dim;
  bool causal;
  std::vector<std::int64_t> key_lengths;  // as a fraction of n: entries in [0, 100] percent
};

// Rows of this rank (zig-zag) from a whole [B, n, heads, dim] tensor.
Tensor local_rows(const Tensor& whole, const distributed::RingLayout& lay) {
  const std::int64_t B = whole.size(0), n = whole.size(1), row = whole.size(2) * whole.size(3);
  Tensor out(DType::f32, {B, lay.local_rows(), whole.size(2), whole.size(3)});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < lay.local_rows(); ++t)
      std::copy_n(whole.data<const float>() + (b * n + lay.global_row(t)) * row, row,
                  out.data<float>() + (b * lay.local_rows() + t) * row);
  return out;
}

void check_ring(const RingCase& rc) {
  const int P = world_size(), rank = world_rank();
  const std::int64_t B = rc.batch, n = 2 * P * rc.chunk, H = rc.heads, Hkv = rc.kv_heads;
  const std::int64_t D = rc.head_dim, Dv = rc.v_head_dim;
  const Tensor q = uniform({B, n, H, D}, 21), k = uniform({B, n, Hkv, D}, 22),
               v = uniform({B, n, Hkv, Dv}, 23);
  std::vector<std::int64_t> key_lengths;
  for (std::int64_t pct : rc.key_lengths) key_lengths.push_back(n * pct / 100);

  Context ctx({.threads = 1});
  Tensor out1(DType::f32, {B, n, H, Dv}), lse1(DType::f32, {B, H, n});
  AttentionParams p1;
  p1.q = q.view();
  p1.k = k.view();
  p1.v = v.view();
  p1.out = out1.view();
  p1.lse = lse1.view();
  p1.causal = rc.causal;
  p1.key_lengths = key_lengths;
  attention_streaming(ctx, p1);

  const distributed::RingLayout lay = distributed::ring_layout(n, P, rank);
  const Tensor ql = local_rows(q, lay), kl = local_rows(k, lay), vl = local_rows(v, lay);
  Tensor outP(DType::f32, {B, lay.local_rows(), H, Dv}), lseP(DType::f32, {B, H, lay.local_rows()});
  std::fill_n(outP.data<float>(), outP.numel(), std::nanf(""));
  std::fill_n(lseP.data<float>(), lseP.numel(), std::nanf(""));
  AttentionParams pl = p1;
  pl.q = ql.view();
  pl.k = kl.view();
  pl.v = vl.view();
  pl.out = outP.view();
  pl.lse = lseP.view();
  distributed::CommStats comm;
  distributed::ring_attention(MPI_COMM_WORLD, ctx, pl, &comm);

  // The bound of the header comment.
  const float scale = 1.0f / std::sqrt(float(D));
  double G = 0, Vmax = 0, Lmax = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d)
            dot += std::fabs(double(q.data<float>()[((b * n + i) * H + h) * D + d]) *
                             k.data<float>()[((b * n + j) * Hkv + h / (H / Hkv)) * D + d]);
          G = std::max(G, scale * dot);
        }
  for (std::int64_t i = 0; i < v.numel(); ++i)
    Vmax = std::max(Vmax, double(std::fabs(v.data<float>()[i])));
  for (std::int64_t i = 0; i < lse1.numel(); ++i)
    if (std::isfinite(lse1.data<float>()[i]))
      Lmax = std::max(Lmax, double(std::fabs(lse1.data<float>()[i])));
  const double eta = 2 * (gamma_n(double(D + 1)) * G + 2 * kU * G) + 4 * kU;
  const double eps_o = (2 * eta + gamma_n(double(3 * n + 2))) * Vmax;
  const double eps_l = eta + gamma_n(double(2 * n)) + 2 * kU * Lmax;
  const double K = 1 + double(P - 1) * double(lay.pieces());  // partials merged per row
  const double bound_o = 2 * eps_o + (2 * eps_l + (2 * K + 4) * kU) * Vmax;
  const double bound_l = 2 * eps_l + gamma_n(K + 2) + 2 * kU * Lmax;

  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < lay.local_rows(); ++t)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t g = lay.global_row(t);
        const float want_l = lse1.data<float>()[(b * H + h) * n + g];
        const float got_l = lseP.data<float>()[(b * H + h) * lay.local_rows() + t];
        if (P == 1 || std::isinf(want_l)) {
          ASSERT_EQ(std::memcmp(&want_l, &got_l, 4), 0)
              << "rank " << rank << " lse b" << b << " row " << g;
        } else {
          ASSERT_LE(std::fabs(double(got_l) - want_l), bound_l)
              << "rank " << rank << " lse b" << b << " row " << g;
        }
        for (std::int64_t e = 0; e < Dv; ++e) {
          const float want = out1.data<float>()[((b * n + g) * H + h) * Dv + e];
          const float got = outP.data<float>()[((b * lay.local_rows() + t) * H + h) * Dv + e];
          if (P == 1) {
            ASSERT_EQ(std::memcmp(&want, &got, 4), 0)
                << "out b" << b << " row " << g << " head " << h;
          } else {
            ASSERT_LE(std::fabs(double(got) - want), bound_o)
                << "rank " << rank << " out b" << b << " row " << g << " head " << h << " (bound "
                << bound_o << ")";
          }
        }
      }
  // Communication: P - 1 steps, each sending this rank's whole K/V block (in pieces).
  const CommunicationCost cost = communication_cost({.d_model = H * D,
                                                     .heads = H,
                                                     .kv_heads = Hkv,
                                                     .head_dim = D,
                                                     .v_head_dim = Dv,
                                                     .seq_len = n,
                                                     .batch = B},
                                                    P);
  ASSERT_TRUE(cost.ring_possible);
  EXPECT_EQ(comm.bytes_sent, cost.ring_bytes);
  EXPECT_EQ(comm.bytes_sent, (P - 1) * B * lay.local_rows() * Hkv * (D + Dv) * 4);
  EXPECT_EQ(comm.bytes_received, comm.bytes_sent);
}

TEST(Ring, FullAttentionMatchesOneProcess) {
  check_ring({.batch = 2,
              .chunk = 5,
              .heads = 2,
              .kv_heads = 2,
              .head_dim = 8,
              .v_head_dim = 8,
              .causal = false,
              .key_lengths = {}});
}
TEST(Ring, CausalMatchesOneProcess) {
  check_ring({.batch = 1,
              .chunk = 6,
              .heads = 4,
              .kv_heads = 2,
              .head_dim = 8,
              .v_head_dim = 5,
              .causal = true,
              .key_lengths = {}});
}
TEST(Ring, CausalWithKeyPaddingMatchesOneProcess) {
  // Padding that ends inside a first chunk, inside a second chunk, and none.
  check_ring({.batch = 3,
              .chunk = 4,
              .heads = 2,
              .kv_heads = 1,
              .head_dim = 6,
              .v_head_dim = 6,
              .causal = true,
              .key_lengths = {30, 80, 100}});
}
TEST(Ring, KeyPaddingWithoutCausalMatchesOneProcess) {
  check_ring({.batch = 2,
              .chunk = 3,
              .heads = 3,
              .kv_heads = 3,
              .head_dim = 4,
              .v_head_dim = 7,
              .causal = false,
              .key_lengths = {55, 0}});
}

TEST(Ring, BadLayoutsThrowOnEveryRank) {
  EXPECT_THROW(distributed::ring_layout(10, 3, 0), Error);  // 2 * 3 does not divide 10
  EXPECT_NO_THROW(distributed::ring_layout(12, 3, 2));
  const int P = world_size();
  // An odd number of local rows: every rank throws (the ranks agree before any message).
  const Tensor q = uniform({1, 3, 1, 4}, 1), k = uniform({1, 3, 1, 4}, 2),
               v = uniform({1, 3, 1, 4}, 3);
  Tensor out(DType::f32, {1, 3, 1, 4});
  AttentionParams p;
  p.q = q.view();
  p.k = k.view();
  p.v = v.view();
  p.out = out.view();
  Context ctx({.threads = 1});
  EXPECT_THROW(distributed::ring_attention(MPI_COMM_WORLD, ctx, p), Error);
  // One rank alone with a bad key length: the others throw too, naming it.
  const Tensor q2 = uniform({1, 2, 1, 4}, 1), k2 = uniform({1, 2, 1, 4}, 2),
               v2 = uniform({1, 2, 1, 4}, 3);
  Tensor out2(DType::f32, {1, 2, 1, 4});
  const std::vector<std::int64_t> bad{world_rank() == P - 1 ? 2 * P + 1 : 1};
  p.q = q2.view();
  p.k = k2.view();
  p.v = v2.view();
  p.out = out2.view();
  p.key_lengths = bad;
  try {
    distributed::ring_attention(MPI_COMM_WORLD, ctx, p);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key_lengths"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace headcount::testing
