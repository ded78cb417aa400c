// Gradient checks of the trainable model: every piece (GEMM with transposes, LayerNorm, GELU,
// embeddings, cross-entropy, the attention sub-block with head gates) and the whole model
// (MHA, GQA, MQA; pre/post-LN; causal decoder and bidirectional encoder; attention-only;
// ignored targets; gates) against central finite differences of float64 forwards written in
// the tests (train_reference.h and below), independent of src/train.
//
// Tolerances. The finite difference of a double forward f with step h has truncation error
// h²/6·|f'''| and rounding error ~ε64·|f|/h; with h = 1e-5 the truncation is estimated per
// element from the same difference at 2h (Richardson: err(h) ≈ |fd(h) − fd(2h)| / 3, we allow
// 2x that) and the rounding (~1e-11 for |f| ~ 1) is covered by an absolute 1e-9. The fp32 side
// errs, per element, by at most γ_n = n·u (u = 2^-24) relative to the magnitude of the terms of
// each length-n sum it goes through, and the errors of `depth` chained stages add to first
// order. We bound the terms' magnitude by S, the largest reference gradient of the tensor
// (sums that cancel make an element's own size meaningless), so
//   |g32 − g_fd| ≤ 4 · depth · n · u · S + 2 · |fd(h) − fd(2h)| + 1e-9,
// the 4 covering the forward rounding seen by the backward (2: value and gradient paths) and
// the exp/log/erf/sqrt evaluations (≤ 2 ulp each). n and depth are stated per test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "headcount/train/model.h"
#include "layers/gemm.h"
#include "layers/packed_gemm.h"
#include "train/attention_block.h"
#include "train/cross_entropy.h"
#include "train/embedding.h"
#include "train/gelu.h"
#include "train/layer_norm.h"
#include "train_reference.h"

namespace headcount::testing {
namespace {

constexpr double kU = 1.0 / (1 << 24);
constexpr double kStep = 1e-5;

using ref::Vec;

Vec random_vec(std::size_t n, std::mt19937_64& rng, double std, double mean = 0) {
  std::normal_distribution<double> normal(mean, std);
  Vec v(n);
  for (double& x : v) x = static_cast<float>(normal(rng));  // representable in fp32
  return v;
}
std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

struct Fd {
  Vec grad, truncation;  // fd(h) and |fd(h) - fd(2h)|
};
// Central differences of f at v (v is restored).
Fd finite_differences(const std::function<double()>& f, Vec& v) {
  Fd out{Vec(v.size()), Vec(v.size())};
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    auto at = [&](double dx) {
      v[i] = x + dx;
      const double y = f();
      v[i] = x;
      return y;
    };
    const double g1 = (at(kStep) - at(-kStep)) / (2 * kStep);
    const double g2 = (at(2 * kStep) - at(-2 * kStep)) / (4 * kStep);
    out.grad[i] = g1;
    out.truncation[i] = std::abs(g1 - g2);
  }
  return out;
}

// The bound in the file comment; `got` has fd.grad.size() entries.
template <typename T>
void expect_gradient(const T* got, const Fd& fd, double depth, double n, const std::string& what) {
  double scale = 0;
  for (double g : fd.grad) scale = std::max(scale, std::abs(g));
  const double fp32 = 4 * depth * n * kU * scale;
  double worst = 0;
  for (std::size_t i = 0; i < fd.grad.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - fd.grad[i]);
    const double tol = fp32 + 2 * fd.truncation[i] + 1e-9;
    worst = std::max(worst, err / tol);
    EXPECT_LE(err, tol) << what << "[" << i << "]: got " << got[i] << ", finite difference "
                        << fd.grad[i];
  }
  // The check must be able to fail: the reference gradient is not all zero.
  EXPECT_GT(scale, 0) << what;
  ::testing::Test::RecordProperty(what + "_worst_over_bound", std::to_string(worst));
}

// ---- pieces ------------------------------------------------------------------------------

// C = op(A)·op(B) (+ C) (+ bias) against double, with the elementwise γ_k bound
// |Δ| ≤ 1.01·(k + 2)·u·(|c| + Σ|a||b| + |bias|): k multiply-adds onto the accumulator (started
// at C's value with accumulate), then one rounding of + bias. Shapes: many row tasks (m = 70),
// one row tile (m = 5), a depth past one depth block of 768 with a ragged panel (n = 130), and
// strided leading dimensions (every operand a column range of a wider matrix).
TEST(TrainGemm, TransposeFlagsMatchDouble) {
  std::mt19937_64 rng(1);
  for (int threads : {1, 2})
    for (auto [m, n, k, pad] :
         {std::tuple{70, 37, 45, 0}, std::tuple{5, 150, 33, 3}, std::tuple{13, 130, 800, 5}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (int mode = 0; mode < 3; ++mode) {  // 0: C = A·B, 1: C += A·B, 2: C = A·B + bias
            const bool acc = mode == 1, with_bias = mode == 2;
            Context ctx({.threads = threads});
            const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
            const Vec a = random_vec(static_cast<std::size_t>((ta ? k : m) * lda), rng, 1);
            const Vec b = random_vec(static_cast<std::size_t>((tb ? n : k) * ldb), rng, 1);
            const Vec c0 = random_vec(static_cast<std::size_t>(m * ldc), rng, 1),
                      bias = random_vec(static_cast<std::size_t>(n), rng, 1);
            std::vector<float> af = to_float(a), bf = to_float(b), cf = to_float(c0),
                               biasf = to_float(bias);
            layers::gemm(ctx, {.m = m,
                               .n = n,
                               .k = k,
                               .a = af.data(),
                               .lda = lda,
                               .b = bf.data(),
                               .ldb = ldb,
                               .c = cf.data(),
                               .ldc = ldc,
                               .bias = with_bias ? biasf.data() : nullptr,
                               .accumulate = acc,
                               .trans_a = ta,
                               .trans_b = tb});
            for (int i = 0; i < m; ++i) {
              for (int j = 0; j < n; ++j) {
                double sum = acc ? c0[static_cast<std::size_t>(i * ldc + j)] : 0.0,
                       mag = std::abs(sum);
                for (int r = 0; r < k; ++r) {
                  const double x = a[static_cast<std::size_t>(ta ? r * lda + i : i * lda + r)];
                  const double y = b[static_cast<std::size_t>(tb ? j * ldb + r : r * ldb + j)];
                  sum += x * y;
                  mag += std::abs(x * y);
                }
                if (with_bias) {
                  sum += bias[static_cast<std::size_t>(j)];
                  mag += std::abs(bias[static_cast<std::size_t>(j)]);
                }
                ASSERT_LE(std::abs(cf[static_cast<std::size_t>(i * ldc + j)] - sum),
                          1.01 * (k + 2) * kU * mag)
                    << "m " << m << " n " << n << " k " << k << " ta " << ta << " tb " << tb
                    << " mode " << mode << " threads " << threads;
              }
              // The padding columns of C are not written.
              for (int j = n; j < ldc; ++j)
                ASSERT_EQ(cf[static_cast<std::size_t>(i * ldc + j)],
                          static_cast<float>(c0[static_cast<std::size_t>(i * ldc + j)]));
            }
          }
}

// The training GEMM's invariance (layers/gemm.h): every output is one accumulator in depth
// order, so 1, 2 and 3 threads give the same bits, a row gives the same bits alone as in the
// batch, and the in-place operands give the bits of the inference side's packed GEMM.
TEST(TrainGemm, BitwiseInvariantToThreadsRowsAndPacking) {
  std::mt19937_64 rng(11);
  const std::int64_t m = 150, n = 200, k = 900;
  std::vector<float> a = to_float(random_vec(static_cast<std::size_t>(m * k), rng, 1));
  std::vector<float> b = to_float(random_vec(static_cast<std::size_t>(k * n), rng, 1));
  std::vector<float> bias = to_float(random_vec(static_cast<std::size_t>(n), rng, 1));
  auto run = [&](int threads, std::int64_t rows, const float* x) {
    Context ctx({.threads = threads});
    std::vector<float> c(static_cast<std::size_t>(rows * n));
    layers::gemm(ctx, {.m = rows,
                       .n = n,
                       .k = k,
                       .a = x,
                       .lda = k,
                       .b = b.data(),
                       .ldb = n,
                       .c = c.data(),
                       .ldc = n,
                       .bias = bias.data()});
    return c;
  };
  const std::vector<float> one = run(1, m, a.data());
  EXPECT_EQ(run(2, m, a.data()), one);
  EXPECT_EQ(run(3, m, a.data()), one);
  const std::vector<float> row = run(2, 1, a.data() + 77 * k);
  EXPECT_TRUE(std::equal(row.begin(), row.end(), one.begin() + 77 * n));
  Context ctx({.threads = 2});
  const Tensor packed = layers::pack_weights(b.data(), k, n, n);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  layers::packed_gemm(ctx, {.m = m,
                            .x = a.data(),
                            .ldx = k,
                            .w = &packed,
                            .n = n,
                            .bias = bias.data(),
                            .y = y.data(),
                            .ldy = n});
  EXPECT_EQ(y, one);
}

// L = Σ R ∘ LayerNorm(x): n = width (the row sums), depth 3 (statistics, normalise, backward).
TEST(TrainLayerNorm, BackwardMatchesFiniteDifferences) {
  Context ctx({.threads = 2});
  std::mt19937_64 rng(2);
  const std::int64_t rows = 37, width = 19;  // rows > one task of 16
  Vec x = random_vec(static_cast<std::size_t>(rows * width), rng, 2.0, 0.5);
  Vec gamma = random_vec(static_cast<std::size_t>(width), rng, 0.3, 1.0),
      beta = random_vec(static_cast<std::size_t>(width), rng, 0.3);
  const Vec r = random_vec(x.size(), rng, 1);
  auto loss = [&] {
    const Vec y = ref::layer_norm(x, rows, width, gamma, beta);
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * r[i];
    return s;
  };
  std::vector<float> xf = to_float(x), gf = to_float(gamma), bf = to_float(beta), rf = to_float(r);
  std::vector<float> y(x.size()), mean(static_cast<std::size_t>(rows)), rstd(mean.size());
  train::layer_norm_forward(ctx, xf.data(), rows, width, gf.data(), bf.data(), y.data(),
                            mean.data(), rstd.data());
  std::vector<float> dx(x.size(), 0.5f), dgamma(gamma.size()), dbeta(beta.size());
  train::layer_norm_backward(ctx, {.x = xf.data(),
                                   .dy = rf.data(),
                                   .gamma = gf.data(),
                                   .mean = mean.data(),
                                   .rstd = rstd.data(),
                                   .rows = rows,
                                   .width = width,
                                   .dx = dx.data(),
                                   .dgamma = dgamma.data(),
                                   .dbeta = dbeta.data(),
                                   .accumulate_dx = true});
  for (float& v : dx) v -= 0.5f;  // accumulate_dx added onto 0.5 (exact: |dx| < 2^23 ulp headroom)
  expect_gradient(dx.data(), finite_differences(loss, x), 3, width + 1, "dx");
  expect_gradient(dgamma.data(), finite_differences(loss, gamma), 3, rows, "dgamma");
  expect_gradient(dbeta.data(), finite_differences(loss, beta), 3, rows, "dbeta");
}

// GELU elementwise: n = 1, depth 2 (erf/exp evaluation, the product).
TEST(TrainGelu, BackwardMatchesFiniteDifferences) {
  Context ctx({.threads = 2});
  std::mt19937_64 rng(3);
  Vec u = random_vec(40000, rng, 2.5);  // > two chunks of 16384
  const Vec r = random_vec(u.size(), rng, 1);
  std::vector<float> uf = to_float(u), rf = to_float(r), du(u.size());
  train::gelu_backward(ctx, uf.data(), rf.data(), du.data(), static_cast<std::int64_t>(u.size()));
  // The elements are independent: one finite difference per element of its own term.
  Fd fd{Vec(u.size()), Vec(u.size())};
  for (std::size_t i = 0; i < u.size(); ++i) {
    auto f = [&](double x) { return ref::gelu(x) * r[i]; };
    const double g1 = (f(u[i] + kStep) - f(u[i] - kStep)) / (2 * kStep);
    const double g2 = (f(u[i] + 2 * kStep) - f(u[i] - 2 * kStep)) / (4 * kStep);
    fd.grad[i] = g1;
    fd.truncation[i] = std::abs(g1 - g2);
  }
  // Per element the scale is the magnitude of the element's own terms (no sums over elements):
  // Φ = 0.5·(1 + erf) is a sum of two terms of sizes 0.5 and 0.5·|erf| (it cancels for u << 0),
  // then u·φ, then the product with r. The per-ISA erf (simd/gemm_impl.h) errs by <= 3.52e-7
  // (its measured worst case, SSE2; 6 ulp of 1), i.e. 3·u on Φ's scale, exp by <= 2 ulp, and about
  // 5 more roundings follow: |Δ| ≤ 12·u·|r|·(0.5·(1 + |erf|) + |u|·φ).
  for (std::size_t i = 0; i < u.size(); ++i) {
    const double x = u[i];
    const double mag = std::abs(r[i]) * (0.5 * (1 + std::abs(std::erf(x / std::sqrt(2.0)))) +
                                         std::abs(x) * std::exp(-x * x / 2) / std::sqrt(2 * M_PI));
    ASSERT_LE(std::abs(du[i] - fd.grad[i]), 12 * kU * mag + 2 * fd.truncation[i] + 1e-9)
        << "u = " << x;
  }
  std::vector<float> y(u.size());
  train::gelu_forward(ctx, uf.data(), y.data(), static_cast<std::int64_t>(u.size()));
  // gelu = u·Φ: 3·u from the erf (above) and two roundings, relative to |u|.
  for (std::size_t i = 0; i < u.size(); ++i)
    ASSERT_NEAR(y[i], ref::gelu(u[i]), 6 * kU * std::abs(u[i]) + 1e-30);
}

// Scatter-add with repeated tokens: exact sums in double, fp32 with n = batch·seq_len terms.
TEST(TrainEmbedding, BackwardSumsEveryOccurrence) {
  Context ctx({.threads = 2});
  std::mt19937_64 rng(4);
  const train::EmbeddingShape s{.batch = 3, .seq_len = 7, .d_model = 45, .vocab = 5, .context = 9};
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(s.batch * s.seq_len));
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 4);  // token 4 never occurs
  const Vec dx = random_vec(tokens.size() * static_cast<std::size_t>(s.d_model), rng, 1);
  std::vector<float> dxf = to_float(dx), dtok(static_cast<std::size_t>(s.vocab * s.d_model), 7.0f),
                     dpos(static_cast<std::size_t>(s.context * s.d_model), 7.0f);
  train::embedding_backward(ctx, s, tokens.data(), dxf.data(), dtok.data(), dpos.data());
  Vec want_tok(dtok.size(), 0.0), want_pos(dpos.size(), 0.0), mag_tok(dtok.size(), 0.0),
      mag_pos(dpos.size(), 0.0);
  for (std::size_t r = 0; r < tokens.size(); ++r)
    for (std::int64_t c = 0; c < s.d_model; ++c) {
      const double g = dx[r * static_cast<std::size_t>(s.d_model) + static_cast<std::size_t>(c)];
      const auto ti = static_cast<std::size_t>(tokens[r] * s.d_model + c);
      const auto pi =
          static_cast<std::size_t>((static_cast<std::int64_t>(r) % s.seq_len) * s.d_model + c);
      want_tok[ti] += g;
      mag_tok[ti] += std::abs(g);
      want_pos[pi] += g;
      mag_pos[pi] += std::abs(g);
    }
  const double n = static_cast<double>(tokens.size());
  for (std::size_t i = 0; i < dtok.size(); ++i)
    ASSERT_LE(std::abs(dtok[i] - want_tok[i]), n * kU * mag_tok[i]) << i;
  for (std::size_t i = 0; i < dpos.size(); ++i)
    ASSERT_LE(std::abs(dpos[i] - want_pos[i]), n * kU * mag_pos[i]) << i;
  // Rows of token 4 and positions past seq_len were overwritten with zeros.
  for (std::int64_t c = 0; c < s.d_model; ++c)
    EXPECT_EQ(dtok[static_cast<std::size_t>(4 * s.d_model + c)], 0.0f);
  for (std::int64_t c = 0; c < s.d_model; ++c)
    EXPECT_EQ(dpos[static_cast<std::size_t>(8 * s.d_model + c)], 0.0f);
}

// Cross-entropy with ignored rows: n = vocab (the softmax sum), depth 2 (exp/log, normalise).
TEST(TrainCrossEntropy, LossAndGradientMatchDouble) {
  Context ctx({.threads = 2});
  std::mt19937_64 rng(5);
  const std::int64_t rows = 41, vocab = 11;
  Vec logits = random_vec(static_cast<std::size_t>(rows * vocab), rng, 3.0);
  for (std::size_t i = 0; i < static_cast<std::size_t>(vocab); ++i)
    logits[i] = static_cast<float>(logits[i] + 80.0);  // a row far from 0: the max shift matters
  std::vector<std::int32_t> targets(static_cast<std::size_t>(rows));
  for (std::size_t r = 0; r < targets.size(); ++r)
    targets[r] = r % 3 == 1 ? -1 : static_cast<std::int32_t>(rng() % vocab);
  std::vector<float> lf = to_float(logits), dl(lf.size());
  std::vector<double> row_loss(static_cast<std::size_t>(rows));
  const train::CrossEntropyResult ce =
      train::cross_entropy(ctx, lf.data(), targets.data(), rows, vocab, row_loss.data(), dl.data());
  const double want = ref::cross_entropy(logits, targets, vocab);
  EXPECT_EQ(ce.scored,
            std::count_if(targets.begin(), targets.end(), [](std::int32_t t) { return t >= 0; }));
  // The fp32 logits are exact inputs; the loss sums in double: error ~ vocab·ε64·max|logit|.
  EXPECT_NEAR(ce.loss, want, 1e-12 * 100);
  auto loss = [&] { return ref::cross_entropy(logits, targets, vocab); };
  expect_gradient(dl.data(), finite_differences(loss, logits), 2, vocab, "dlogits");
  for (std::size_t r = 0; r < targets.size(); ++r)
    if (targets[r] < 0)
      for (std::int64_t v = 0; v < vocab; ++v)
        EXPECT_EQ(dl[r * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(v)], 0.0f);
  // Nothing scored: loss 0 and zero gradients, not NaN.
  std::vector<std::int32_t> none(targets.size(), -1);
  const train::CrossEntropyResult empty =
      train::cross_entropy(ctx, lf.data(), none.data(), rows, vocab, row_loss.data(), dl.data());
  EXPECT_EQ(empty.scored, 0);
  EXPECT_EQ(empty.loss, 0.0);
  for (float v : dl) EXPECT_EQ(v, 0.0f);
}

// Distillation's KL(teacher ‖ model) per scored row against its float64 definition and its
// gradient against finite differences (n = vocab, depth 2 as for the cross-entropy); a model
// equal to its teacher has loss 0 and zero gradient.
TEST(TrainCrossEntropy, DistillationLossAndGradientMatchDouble) {
  Context ctx({.threads = 2});
  std::mt19937_64 rng(6);
  const std::int64_t rows = 23, vocab = 9;
  Vec logits = random_vec(static_cast<std::size_t>(rows * vocab), rng, 3.0);
  const Vec teacher = random_vec(static_cast<std::size_t>(rows * vocab), rng, 3.0);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(rows));
  for (std::size_t r = 0; r < targets.size(); ++r) targets[r] = r % 4 == 2 ? -1 : 0;
  auto kl = [&] {
    double total = 0;
    std::int64_t scored = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      if (targets[static_cast<std::size_t>(r)] < 0) continue;
      double ms = -INFINITY, mt = -INFINITY, ss = 0, st = 0;
      for (std::int64_t v = 0; v < vocab; ++v) {
        ms = std::max(ms, logits[static_cast<std::size_t>(r * vocab + v)]);
        mt = std::max(mt, teacher[static_cast<std::size_t>(r * vocab + v)]);
      }
      for (std::int64_t v = 0; v < vocab; ++v) {
        ss += std::exp(logits[static_cast<std::size_t>(r * vocab + v)] - ms);
        st += std::exp(teacher[static_cast<std::size_t>(r * vocab + v)] - mt);
      }
      for (std::int64_t v = 0; v < vocab; ++v) {
        const double lt = teacher[static_cast<std::size_t>(r * vocab + v)] - mt - std::log(st);
        const double ls = logits[static_cast<std::size_t>(r * vocab + v)] - ms - std::log(ss);
        total += std::exp(lt) * (lt - ls);
      }
      ++scored;
    }
    return total / static_cast<double>(scored);
  };
  std::vector<float> lf = to_float(logits), tf = to_float(teacher), dl(lf.size());
  std::vector<double> row_loss(static_cast<std::size_t>(rows));
  const train::CrossEntropyResult r = train::distillation_loss(
      ctx, lf.data(), tf.data(), targets.data(), rows, vocab, row_loss.data(), dl.data());
  EXPECT_EQ(r.scored, 17);
  EXPECT_NEAR(r.loss, kl(), 1e-12 * 100);
  EXPECT_GT(r.loss, 0.1);
  expect_gradient(dl.data(), finite_differences(kl, logits), 2, vocab, "dlogits");
  const train::CrossEntropyResult same = train::distillation_loss(
      ctx, tf.data(), tf.data(), targets.data(), rows, vocab, row_loss.data(), dl.data());
  EXPECT_NEAR(same.loss, 0.0, 1e-12);
  for (float v : dl) EXPECT_LE(std::abs(v), 1e-7f);
}

// The attention sub-block with gates (GQA, 4 query heads on 2 kv heads, head_dim decoupled):
// L = Σ R ∘ block(x). n = max(d_model, qkv width, seq_len), depth 6 (QKV GEMM, scores,
// softmax, weighted sum, gate, W_O).
TEST(TrainAttentionBlock, BackwardMatchesFiniteDifferences) {
  for (Kernel kernel : {Kernel::reference, Kernel::streaming})
    for (bool causal : {true, false}) {
      SCOPED_TRACE(std::string(kernel_name(kernel)) + (causal ? " causal" : " encoder"));
      Context ctx({.threads = 2});
      std::mt19937_64 rng(6);
      const train::AttentionBlockShape s{.batch = 2,
                                         .seq_len = 5,
                                         .d_model = 6,
                                         .heads = 4,
                                         .kv_heads = 2,
                                         .head_dim = 3,
                                         .scale = 0.45f,
                                         .causal = causal,
                                         .kernel = kernel};
      const std::int64_t N = s.rows(), W = s.qkv_width(), C = s.concat_width();
      Vec x = random_vec(static_cast<std::size_t>(N * s.d_model), rng, 1);
      Vec w_qkv = random_vec(static_cast<std::size_t>(s.d_model * W), rng, 0.5),
          b_qkv = random_vec(static_cast<std::size_t>(W), rng, 0.2);
      Vec w_o = random_vec(static_cast<std::size_t>(C * s.d_model), rng, 0.5),
          b_o = random_vec(static_cast<std::size_t>(s.d_model), rng, 0.2);
      Vec gates = {0.5, 1.25, -0.75, 1.0};
      const Vec r = random_vec(x.size(), rng, 1);
      auto loss = [&] {
        Vec concat =
            ref::attention(ref::linear(x, N, s.d_model, w_qkv, b_qkv, W), {.batch = s.batch,
                                                                           .seq_len = s.seq_len,
                                                                           .heads = s.heads,
                                                                           .kv_heads = s.kv_heads,
                                                                           .head_dim = s.head_dim,
                                                                           .scale = 0.45f,
                                                                           .causal = causal});
        for (std::int64_t i = 0; i < N * C; ++i)
          concat[static_cast<std::size_t>(i)] *=
              gates[static_cast<std::size_t>((i % C) / s.head_dim)];
        const Vec y = ref::linear(concat, N, C, w_o, b_o, s.d_model);
        double sum = 0;
        for (std::size_t i = 0; i < y.size(); ++i) sum += y[i] * r[i];
        return sum;
      };
      std::vector<float> xf = to_float(x), wq = to_float(w_qkv), bq = to_float(b_qkv),
                         wo = to_float(w_o), bo = to_float(b_o);
      std::vector<float> gf = to_float(gates), rf = to_float(r);
      std::vector<float> qkv(static_cast<std::size_t>(N * W)),
          concat(static_cast<std::size_t>(N * C)), gated(concat.size());
      std::vector<float> lse(static_cast<std::size_t>(s.batch * s.heads * s.seq_len)), y(x.size());
      const train::AttentionBlockWeights w{
          .w_qkv = wq.data(), .b_qkv = bq.data(), .w_o = wo.data(), .b_o = bo.data()};
      const train::AttentionBlockSaved saved{
          .qkv = qkv.data(), .concat = concat.data(), .gated = gated.data(), .lse = lse.data()};
      train::attention_block_forward(ctx, s, w, xf.data(), gf.data(), saved, y.data());
      std::vector<float> dx(x.size()), dwq(wq.size()), dbq(bq.size()), dwo(wo.size()),
          dbo(bo.size());
      std::vector<float> d_qkv(qkv.size()), d_concat(concat.size()), d_split(qkv.size());
      std::vector<double> dgates(gates.size());
      train::attention_block_backward(ctx, s, w,
                                      {.x = xf.data(),
                                       .gates = gf.data(),
                                       .saved = saved,
                                       .dy = rf.data(),
                                       .dx = dx.data(),
                                       .d_qkv = d_qkv.data(),
                                       .d_concat = d_concat.data(),
                                       .d_split = d_split.data()},
                                      {.w_qkv = dwq.data(),
                                       .b_qkv = dbq.data(),
                                       .w_o = dwo.data(),
                                       .b_o = dbo.data(),
                                       .gates = dgates.data()});
      const double n = static_cast<double>(std::max({s.d_model, W, s.seq_len, N}));
      expect_gradient(dx.data(), finite_differences(loss, x), 6, n, "dx");
      expect_gradient(dwq.data(), finite_differences(loss, w_qkv), 6, n, "dw_qkv");
      expect_gradient(dbq.data(), finite_differences(loss, b_qkv), 6, n, "db_qkv");
      expect_gradient(dwo.data(), finite_differences(loss, w_o), 6, n, "dw_o");
      expect_gradient(dbo.data(), finite_differences(loss, b_o), 6, n, "db_o");
      expect_gradient(dgates.data(), finite_differences(loss, gates), 6, n, "dgates");
    }
}

// ---- the whole model ---------------------------------------------------------------------

struct ModelCase {
  const char* name;
  train::ModelConfig config;
  bool gates = false;
};

std::vector<ModelCase> model_cases() {
  using train::NormPlacement;
  return {
      {"mha_pre_causal",
       {.vocab = 7, .context = 6, .layers = 2, .d_model = 8, .heads = 2, .d_ff = 12}},
      {"gqa_post_encoder_head_dim",
       {.vocab = 6,
        .context = 5,
        .layers = 2,
        .d_model = 6,
        .heads = 4,
        .kv_heads = 2,
        .head_dim = 3,
        .d_ff = 10,
        .norm = NormPlacement::post,
        .causal = false}},
      {"mqa_pre_attention_only",
       {.vocab = 5,
        .context = 5,
        .layers = 2,
        .d_model = 8,
        .heads = 4,
        .kv_heads = 1,
        .attention_only = true}},
      {"mha_post_causal_gates_scale",
       {.vocab = 6,
        .context = 5,
        .layers = 1,
        .d_model = 6,
        .heads = 3,
        .d_ff = 9,
        .scale = 0.8f,
        .norm = NormPlacement::post},
       true},
      {"gqa_pre_encoder_gates",
       {.vocab = 7,
        .context = 6,
        .layers = 2,
        .d_model = 8,
        .heads = 4,
        .kv_heads = 2,
        .d_ff = 8,
        .causal = false},
       true},
      {"mqa_post_attention_only_gates",
       {.vocab = 5,
        .context = 4,
        .layers = 2,
        .d_model = 4,
        .heads = 2,
        .kv_heads = 1,
        .head_dim = 3,
        .norm = NormPlacement::post,
        .attention_only = true},
       true},
      // A pruned model's shape: per-layer query and K/V head counts (4 on 2, 1 on 1, 3 on 3).
      {"per_layer_heads_post_encoder_gates",
       {.vocab = 6,
        .context = 5,
        .layers = 3,
        .d_model = 8,
        .heads = 4,
        .head_dim = 2,
        .d_ff = 10,
        .norm = NormPlacement::post,
        .causal = false,
        .layer_heads = {4, 1, 3},
        .layer_kv_heads = {2, 1, 3}},
       true},
      // The Llama family's pieces: RMSNorm, rotary positions (a base small enough that the
      // angles at positions 1-4 differ visibly), SwiGLU, no biases, the head tied to tok_emb.
      {"llama_gqa_rotary_swiglu_tied",
       {.vocab = 7,
        .context = 6,
        .layers = 2,
        .d_model = 8,
        .heads = 4,
        .kv_heads = 2,
        .head_dim = 4,
        .d_ff = 10,
        .rms_norm = true,
        .rope_base = 3.0f,
        .swiglu = true,
        .biases = false,
        .tied_head = true}},
      // The pieces one by one beside the others: rotary and SwiGLU with biases, an untied head,
      // LayerNorm, MQA, gates.
      {"rotary_swiglu_biases_mqa_gates",
       {.vocab = 6,
        .context = 5,
        .layers = 1,
        .d_model = 6,
        .heads = 3,
        .kv_heads = 1,
        .head_dim = 2,
        .d_ff = 7,
        .rope_base = 2.0f,
        .swiglu = true},
       true},
  };
}

// Random values for every parameter (biases and LayerNorm too, so their gradients are
// exercised), a batch with ignored targets (and seq_len < context: pos_emb rows past it get 0).
train::Batch fill_case(train::Model& model, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (train::Parameter& p : model.parameters()) {
    const bool ln_weight =
        p.value.rank() == 1 && p.name.find("ln") != std::string::npos && p.name.ends_with("weight");
    const Vec v = random_vec(static_cast<std::size_t>(p.value.numel()), rng,
                             p.value.rank() >= 2 ? 0.5 : 0.2, ln_weight ? 1.0 : 0.0);
    std::copy(v.begin(), v.end(), p.value.data<float>());
  }
  const train::ModelConfig& c = model.config();
  train::Batch batch{.batch = 2, .seq_len = c.context - 1};
  for (std::int64_t i = 0; i < batch.batch * batch.seq_len; ++i) {
    batch.tokens.push_back(static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(c.vocab)));
    batch.targets.push_back(
        i % 4 == 1 ? train::Batch::kIgnore
                   : static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(c.vocab)));
  }
  return batch;
}

class TrainModelGradients : public ::testing::TestWithParam<std::tuple<int, Kernel>> {};

TEST_P(TrainModelGradients, EveryParameterMatchesFiniteDifferences) {
  const ModelCase mc = model_cases()[static_cast<std::size_t>(std::get<0>(GetParam()))];
  const Kernel kernel = std::get<1>(GetParam());
  SCOPED_TRACE(mc.name);
  Context ctx({.threads = 2});
  train::Model model(mc.config, 11);
  const train::ModelConfig& c = model.config();
  const train::Batch batch = fill_case(model, 12);
  std::vector<std::vector<double>> gates;
  train::ForwardOptions options{.kernel = kernel};
  if (mc.gates) {
    std::mt19937_64 rng(13);
    for (std::int64_t l = 0; l < c.layers; ++l) {
      gates.push_back(random_vec(static_cast<std::size_t>(c.heads_in(l)), rng, 0.4, 1.0));
      options.head_gates.push_back(std::vector<float>(gates.back().begin(), gates.back().end()));
    }
  }
  const train::StepResult step = model.forward_backward(ctx, batch, options);
  ref::Params p = ref::params_of(model);
  const double want_loss = ref::model_loss(c, p, batch, gates);
  // Loss: depth·n·u relative to the loss (a sum of positive terms), as in the gradient bound.
  std::int64_t widest = 0;
  for (std::int64_t l = 0; l < c.layers; ++l)
    widest = std::max(widest, (c.heads_in(l) + 2 * c.kv_heads_in(l)) * c.head_dim);
  const double n = static_cast<double>(
      std::max({c.d_model, widest, c.d_ff, c.vocab, batch.batch * batch.seq_len}));
  const double depth = 8.0 * static_cast<double>(c.layers) +
                       4;  // ~8 rounded stages per block + embed, ln_f, head, CE
  EXPECT_NEAR(step.loss, want_loss, 4 * depth * n * kU * want_loss);
  EXPECT_EQ(step.scored, batch.batch * batch.seq_len - (batch.batch * batch.seq_len + 2) / 4);
  for (train::Parameter& param : model.parameters()) {
    Vec& v = p.at(param.name);
    const Fd fd = finite_differences([&] { return ref::model_loss(c, p, batch, gates); }, v);
    expect_gradient(param.grad.data<const float>(), fd, depth, n, param.name);
  }
  for (std::int64_t l = 0; l < c.layers; ++l) {
    Vec g = gates.empty() ? Vec(static_cast<std::size_t>(c.heads_in(l)), 1.0)
                          : gates[static_cast<std::size_t>(l)];
    std::vector<std::vector<double>> all = gates;
    if (all.empty())
      for (std::int64_t k = 0; k < c.layers; ++k)
        all.emplace_back(static_cast<std::size_t>(c.heads_in(k)), 1.0);
    const Fd fd = finite_differences(
        [&] {
          all[static_cast<std::size_t>(l)] = g;
          return ref::model_loss(c, p, batch, all);
        },
        g);
    expect_gradient(step.gate_grads[static_cast<std::size_t>(l)].data(), fd, depth, n,
                    "gates " + std::to_string(l));
  }
  // The forward alone gives the same loss, bitwise (same code path, no gradient).
  EXPECT_EQ(model.forward(ctx, batch, nullptr, options), step.loss);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainModelGradients,
    ::testing::Combine(::testing::Range(0, 9),
                       ::testing::Values(Kernel::reference, Kernel::streaming)),
    [](const auto& info) {
      return std::string(model_cases()[static_cast<std::size_t>(std::get<0>(info.param))].name) +
             "_" + kernel_name(std::get<1>(info.param));
    });

}  // namespace
}  // namespace headcount::testing
