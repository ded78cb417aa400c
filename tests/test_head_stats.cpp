// Row statistics without the n^2 probabilities (head_stats.h), against the tests' own float64
// probabilities; the head mask of the layer; and, on all-MiniLM-L6-v2 over corpus sentences,
// the streaming second pass against the reference kernel's probabilities.
//
// Bound of the second pass, per row i (derived, not tuned): it evaluates p_ij = exp(t~ - l~)
// with an fp32 score t~ (head_dim products summed in fp32, one scale multiply, one bias add)
// and the kernel's fp32 lse l~. |t~ - t| <= (head_dim + 2) u scale sum_d |q_d k_d| + 2u |t|
// (u = 2^-24, a standard dot-product bound), and |l~ - lse| is measured against the float64
// oracle. With delta_i = max_j |t~ - t| + |l~ - lse|, every p has |p~ - p| <= p (e^delta - 1),
// so each mass (offsets, classes, total) is within (e^delta - 1) of its value, the distance
// within (e^delta - 1) * distance, and the entropy sum_j p (lse - t) within
// (e^delta - 1) * H + delta. Sums are in double (1e-12 absolute covers them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "attention_inputs.h"
#include "case_table.h"
#include "expect_error.h"
#include "headcount/error.h"
#include "headcount/head_analysis.h"
#include "headcount/head_stats.h"
#include "headcount/multi_head_attention.h"
#include "minilm_golden.h"

namespace headcount::testing {
namespace {

constexpr double kU = 0x1p-24;

// Three classes on keys: bit 0 on key 0, bit 1 on every third key, bit 2 on the last key.
std::vector<std::uint8_t> test_classes(const AttentionCase& c) {
  std::vector<std::uint8_t> classes(static_cast<std::size_t>(c.batch * c.kv_len), 0);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t j = 0; j < c.kv_len; ++j) {
      std::uint8_t bits = 0;
      if (j == 0) bits |= 1;
      if (j % 3 == 0) bits |= 2;
      if (j == c.kv_len - 1) bits |= 4;
      classes[static_cast<std::size_t>(b * c.kv_len + j)] = bits;
    }
  return classes;
}

float bias_at(const AttentionInputs& in, std::int64_t b, std::int64_t h, std::int64_t i,
              std::int64_t j) {
  if (in.bias.empty()) return 0.0f;
  const TensorView& t = in.bias;
  return t.ptr<const float>()[t.offset({t.shape[0] == 1 ? 0 : b, t.shape[1] == 1 ? 0 : h, i, j})];
}

// The fields of every row, from float64 probabilities, written from the definitions in
// head_stats.h.
std::vector<double> expected_stats(const AttentionInputs& in, const std::vector<double>& probs,
                                   const RowStatsSpec& spec) {
  const AttentionCase& c = in.c;
  const std::int64_t F = spec.fields();
  std::vector<double> out(static_cast<std::size_t>(c.batch * c.heads * c.q_len * F), 0.0);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t h = 0; h < c.heads; ++h)
      for (std::int64_t i = 0; i < c.q_len; ++i) {
        double* row = out.data() + ((b * c.heads + h) * c.q_len + i) * F;
        const std::int64_t diagonal = i + c.kv_len - c.q_len;
        for (std::int64_t j = 0; j < c.kv_len; ++j) {
          if (!key_visible(in, b, i, j) ||
              bias_at(in, b, h, i, j) == -std::numeric_limits<float>::infinity())
            continue;
          const double p =
              probs[static_cast<std::size_t>(((b * c.heads + h) * c.q_len + i) * c.kv_len + j)];
          row[kRowVisible] += 1;
          row[kRowMass] += p;
          if (p > 0) row[kRowEntropy] -= p * std::log(p);
          row[kRowDistance] += p * std::fabs(static_cast<double>(j - diagonal));
          for (int bit = 0; bit < spec.classes; ++bit)
            if (spec.key_classes[static_cast<std::size_t>(b * c.kv_len + j)] & (1 << bit))
              row[spec.class_field(bit)] += p;
          for (std::size_t o = 0; o < spec.offsets.size(); ++o)
            if (j == diagonal + spec.offsets[o]) row[spec.offset_field(o)] = p;
        }
      }
  return out;
}

// delta_i of the header comment, for every row.
std::vector<double> score_error_bounds(const AttentionInputs& in, const Tensor& lse,
                                       const std::vector<double>& exact_lse) {
  const AttentionCase& c = in.c;
  const double scale = c.scale ? *c.scale : static_cast<float>(1.0 / std::sqrt(double(c.head_dim)));
  const std::int64_t group = c.heads / c.kv_heads;
  std::vector<double> delta(static_cast<std::size_t>(c.batch * c.heads * c.q_len), 0.0);
  auto at = [](const TensorView& t, std::int64_t a, std::int64_t b, std::int64_t x,
               std::int64_t d) {
    return static_cast<double>(t.ptr<const float>()[t.offset({a, b, x, d})]);
  };
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t h = 0; h < c.heads; ++h)
      for (std::int64_t i = 0; i < c.q_len; ++i) {
        const std::size_t r = static_cast<std::size_t>((b * c.heads + h) * c.q_len + i);
        if (std::isinf(exact_lse[r])) continue;
        double worst = 0;
        for (std::int64_t j = 0; j < c.kv_len; ++j) {
          if (!key_visible(in, b, i, j) || std::isinf(bias_at(in, b, h, i, j))) continue;
          double abs_dot = 0, dot = 0;
          for (std::int64_t d = 0; d < c.head_dim; ++d) {
            abs_dot += std::fabs(at(in.q, b, i, h, d) * at(in.k, b, j, h / group, d));
            dot += at(in.q, b, i, h, d) * at(in.k, b, j, h / group, d);
          }
          const double t = scale * dot + bias_at(in, b, h, i, j);
          worst = std::max(worst, (c.head_dim + 2) * kU * scale * abs_dot + 2 * kU * std::fabs(t));
        }
        delta[r] =
            worst + std::fabs(static_cast<double>(lse.data<const float>()[r]) - exact_lse[r]);
      }
  return delta;
}

void expect_stats_within(const std::vector<double>& got, const std::vector<double>& want,
                         const std::vector<double>& delta, const RowStatsSpec& spec,
                         const std::string& what) {
  const std::int64_t F = spec.fields();
  for (std::size_t r = 0; r < delta.size(); ++r) {
    const double* g = got.data() + r * static_cast<std::size_t>(F);
    const double* w = want.data() + r * static_cast<std::size_t>(F);
    const double grow = std::expm1(delta[r]);
    ASSERT_EQ(g[kRowVisible], w[kRowVisible]) << what << " row " << r << " visible";
    ASSERT_NEAR(g[kRowEntropy], w[kRowEntropy], grow * w[kRowEntropy] + delta[r] + 1e-12)
        << what << " row " << r << " entropy";
    ASSERT_NEAR(g[kRowDistance], w[kRowDistance], grow * w[kRowDistance] + 1e-12)
        << what << " row " << r << " distance";
    for (std::int64_t f : {std::int64_t{kRowMass}})
      ASSERT_NEAR(g[f], w[f], grow * w[f] + 1e-12) << what << " row " << r << " mass";
    for (std::int64_t f = kRowFixedFields; f < F; ++f)
      ASSERT_NEAR(g[f], w[f], grow * w[f] + 1e-12) << what << " row " << r << " field " << f;
  }
}

class RowStatsCase : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(RowStatsCase, SecondPassAndProbsMatchFloat64) {
  const AttentionCase& c = GetParam();
  const AttentionInputs in = make_inputs(c, 77);
  const std::vector<double> probs = naive_probs_f64(in);
  const NaiveResult exact = naive_attention_f64(in);
  const std::vector<std::uint8_t> classes = test_classes(c);
  const RowStatsSpec spec{.offsets = {-2, -1, 0, 1, 5}, .key_classes = classes, .classes = 3};
  const std::vector<double> want = expected_stats(in, probs, spec);
  const std::int64_t F = spec.fields();

  Context ctx({.threads = 2});
  Tensor out(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim}),
      lse(DType::f32, {c.batch, c.heads, c.q_len});
  const AttentionParams params = in.params(out, lse);
  attention_streaming(ctx, params);
  std::vector<double> got(want.size());
  attention_row_stats(
      ctx, params, spec,
      TensorView::contiguous(got.data(), DType::f64, {c.batch, c.heads, c.q_len, F}));
  expect_stats_within(got, want, score_error_bounds(in, lse, exact.lse), spec, "second pass");

  // The reference kernel's fp32 probabilities: each within u of the float64 one, so delta = 2u.
  Tensor ref_out(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim});
  Tensor ref_probs(DType::f32, {c.batch, c.heads, c.q_len, c.kv_len});
  AttentionParams ref = in.params(ref_out, lse);
  ref.probs_mode = ProbsMode::per_head;
  ref.probs = ref_probs.view();
  attention_reference(ctx, ref);
  std::vector<double> from_probs(want.size());
  attention_row_stats_from_probs(
      ref, ref_probs.view(), spec,
      TensorView::contiguous(from_probs.data(), DType::f64, {c.batch, c.heads, c.q_len, F}));
  expect_stats_within(from_probs, want, std::vector<double>(exact.lse.size(), 2 * kU), spec,
                      "from probs");
}

// bf16 q and k: the pass widens them exactly to fp32, so the bound is the fp32 one, computed on
// the bf16-rounded values (which the float64 oracle reads too).
TEST_P(RowStatsCase, Bf16InputsMatchFloat64) {
  const AttentionCase& c = GetParam();
  if (c.batch * c.heads * c.q_len * c.kv_len > 100000) GTEST_SKIP() << "covered by smaller cases";
  AttentionInputs in = make_inputs(c, 78);
  Tensor q16, k16, v16;
  const TensorView q = round_to_bf16(in.q, in.q_storage, q16);
  const TensorView k = round_to_bf16(in.k, in.k_storage, k16);
  TensorView v = in.v;
  if (in.v_storage.empty()) {  // fused layout: v lives in k's buffer
    v.dtype = DType::bf16;
    v.data = k16.data<bf16>() + (in.v.ptr<const float>() - in.k_storage.data<float>());
  } else {
    v = round_to_bf16(in.v, in.v_storage, v16);
  }
  const std::vector<double> probs = naive_probs_f64(in);
  const NaiveResult exact = naive_attention_f64(in);
  const RowStatsSpec spec{.offsets = {-1, 0, 1}};
  const std::vector<double> want = expected_stats(in, probs, spec);
  Context ctx({.threads = 2});
  Tensor out(DType::f32, {c.batch, c.q_len, c.heads, c.v_head_dim}),
      lse(DType::f32, {c.batch, c.heads, c.q_len});
  AttentionParams params = in.params(out, lse);
  params.q = q;
  params.k = k;
  params.v = v;
  attention_streaming(ctx, params);
  std::vector<double> got(want.size());
  attention_row_stats(
      ctx, params, spec,
      TensorView::contiguous(got.data(), DType::f64, {c.batch, c.heads, c.q_len, spec.fields()}));
  expect_stats_within(got, want, score_error_bounds(in, lse, exact.lse), spec, "bf16 second pass");
}

std::vector<AttentionCase> small_cases() {
  std::vector<AttentionCase> out;
  for (const AttentionCase& c : kernel_cases())
    if (c.batch * c.heads * c.q_len * c.kv_len <= 400000) out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(CaseTable, RowStatsCase, ::testing::ValuesIn(small_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           return info.param.name();
                         });

// The point of the second pass: statistics of long inputs in O(n) memory. At n = 4096 with 4
// heads the reference kernel would hold 4 * 4096^2 doubles (512 MiB); the streaming kernel and
// the second pass together reserve a few tiles and head_dim floats per worker.
TEST(RowStats, LongInputNeedsNoScoreGrid) {
  const AttentionCase c{.batch = 1,
                        .heads = 4,
                        .kv_heads = 4,
                        .head_dim = 32,
                        .v_head_dim = 32,
                        .q_len = 4096,
                        .kv_len = 4096,
                        .causal = true};
  const AttentionInputs in = make_inputs(c, 3);
  Context ctx({.threads = 2});
  Tensor out(DType::f32, {1, 4096, 4, 32}), lse(DType::f32, {1, 4, 4096});
  const AttentionParams params = in.params(out, lse);
  attention_streaming(ctx, params);
  const RowStatsSpec spec{.offsets = {-1, 0}};
  std::vector<double> stats(static_cast<std::size_t>(4 * 4096 * spec.fields()));
  attention_row_stats(
      ctx, params, spec,
      TensorView::contiguous(stats.data(), DType::f64, {1, 4, 4096, spec.fields()}));
  // Per-worker tiles (< 4 MiB) plus the streaming kernel's contiguous copy of K and V (4096
  // keys x 4 heads x (32 + 32) floats = 4 MiB; tuning.h caps it at 16 MiB): O(n), not O(n^2).
  const std::size_t packed_kv = std::size_t{4096} * 4 * (32 + 32) * sizeof(float);
  EXPECT_LT(ctx.reserved_bytes(), (std::size_t{4} << 20) + packed_kv)
      << "beyond O(n): the score grid would be 512 MiB";
  for (std::int64_t r = 0; r < 4 * 4096; ++r) {
    ASSERT_NEAR(stats[static_cast<std::size_t>(r * spec.fields() + kRowMass)], 1.0, 1e-5) << r;
    ASSERT_EQ(stats[static_cast<std::size_t>(r * spec.fields() + kRowVisible)],
              static_cast<double>(r % 4096 + 1))
        << r;
  }
}

TEST(RowStats, ErrorsNameTheParameter) {
  const AttentionCase c{.batch = 1, .heads = 2, .kv_heads = 2, .q_len = 5, .kv_len = 5};
  const AttentionInputs in = make_inputs(c, 1);
  Context ctx({.threads = 1});
  Tensor out(DType::f32, {1, 5, 2, 8}), lse(DType::f32, {1, 2, 5});
  AttentionParams params = in.params(out, lse);
  attention_streaming(ctx, params);
  const RowStatsSpec spec{.offsets = {-1}};
  std::vector<double> buffer(static_cast<std::size_t>(2 * 5 * spec.fields()));
  const TensorView good =
      TensorView::contiguous(buffer.data(), DType::f64, {1, 2, 5, spec.fields()});
  AttentionParams no_lse = params;
  no_lse.lse = {};
  expect_error([&] { attention_row_stats(ctx, no_lse, spec, good); },
               {"lse: expected the log-sum-exp [1, 2, 5]"});
  const TensorView wrong =
      TensorView::contiguous(buffer.data(), DType::f64, {1, 2, 5, spec.fields() - 1});
  expect_error([&] { attention_row_stats(ctx, params, spec, wrong); }, {"row stats out shape"});
  std::vector<std::uint8_t> few(3);
  const RowStatsSpec bad_classes{.key_classes = few, .classes = 2};
  expect_error([&] { attention_row_stats(ctx, params, bad_classes, good); },
               {"row stats key_classes: expected 5 entries"});
  Tensor bad_lse(DType::f32, {1, 2, 5});
  std::copy_n(lse.data<const float>(), 10, bad_lse.data<float>());
  bad_lse.data<float>()[7] = std::nanf("");
  AttentionParams nan_lse = params;
  nan_lse.lse = bad_lse.view();
  expect_error([&] { attention_row_stats(ctx, nan_lse, spec, good); },
               {"lse: expected the attention call's log-sum-exp", "got nan at [0, 1, 2]"});
  const RowStatsSpec far{.offsets = {std::int64_t{1} << 50}};
  expect_error([&] { attention_row_stats(ctx, params, far, good); }, {"row stats offset"});
}

// The head mask scales a head's slice of the concat buffer before W_O: mask 0 on head h gives
// exactly the layer whose W_O rows of head h are zero.
TEST(HeadMask, ZeroingAHeadEqualsZeroingItsOutputWeights) {
  const MultiHeadAttentionConfig config{.d_model = 48, .heads = 4};
  MultiHeadAttentionWeights weights = MultiHeadAttentionWeights::random(config, 5);
  MultiHeadAttentionWeights pruned = MultiHeadAttentionWeights::random(config, 5);
  const std::int64_t head = 2, hd = 12;
  for (std::int64_t r = head * hd; r < (head + 1) * hd; ++r)
    for (std::int64_t col = 0; col < 48; ++col) pruned.w_o.data<float>()[r * 48 + col] = 0.0f;
  const MultiHeadAttention layer(config, std::move(weights)), reference(config, std::move(pruned));
  Tensor x(DType::f32, {2, 9, 48});
  for (std::int64_t i = 0; i < x.numel(); ++i)
    x.data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
  Tensor a(DType::f32, {2, 9, 48}), b(DType::f32, {2, 9, 48});
  Context ctx({.threads = 2});
  const float mask[] = {1, 1, 0, 1};
  layer.forward(ctx, x.view(), a.view(), {.head_mask = mask});
  reference.forward(ctx, x.view(), b.view());
  for (std::int64_t i = 0; i < a.numel(); ++i)
    ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << i;

  const float short_mask[] = {1, 1, 0};
  EXPECT_THROW(
      {
        try {
          layer.forward(ctx, x.view(), a.view(), {.head_mask = short_mask});
        } catch (const Error& e) {
          EXPECT_STREQ(e.what(), "head_mask: expected 4 entries (one per head), got 3");
          throw;
        }
      },
      Error);
  const float nan_mask[] = {1, std::nanf(""), 1, 1};
  EXPECT_THROW(layer.forward(ctx, x.view(), a.view(), {.head_mask = nan_mask}), Error);
}

// The golden sentences of the MiniLM tests (in the repository, so this runs on any checkout)
// of at most 48 tokens: varied text, short enough for the float64 score scan below.
std::vector<std::string> corpus_sample(const BertEncoder& encoder, std::size_t count) {
  std::vector<std::string> out;
  for (const GoldenCase& c : load_golden_cases())
    if (out.size() < count && encoder.tokenizer().encode(c.text).size() <= 48)
      out.push_back(c.text);
  return out;
}

// On the real model and real sentences, the streaming second pass equals the reference
// kernel's probabilities reduced. The per-row bound of the header comment needs the scores'
// size, which we measure on the same sentences through the encoder's observe hook: S = max
// scale * sum_d |q_d k_d|, T = max |t|, L = max |lse|. The kernel's lse is within
// (head_dim + 2) u S + 2u T + 2u L of the exact one by the same dot-product argument, so
// delta <= 2((head_dim + 2) u S + 2u T) + 2u L for every row; an average of rows inherits the
// row bounds (masses within expm1(delta), entropy within expm1(delta) H + delta, distance within
// expm1(delta) * distance), and the reference side adds 2u.
TEST(HeadAnalysisModel, StreamingStatisticsEqualReferenceOnCorpus) {
  HEADCOUNT_REQUIRE_MINILM();
  const BertEncoder encoder = BertEncoder::load(default_model_dir());
  const std::vector<std::string> sentences = corpus_sample(encoder, 80);
  ASSERT_EQ(sentences.size(), 80u);
  Context ctx({.threads = 2});

  double S = 0, T = 0, L = 0;
  for (const std::string& text : sentences) {
    const TokenBatch batch =
        pad_batch({encoder.tokenizer().encode(text)}, encoder.tokenizer().pad_id());
    Tensor hidden(DType::f32, {1, batch.seq_len, encoder.dim()});
    encoder.executor().forward(
        ctx, batch, hidden.view(),
        TransformerForwardOptions{.observe_attention = [&](std::int64_t, const AttentionParams& p) {
          const std::int64_t n = p.q.shape[1], heads = p.q.shape[2], d = p.q.shape[3];
          const double scale = 1.0 / std::sqrt(static_cast<double>(d));
          for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t i = 0; i < n; ++i) {
              L = std::max(L, std::fabs(static_cast<double>(
                                  p.lse.ptr<const float>()[p.lse.offset({0, h, i})])));
              for (std::int64_t j = 0; j < n; ++j) {
                double dot = 0, abs_dot = 0;
                for (std::int64_t e = 0; e < d; ++e) {
                  const double x =
                      static_cast<double>(p.q.ptr<const float>()[p.q.offset({0, i, h, e})]) *
                      p.k.ptr<const float>()[p.k.offset({0, j, h, e})];
                  dot += x;
                  abs_dot += std::fabs(x);
                }
                S = std::max(S, scale * abs_dot);
                T = std::max(T, std::fabs(scale * dot));
              }
            }
        }});
  }
  const double delta = 2 * ((32 + 2) * kU * S + 2 * kU * T) + 2 * kU * L + 2 * kU;
  const double grow = std::expm1(delta);

  const HeadAnalysis streaming =
      analyze_heads(ctx, encoder, sentences, {.stats_kernel = Kernel::streaming});
  const HeadAnalysis reference =
      analyze_heads(ctx, encoder, sentences, {.stats_kernel = Kernel::reference});
  ASSERT_EQ(streaming.per_head.size(), 72u);
  double worst = 0;
  for (std::size_t k = 0; k < streaming.per_head.size(); ++k) {
    const HeadStatistics& s = streaming.per_head[k];
    const HeadStatistics& r = reference.per_head[k];
    ASSERT_EQ(s.rows, r.rows);
    ASSERT_EQ(s.uniform_entropy, r.uniform_entropy);  // visible-key counts: exact
    const double masses[][2] = {
        {s.cls, r.cls}, {s.sep, r.sep}, {s.punctuation, r.punctuation}, {s.mass, r.mass}};
    for (const auto& m : masses) {
      EXPECT_NEAR(m[0], m[1], grow * m[1] + 1e-12) << k;
      worst = std::max(worst, std::fabs(m[0] - m[1]));
    }
    for (std::size_t o = 0; o < s.offsets.size(); ++o) {
      EXPECT_NEAR(s.offsets[o], r.offsets[o], grow * r.offsets[o] + 1e-12) << k;
      worst = std::max(worst, std::fabs(s.offsets[o] - r.offsets[o]));
    }
    EXPECT_NEAR(s.entropy, r.entropy, grow * r.entropy + delta) << k;
    EXPECT_NEAR(s.distance, r.distance, grow * r.distance + 1e-12) << k;
    worst = std::max({worst, std::fabs(s.entropy - r.entropy), std::fabs(s.distance - r.distance)});
    EXPECT_EQ(s.role, r.role) << "layer " << s.layer << " head " << s.head;
  }
  std::printf(
      "scores: S %.1f, T %.1f, L %.1f -> delta %.3g; over %zu sentences max |difference| %.3g\n", S,
      T, L, delta, sentences.size(), worst);
}

TEST(HeadRoles, RulesInOrder) {
  HeadStatistics s;
  s.uniform_entropy = 2.0;
  s.entropy = 1.0;
  s.offsets[kOffsetIndex0 - 1] = 0.5;  // exactly the threshold: previous-token
  s.cls = 0.3;
  EXPECT_EQ(assign_role(s), HeadRole::previous_token);
  s.cls = 0.6;  // the largest target wins
  EXPECT_EQ(assign_role(s), HeadRole::cls_sink);
  s.cls = 0.1;
  s.offsets[kOffsetIndex0 - 1] = 0.1;
  s.offsets[kOffsetIndex0 + 2] = 0.7;
  EXPECT_EQ(assign_role(s), HeadRole::positional);
  EXPECT_EQ(role_target(s), "+2 0.70");
  s.offsets[kOffsetIndex0 + 2] = 0.2;
  s.sep = 0.55;
  EXPECT_EQ(assign_role(s), HeadRole::sep_sink);
  s.sep = 0.2;
  s.punctuation = 0.49;  // below the threshold: entropy decides
  EXPECT_EQ(assign_role(s), HeadRole::mixed);
  s.entropy = 1.8;  // 90% of uniform
  EXPECT_EQ(assign_role(s), HeadRole::broad);
}

TEST(HeadAnalysisModel, AblationBaselineIsTheStsScoreAndMasksChangeIt) {
  HEADCOUNT_REQUIRE_MINILM();
  std::vector<StsPair> pairs =
      read_sts(std::string(HEADCOUNT_TESTDATA_DIR) + "/heads/sts-pairs.tsv");
  pairs.resize(12);
  const BertEncoder encoder = BertEncoder::load(default_model_dir());
  Context ctx({.threads = 2});
  const HeadAblation ablation = ablate_heads(ctx, encoder, pairs);
  const StsResult plain = evaluate_sts(ctx, encoder, pairs);
  ASSERT_EQ(ablation.spearman.size(), 72u);
  EXPECT_DOUBLE_EQ(ablation.baseline, plain.spearman);
  // The layer-by-layer ablation (cached layer inputs) equals removing each head from a full
  // forward, bitwise: the same batches run the same code from that layer on.
  std::vector<std::string> texts;
  std::vector<std::pair<std::size_t, std::size_t>> rows;
  auto row_of = [&](const std::string& t) {
    const auto it = std::find(texts.begin(), texts.end(), t);
    if (it != texts.end()) return static_cast<std::size_t>(it - texts.begin());
    texts.push_back(t);
    return texts.size() - 1;
  };
  std::vector<double> gold;
  for (const StsPair& p : pairs) {
    const std::size_t a = row_of(p.sentence1);
    rows.emplace_back(a, row_of(p.sentence2));
    gold.push_back(p.score);
  }
  for (std::size_t head = 0; head < 72; head += 7) {
    std::vector<float> one(72, 1.0f);
    one[head] = 0.0f;
    const Tensor e = encoder.embed(ctx, texts, {.head_mask = one});
    std::vector<double> cosines;
    for (const auto& [a, b] : rows)
      cosines.push_back(
          cosine_similarity(e.data<const float>() + a * 384, e.data<const float>() + b * 384, 384));
    EXPECT_EQ(ablation.spearman[head], 100.0 * spearman(cosines, gold)) << "head " << head;
  }

  int changed = 0;
  for (double s : ablation.spearman) {
    EXPECT_TRUE(std::isfinite(s));
    changed += s != ablation.baseline;
  }
  EXPECT_GT(changed, 0) << "removing heads never changed the ranking";

  // All-ones mask: bitwise the unmasked model. Removing every head of layer 0 changes it.
  const std::vector<std::string> two = {"A man is playing a flute.", "Two dogs run."};
  const Tensor base = encoder.embed(ctx, two);
  std::vector<float> mask(72, 1.0f);
  const Tensor ones = encoder.embed(ctx, two, {.head_mask = mask});
  for (std::int64_t i = 0; i < base.numel(); ++i)
    ASSERT_EQ(base.data<const float>()[i], ones.data<const float>()[i]);
  std::fill(mask.begin(), mask.begin() + 12, 0.0f);
  const Tensor pruned = encoder.embed(ctx, two, {.head_mask = mask});
  EXPECT_LT(cosine_similarity(base.data<const float>(), pruned.data<const float>(), 384), 0.999);
  // A forward split at layer 3 is the full forward, bitwise; a layer range outside the model is an
  // error.
  const TokenBatch tb =
      pad_batch({encoder.tokenizer().encode(two[0]), encoder.tokenizer().encode(two[1])},
                encoder.tokenizer().pad_id());
  Tensor full(DType::f32, {2, tb.seq_len, 384}), split(DType::f32, {2, tb.seq_len, 384});
  encoder.executor().forward(ctx, tb, full.view());
  encoder.executor().forward(ctx, tb, split.view(), TransformerForwardOptions{.end_layer = 3});
  encoder.executor().forward(ctx, tb, split.view(), TransformerForwardOptions{.first_layer = 3});
  for (std::int64_t i = 0; i < full.numel(); ++i)
    ASSERT_EQ(full.data<const float>()[i], split.data<const float>()[i]) << i;
  EXPECT_THROW(encoder.executor().forward(ctx, tb, split.view(),
                                          TransformerForwardOptions{.first_layer = 7}),
               Error);
  EXPECT_THROW(
      encoder.executor().forward(ctx, tb, split.view(),
                                 TransformerForwardOptions{.first_layer = 4, .end_layer = 2}),
      Error);
  std::vector<float> short_mask(71, 1.0f);
  EXPECT_THROW(encoder.embed(ctx, two, {.head_mask = short_mask}), Error);
}

}  // namespace
}  // namespace headcount::testing
