// Both backward kernels against the tests' own float64 backward (attention_backward_naive.h),
// which finite differences of the float64 forward check in turn.
//
// Tolerances, from the arithmetic (u = 2^-24, the fp32 unit roundoff):
//  - reference: double accumulation, each gradient rounded once to fp32, so
//      |ref - exact| <= u·|exact| + slack,   slack = 1e-10·max|exact|
//    where the slack covers the double sums of both implementations: at most
//    ~2·(kv_len + q_len + d) <= 4500 terms each, gamma ~ 4500·2^-53 = 5e-13 of a sum of
//    magnitudes that is at most ~100x the largest gradient on these inputs.
//  - finite differences (float64 forward, central, step h = 2^-14 on inputs rounded to
//    multiples of 2^-8, so the step is exact in fp32): truncation h²/6·|L'''| plus
//    rounding 2^-53·|L|/h; with |L| ~ 10 and |L'''| ~ 100 that is ~6e-8, so
//    1e-6·(1 + |grad|) is a bound with room.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "attention_backward_naive.h"
#include "attention_inputs.h"
#include "case_table.h"
#include "headcount/attention_backward.h"

namespace headcount::testing {
namespace {

constexpr double kU = 1.0 / (1 << 24);

struct Grads {
  Tensor d_q, d_k, d_v, d_bias;
  AttentionBackwardStats stats;
};

Tensor random_d_out(const AttentionCase& c, std::uint64_t seed) {
  Tensor t(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

Tensor poisoned(std::vector<std::int64_t> shape) {
  Tensor t(DType::f32, std::move(shape));
  std::fill_n(t.data<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
  return t;
}

// Runs the forward (streaming, as a training step would) for out and lse, then the backward.
Grads run_backward(Kernel kernel, const AttentionInputs& in, const Tensor& d_out, int threads,
                   Isa isa = Isa::best, bool with_forward = true) {
  const AttentionCase& c = in.c;
  Context ctx({.threads = threads, .isa = isa});
  Tensor out(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim}), lse(DType::f32, {c.batch, c.heads, c.q_len});
  AttentionParams p = in.params(out, lse);
  if (with_forward) {
    attention(ctx, Kernel::streaming, p);
  } else {
    p.out = {};
    p.lse = {};
  }
  Grads g{poisoned({c.batch, c.q_len, c.heads, c.head_dim}), poisoned({c.batch, c.kv_len, c.kv_heads, c.head_dim}),
          poisoned({c.batch, c.kv_len, c.kv_heads, c.v_head_dim}), {}, {}};
  if (!in.bias.empty()) g.d_bias = poisoned({in.bias.shape[0], in.bias.shape[1], c.q_len, c.kv_len});
  g.stats = attention_backward(ctx, kernel, p,
                               {.d_out = d_out.view(), .d_q = g.d_q.view(), .d_k = g.d_k.view(),
                                .d_v = g.d_v.view(), .d_bias = g.d_bias.empty() ? TensorView{} : g.d_bias.view()});
  return g;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}

// Every element within u·|want| + slack of the float64 value.
void expect_rounded_once(const Tensor& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(static_cast<std::size_t>(got.numel()), want.size()) << what;
  const double slack = 1e-10 * max_abs(want);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.data<float>()[i];
    ASSERT_LE(std::fabs(g - want[i]), kU * std::fabs(want[i]) + slack) << what << "[" << i << "] = " << g
                                                                       << ", float64 " << want[i];
  }
}

void expect_reference_matches(const AttentionInputs& in, const Tensor& d_out, bool with_forward) {
  const NaiveGrads want = naive_backward_f64(in, d_out.view());
  const Grads g = run_backward(Kernel::reference, in, d_out, 2, Isa::best, with_forward);
  expect_rounded_once(g.d_q, want.d_q, "d_q");
  expect_rounded_once(g.d_k, want.d_k, "d_k");
  expect_rounded_once(g.d_v, want.d_v, "d_v");
  if (!in.bias.empty()) expect_rounded_once(g.d_bias, want.d_bias, "d_bias");
}

// Largest |got - want| over the elements of a gradient.
double max_error(const Tensor& got, const std::vector<double>& want) {
  double err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.data<float>()[i];
    err = std::isfinite(g) ? std::max(err, std::fabs(g - want[i])) : std::numeric_limits<double>::infinity();
  }
  return err;
}

// The streaming kernel (see the file comment for the derivation): at most three times
// what the plain fp32 backward errs, plus u times the largest condition of the tensor.
void expect_streaming_matches(const AttentionInputs& in, const Tensor& d_out, const NaiveGrads& want,
                              const NaiveGrads& plain, int threads, Isa isa = Isa::best) {
  const Grads g = run_backward(Kernel::streaming, in, d_out, threads, isa);
  auto check = [&](const Tensor& got, const std::vector<double>& exact, const std::vector<double>& f32,
                   const std::vector<double>& cond, const char* what) {
    double plain_error = 0;
    for (std::size_t i = 0; i < exact.size(); ++i) plain_error = std::max(plain_error, std::fabs(f32[i] - exact[i]));
    const double bound = 3 * plain_error + kU * max_abs(cond);
    EXPECT_LE(max_error(got, exact), bound) << in.c.name() << " " << what << " on " << isa_name(isa)
                                            << ", plain fp32 errs " << plain_error << ", u·cond " << kU * max_abs(cond);
  };
  check(g.d_q, want.d_q, plain.d_q, want.cond_q, "d_q");
  check(g.d_k, want.d_k, plain.d_k, want.cond_k, "d_k");
  check(g.d_v, want.d_v, plain.d_v, want.cond_v, "d_v");
  if (!in.bias.empty()) check(g.d_bias, want.d_bias, plain.d_bias, want.cond_bias, "d_bias");
}

// The cases of the table small enough for the float64 oracles (O(B·H·n·m·d) each).
std::vector<AttentionCase> small_cases() {
  std::vector<AttentionCase> out;
  for (const AttentionCase& c : kernel_cases())
    if (c.batch * c.heads * c.q_len * c.kv_len * (c.head_dim + c.v_head_dim) <= 100'000'000) out.push_back(c);
  return out;
}

class BackwardCases : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(BackwardCases, ReferenceMatchesFloat64) {
  const AttentionInputs in = make_inputs(GetParam(), 7);
  const Tensor d_out = random_d_out(GetParam(), 11);
  expect_reference_matches(in, d_out, /*with_forward=*/true);
}

TEST_P(BackwardCases, StreamingMatchesFloat64) {
  const AttentionInputs in = make_inputs(GetParam(), 7);
  const Tensor d_out = random_d_out(GetParam(), 11);
  expect_streaming_matches(in, d_out, naive_backward_f64(in, d_out.view()), naive_backward_f32(in, d_out.view()), 2);
}

INSTANTIATE_TEST_SUITE_P(Table, BackwardCases, ::testing::ValuesIn(small_cases()),
                         [](const auto& info) { return info.param.name(); });

TEST(AttentionBackward, ReferenceWithoutForwardResults) {
  const AttentionCase c{.batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 9, .v_head_dim = 5, .q_len = 11,
                        .kv_len = 13, .causal = true, .key_padding = true, .bias = BiasKind::broadcast};
  expect_reference_matches(make_inputs(c, 3), random_d_out(c, 4), /*with_forward=*/false);
}

// The float64 backward itself against central differences of the float64 forward.
TEST(AttentionBackward, Float64BackwardMatchesFiniteDifferences) {
  for (const AttentionCase& c :
       {AttentionCase{.batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 5, .v_head_dim = 3, .q_len = 4,
                      .kv_len = 6, .causal = true, .key_padding = true, .bias = BiasKind::per_head},
        AttentionCase{.batch = 1, .heads = 2, .kv_heads = 1, .head_dim = 4, .v_head_dim = 4, .q_len = 6,
                      .kv_len = 3, .causal = true, .bias = BiasKind::broadcast, .scale = 0.7f},
        AttentionCase{.batch = 1, .heads = 3, .kv_heads = 3, .head_dim = 3, .v_head_dim = 2, .q_len = 5,
                      .kv_len = 5, .window_left = 1, .window_right = 1}}) {
    AttentionInputs in = make_inputs(c, 21);
    const Tensor d_out = random_d_out(c, 22);
    // Inputs rounded to multiples of 2^-8 (|x| < 2^8 here), so x ± h with h = 2^-14 is
    // exact in fp32: the float64 forward sees exactly the symmetric step.
    const double h = std::ldexp(1.0, -14);
    for (Tensor* t : {&in.q_storage, &in.k_storage, &in.v_storage, &in.bias_storage})
      for (std::int64_t i = 0; i < t->numel(); ++i) {
        float& x = t->data<float>()[i];
        if (std::isfinite(x)) x = std::ldexp(std::nearbyint(std::ldexp(x, 8)), -8);
      }
    const NaiveGrads grads = naive_backward_f64(in, d_out.view());
    auto check = [&](Tensor& storage, const TensorView& view, const std::vector<double>& grad, const char* what) {
      ASSERT_EQ(storage.numel(), view.numel()) << what;  // these cases use contiguous views
      for (std::int64_t i = 0; i < storage.numel(); ++i) {
        float* x = storage.data<float>() + i;
        const float saved = *x;
        if (std::isinf(saved)) continue;  // a -inf bias entry: not differentiable (its grad is 0)
        *x = static_cast<float>(saved + h);
        ASSERT_EQ(static_cast<double>(*x) - saved, h);
        const double plus = naive_loss_f64(in, d_out.view());
        *x = static_cast<float>(saved - h);
        const double minus = naive_loss_f64(in, d_out.view());
        *x = saved;
        const double fd = (plus - minus) / (2 * h);
        EXPECT_NEAR(grad[static_cast<std::size_t>(i)], fd, 1e-6 * (1 + std::fabs(fd)))
            << c.name() << " " << what << "[" << i << "]";
      }
    };
    check(in.q_storage, in.q, grads.d_q, "d_q");
    check(in.k_storage, in.k, grads.d_k, "d_k");
    check(in.v_storage, in.v, grads.d_v, "d_v");
    check(in.bias_storage, in.bias, grads.d_bias, "d_bias");
  }
}

}  // namespace
}  // namespace headcount::testing
