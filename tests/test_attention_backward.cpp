// Both backward kernels against the tests' own float64 backward (attention_backward_naive.h),
// which finite differences of the float64 forward check in turn.
//
// Tolerances, from the arithmetic (u = 2^-24, the fp32 unit roundoff):
//  - reference: double accumulation, each gradient rounded once to fp32, so
//      |ref - exact| <= u·|exact| + slack,   slack = 1e-10·max|exact|
//    where the slack covers the double sums of both implementations: at most
//    ~2·(kv_len + q_len + d) <= 4500 terms each, gamma ~ 4500·2^-53 = 5e-13 of a sum of
//    magnitudes that is at most ~100x the largest gradient on these inputs.
//  - streaming: fp32 throughout. It reads the forward's fp32 out and lse, which the forward's
//    tests hold to 2x the plain fp32 forward's error, and then does fp32 arithmetic of the
//    same kind as a plain fp32 backward (the naive one in float: materialised P, sequential
//    sums) in another order; so its error is at most that inherited 2x plus 1x of its own:
//      max|stream - exact| <= 3·max|plain32 - exact| + u·max(cond)
//    per gradient tensor. cond (attention_backward_naive.h) is each element's sum of
//    absolute terms: the floor for elements where plain fp32 happens to be exact (one key:
//    dP - D cancels exactly there in the plain order, not in the kernel's).
//  - finite differences (float64 forward, central, step h = 2^-14 on inputs rounded to
//    multiples of 2^-8, so the step is exact in fp32): truncation h²/6·|L'''| plus
//    rounding 2^-53·|L|/h; with |L| ~ 10 and |L'''| ~ 100 that is ~6e-8, so
//    1e-6·(1 + |grad|) is a bound with room.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "attention_backward_naive.h"
#include "attention_inputs.h"
#include "case_table.h"
#include "headcount/attention_backward.h"

namespace headcount::testing {
namespace {

constexpr double kU = 1.0 / (1 << 24);

// Every instruction set this CPU runs: the streaming backward is checked on each.
std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx_bf16})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

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
  Tensor out(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim}),
      lse(DType::f32, {c.batch, c.heads, c.q_len});
  AttentionParams p = in.params(out, lse);
  if (with_forward) {
    attention(ctx, Kernel::streaming, p);
  } else {
    p.out = {};
    p.lse = {};
  }
  Grads g{poisoned({c.batch, c.q_len, c.heads, c.head_dim}),
          poisoned({c.batch, c.kv_len, c.kv_heads, c.head_dim}),
          poisoned({c.batch, c.kv_len, c.kv_heads, c.v_head_dim}),
          {},
          {}};
  if (!in.bias.empty())
    g.d_bias = poisoned({in.bias.shape[0], in.bias.shape[1], c.q_len, c.kv_len});
  g.stats = attention_backward(ctx, kernel, p,
                               {.d_out = d_out.view(),
                                .d_q = g.d_q.view(),
                                .d_k = g.d_k.view(),
                                .d_v = g.d_v.view(),
                                .d_bias = g.d_bias.empty() ? TensorView{} : g.d_bias.view()});
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
    ASSERT_LE(std::fabs(g - want[i]), kU * std::fabs(want[i]) + slack)
        << what << "[" << i << "] = " << g << ", float64 " << want[i];
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
    err = std::isfinite(g) ? std::max(err, std::fabs(g - want[i]))
                           : std::numeric_limits<double>::infinity();
  }
  return err;
}

// The streaming kernel (see the file comment for the derivation): at most three times
// what the plain fp32 backward errs, plus u times the largest condition of the tensor.
void expect_streaming_matches(const AttentionInputs& in, const Tensor& d_out,
                              const NaiveGrads& want, const NaiveGrads& plain, int threads,
                              Isa isa = Isa::best) {
  const Grads g = run_backward(Kernel::streaming, in, d_out, threads, isa);
  auto check = [&](const Tensor& got, const std::vector<double>& exact,
                   const std::vector<double>& f32, const std::vector<double>& cond,
                   const char* what) {
    double plain_error = 0;
    for (std::size_t i = 0; i < exact.size(); ++i)
      plain_error = std::max(plain_error, std::fabs(f32[i] - exact[i]));
    const double bound = 3 * plain_error + kU * max_abs(cond);
    EXPECT_LE(max_error(got, exact), bound)
        << in.c.name() << " " << what << " on " << isa_name(isa) << ", plain fp32 errs "
        << plain_error << ", u·cond " << kU * max_abs(cond);
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
    if (c.batch * c.heads * c.q_len * c.kv_len * (c.head_dim + c.v_head_dim) <= 100'000'000)
      out.push_back(c);
  // The streaming backward's task split at its edges: several key tiles dealt out in chunks
  // (few (batch, kv head) pairs), and a broadcast bias's d_bias, which moves the batch and
  // kv-head loops inside the tasks.
  out.push_back({.batch = 2,
                 .heads = 4,
                 .kv_heads = 2,
                 .head_dim = 16,
                 .v_head_dim = 16,
                 .q_len = 70,
                 .kv_len = 1100,
                 .causal = true,
                 .key_padding = true,
                 .bias = BiasKind::broadcast});
  out.push_back({.batch = 1,
                 .heads = 2,
                 .kv_heads = 1,
                 .head_dim = 32,
                 .v_head_dim = 24,
                 .q_len = 200,
                 .kv_len = 1100,
                 .window_left = 700,
                 .window_right = 40,
                 .bias = BiasKind::per_head});
  return out;
}

class BackwardCases : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(BackwardCases, ReferenceMatchesFloat64) {
  const AttentionInputs in = make_inputs(GetParam(), 7);
  const Tensor d_out = random_d_out(GetParam(), 11);
  expect_reference_matches(in, d_out, /*with_forward=*/true);
}

// Every element no term reaches (cond == 0: a query that sees no key, a key no query sees)
// must be exactly 0, not merely small.
void expect_exact_zeros(const Grads& g, const NaiveGrads& want, const char* kernel) {
  auto check = [&](const Tensor& got, const std::vector<double>& cond, const char* what) {
    for (std::size_t i = 0; i < cond.size(); ++i)
      if (cond[i] == 0)
        ASSERT_EQ(got.data<float>()[i], 0.0f) << kernel << " " << what << "[" << i << "]";
  };
  check(g.d_q, want.cond_q, "d_q");
  check(g.d_k, want.cond_k, "d_k");
  check(g.d_v, want.cond_v, "d_v");
  if (!g.d_bias.empty()) check(g.d_bias, want.cond_bias, "d_bias");
}

TEST_P(BackwardCases, StreamingMatchesFloat64OnEveryIsa) {
  const AttentionInputs in = make_inputs(GetParam(), 7);
  const Tensor d_out = random_d_out(GetParam(), 11);
  const NaiveGrads want = naive_backward_f64(in, d_out.view()),
                   plain = naive_backward_f32(in, d_out.view());
  for (Isa isa : supported_isas()) {
    expect_streaming_matches(in, d_out, want, plain, 2, isa);
    expect_exact_zeros(run_backward(Kernel::streaming, in, d_out, 2, isa), want, isa_name(isa));
  }
  expect_exact_zeros(run_backward(Kernel::reference, in, d_out, 2), want, "reference");
}

// Tasks own what they write and partials are summed in a fixed order: the thread count
// cannot change a bit.
TEST_P(BackwardCases, StreamingIsBitwiseIdenticalFor1To3Threads) {
  const AttentionInputs in = make_inputs(GetParam(), 5);
  const Tensor d_out = random_d_out(GetParam(), 6);
  const Grads one = run_backward(Kernel::streaming, in, d_out, 1);
  for (int threads : {2, 3}) {
    const Grads other = run_backward(Kernel::streaming, in, d_out, threads);
    EXPECT_EQ(std::memcmp(one.d_q.data<float>(), other.d_q.data<float>(), one.d_q.bytes()), 0)
        << threads;
    EXPECT_EQ(std::memcmp(one.d_k.data<float>(), other.d_k.data<float>(), one.d_k.bytes()), 0)
        << threads;
    EXPECT_EQ(std::memcmp(one.d_v.data<float>(), other.d_v.data<float>(), one.d_v.bytes()), 0)
        << threads;
    if (!one.d_bias.empty())
      EXPECT_EQ(
          std::memcmp(one.d_bias.data<float>(), other.d_bias.data<float>(), one.d_bias.bytes()), 0)
          << threads;
  }
}

INSTANTIATE_TEST_SUITE_P(Table, BackwardCases, ::testing::ValuesIn(small_cases()),
                         [](const auto& info) { return info.param.name(); });

// The bound of expect_streaming_matches for one gradient tensor.
double streaming_bound(const std::vector<double>& exact, const std::vector<double>& plain,
                       const std::vector<double>& cond) {
  double plain_error = 0;
  for (std::size_t i = 0; i < exact.size(); ++i)
    plain_error = std::max(plain_error, std::fabs(plain[i] - exact[i]));
  return 3 * plain_error + kU * max_abs(cond);
}

// Grouped- and multi-query attention are multi-head attention with each K/V head repeated
// over its group: dQ is the same, and dK/dV of a kv head are the sums of the repeated
// heads' dK/dV. Checked on both kernels, each within its own bound of the float64 values
// (the reference: u·|x| + slack per value; the streaming kernel: its bound above per
// tensor, the grouped one plus `group` MHA ones for a sum of `group` MHA gradients).
TEST(AttentionBackward, GroupedEqualsMultiHeadWithRepeatedKv) {
  for (const AttentionCase& c : {AttentionCase{.batch = 2,
                                .heads = 6,
                                .kv_heads = 2,
                                .head_dim = 16,
                                .v_head_dim = 24,
                                .q_len = 70,
                                .kv_len = 90,
                                .causal = true,
                                .key_padding = true},
                                 AttentionCase{.batch = 1,
                                 .heads = 4,
                                 .kv_heads = 1,
                                 .head_dim = 64,
                                 .v_head_dim = 64,
                                 .q_len = 129,
                                 .kv_len = 129,
                                 .window_left = 20,
                                 .window_right = 5,
                                 .bias = BiasKind::per_head}}) {
    const AttentionInputs grouped = make_inputs(c, 31);
    AttentionCase mc = c;
    mc.kv_heads = c.heads;
    AttentionInputs mha = make_inputs(mc, 31);
    const std::int64_t group = c.heads / c.kv_heads;
    for (std::int64_t b = 0; b < c.batch; ++b)
      for (std::int64_t j = 0; j < c.kv_len; ++j)
        for (std::int64_t h = 0; h < c.heads; ++h) {
          for (std::int64_t d = 0; d < c.head_dim; ++d)
            mha.k.ptr<float>()[mha.k.offset({b, j, h, d})] =
                grouped.k.ptr<float>()[grouped.k.offset({b, j, h / group, d})];
          for (std::int64_t e = 0; e < c.v_head_dim; ++e)
            mha.v.ptr<float>()[mha.v.offset({b, j, h, e})] =
                grouped.v.ptr<float>()[grouped.v.offset({b, j, h / group, e})];
        }
    for (std::int64_t i = 0; i < grouped.q_storage.numel(); ++i)
      mha.q_storage.data<float>()[i] = grouped.q_storage.data<float>()[i];
    for (std::int64_t i = 0; i < grouped.bias_storage.numel(); ++i)
      mha.bias_storage.data<float>()[i] = grouped.bias_storage.data<float>()[i];
    const Tensor d_out = random_d_out(c, 32);
    const NaiveGrads exact_g = naive_backward_f64(grouped, d_out.view()),
                     plain_g = naive_backward_f32(grouped, d_out.view());
    const NaiveGrads exact_m = naive_backward_f64(mha, d_out.view()),
                     plain_m = naive_backward_f32(mha, d_out.view());
    const double bound_q = streaming_bound(exact_g.d_q, plain_g.d_q, exact_g.cond_q) +
                           streaming_bound(exact_m.d_q, plain_m.d_q, exact_m.cond_q);
    const double bound_k = streaming_bound(exact_g.d_k, plain_g.d_k, exact_g.cond_k) +
                           group * streaming_bound(exact_m.d_k, plain_m.d_k, exact_m.cond_k);
    const double bound_v = streaming_bound(exact_g.d_v, plain_g.d_v, exact_g.cond_v) +
                           group * streaming_bound(exact_m.d_v, plain_m.d_v, exact_m.cond_v);
    for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
      const Grads g = run_backward(kernel, grouped, d_out, 2),
                  m = run_backward(kernel, mha, d_out, 2);
      const bool ref = kernel == Kernel::reference;
      const double slack = 1e-10 * max_abs(exact_g.d_k) * (group + 1);
      for (std::int64_t i = 0; i < g.d_q.numel(); ++i) {
        const double x = g.d_q.data<float>()[i], y = m.d_q.data<float>()[i];
        ASSERT_LE(std::fabs(x - y), ref ? kU * (std::fabs(x) + std::fabs(y)) + slack : bound_q)
            << c.name() << " d_q[" << i << "]";
      }
      for (std::int64_t b = 0; b < c.batch; ++b)
        for (std::int64_t j = 0; j < c.kv_len; ++j)
          for (std::int64_t kv = 0; kv < c.kv_heads; ++kv) {
            auto compare = [&](const Tensor& gt, const Tensor& mt, std::int64_t dim, double bound,
                               const char* what) {
              for (std::int64_t d = 0; d < dim; ++d) {
                double sum = 0, magnitude = 0;
                for (std::int64_t h = kv * group; h < (kv + 1) * group; ++h) {
                  const double x = mt.data<float>()[((b * c.kv_len + j) * c.heads + h) * dim + d];
                  sum += x;
                  magnitude += std::fabs(x);
                }
                const double x = gt.data<float>()[((b * c.kv_len + j) * c.kv_heads + kv) * dim + d];
                ASSERT_LE(std::fabs(x - sum), ref ? kU * (std::fabs(x) + magnitude) + slack : bound)
                    << c.name() << " " << kernel_name(kernel) << " " << what << " [" << b << ", "
                    << j << ", " << kv << ", " << d << "]";
              }
            };
            compare(g.d_k, m.d_k, c.head_dim, bound_k, "d_k");
            compare(g.d_v, m.d_v, c.v_head_dim, bound_v, "d_v");
          }
    }
  }
}

// bf16 q, k, v: the float64 oracles read the same bf16 values, so input rounding is no
// error; the kernels widen bf16 exactly to fp32 and then do what they do for fp32, so the
// fp32 bounds hold. out and lse from the reference forward here (an avx512_bf16 streaming
// forward rounds P to bf16: that error belongs to the forward and its own test).
TEST(AttentionBackward, Bf16InputsOnEveryIsa) {
  for (const AttentionCase& c : {AttentionCase{.batch = 2,
                                .heads = 4,
                                .kv_heads = 2,
                                .head_dim = 32,
                                .v_head_dim = 20,
                                .q_len = 77,
                                .kv_len = 130,
                                .causal = true,
                                .key_padding = true,
                                .bias = BiasKind::broadcast},
                                 AttentionCase{.batch = 1,
                                 .heads = 2,
                                 .kv_heads = 2,
                                 .head_dim = 64,
                                 .v_head_dim = 64,
                                 .q_len = 65,
                                 .kv_len = 65,
                                 .window_left = 9,
                                 .window_right = 2,
                                 .kv_layout = KvLayout::fused}}) {
    AttentionInputs in = make_inputs(c, 41);
    const Bf16Inputs bf = round_inputs_to_bf16(in);
    const TensorView q_view = bf.q, k_view = bf.k, v_view = bf.v;
    const Tensor d_out = random_d_out(c, 42);
    const NaiveGrads want = naive_backward_f64(in, d_out.view()),
                     plain = naive_backward_f32(in, d_out.view());
    for (Isa isa : supported_isas()) {
      Context ctx({.threads = 2, .isa = isa});
      Tensor out(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim}),
          lse(DType::f32, {c.batch, c.heads, c.q_len});
      AttentionParams p = in.params(out, lse);
      attention_reference(ctx, p);  // fp32 inputs holding the bf16 values: the same function
      p.q = q_view;
      p.k = k_view;
      p.v = v_view;
      for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
        Grads g{poisoned({c.batch, c.q_len, c.heads, c.head_dim}),
                poisoned({c.batch, c.kv_len, c.kv_heads, c.head_dim}),
                poisoned({c.batch, c.kv_len, c.kv_heads, c.v_head_dim}),
                {},
                {}};
        if (!in.bias.empty())
          g.d_bias = poisoned({in.bias.shape[0], in.bias.shape[1], c.q_len, c.kv_len});
        attention_backward(ctx, kernel, p,
                           {.d_out = d_out.view(),
                            .d_q = g.d_q.view(),
                            .d_k = g.d_k.view(),
                            .d_v = g.d_v.view(),
                            .d_bias = g.d_bias.empty() ? TensorView{} : g.d_bias.view()});
        SCOPED_TRACE(std::string(kernel_name(kernel)) + " on " + isa_name(isa) + ", " + c.name());
        if (kernel == Kernel::reference) {
          expect_rounded_once(g.d_q, want.d_q, "d_q");
          expect_rounded_once(g.d_k, want.d_k, "d_k");
          expect_rounded_once(g.d_v, want.d_v, "d_v");
          if (!in.bias.empty()) expect_rounded_once(g.d_bias, want.d_bias, "d_bias");
        } else {
          EXPECT_LE(max_error(g.d_q, want.d_q), streaming_bound(want.d_q, plain.d_q, want.cond_q));
          EXPECT_LE(max_error(g.d_k, want.d_k), streaming_bound(want.d_k, plain.d_k, want.cond_k));
          EXPECT_LE(max_error(g.d_v, want.d_v), streaming_bound(want.d_v, plain.d_v, want.cond_v));
          if (!in.bias.empty())
            EXPECT_LE(max_error(g.d_bias, want.d_bias),
                      streaming_bound(want.d_bias, plain.d_bias, want.cond_bias));
        }
        expect_exact_zeros(g, want, kernel_name(kernel));
      }
    }
  }
}

// The kernels' own counters: the five products, once per visible score.
TEST(AttentionBackward, CountsFiveProductsPerScore) {
  const AttentionCase c{.batch = 2,
                        .heads = 4,
                        .kv_heads = 2,
                        .head_dim = 24,
                        .v_head_dim = 40,
                        .q_len = 100,
                        .kv_len = 130};
  const AttentionInputs in = make_inputs(c, 51);
  const Tensor d_out = random_d_out(c, 52);
  const std::int64_t macs =
      c.batch * c.heads * c.q_len * c.kv_len * (3 * c.head_dim + 2 * c.v_head_dim);
  EXPECT_EQ(run_backward(Kernel::reference, in, d_out, 2).stats.macs, macs);
  EXPECT_EQ(run_backward(Kernel::streaming, in, d_out, 2).stats.macs, macs);
  EXPECT_EQ(run_backward(Kernel::reference, in, d_out, 2).stats.peak_score_entries,
            c.batch * c.heads * c.q_len * c.kv_len);
  // The streaming kernel: two tiles (S^T and dP^T) per worker, whatever the lengths.
  AttentionCase longer = c;
  longer.q_len = 1100;
  longer.kv_len = 1300;
  const std::int64_t peak = run_backward(Kernel::streaming, in, d_out, 2).stats.peak_score_entries;
  EXPECT_EQ(run_backward(Kernel::streaming, make_inputs(longer, 53), random_d_out(longer, 54), 2)
                .stats.peak_score_entries,
            peak);
  EXPECT_LT(peak, longer.q_len * longer.kv_len / 4);
}

TEST(AttentionBackward, ReferenceWithoutForwardResults) {
  const AttentionCase c{.batch = 2,
                        .heads = 4,
                        .kv_heads = 2,
                        .head_dim = 9,
                        .v_head_dim = 5,
                        .q_len = 11,
                        .kv_len = 13,
                        .causal = true,
                        .key_padding = true,
                        .bias = BiasKind::broadcast};
  expect_reference_matches(make_inputs(c, 3), random_d_out(c, 4), /*with_forward=*/false);
}

// The float64 backward itself against central differences of the float64 forward.
TEST(AttentionBackward, Float64BackwardMatchesFiniteDifferences) {
  for (const AttentionCase& c : {AttentionCase{.batch = 2,
                                .heads = 4,
                                .kv_heads = 2,
                                .head_dim = 5,
                                .v_head_dim = 3,
                                .q_len = 4,
                                .kv_len = 6,
                                .causal = true,
                                .key_padding = true,
                                .bias = BiasKind::per_head},
                                 AttentionCase{.batch = 1,
                                 .heads = 2,
                                 .kv_heads = 1,
                                 .head_dim = 4,
                                 .v_head_dim = 4,
                                 .q_len = 6,
                                 .kv_len = 3,
                                 .causal = true,
                                 .bias = BiasKind::broadcast,
                                 .scale = 0.7f},
                                 AttentionCase{.batch = 1,
                                 .heads = 3,
                                 .kv_heads = 3,
                                 .head_dim = 3,
                                 .v_head_dim = 2,
                                 .q_len = 5,
                                 .kv_len = 5,
                                 .window_left = 1,
                                 .window_right = 1}}) {
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
    auto check = [&](Tensor& storage, const TensorView& view, const std::vector<double>& grad,
                     const char* what) {
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
