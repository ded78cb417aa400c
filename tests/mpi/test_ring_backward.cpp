// Ring attention backward against the one-process streaming backward, on every rank.
//
// With one rank it is one backward call whose results are copied: bitwise. With P ranks every
// gradient is a sum over key blocks (dQ) or over the ranks' query blocks (dK, dV) of the
// per-block backward's partial sums. Each term (P_ij dO_i for dV, scale dS_ij q_i for dK,
// scale dS_ij k_j for dQ, with P_ij = exp(s_ij - lse_i) from the same final lse and dS_ij =
// P_ij (dO_i.v_j - dO_i.O_i)) is computed from the same inputs by the same kernel arithmetic,
// so what changes is the grouping of the sums, plus the P - 1 additions across blocks. Any
// order of summing N terms errs by at most gamma_(N-1) sum |terms| (Higham 4.2); both results
// are such sums of N <= n * group terms (+ P for the block sums), so per element
//   |g_P - g_1| <= 2 gamma_(N + P) * M,  M = sum |terms| (in float64 here, from the inputs).
// With the fp32 terms themselves off by a relative eta (test_ring.cpp's score-and-exp error,
// if the kernels' tiles ever computed a term differently), M picks up a factor (1 + 2 eta):
// the bound below uses 2 (gamma_(N+P) + eta) M.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "headcount/attention_backward.h"
#include "headcount/cost.h"
#include "headcount/distributed.h"
#include "headcount/error.h"
#include "mpi_testing.h"

namespace headcount::testing {
namespace {

struct Case {
  std::int64_t batch, chunk, heads, kv_heads, dim, v_dim;
  bool causal;
  std::vector<std::int64_t> key_percent;
};

Tensor rows_of(const Tensor& whole, const distributed::RingLayout& lay) {
  const std::int64_t B = whole.size(0), n = whole.size(1), row = whole.size(2) * whole.size(3);
  Tensor out(DType::f32, {B, lay.local_rows(), whole.size(2), whole.size(3)});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < lay.local_rows(); ++t)
      std::copy_n(whole.data<const float>() + (b * n + lay.global_row(t)) * row, row,
                  out.data<float>() + (b * lay.local_rows() + t) * row);
  return out;
}

void check(const Case& c) {
  const int P = world_size(), rank = world_rank();
  const std::int64_t B = c.batch, n = 2 * P * c.chunk, H = c.heads, Hkv = c.kv_heads, D = c.dim,
                     Dv = c.v_dim;
  const std::int64_t group = H / Hkv;
  const Tensor q = uniform({B, n, H, D}, 31), k = uniform({B, n, Hkv, D}, 32),
               v = uniform({B, n, Hkv, Dv}, 33);
  const Tensor d_out = uniform({B, n, H, Dv}, 34);
  std::vector<std::int64_t> key_lengths;
  for (std::int64_t pct : c.key_percent) key_lengths.push_back(n * pct / 100);

  // One process: forward (out, lse) and backward.
  Context ctx({.threads = 1});
  Tensor out(DType::f32, {B, n, H, Dv}), lse(DType::f32, {B, H, n});
  AttentionParams p1;
  p1.q = q.view();
  p1.k = k.view();
  p1.v = v.view();
  p1.out = out.view();
  p1.lse = lse.view();
  p1.causal = c.causal;
  p1.key_lengths = key_lengths;
  attention_streaming(ctx, p1);
  Tensor dq1(DType::f32, q.shape()), dk1(DType::f32, k.shape()), dv1(DType::f32, v.shape());
  attention_backward_streaming(
      ctx, p1, {.d_out = d_out.view(), .d_q = dq1.view(), .d_k = dk1.view(), .d_v = dv1.view()});

  // The ring, from this rank's rows of everything (out and lse: the one process's, whose rows
  // the ring forward reproduces within test_ring.cpp's bound; here the backward alone is tested).
  const distributed::RingLayout lay = distributed::ring_layout(n, P, rank);
  const Tensor ql = rows_of(q, lay), kl = rows_of(k, lay), vl = rows_of(v, lay),
               ol = rows_of(out, lay);
  const Tensor dol = rows_of(d_out, lay);
  Tensor lsel(DType::f32, {B, H, lay.local_rows()});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < lay.local_rows(); ++t)
        lsel.data<float>()[(b * H + h) * lay.local_rows() + t] =
            lse.data<float>()[(b * H + h) * n + lay.global_row(t)];
  AttentionParams pl = p1;
  pl.q = ql.view();
  pl.k = kl.view();
  pl.v = vl.view();
  pl.out = const_cast<Tensor&>(ol).view();
  pl.lse = lsel.view();
  Tensor dqP(DType::f32, ql.shape()), dkP(DType::f32, kl.shape()), dvP(DType::f32, vl.shape());
  distributed::CommStats comm;
  distributed::ring_attention_backward(
      MPI_COMM_WORLD, ctx, pl,
      {.d_out = dol.view(), .d_q = dqP.view(), .d_k = dkP.view(), .d_v = dvP.view()}, &comm);
  const CommunicationCost cost = communication_cost({.d_model = H * D,
                                                     .heads = H,
                                                     .kv_heads = Hkv,
                                                     .head_dim = D,
                                                     .v_head_dim = Dv,
                                                     .seq_len = n,
                                                     .batch = B},
                                                    P);
  EXPECT_EQ(comm.bytes_sent, cost.ring_backward_bytes);
  EXPECT_EQ(comm.bytes_sent, (2 * P - 1) * B * lay.local_rows() * Hkv * (D + Dv) * 4 * (P > 1));

  // M of the header comment, in float64.
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> mq(q.numel()), mk(k.numel()), mv(v.numel());
  double G = 0;
  auto at = [](const Tensor& t, std::int64_t b, std::int64_t r, std::int64_t h, std::int64_t e) {
    return double(t.data<float>()[((b * t.size(1) + r) * t.size(2) + h) * t.size(3) + e]);
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t hk = h / group;
      for (std::int64_t i = 0; i < n; ++i) {
        const double L = lse.data<float>()[(b * H + h) * n + i];
        if (std::isinf(L)) continue;
        double Di = 0;
        for (std::int64_t e = 0; e < Dv; ++e) Di += at(d_out, b, i, h, e) * at(out, b, i, h, e);
        for (std::int64_t j = 0; j < n; ++j) {
          if ((c.causal && j > i) || (!key_lengths.empty() && j >= key_lengths[b])) continue;
          double s = 0, abs_s = 0, dp = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            s += at(q, b, i, h, d) * at(k, b, j, hk, d);
            abs_s += std::fabs(at(q, b, i, h, d) * at(k, b, j, hk, d));
          }
          G = std::max(G, scale * abs_s);
          const double pij = std::exp(scale * s - L);
          for (std::int64_t e = 0; e < Dv; ++e) dp += at(d_out, b, i, h, e) * at(v, b, j, hk, e);
          const double ds = std::fabs(pij * (dp - Di));
          for (std::int64_t d = 0; d < D; ++d) {
            mq[((b * n + i) * H + h) * D + d] += scale * ds * std::fabs(at(k, b, j, hk, d));
            mk[((b * n + j) * Hkv + hk) * D + d] += scale * ds * std::fabs(at(q, b, i, h, d));
          }
          for (std::int64_t e = 0; e < Dv; ++e)
            mv[((b * n + j) * Hkv + hk) * Dv + e] += pij * std::fabs(at(d_out, b, i, h, e));
        }
      }
    }
  const double eta = 2 * (gamma_n(double(D + 1)) * G + 2 * kU * G) + 4 * kU;
  const double factor = 2 * (gamma_n(double(n * group + P)) + eta);

  auto compare = [&](const Tensor& whole, const Tensor& mine, const std::vector<double>& m,
                     const char* what) {
    const std::int64_t row = whole.size(2) * whole.size(3);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < lay.local_rows(); ++t)
        for (std::int64_t x = 0; x < row; ++x) {
          const std::int64_t gi = (b * n + lay.global_row(t)) * row + x;
          const float want = whole.data<float>()[gi],
                      got = mine.data<float>()[(b * lay.local_rows() + t) * row + x];
          if (P == 1) {
            ASSERT_EQ(std::memcmp(&want, &got, 4), 0)
                << what << " row " << lay.global_row(t) << " x " << x;
          } else {
            ASSERT_LE(std::fabs(double(got) - want), factor * m[gi])
                << what << " rank " << rank << " row " << lay.global_row(t) << " x " << x;
          }
        }
  };
  compare(dq1, dqP, mq, "dq");
  compare(dk1, dkP, mk, "dk");
  compare(dv1, dvP, mv, "dv");
}

TEST(RingBackward, FullAttentionMatchesOneProcess) {
  check({.batch = 2,
         .chunk = 4,
         .heads = 2,
         .kv_heads = 2,
         .dim = 8,
         .v_dim = 8,
         .causal = false,
         .key_percent = {}});
}
TEST(RingBackward, CausalGroupedWithPaddingMatchesOneProcess) {
  check({.batch = 2,
         .chunk = 5,
         .heads = 4,
         .kv_heads = 2,
         .dim = 6,
         .v_dim = 5,
         .causal = true,
         .key_percent = {100, 60}});
}

}  // namespace
}  // namespace headcount::testing
