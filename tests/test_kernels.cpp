// Both kernels against the tests' own float64 attention, over the whole case table.
//
// Tolerances, from the arithmetic (u = 2^-24, the fp32 unit roundoff):
//  - reference: it accumulates in double and rounds each output once to fp32, so
//      |ref - exact| <= u·|exact| + 1e-12·max|v|
//    where 1e-12 covers double summation over <= 1025 keys + 128 dims (gamma_n ~ 1.3e-13).
//  - streaming: fp32 throughout, like any fp32 implementation. Following FlashAttention's
//    rule it may err at most twice as much as a plain fp32 implementation on the same
//    inputs (materialised scores, fp32 dot products, exp and sums), plus one ulp of
//    max|v| so that cases where the plain version happens to be exact still pass:
//      max|stream - exact| <= 2·max|plain32 - exact| + u·max|v|     (same for lse).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "attention_inputs.h"
#include "case_table.h"
#include "sanitized.h"

namespace headcount::testing {
namespace {

constexpr double kU = 1.0 / (1 << 24);

struct Outputs {
  Tensor out, lse;
  AttentionStats stats;
};

// Every instruction set this CPU runs: the streaming kernel is checked on each.
std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx_bf16})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Outputs run(Kernel kernel, const AttentionInputs& in, int threads, Isa isa = Isa::best) {
  const AttentionCase& c = in.c;
  Outputs o{Tensor(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim}),
            Tensor(DType::f32, {c.batch, c.heads, c.q_len}),
            {}};
  // Poison the outputs: every element must be written.
  std::fill_n(o.out.data<float>(), o.out.numel(), std::numeric_limits<float>::quiet_NaN());
  std::fill_n(o.lse.data<float>(), o.lse.numel(), std::numeric_limits<float>::quiet_NaN());
  Context ctx({.threads = threads, .isa = isa});
  o.stats = attention(ctx, kernel, in.params(o.out, o.lse));
  return o;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}

double max_abs_v(const AttentionInputs& in) {
  double m = 0;
  const TensorView& v = in.v;
  for (std::int64_t a = 0; a < v.shape[0]; ++a)
    for (std::int64_t b = 0; b < v.shape[1]; ++b)
      for (std::int64_t c = 0; c < v.shape[2]; ++c)
        for (std::int64_t d = 0; d < v.shape[3]; ++d)
          m = std::max(m, std::fabs(double(v.ptr<float>()[v.offset({a, b, c, d})])));
  return m;
}

// Largest |got - want| over finite lse values; -inf must match exactly.
double lse_error(const Tensor& got, const std::vector<double>& want, const char* what) {
  double err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.data<float>()[i];
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(g) && g < 0) << what << " lse[" << i << "] should be -inf, got " << g;
    } else {
      EXPECT_TRUE(std::isfinite(g)) << what << " lse[" << i << "] = " << g;
      err = std::max(err, std::fabs(g - want[i]));
    }
  }
  return err;
}

double out_error(const Tensor& got, const std::vector<double>& want, const char* what) {
  double err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.data<float>()[i];
    EXPECT_FALSE(std::isnan(g)) << what << " out[" << i << "] is NaN";
    err = std::max(err, std::fabs(g - want[i]));
  }
  return err;
}

double max_error(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!std::isinf(b[i])) err = std::max(err, std::fabs(a[i] - b[i]));
  return err;
}

// Rows with no visible key: exact zeros in the output.
void expect_zero_rows(const Tensor& out, const std::vector<double>& lse, const AttentionCase& c,
                      const char* what) {
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t h = 0; h < c.heads; ++h)
      for (std::int64_t i = 0; i < c.q_len; ++i) {
        if (!std::isinf(lse[static_cast<std::size_t>((b * c.heads + h) * c.q_len + i)])) continue;
        for (std::int64_t e = 0; e < c.v_head_dim; ++e)
          ASSERT_EQ(out.data<float>()[((b * c.q_len + i) * c.heads + h) * c.v_head_dim + e], 0.0f)
              << what << ": fully masked row b" << b << " h" << h << " i" << i;
      }
}

class KernelCase : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(KernelCase, BothKernelsMatchIndependentFloat64) {
  const AttentionCase& c = GetParam();
  // Under the sanitizers the two largest cases (12-16 M scores) spent 114 s of the ASan suite,
  // most of it in the naive float64 and float32 loops (attention_inputs.cpp). The streaming
  // kernel's memory is still checked on them there (StreamingIsBitwiseIdenticalForOneAndTwoThreads,
  // default ISA; the reference kernel is not run on them under the sanitizers), their values in
  // the Release build.
  if (HEADCOUNT_TEST_SANITIZED && c.batch * c.heads * c.q_len * c.kv_len > 4'000'000)
    GTEST_SKIP()
        << "values checked in the Release build; memory by StreamingIsBitwiseIdentical here";
  const AttentionInputs in = make_inputs(c, 1234);
  const NaiveResult exact = naive_attention_f64(in);
  const NaiveResult plain = naive_attention_f32(in);
  const double v_max = max_abs_v(in);

  const Outputs ref = run(Kernel::reference, in, 2);
  for (std::size_t i = 0; i < exact.out.size(); ++i)
    ASSERT_NEAR(ref.out.data<float>()[i], exact.out[i],
                kU * std::fabs(exact.out[i]) + 1e-12 * v_max)
        << "reference out[" << i << "]";
  lse_error(ref.lse, exact.lse, "reference");
  for (std::size_t i = 0; i < exact.lse.size(); ++i)
    if (!std::isinf(exact.lse[i]))
      ASSERT_NEAR(ref.lse.data<float>()[i], exact.lse[i],
                  kU * std::fabs(exact.lse[i]) + 1e-12 * (1 + std::fabs(exact.lse[i])));
  expect_zero_rows(ref.out, exact.lse, c, "reference");

  const double plain_out_err = max_error(plain.out, exact.out);
  const double plain_lse_err = max_error(plain.lse, exact.lse);
  Outputs stream;
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(std::string("streaming on ") + isa_name(isa));
    stream = run(Kernel::streaming, in, 2, isa);
    const double stream_out_err = out_error(stream.out, exact.out, "streaming");
    const double stream_lse_err = lse_error(stream.lse, exact.lse, "streaming");
    EXPECT_LE(stream_out_err, 2 * plain_out_err + kU * v_max)
        << "plain fp32 error " << plain_out_err << ", max|v| " << v_max;
    EXPECT_LE(stream_lse_err, 2 * plain_lse_err + kU * (1 + max_abs(exact.lse)))
        << "plain fp32 lse error " << plain_lse_err;
    expect_zero_rows(stream.out, exact.lse, c, "streaming");
  }

  if (!c.masked()) {  // the kernels' own counters: every score, every weighted value, once
    const std::int64_t entries = c.batch * c.heads * c.q_len * c.kv_len;
    for (const Outputs* o : {&ref, static_cast<const Outputs*>(&stream)}) {
      EXPECT_EQ(o->stats.score_macs, entries * c.head_dim);
      EXPECT_EQ(o->stats.weighted_sum_macs, entries * c.v_head_dim);
    }
    EXPECT_EQ(ref.stats.peak_score_entries, entries);
  }
}

TEST_P(KernelCase, StreamingIsBitwiseIdenticalForOneAndTwoThreads) {
  const AttentionInputs in = make_inputs(GetParam(), 99);
  const Outputs one = run(Kernel::streaming, in, 1);
  const Outputs two = run(Kernel::streaming, in, 2);
  ASSERT_EQ(std::memcmp(one.out.data<float>(), two.out.data<float>(), one.out.bytes()), 0);
  ASSERT_EQ(std::memcmp(one.lse.data<float>(), two.lse.data<float>(), one.lse.bytes()), 0);
}

// bf16 inputs: the same case with q, k, v rounded to bf16. The float64 oracle reads the
// same bf16 values, so input rounding is not an error here. On avx512_bf16 the kernel
// rounds P to bf16 (relative error <= 2^-9 per weight) before P·V; since the weights sum
// to 1, that moves an output by at most 2^-9·max|v|. Other ISAs widen to fp32. So:
//   max|stream - exact| <= 2^-9·max|v| + 2·(plain fp32 error) + u·max|v|.
TEST_P(KernelCase, Bf16InputsOnEveryIsa) {
  const AttentionCase& c = GetParam();
  if (c.batch * c.heads * c.q_len * c.kv_len > 4'000'000)
    GTEST_SKIP() << "covered by smaller cases";
  AttentionInputs in = make_inputs(c, 4321);
  const Bf16Inputs bf = round_inputs_to_bf16(in);
  const TensorView q_view = bf.q, k_view = bf.k, v_view = bf.v;
  const NaiveResult exact = naive_attention_f64(in);
  const NaiveResult plain = naive_attention_f32(in);
  const double v_max = max_abs_v(in);
  const double plain_err = max_error(plain.out, exact.out);
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(std::string("bf16 streaming on ") + isa_name(isa));
    Tensor out(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim}),
        lse(DType::f32, {c.batch, c.heads, c.q_len});
    AttentionParams p = in.params(out, lse);
    p.q = q_view;
    p.k = k_view;
    p.v = v_view;
    Context ctx({.threads = 2, .isa = isa});
    attention_streaming(ctx, p);
    const double err = out_error(out, exact.out, "bf16 streaming");
    EXPECT_LE(err, std::ldexp(1.0, -9) * v_max + 2 * plain_err + kU * v_max)
        << "plain fp32 error " << plain_err;
    expect_zero_rows(out, exact.lse, c, "bf16 streaming");
    // The reference reads bf16 exactly: same bound as for fp32 inputs.
    Tensor ref_out(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim});
    p.out = ref_out.view();
    attention_reference(ctx, p);
    for (std::size_t i = 0; i < exact.out.size(); ++i)
      ASSERT_NEAR(ref_out.data<float>()[i], exact.out[i],
                  kU * std::fabs(exact.out[i]) + 1e-12 * v_max);
  }
}

INSTANTIATE_TEST_SUITE_P(CaseTable, KernelCase, ::testing::ValuesIn(kernel_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           return std::to_string(info.index) + "_" + info.param.name();
                         });

}  // namespace
}  // namespace headcount::testing

namespace headcount::testing {
namespace {

// The streaming kernel takes each key tile's maximum from the score product only where every
// query sees the whole tile: a causal tile's hidden keys must not raise the softmax's shift.
// Here the hidden (future) keys score up to ~190 above the visible ones (score(i, j) = 2j),
// so a shift taken over them would underflow every visible exp(s - m) to 0 and the row would
// come out as "saw no key" (zeros); the output must be the softmax over the visible keys,
// almost all on key i, on every ISA.
TEST(StreamingKernel, HiddenKeysNeverSetTheSoftmaxShift) {
  const std::int64_t n = 200, dim = 8;
  Tensor q(DType::f32, {1, n, 1, dim}), k(DType::f32, {1, n, 1, dim}),
      v(DType::f32, {1, n, 1, dim});
  std::fill_n(q.data<float>(), q.numel(), 0.0f);
  std::fill_n(k.data<float>(), k.numel(), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    q.data<float>()[i * dim] = 2.0f;
    k.data<float>()[i * dim] = static_cast<float>(i);
    for (std::int64_t e = 0; e < dim; ++e) v.data<float>()[i * dim + e] = static_cast<float>(i + e);
  }
  for (Isa isa : supported_isas()) {
    Tensor out(DType::f32, {1, n, 1, dim});
    AttentionParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.scale = 1.0f;
    p.causal = true;
    Context ctx({.threads = 1, .isa = isa});
    attention(ctx, Kernel::streaming, p);
    for (std::int64_t i = 0; i < n; ++i) {
      // softmax over j <= i of 2j: weight 1 / (1 + e^-2 + e^-4 + ...) on key i, and so on.
      double num = 0, den = 0;
      for (std::int64_t j = 0; j <= i; ++j) {
        const double w = std::exp(2.0 * static_cast<double>(j - i));
        num += w * static_cast<double>(j);
        den += w;
      }
      const double want = num / den;  // output column 0 (v[j][0] = j)
      // fp32: <= n + 3 roundings of terms bounded by max|v| (the sums of P·V and of P, exp's 2
      // ulp, the division), each at most u relative: (n + 4)·u·max|v|, max|v| = n - 1 + dim - 1.
      const double bound =
          static_cast<double>(n + 4) * std::ldexp(1.0, -24) * static_cast<double>(n + dim - 2);
      ASSERT_NEAR(out.data<float>()[i * dim], want, bound) << isa_name(isa) << " row " << i;
    }
  }
}

}  // namespace
}  // namespace headcount::testing
