// The decode kernel and the layer's prefill / decode_step.
//
// Tolerances (u = 2^-24, the fp32 unit roundoff):
//  - fp32 cache vs the reference kernel (double accumulation, one rounding: "exact" here).
//    FlashAttention's rule: the decode kernel may err at most twice as much as a plain fp32
//    implementation of the same attention (this file's naive_decode<float>) plus one ulp of
//    max|v|:   max|decode - ref| <= 2 max|plain32 - ref| + u max|v|   (lse likewise).
//  - bf16 / int8 caches vs the exact attention over the unquantised fp32 K/V. Per element the
//    cache errs by |dk| <= 2^-8 |k| (bf16) or max_d|k_j| / 254 (int8, scale = max|k_j| / 127,
//    round to nearest); V likewise. A row's score s_j = scale q.k_j then moves by at most
//        delta = max_j scale * sum_d |q_d| |dk_jd|,
//    every softmax weight by a factor in [e^-2delta, e^2delta], so sum_j |p'_j - p_j| <=
//    e^(2 delta) - 1, and the output moves by at most
//        (e^(2 delta) - 1) max|v| + max|dv| (+ the fp32 rule above, for the arithmetic);
//    the log-sum-exp by at most delta.
//  - the layer: prefill + decode_step against this file's float64 layer, within twice a plain
//    fp32 layer's error plus u * max|out| (the same rule one level up).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "expect_error.h"
#include "headcount/decode.h"
#include "headcount/error.h"
#include "headcount/kv_cache.h"
#include "headcount/multi_head_attention.h"

namespace headcount::testing {
namespace {

using i64 = std::int64_t;
constexpr double kU = 1.0 / (1 << 24);

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

Tensor random_tensor(std::vector<i64> shape, std::mt19937_64& rng, float stddev = 1.0f) {
  Tensor t(DType::f32, std::move(shape));
  std::normal_distribution<float> normal(0.0f, stddev);
  for (i64 i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

struct DecodeCase {
  i64 batch = 1, heads = 1, kv_heads = 1, head_dim = 16, v_head_dim = 16, q_len = 1;
  std::vector<i64> lengths;  // cache rows per sequence, the q_len new ones included
  std::string name() const {
    std::string s = "b" + std::to_string(batch) + "_h" + std::to_string(heads) + "_kv" +
                    std::to_string(kv_heads) + "_d" + std::to_string(head_dim) + "_dv" +
                    std::to_string(v_head_dim) + "_q" + std::to_string(q_len) + "_len";
    for (i64 l : lengths) s += "_" + std::to_string(l);
    return s;
  }
};
void PrintTo(const DecodeCase& c, std::ostream* os) { *os << c.name(); }

// A case's fp32 data: q [B, q_len, H, D] and the cache contents k [B, cap, Hkv, D], v.
struct Data {
  DecodeCase c;
  i64 capacity = 1;
  Tensor q, k, v;
};

Data make_data(const DecodeCase& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Data d{c, std::max<i64>(1, *std::max_element(c.lengths.begin(), c.lengths.end())), {}, {}, {}};
  d.q = random_tensor({c.batch, c.q_len, c.heads, c.head_dim}, rng);
  d.k = random_tensor({c.batch, d.capacity, c.kv_heads, c.head_dim}, rng);
  d.v = random_tensor({c.batch, d.capacity, c.kv_heads, c.v_head_dim}, rng);
  return d;
}

KvCache fill_cache(const Data& d, CacheDType dtype) {
  const DecodeCase& c = d.c;
  KvCache cache({.batch = c.batch,
                 .kv_heads = c.kv_heads,
                 .head_dim = c.head_dim,
                 .v_head_dim = c.v_head_dim,
                 .capacity = d.capacity,
                 .dtype = dtype});
  cache.append(0, d.k.view(), d.v.view(), c.lengths);
  return cache;
}

float at(const Tensor& t, i64 a, i64 b, i64 c, i64 e) {
  return t.data<float>()[t.view().offset({a, b, c, e})];
}

struct Result {
  std::vector<double> out;  // [B, q_len, H, Dv]
  std::vector<double> lse;  // [B, H, q_len]
};

// Plain attention of the new tokens over the fp32 source values, every operation in Real.
template <typename Real>
Result naive_decode(const Data& d) {
  const DecodeCase& c = d.c;
  const i64 group = c.heads / c.kv_heads;
  const Real scale = Real(static_cast<float>(1.0 / std::sqrt(double(c.head_dim))));
  Result r;
  r.out.assign(static_cast<std::size_t>(c.batch * c.q_len * c.heads * c.v_head_dim), 0.0);
  r.lse.assign(static_cast<std::size_t>(c.batch * c.heads * c.q_len),
               -std::numeric_limits<double>::infinity());
  for (i64 b = 0; b < c.batch; ++b)
    for (i64 t = 0; t < c.q_len; ++t)
      for (i64 h = 0; h < c.heads; ++h) {
        const i64 visible = std::clamp<i64>(c.lengths[b] - c.q_len + t + 1, 0, c.lengths[b]);
        if (visible == 0) continue;
        std::vector<Real> s(static_cast<std::size_t>(visible));
        Real m = -std::numeric_limits<Real>::infinity();
        for (i64 j = 0; j < visible; ++j) {
          Real dot = 0;
          for (i64 e = 0; e < c.head_dim; ++e)
            dot += Real(at(d.q, b, t, h, e)) * Real(at(d.k, b, j, h / group, e));
          s[j] = scale * dot;
          m = std::max(m, s[j]);
        }
        Real l = 0;
        for (Real& x : s) l += (x = std::exp(x - m));
        r.lse[static_cast<std::size_t>((b * c.heads + h) * c.q_len + t)] = double(m + std::log(l));
        for (i64 e = 0; e < c.v_head_dim; ++e) {
          Real acc = 0;
          for (i64 j = 0; j < visible; ++j) acc += s[j] * Real(at(d.v, b, j, h / group, e));
          r.out[static_cast<std::size_t>(((b * c.q_len + t) * c.heads + h) * c.v_head_dim + e)] =
              double(acc / l);
        }
      }
  return r;
}

struct Outputs {
  Tensor out, lse;
};

Outputs run_decode(const Data& d, const KvCache& cache, int threads, Isa isa = Isa::best) {
  const DecodeCase& c = d.c;
  Outputs o{Tensor(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim}),
            Tensor(DType::f32, {c.batch, c.heads, c.q_len})};
  std::fill_n(o.out.data<float>(), o.out.numel(), std::numeric_limits<float>::quiet_NaN());
  std::fill_n(o.lse.data<float>(), o.lse.numel(), std::numeric_limits<float>::quiet_NaN());
  Context ctx({.threads = threads, .isa = isa});
  attention_decode(
      ctx, {.q = d.q.view(), .kv = cache.view(0), .out = o.out.view(), .lse = o.lse.view()});
  return o;
}

// The reference kernel per sequence, on the cache's own token-major views (the new tokens
// last, so its bottom-right causal mask with kv_len = length is exactly the decode mask).
Result reference_over_cache(const Data& d, const KvCache& cache) {
  const DecodeCase& c = d.c;
  Result r;
  r.out.assign(static_cast<std::size_t>(c.batch * c.q_len * c.heads * c.v_head_dim), 0.0);
  r.lse.assign(static_cast<std::size_t>(c.batch * c.heads * c.q_len),
               -std::numeric_limits<double>::infinity());
  Context ctx({.threads = 2});
  for (i64 b = 0; b < c.batch; ++b) {
    const i64 len = c.lengths[b];
    if (len == 0) continue;  // no keys at all: zeros and -inf, checked as such
    auto slice = [&](TensorView t, i64 rows) {
      t.data = static_cast<float*>(t.data) + b * t.strides[0];
      t.shape[0] = 1;
      t.shape[1] = rows;
      return t;
    };
    Tensor out(DType::f32, {1, c.q_len, c.heads, c.v_head_dim}),
        lse(DType::f32, {1, c.heads, c.q_len});
    attention_reference(ctx, {.q = slice(d.q.view(), c.q_len),
                              .k = slice(cache.k_tensor(0), len),
                              .v = slice(cache.v_tensor(0), len),
                              .out = out.view(),
                              .lse = lse.view(),
                              .causal = true});
    for (i64 i = 0; i < out.numel(); ++i)
      r.out[static_cast<std::size_t>(b * out.numel() + i)] = out.data<float>()[i];
    for (i64 i = 0; i < lse.numel(); ++i)
      r.lse[static_cast<std::size_t>(b * lse.numel() + i)] = lse.data<float>()[i];
  }
  return r;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (i64 i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(double(t.data<float>()[i])));
  return m;
}

double max_err(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!std::isinf(b[i])) e = std::max(e, std::fabs(a[i] - b[i]));
  return e;
}

// Compares outputs with `want`; -inf lse rows must be -inf with exact zero outputs.
void expect_close(const Outputs& got, const Result& want, const DecodeCase& c, double out_tol,
                  double lse_tol) {
  for (i64 b = 0; b < c.batch; ++b)
    for (i64 t = 0; t < c.q_len; ++t)
      for (i64 h = 0; h < c.heads; ++h) {
        const std::size_t li = static_cast<std::size_t>((b * c.heads + h) * c.q_len + t);
        const float g = got.lse.data<float>()[li];
        if (std::isinf(want.lse[li])) {
          ASSERT_TRUE(std::isinf(g) && g < 0)
              << "lse b" << b << " t" << t << " h" << h << " = " << g;
        } else {
          ASSERT_NEAR(g, want.lse[li], lse_tol) << "lse b" << b << " t" << t << " h" << h;
        }
        for (i64 e = 0; e < c.v_head_dim; ++e) {
          const std::size_t oi =
              static_cast<std::size_t>(((b * c.q_len + t) * c.heads + h) * c.v_head_dim + e);
          const float o = got.out.data<float>()[oi];
          if (std::isinf(want.lse[li])) {
            ASSERT_EQ(o, 0.0f) << "fully masked row b" << b << " t" << t << " h" << h;
          } else {
            ASSERT_NEAR(o, want.out[oi], out_tol)
                << "out b" << b << " t" << t << " h" << h << " e" << e;
          }
        }
      }
}

std::vector<DecodeCase> decode_cases() {
  return {
      // multi-head, several chunks (512 keys each) and a short sequence
      {.batch = 2,
       .heads = 4,
       .kv_heads = 4,
       .head_dim = 64,
       .v_head_dim = 64,
       .q_len = 1,
       .lengths = {1100, 37}},
      // grouped-query, odd head_dim, v_head_dim != head_dim, lengths around a chunk boundary
      {.batch = 2,
       .heads = 8,
       .kv_heads = 2,
       .head_dim = 59,
       .v_head_dim = 40,
       .q_len = 3,
       .lengths = {600, 513}},
      // multi-query, 16 new tokens
      {.batch = 2,
       .heads = 6,
       .kv_heads = 1,
       .head_dim = 32,
       .v_head_dim = 32,
       .q_len = 16,
       .lengths = {20, 1025}},
      // an empty sequence, and one shorter than the new tokens: fully masked rows
      {.batch = 3,
       .heads = 2,
       .kv_heads = 1,
       .head_dim = 16,
       .v_head_dim = 24,
       .q_len = 4,
       .lengths = {0, 2, 9}},
      // head_dim 128 as in the benchmarks, group 4
      {.batch = 1,
       .heads = 8,
       .kv_heads = 2,
       .head_dim = 128,
       .v_head_dim = 128,
       .q_len = 2,
       .lengths = {700}},
  };
}

class DecodeKernel : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeKernel, Fp32CacheMatchesTheReferenceKernelOnEveryIsa) {
  const DecodeCase& c = GetParam();
  const Data d = make_data(c, 11);
  const KvCache cache = fill_cache(d, CacheDType::f32);
  const Result ref = reference_over_cache(d, cache);
  const Result plain = naive_decode<float>(d);
  const double v_max = max_abs(d.v);
  double lse_max = 0;
  for (double x : ref.lse)
    if (!std::isinf(x)) lse_max = std::max(lse_max, std::fabs(x));
  const double out_tol = 2 * max_err(plain.out, ref.out) + kU * v_max;
  const double lse_tol = 2 * max_err(plain.lse, ref.lse) + kU * (1 + lse_max);
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const Outputs one = run_decode(d, cache, 1, isa);
    expect_close(one, ref, c, out_tol, lse_tol);
    // The split does not depend on the thread count: bitwise the same for 1, 2 and 3.
    for (int threads : {2, 3}) {
      const Outputs many = run_decode(d, cache, threads, isa);
      ASSERT_EQ(std::memcmp(one.out.data<float>(), many.out.data<float>(), one.out.bytes()), 0)
          << threads << " threads";
      ASSERT_EQ(std::memcmp(one.lse.data<float>(), many.lse.data<float>(), one.lse.bytes()), 0)
          << threads << " threads";
    }
  }
}

TEST_P(DecodeKernel, QuantisedCachesWithinTheDerivedBound) {
  const DecodeCase& c = GetParam();
  const Data d = make_data(c, 12);
  const Result exact = naive_decode<double>(d);
  const Result plain = naive_decode<float>(d);
  const double v_max = max_abs(d.v);
  const double fp32_out = 2 * max_err(plain.out, exact.out) + kU * v_max;
  const double fp32_lse = 2 * max_err(plain.lse, exact.lse) + kU * (1 + 20);
  const double scale = static_cast<float>(1.0 / std::sqrt(double(c.head_dim)));
  const i64 group = c.heads / c.kv_heads;
  for (CacheDType dtype : {CacheDType::bf16, CacheDType::int8}) {
    SCOPED_TRACE(cache_dtype_name(dtype));
    const KvCache cache = fill_cache(d, dtype);
    // Per-element bound of the cache's error on row j of (b, kv head g), for K or V.
    auto element_bound = [&](const Tensor& src, i64 b, i64 j, i64 g, i64 e, i64 dim) {
      if (dtype == CacheDType::bf16) return std::ldexp(std::fabs(double(at(src, b, j, g, e))), -8);
      double m = 0;
      for (i64 x = 0; x < dim; ++x) m = std::max(m, std::fabs(double(at(src, b, j, g, x))));
      return m / 254 * (1 + 1e-6);
    };
    // The widest bound over all rows: delta = max over rows and keys of scale * sum |q||dk|.
    double delta = 0, dv_max = 0;
    for (i64 b = 0; b < c.batch; ++b)
      for (i64 j = 0; j < c.lengths[b]; ++j)
        for (i64 g = 0; g < c.kv_heads; ++g) {
          for (i64 e = 0; e < c.v_head_dim; ++e)
            dv_max = std::max(dv_max, element_bound(d.v, b, j, g, e, c.v_head_dim));
          for (i64 t = 0; t < c.q_len; ++t)
            for (i64 hg = 0; hg < group; ++hg) {
              double s = 0;
              for (i64 e = 0; e < c.head_dim; ++e)
                s += std::fabs(double(at(d.q, b, t, g * group + hg, e))) *
                     element_bound(d.k, b, j, g, e, c.head_dim);
              delta = std::max(delta, scale * s);
            }
        }
    const double out_tol = (std::exp(2 * delta) - 1) * v_max + dv_max + fp32_out;
    const double lse_tol = delta + fp32_lse;
    for (Isa isa : supported_isas()) {
      SCOPED_TRACE(isa_name(isa));
      expect_close(run_decode(d, cache, 2, isa), exact, c, out_tol, lse_tol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, DecodeKernel, ::testing::ValuesIn(decode_cases()),
                         [](const auto& info) { return info.param.name(); });

// Grouped- and multi-query decode give bitwise what multi-head decode gives when each K/V
// head is repeated for its group: the rows of a group never interact.
TEST(DecodeKernel, GroupedQueryEqualsMultiHeadWithRepeatedKvHeads) {
  for (i64 kv_heads : {2, 1}) {
    const DecodeCase gqa{.batch = 2,
                         .heads = 8,
                         .kv_heads = kv_heads,
                         .head_dim = 64,
                         .v_head_dim = 64,
                         .q_len = 3,
                         .lengths = {700, 45}};
    const Data d = make_data(gqa, 13);
    DecodeCase mha = gqa;
    mha.kv_heads = 8;
    Data m{mha, d.capacity, Tensor(DType::f32, {2, 3, 8, 64}),
           Tensor(DType::f32, {2, d.capacity, 8, 64}), Tensor(DType::f32, {2, d.capacity, 8, 64})};
    std::memcpy(m.q.data<float>(), d.q.data<float>(), d.q.bytes());
    const i64 group = 8 / kv_heads;
    for (i64 b = 0; b < 2; ++b)
      for (i64 j = 0; j < d.capacity; ++j)
        for (i64 h = 0; h < 8; ++h)
          for (i64 e = 0; e < 64; ++e) {
            m.k.data<float>()[m.k.view().offset({b, j, h, e})] = at(d.k, b, j, h / group, e);
            m.v.data<float>()[m.v.view().offset({b, j, h, e})] = at(d.v, b, j, h / group, e);
          }
    for (CacheDType dtype : {CacheDType::f32, CacheDType::bf16, CacheDType::int8})
      for (Isa isa : supported_isas()) {
        SCOPED_TRACE(std::string(cache_dtype_name(dtype)) + " " + isa_name(isa) + " kv_heads " +
                     std::to_string(kv_heads));
        const Outputs a = run_decode(d, fill_cache(d, dtype), 2, isa);
        const Outputs b = run_decode(m, fill_cache(m, dtype), 2, isa);
        ASSERT_EQ(std::memcmp(a.out.data<float>(), b.out.data<float>(), a.out.bytes()), 0);
        ASSERT_EQ(std::memcmp(a.lse.data<float>(), b.lse.data<float>(), a.lse.bytes()), 0);
      }
  }
}

TEST(DecodeKernel, NothingAllocatesOnceWarm) {
  const DecodeCase c{.batch = 2,
                     .heads = 8,
                     .kv_heads = 2,
                     .head_dim = 64,
                     .v_head_dim = 64,
                     .q_len = 2,
                     .lengths = {900, 300}};
  const Data d = make_data(c, 14);
  const KvCache cache = fill_cache(d, CacheDType::int8);
  Tensor out(DType::f32, {2, 2, 8, 64});
  Context ctx({.threads = 2});
  const DecodeParams p{.q = d.q.view(), .kv = cache.view(0), .out = out.view()};
  attention_decode(ctx, p);
  const i64 grown = ctx.allocations();
  for (int i = 0; i < 3; ++i) attention_decode(ctx, p);
  EXPECT_EQ(ctx.allocations(), grown);
}

TEST(DecodeKernel, BadInputsSayWhatWasExpected) {
  Context ctx;
  KvCache cache({.batch = 1, .kv_heads = 2, .head_dim = 16, .capacity = 8});
  Tensor q(DType::f32, {1, 1, 4, 16}), out(DType::f32, {1, 1, 4, 16});
  expect_error(
      [&] {
        Tensor q32(DType::f32, {1, 1, 4, 32}), o32(DType::f32, {1, 1, 4, 16});
        attention_decode(ctx, {.q = q32.view(), .kv = cache.view(0), .out = o32.view()});
      },
      {"kv cache head_dim", "expected 32 (the head_dim of q)", "got 16"});
  expect_error(
      [&] {
        Tensor qb(DType::bf16, {1, 1, 4, 16});
        attention_decode(ctx, {.q = qb.view(), .kv = cache.view(0), .out = out.view()});
      },
      {"q dtype", "expected f32", "got bf16"});
  expect_error(
      [&] {
        Tensor q6(DType::f32, {1, 1, 3, 16}), o6(DType::f32, {1, 1, 3, 16});
        attention_decode(ctx, {.q = q6.view(), .kv = cache.view(0), .out = o6.view()});
      },
      {"kv cache kv_heads", "expected a divisor of heads = 3", "got 2"});
  expect_error(
      [&] {
        Tensor q17(DType::f32, {1, 17, 4, 16}), o17(DType::f32, {1, 17, 4, 16});
        attention_decode(ctx, {.q = q17.view(), .kv = cache.view(0), .out = o17.view()});
      },
      {"q_len", "expected 1 to 16 new tokens per call", "got 17"});
  expect_error(
      [&] {
        KvCache two({.batch = 2, .kv_heads = 2, .head_dim = 16, .capacity = 8});
        attention_decode(ctx, {.q = q.view(), .kv = two.view(0), .out = out.view()});
      },
      {"kv cache batch", "expected 1 (the batch of q)", "got 2"});
  expect_error(
      [&] {
        Tensor wrong(DType::f32, {1, 1, 4, 8});
        attention_decode(ctx, {.q = q.view(), .kv = cache.view(0), .out = wrong.view()});
      },
      {"out shape", "expected [1, 1, 4, 16]", "got [1, 1, 4, 8]"});
}

// ---- the layer: prefill + decode_step == the full causal forward ---------------------------

// The causal self-attention layer over one sequence x [n, d_model], every operation in Real.
template <typename Real>
std::vector<double> naive_layer(const MultiHeadAttention& layer, const std::vector<float>& x,
                                i64 n) {
  const MultiHeadAttentionConfig& c = layer.config();
  const MultiHeadAttentionWeights& w = layer.weights();
  auto project = [&](const Tensor& wt, const Tensor& bias, i64 width) {
    std::vector<Real> y(static_cast<std::size_t>(n * width));
    for (i64 i = 0; i < n; ++i)
      for (i64 o = 0; o < width; ++o) {
        Real acc = bias.empty() ? Real(0) : Real(bias.data<float>()[o]);
        for (i64 k = 0; k < c.d_model; ++k)
          acc += Real(x[i * c.d_model + k]) * Real(wt.data<float>()[k * width + o]);
        y[i * width + o] = acc;
      }
    return y;
  };
  const std::vector<Real> q = project(w.w_q, w.b_q, c.heads * c.head_dim);
  const std::vector<Real> k = project(w.w_k, w.b_k, c.kv_heads * c.head_dim);
  const std::vector<Real> v = project(w.w_v, w.b_v, c.kv_heads * c.v_head_dim);
  const Real scale = Real(static_cast<float>(1.0 / std::sqrt(double(c.head_dim))));
  const i64 group = c.heads / c.kv_heads, cw = c.heads * c.v_head_dim;
  std::vector<Real> cat(static_cast<std::size_t>(n * cw));
  for (i64 i = 0; i < n; ++i)
    for (i64 h = 0; h < c.heads; ++h) {
      const i64 g = h / group;
      std::vector<Real> s(static_cast<std::size_t>(i + 1));
      Real m = -std::numeric_limits<Real>::infinity();
      for (i64 j = 0; j <= i; ++j) {
        Real dot = 0;
        for (i64 e = 0; e < c.head_dim; ++e)
          dot += q[i * c.heads * c.head_dim + h * c.head_dim + e] *
                 k[j * c.kv_heads * c.head_dim + g * c.head_dim + e];
        m = std::max(m, s[j] = scale * dot);
      }
      Real l = 0;
      for (Real& p : s) l += (p = std::exp(p - m));
      for (i64 e = 0; e < c.v_head_dim; ++e) {
        Real acc = 0;
        for (i64 j = 0; j <= i; ++j)
          acc += s[j] * v[j * c.kv_heads * c.v_head_dim + g * c.v_head_dim + e];
        cat[i * cw + h * c.v_head_dim + e] = acc / l;
      }
    }
  std::vector<double> out(static_cast<std::size_t>(n * c.d_model));
  for (i64 i = 0; i < n; ++i)
    for (i64 o = 0; o < c.d_model; ++o) {
      Real acc = w.b_o.empty() ? Real(0) : Real(w.b_o.data<float>()[o]);
      for (i64 k2 = 0; k2 < cw; ++k2)
        acc += cat[i * cw + k2] * Real(w.w_o.data<float>()[k2 * c.d_model + o]);
      out[i * c.d_model + o] = double(acc);
    }
  return out;
}

TEST(LayerDecode, PrefillThenDecodeStepsEqualTheFullCausalForward) {
  for (i64 kv_heads : {6, 2, 1}) {  // multi-head, grouped-query, multi-query
    SCOPED_TRACE("kv_heads " + std::to_string(kv_heads));
    const MultiHeadAttentionConfig config{.d_model = 48, .heads = 6, .kv_heads = kv_heads};
    const MultiHeadAttention layer(config, MultiHeadAttentionWeights::random(config, 21));
    const i64 batch = 2, prompt = 9, d = 48;
    const std::vector<i64> prompt_lengths = {5, 9};
    const std::vector<i64> steps = {1, 3, 1, 2};
    std::mt19937_64 rng(22);
    const Tensor x_prompt = random_tensor({batch, prompt, d}, rng);
    std::vector<Tensor> x_steps;
    for (i64 t : steps) x_steps.push_back(random_tensor({batch, t, d}, rng));

    for (int threads : {1, 2}) {
      Context ctx({.threads = threads});
      KvCache cache(
          {.layers = 2, .batch = batch, .kv_heads = kv_heads, .head_dim = 8, .capacity = 20});
      // Outputs of every real token of every sequence, in order, and the tokens themselves.
      std::vector<std::vector<float>> got(batch), tokens(batch);
      Tensor out(DType::f32, {batch, prompt, d});
      layer.prefill(ctx, x_prompt.view(), cache, 1, out.view(), {.prompt_lengths = prompt_lengths});
      for (i64 b = 0; b < batch; ++b)
        for (i64 i = 0; i < prompt_lengths[b]; ++i)
          for (i64 e = 0; e < d; ++e) {
            got[b].push_back(out.data<float>()[(b * prompt + i) * d + e]);
            tokens[b].push_back(x_prompt.data<float>()[(b * prompt + i) * d + e]);
          }
      for (std::size_t s = 0; s < steps.size(); ++s) {
        Tensor step_out(DType::f32, {batch, steps[s], d});
        layer.decode_step(ctx, x_steps[s].view(), cache, 1, step_out.view());
        for (i64 b = 0; b < batch; ++b)
          for (i64 i = 0; i < steps[s] * d; ++i) {
            got[b].push_back(step_out.data<float>()[b * steps[s] * d + i]);
            tokens[b].push_back(x_steps[s].data<float>()[b * steps[s] * d + i]);
          }
      }
      for (i64 b = 0; b < batch; ++b) {
        SCOPED_TRACE("sequence " + std::to_string(b) + ", threads " + std::to_string(threads));
        const i64 n = static_cast<i64>(tokens[b].size()) / d;
        EXPECT_EQ(cache.length(1, b), n);
        const std::vector<double> exact = naive_layer<double>(layer, tokens[b], n);
        const std::vector<double> plain = naive_layer<float>(layer, tokens[b], n);
        double plain_err = 0, out_max = 0;
        for (std::size_t i = 0; i < exact.size(); ++i) {
          plain_err = std::max(plain_err, std::fabs(plain[i] - exact[i]));
          out_max = std::max(out_max, std::fabs(exact[i]));
        }
        const double tol = 2 * plain_err + kU * out_max;
        // The layer's own full causal forward over the same tokens, for comparison.
        Tensor seq(DType::f32, {1, n, d}), full(DType::f32, {1, n, d});
        std::copy(tokens[b].begin(), tokens[b].end(), seq.data<float>());
        layer.forward(ctx, seq.view(), full.view(), {.causal = true});
        for (std::size_t i = 0; i < exact.size(); ++i) {
          ASSERT_NEAR(got[b][i], exact[i], tol) << "token " << i / d << " feature " << i % d;
          ASSERT_NEAR(full.data<float>()[i], exact[i], tol) << "forward, token " << i / d;
        }
      }
    }
  }
}

TEST(LayerDecode, DecodeStepAllocatesNothingOnceWarm) {
  const MultiHeadAttentionConfig config{.d_model = 64, .heads = 8, .kv_heads = 2};
  const MultiHeadAttention layer(config, MultiHeadAttentionWeights::random(config, 23));
  KvCache cache(
      {.batch = 2, .kv_heads = 2, .head_dim = 8, .capacity = 64, .dtype = CacheDType::bf16});
  Tensor x(DType::f32, {2, 1, 64}), out(DType::f32, {2, 1, 64});
  Context ctx({.threads = 2});
  layer.decode_step(ctx, x.view(), cache, 0, out.view());
  const i64 grown = ctx.allocations();
  for (int i = 0; i < 5; ++i) layer.decode_step(ctx, x.view(), cache, 0, out.view());
  EXPECT_EQ(ctx.allocations(), grown);
  EXPECT_EQ(cache.length(0, 0), 6);
}

TEST(LayerDecode, BadCachesSayWhatWasExpected) {
  const MultiHeadAttentionConfig config{.d_model = 32, .heads = 4, .kv_heads = 2};
  const MultiHeadAttention layer(config, MultiHeadAttentionWeights::random(config, 24));
  Context ctx;
  Tensor x(DType::f32, {1, 3, 32}), out(DType::f32, {1, 3, 32});
  expect_error(
      [&] {
        KvCache wrong({.kv_heads = 4, .head_dim = 8, .capacity = 8});
        layer.decode_step(ctx, x.view(), wrong, 0, out.view());
      },
      {"kv cache kv_heads", "expected 2 (the layer's kv_heads)", "got 4"});
  expect_error(
      [&] {
        KvCache wrong({.kv_heads = 2, .head_dim = 16, .capacity = 8});
        layer.decode_step(ctx, x.view(), wrong, 0, out.view());
      },
      {"kv cache head_dim", "expected 8 (the layer's head_dim)", "got 16"});
  expect_error(
      [&] {
        KvCache small({.kv_heads = 2, .head_dim = 8, .capacity = 4});
        layer.prefill(ctx, x.view(), small, 0, out.view());
        layer.decode_step(ctx, x.view(), small, 0, out.view());
      },
      {"kv cache append (layer 0, sequence 0)", "capacity = 4", "got 3 + 3 = 6"});
  // A second prefill continues a cached prompt (chunked prefill) for one sequence in an fp32
  // cache only: a batch, or a cache holding rounded keys, is an error before anything is added.
  expect_error(
      [&] {
        Tensor x2(DType::f32, {2, 3, 32}), out2(DType::f32, {2, 3, 32});
        KvCache cache({.batch = 2, .kv_heads = 2, .head_dim = 8, .capacity = 8});
        layer.prefill(ctx, x2.view(), cache, 0, out2.view());
        layer.prefill(ctx, x2.view(), cache, 0, out2.view());
      },
      {"prefill after a cached part", "one sequence", "batch 2"});
  expect_error(
      [&] {
        KvCache cache({.kv_heads = 2, .head_dim = 8, .capacity = 8, .dtype = CacheDType::bf16});
        layer.prefill(ctx, x.view(), cache, 0, out.view());
        layer.prefill(ctx, x.view(), cache, 0, out.view());
      },
      {"kv cache dtype", "fp32 to continue a prefill", "bf16"});
  expect_error(
      [] { (void)resolve(MultiHeadAttentionConfig{.d_model = 32, .heads = 4, .kv_heads = 3}); },
      {"kv_heads", "expected a divisor of heads = 4", "got 3"});
}

}  // namespace
}  // namespace headcount::testing
