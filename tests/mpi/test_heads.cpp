// Heads over ranks against one process, on every rank of MPI_COMM_WORLD (1 to 4 ranks).
//
// The layer: every rank computes its heads whole, so the kernel's lse of each head (and the
// concat buffer) is bitwise the one process's. Only W_o's sum over the concat columns changes
// order: one process sums K = heads * v_head_dim products and the bias in its GEMM's order;
// with P ranks each rank sums its K/P products (and the bias, or +0), then the all-reduce adds
// the P partials in MPI's order. Any order of summing N terms errs by at most
// gamma_(N-1) * sum |terms| (Higham 4.2), so per output element
//   |out_P - out_1| <= (gamma_K + gamma_(K/P + P)) * (sum_k |c_k w_k| + |b|)
// with c the (shared, bitwise) concat row; with one rank the all-reduce is a copy and the local
// layer is the whole layer: bitwise.
// The attention core split by heads (attention_heads) sums nothing across ranks: bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "headcount/cost.h"
#include "headcount/distributed.h"
#include "headcount/error.h"
#include "mpi_testing.h"

namespace headcount::testing {
namespace {

using distributed::HeadParallelAttention;

struct LayerCase {
  std::int64_t heads, kv_heads, head_dim, d_model;
  bool causal;
};

void check_layer(const LayerCase& lc) {
  const int P = world_size(), rank = world_rank();
  const MultiHeadAttentionConfig config{
      .d_model = lc.d_model, .heads = lc.heads, .kv_heads = lc.kv_heads, .head_dim = lc.head_dim};
  const std::int64_t B = 2, n = 9;
  const Tensor x = uniform({B, n, lc.d_model}, 11);
  const std::vector<std::int64_t> key_lengths{9, 6};

  // One process: out, lse of every head, and the concat buffer (from `observe`).
  MultiHeadAttention whole(config, MultiHeadAttentionWeights::random(config, 7));
  const MultiHeadAttentionWeights& weights = whole.weights();
  Context ctx({.threads = 1});
  Tensor out1(DType::f32, {B, n, lc.d_model}), lse1(DType::f32, {B, lc.heads, n});
  const std::int64_t K = lc.heads * lc.head_dim;
  Tensor concat(DType::f32, {B, n, K});
  AttentionOptions o1{.causal = lc.causal, .key_lengths = key_lengths, .lse = lse1.view()};
  o1.observe = [&](const AttentionParams& p) {
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t h = 0; h < lc.heads; ++h)
          for (std::int64_t e = 0; e < lc.head_dim; ++e)
            concat.data<float>()[((b * n + t) * lc.heads + h) * lc.head_dim + e] =
                p.out.ptr<float>()[p.out.offset({b, t, h, e})];
  };
  whole.forward(ctx, x.view(), out1.view(), o1);

  // P ranks.
  HeadParallelAttention layer(MPI_COMM_WORLD, config, weights);
  const distributed::HeadSplit& s = layer.split();
  Tensor outP(DType::f32, {B, n, lc.d_model}), lseP(DType::f32, {B, s.heads, n});
  distributed::CommStats comm;
  layer.forward(
      ctx, x.view(), outP.view(),
      AttentionOptions{.causal = lc.causal, .key_lengths = key_lengths, .lse = lseP.view()}, &comm);

  // The core: this rank's heads bitwise.
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t t = 0; t < n; ++t) {
        const float want = lse1.data<float>()[(b * lc.heads + s.head_begin + h) * n + t];
        const float got = lseP.data<float>()[(b * s.heads + h) * n + t];
        ASSERT_EQ(std::memcmp(&want, &got, 4), 0)
            << "rank " << rank << " lse b" << b << " h" << h << " t" << t;
      }
  // W_o's regrouped sum: the bound in the header comment.
  const float* w_o = weights.w_o.data<const float>();
  for (std::int64_t r = 0; r < B * n; ++r)
    for (std::int64_t j = 0; j < lc.d_model; ++j) {
      double magnitude = std::fabs(weights.b_o.data<const float>()[j]);
      for (std::int64_t k = 0; k < K; ++k)
        magnitude += std::fabs(double(concat.data<float>()[r * K + k]) * w_o[k * lc.d_model + j]);
      const double bound = (gamma_n(double(K)) + gamma_n(double(K / P + P))) * magnitude;
      const float want = out1.data<float>()[r * lc.d_model + j],
                  got = outP.data<float>()[r * lc.d_model + j];
      if (P == 1) ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << "row " << r << " column " << j;
      ASSERT_LE(std::fabs(double(got) - want), bound)
          << "rank " << rank << " row " << r << " column " << j;
    }
  // The communication: one all-reduce of B * n * d_model floats (cost model: communication_cost).
  const CommunicationCost cost = communication_cost({.d_model = lc.d_model,
                                                     .heads = lc.heads,
                                                     .kv_heads = lc.kv_heads,
                                                     .head_dim = lc.head_dim,
                                                     .seq_len = n,
                                                     .batch = B},
                                                    P);
  EXPECT_EQ(comm.bytes_sent, cost.allreduce_bytes);
  EXPECT_EQ(comm.messages, 1);
}

TEST(HeadParallel, MultiHeadLayerMatchesOneProcess) {
  check_layer({.heads = 12, .kv_heads = 12, .head_dim = 4, .d_model = 48, .causal = false});
}
TEST(HeadParallel, GroupedQueryCausalLayerMatchesOneProcess) {
  check_layer({.heads = 24, .kv_heads = 12, .head_dim = 3, .d_model = 40, .causal = true});
}

TEST(HeadParallel, RanksMustDivideKvHeads) {
  const int P = world_size();
  EXPECT_THROW(distributed::split_heads(8, 4, 3, 0), Error);
  EXPECT_THROW(distributed::split_heads(8, 2, 4, 1), Error);
  EXPECT_NO_THROW(distributed::split_heads(8, 4, 4, 3));
  if (P == 1) return;
  // Every rank throws, before any work, when the ranks do not divide kv_heads or outnumber them.
  for (std::int64_t kv_heads : {std::int64_t{P + 1}, std::int64_t{1}}) {
    const MultiHeadAttentionConfig config{
        .d_model = 2 * kv_heads * 4, .heads = 2 * kv_heads, .kv_heads = kv_heads};
    const MultiHeadAttentionWeights weights = MultiHeadAttentionWeights::random(config, 3);
    try {
      HeadParallelAttention layer(MPI_COMM_WORLD, config, weights);
      ADD_FAILURE() << "no error for " << P << " ranks over kv_heads = " << kv_heads;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ranks"), std::string::npos) << e.what();
    }
  }
}

TEST(HeadParallel, BadLseOnOneRankThrowsOnEveryRank) {
  // The last rank alone passes an lse with the whole layer's head count: every rank throws
  // (none is left waiting in the all-reduce), the others naming that rank.
  const int P = world_size(), rank = world_rank();
  const MultiHeadAttentionConfig config{.d_model = 48, .heads = 12, .kv_heads = 12};
  HeadParallelAttention layer(MPI_COMM_WORLD, config, MultiHeadAttentionWeights::random(config, 5));
  const Tensor x = uniform({1, 4, 48}, 6);
  Tensor out(DType::f32, {1, 4, 48});
  Tensor lse(DType::f32, {1, rank == P - 1 ? std::int64_t{13} : layer.split().heads, 4});
  Context ctx({.threads = 1});
  try {
    layer.forward(ctx, x.view(), out.view(), AttentionOptions{.lse = lse.view()});
    ADD_FAILURE() << "no error on rank " << rank;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lse"), std::string::npos) << e.what();
    if (rank != P - 1)
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(P - 1)), std::string::npos)
          << e.what();
  }
}

TEST(HeadParallel, CoreSplitByHeadsIsBitwiseOnRankZero) {
  const int P = world_size();
  const std::int64_t B = 2, n = 7, m = 11, H = 24, Hkv = 12, D = 5, Dv = 3;
  const Tensor q = uniform({B, n, H, D}, 1), k = uniform({B, m, Hkv, D}, 2),
               v = uniform({B, m, Hkv, Dv}, 3);
  const Tensor bias = uniform({1, H, n, m}, 4);
  const std::vector<std::int64_t> key_lengths{11, 4};
  auto params = [&](Tensor& out, Tensor& lse) {
    AttentionParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.lse = lse.view();
    p.causal = true;
    p.key_lengths = key_lengths;
    p.bias = bias.view();
    return p;
  };
  Tensor out1(DType::f32, {B, n, H, Dv}), lse1(DType::f32, {B, H, n});
  Tensor outP(DType::f32, {B, n, H, Dv}), lseP(DType::f32, {B, H, n});
  Context ctx({.threads = 1});
  attention(ctx, Kernel::streaming, params(out1, lse1));
  distributed::CommStats comm;
  distributed::attention_heads(MPI_COMM_WORLD, ctx, Kernel::streaming, params(outP, lseP), &comm);
  if (world_rank() == 0) {
    EXPECT_EQ(std::memcmp(out1.data<float>(), outP.data<float>(), out1.bytes()), 0);
    EXPECT_EQ(std::memcmp(lse1.data<float>(), lseP.data<float>(), lse1.bytes()), 0);
  } else {
    const CommunicationCost cost = communication_cost({.d_model = H * D,
                                                       .heads = H,
                                                       .kv_heads = Hkv,
                                                       .head_dim = D,
                                                       .v_head_dim = Dv,
                                                       .seq_len = n,
                                                       .kv_len = m,
                                                       .batch = B},
                                                      P);
    EXPECT_EQ(comm.bytes_sent, cost.gather_bytes);
  }
}

}  // namespace
}  // namespace headcount::testing
