// The MultiHeadAttention layer, and the seeds' equivalences as tests:
//  - the fused QKV projection, sliced per head, equals separate per-head projections
//    (the layer against a per-head pipeline written here, head by head);
//  - grouped- and multi-query attention equal multi-head attention with K/V heads repeated;
//  - the multiply-adds the kernels and the layer count equal the cost model's.
//
// Tolerance for the layer against the per-head pipeline in float64: the layer runs fp32
// GEMMs, so it may err at most twice as much as the same per-head pipeline run in plain
// fp32, plus one ulp of the largest output (FlashAttention's rule, as in test_kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "headcount/cost.h"
#include "headcount/error.h"
#include "headcount/multi_head_attention.h"

namespace headcount::testing {
namespace {

constexpr double kU = 1.0 / (1 << 24);

Tensor random_input(std::int64_t batch, std::int64_t len, std::int64_t width, std::uint64_t seed) {
  Tensor x(DType::f32, {batch, len, width});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = normal(rng);
  return x;
}

// out[b, i, :] for one layer, computed head by head with each head's own slab of the
// weights: Q_h = x · W_q[:, h*dk:(h+1)*dk] + b_q[h], and so on; every sum in Real.
template <typename Real>
std::vector<Real> per_head_layer(const MultiHeadAttention& layer, const Tensor& x_q,
                                 const Tensor& x_kv, bool causal) {
  const MultiHeadAttentionConfig& c = layer.config();
  const MultiHeadAttentionWeights& w = layer.weights();
  const std::int64_t B = x_q.size(0), n = x_q.size(1), m = x_kv.size(1);
  const std::int64_t group = c.heads / c.kv_heads;
  const Real scale = Real(static_cast<float>(1.0 / std::sqrt(double(c.head_dim))));
  auto slab = [](const Tensor& x, std::int64_t b, std::int64_t i, const Tensor& W,
                 const Tensor& bias, std::int64_t col0, std::int64_t cols) {
    std::vector<Real> y(static_cast<std::size_t>(cols));
    const std::int64_t in = W.size(0), width = W.size(1);
    for (std::int64_t c2 = 0; c2 < cols; ++c2) {
      Real acc = bias.empty() ? Real(0) : Real(bias.data<float>()[col0 + c2]);
      for (std::int64_t r = 0; r < in; ++r)
        acc += Real(x.data<float>()[(b * x.size(1) + i) * in + r]) *
               Real(W.data<float>()[r * width + col0 + c2]);
      y[static_cast<std::size_t>(c2)] = acc;
    }
    return y;
  };
  std::vector<Real> concat(static_cast<std::size_t>(B * n * c.heads * c.v_head_dim), Real(0));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const std::int64_t g = h / group;
      std::vector<std::vector<Real>> K, V;
      for (std::int64_t j = 0; j < m; ++j) {
        K.push_back(slab(x_kv, b, j, w.w_k, w.b_k, g * c.head_dim, c.head_dim));
        V.push_back(slab(x_kv, b, j, w.w_v, w.b_v, g * c.v_head_dim, c.v_head_dim));
      }
      for (std::int64_t i = 0; i < n; ++i) {
        const std::vector<Real> q = slab(x_q, b, i, w.w_q, w.b_q, h * c.head_dim, c.head_dim);
        std::vector<Real> s(static_cast<std::size_t>(m));
        Real mx = -std::numeric_limits<Real>::infinity();
        const std::int64_t last = causal ? std::min(m - 1, i + m - n) : m - 1;
        for (std::int64_t j = 0; j <= last; ++j) {
          Real dot = 0;
          for (std::int64_t d = 0; d < c.head_dim; ++d) dot += q[d] * K[j][d];
          s[j] = scale * dot;
          mx = std::max(mx, s[j]);
        }
        Real l = 0;
        for (std::int64_t j = 0; j <= last; ++j) l += (s[j] = std::exp(s[j] - mx));
        for (std::int64_t e = 0; e < c.v_head_dim; ++e) {
          Real acc = 0;
          for (std::int64_t j = 0; j <= last; ++j) acc += s[j] * V[j][e];
          concat[((b * n + i) * c.heads + h) * c.v_head_dim + e] = acc / l;
        }
      }
    }
  std::vector<Real> out(static_cast<std::size_t>(B * n * c.d_model));
  const std::int64_t cw = c.heads * c.v_head_dim;
  for (std::int64_t r = 0; r < B * n; ++r)
    for (std::int64_t j = 0; j < c.d_model; ++j) {
      Real acc = w.b_o.empty() ? Real(0) : Real(w.b_o.data<float>()[j]);
      for (std::int64_t k = 0; k < cw; ++k)
        acc += concat[r * cw + k] * Real(w.w_o.data<float>()[k * c.d_model + j]);
      out[r * c.d_model + j] = acc;
    }
  return out;
}

void expect_matches_per_head(const MultiHeadAttention& layer, const Tensor& x_q, const Tensor& x_kv,
                             const Tensor& got, bool causal, const char* what) {
  const std::vector<double> exact = per_head_layer<double>(layer, x_q, x_kv, causal);
  const std::vector<float> plain = per_head_layer<float>(layer, x_q, x_kv, causal);
  double plain_err = 0, got_err = 0, biggest = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    plain_err = std::max(plain_err, std::fabs(double(plain[i]) - exact[i]));
    got_err = std::max(got_err, std::fabs(double(got.data<float>()[i]) - exact[i]));
    biggest = std::max(biggest, std::fabs(exact[i]));
  }
  EXPECT_LE(got_err, 2 * plain_err + kU * biggest) << what << ": plain fp32 error " << plain_err;
}

struct LayerCase {
  MultiHeadAttentionConfig config;
  std::int64_t batch, q_len, kv_len;
  bool causal;
};

class LayerEquivalence : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerEquivalence, FusedProjectionEqualsSeparatePerHeadProjections) {
  const LayerCase& lc = GetParam();
  const MultiHeadAttention layer(lc.config, MultiHeadAttentionWeights::random(lc.config, 7));
  const MultiHeadAttentionConfig& c = layer.config();
  Context ctx({.threads = 2});
  const Tensor x = random_input(lc.batch, lc.q_len, c.d_model, 11);
  const bool self = c.kv_dim == c.d_model && lc.kv_len == lc.q_len;
  const Tensor other = self ? Tensor() : random_input(lc.batch, lc.kv_len, c.kv_dim, 12);
  const Tensor& x_kv = self ? x : other;
  for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
    Tensor out(DType::f32, {lc.batch, lc.q_len, c.d_model});
    if (self) {
      layer.forward(ctx, x.view(), out.view(), {.kernel = kernel, .causal = lc.causal});
    } else {
      layer.forward(ctx, x.view(), x_kv.view(), x_kv.view(), out.view(),
                    {.kernel = kernel, .causal = lc.causal});
    }
    expect_matches_per_head(layer, x, x_kv, out, lc.causal, kernel_name(kernel));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layers, LayerEquivalence,
    ::testing::Values(
        LayerCase{{.d_model = 64, .heads = 8}, 2, 19, 19, false},
        LayerCase{{.d_model = 64, .heads = 1}, 1, 33, 33, true},
        LayerCase{{.d_model = 48, .heads = 6, .kv_heads = 2}, 2, 17, 17, true},
        LayerCase{{.d_model = 40, .heads = 4, .kv_heads = 1, .bias = false}, 3, 9, 9, false},
        LayerCase{{.d_model = 32, .heads = 4, .head_dim = 12, .v_head_dim = 5}, 2, 13, 13, false},
        LayerCase{{.d_model = 32, .heads = 4, .kv_heads = 2, .kv_dim = 24}, 2, 7, 23, false},
        LayerCase{{.d_model = 32, .heads = 2, .kv_dim = 20}, 1, 11, 5, true}));

// Query head h reads kv head h / group: repeating each kv head `group` times must give
// exactly the same numbers (the kernels do the same arithmetic in the same order).
TEST(GroupedQuery, EqualsMultiHeadWithRepeatedKvHeads) {
  const std::int64_t B = 2, n = 37, m = 45, H = 12, D = 16;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  Tensor q(DType::f32, {B, n, H, D});
  for (std::int64_t i = 0; i < q.numel(); ++i) q.data<float>()[i] = normal(rng);
  for (std::int64_t kv_heads : {12, 6, 4, 3, 2, 1}) {
    const std::int64_t group = H / kv_heads;
    Tensor k(DType::f32, {B, m, kv_heads, D}), v(DType::f32, {B, m, kv_heads, D});
    Tensor k_rep(DType::f32, {B, m, H, D}), v_rep(DType::f32, {B, m, H, D});
    for (std::int64_t i = 0; i < k.numel(); ++i) k.data<float>()[i] = normal(rng);
    for (std::int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = normal(rng);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < m; ++j)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < D; ++d) {
            k_rep.data<float>()[((b * m + j) * H + h) * D + d] =
                k.data<float>()[((b * m + j) * kv_heads + h / group) * D + d];
            v_rep.data<float>()[((b * m + j) * H + h) * D + d] =
                v.data<float>()[((b * m + j) * kv_heads + h / group) * D + d];
          }
    Context ctx({.threads = 2});
    for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
      Tensor o_gqa(DType::f32, {B, n, H, D}), o_mha(DType::f32, {B, n, H, D});
      attention(ctx, kernel,
                {.q = q.view(), .k = k.view(), .v = v.view(), .out = o_gqa.view(), .causal = true});
      attention(ctx, kernel,
                {.q = q.view(),
                 .k = k_rep.view(),
                 .v = v_rep.view(),
                 .out = o_mha.view(),
                 .causal = true});
      EXPECT_EQ(std::memcmp(o_gqa.data<float>(), o_mha.data<float>(), o_gqa.bytes()), 0)
          << kernel_name(kernel) << " kv_heads " << kv_heads;
    }
  }
}

// With head_dim = d_model / heads, the multiply-adds the layer and its kernels count
// equal the cost model's, stage by stage, whatever the head count.
TEST(Counters, LayerAndKernelsCountWhatTheCostModelPredicts) {
  const std::int64_t d_model = 64, n = 50, batch = 2;
  for (std::int64_t heads : {1, 2, 4, 8, 16}) {
    for (std::int64_t kv_heads : {heads, std::int64_t{1}}) {
      const MultiHeadAttentionConfig config{
          .d_model = d_model, .heads = heads, .kv_heads = kv_heads};
      const MultiHeadAttention layer(config, MultiHeadAttentionWeights::random(config, 3));
      const Tensor x = random_input(batch, n, d_model, 4);
      Tensor out(DType::f32, {batch, n, d_model});
      Context ctx;
      const CostReport cost = estimate_cost(
          {.d_model = d_model, .heads = heads, .kv_heads = kv_heads, .seq_len = n, .batch = batch});
      for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
        const LayerStats s = layer.forward(ctx, x.view(), out.view(), {.kernel = kernel});
        SCOPED_TRACE(std::string(kernel_name(kernel)) + " heads " + std::to_string(heads) +
                     " kv_heads " + std::to_string(kv_heads));
        EXPECT_EQ(s.q_macs, cost.stage("Q projection").macs);
        EXPECT_EQ(s.k_macs, cost.stage("K projection").macs);
        EXPECT_EQ(s.v_macs, cost.stage("V projection").macs);
        EXPECT_EQ(s.attention.score_macs, cost.stage("scores").macs);
        EXPECT_EQ(s.attention.weighted_sum_macs, cost.stage("weighted sum").macs);
        EXPECT_EQ(s.o_macs, cost.stage("O projection").macs);
        EXPECT_EQ(s.q_macs + s.k_macs + s.v_macs + s.o_macs + s.attention.score_macs +
                      s.attention.weighted_sum_macs,
                  cost.stage("attention block").macs);
        if (kernel == Kernel::reference)
          EXPECT_EQ(s.attention.peak_score_entries, cost.stage("scores").reference_score_entries);
        else
          EXPECT_EQ(s.attention.peak_score_entries, cost.stage("scores").streaming_score_entries);
      }
    }
  }
}

TEST(NeedWeights, AveragedProbabilitiesAreTheMeanOfPerHead) {
  const MultiHeadAttentionConfig config{.d_model = 24, .heads = 3};
  const MultiHeadAttention layer(config, MultiHeadAttentionWeights::random(config, 9));
  const Tensor x = random_input(2, 6, 24, 10);
  Tensor out(DType::f32, {2, 6, 24}), per_head(DType::f32, {2, 3, 6, 6}),
      mean(DType::f32, {2, 6, 6});
  Context ctx;
  layer.forward(ctx, x.view(), out.view(),
                {.causal = true, .probs_mode = ProbsMode::per_head, .probs = per_head.view()});
  layer.forward(ctx, x.view(), out.view(),
                {.causal = true, .probs_mode = ProbsMode::averaged, .probs = mean.view()});
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < 6; ++i) {
      double row = 0;
      for (std::int64_t j = 0; j < 6; ++j) {
        double m = 0;
        for (std::int64_t h = 0; h < 3; ++h)
          m += per_head.data<float>()[((b * 3 + h) * 6 + i) * 6 + j] / 3.0;
        EXPECT_NEAR(mean.data<float>()[(b * 6 + i) * 6 + j], m, 2 * kU);
        if (j > i) EXPECT_EQ(mean.data<float>()[(b * 6 + i) * 6 + j], 0.0f);  // causal
        row += mean.data<float>()[(b * 6 + i) * 6 + j];
      }
      EXPECT_NEAR(row, 1.0, 8 * kU);
    }
}

TEST(LayerErrors, NameTheParameter) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] {
              resolve(MultiHeadAttentionConfig{.d_model = 64, .heads = 6});
            }).find("heads: expected a divisor of d_model = 64"),
            std::string::npos);
  EXPECT_NE(message([] {
              resolve(MultiHeadAttentionConfig{.d_model = 64, .heads = 8, .kv_heads = 3});
            }).find("kv_heads: expected a divisor of heads = 8, got 3"),
            std::string::npos);
  EXPECT_NE(message([] {
              resolve(MultiHeadAttentionConfig{.d_model = 0, .heads = 1});
            }).find("d_model: expected >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(message([] {
              resolve(MultiHeadAttentionConfig{.d_model = 8, .heads = -2});
            }).find("heads: expected >= 1, got -2"),
            std::string::npos);

  const MultiHeadAttentionConfig config{.d_model = 16, .heads = 4};
  MultiHeadAttentionWeights w = MultiHeadAttentionWeights::random(config, 1);
  w.w_k = Tensor(DType::f32, {16, 12});
  EXPECT_NE(message([&] {
              MultiHeadAttention(config, std::move(w));
            }).find("w_k shape: expected [16, 16], got [16, 12]"),
            std::string::npos);
  MultiHeadAttentionWeights nan_weights = MultiHeadAttentionWeights::random(config, 1);
  nan_weights.w_o.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(message([&] {
              MultiHeadAttention(config, std::move(nan_weights));
            }).find("w_o: expected finite values"),
            std::string::npos);

  const MultiHeadAttention layer(config, MultiHeadAttentionWeights::random(config, 1));
  Context ctx;
  Tensor x(DType::f32, {2, 5, 16}), out(DType::f32, {2, 5, 16}), wrong(DType::f32, {2, 5, 12});
  EXPECT_NE(message([&] {
              layer.forward(ctx, wrong.view(), out.view());
            }).find("x shape: expected [batch >= 1, length >= 1, 16]"),
            std::string::npos);
  EXPECT_NE(message([&] {
              layer.forward(ctx, x.view(), wrong.view());
            }).find("out shape: expected [2, 5, 16], got [2, 5, 12]"),
            std::string::npos);
  x.data<float>()[7] = std::numeric_limits<float>::infinity();
  EXPECT_NE(message([&] {
              layer.forward(ctx, x.view(), out.view());
            }).find("x: expected finite values, got inf at [0, 0, 7]"),
            std::string::npos);
  x.data<float>()[7] = 0;
  Tensor probs(DType::f32, {2, 4, 5, 5});
  EXPECT_NE(message([&] {
              layer.forward(ctx, x.view(), out.view(),
                            {.probs_mode = ProbsMode::averaged, .probs = probs.view()});
            }).find("probs"),
            std::string::npos);
}

}  // namespace
}  // namespace headcount::testing
