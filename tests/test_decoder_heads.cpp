// What the decoder's heads do (decoder_heads.h): the decoder's observe hook against float64 and
// against the streaming kernel's own output, the corpus statistics of the streaming second pass
// against the reference probabilities, the OV copying circuit's z-scores against full logits in
// double, the induction scores against the maps and logits they summarise, the role rule at its
// thresholds; and the hook on SmolLM2-135M (skipped, naming the file, when the model is absent).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "expect_error.h"
#include "headcount/decoder_heads.h"
#include "headcount/gguf.h"
#include "sanitized.h"
#include "small_llama.h"

namespace headcount {
namespace {

namespace fs = std::filesystem;
using i64 = std::int64_t;
using testing::small_llama;
using testing::small_tokenizer;

constexpr double kU = 0x1.0p-24;  // fp32 unit roundoff

// The hook's params of one layer against float64 from the same (rotated, fp32) q, k, v:
//   - the reference probabilities (reference_probabilities: a double softmax, rounded to fp32
//     once) within 2u relative;
//   - the streaming kernel's out (the concat buffer, fp32) within its rounding. Its error: the
//     fp32 score of a dot product of length d has |error| <= d u scale sum|q k| =: delta_ij
//     (plus the scale's rounding, u |s|); the online softmax then moves each weight by a
//     relative (2 max_j delta + c u), c a few operations per key (exp, the running rescale,
//     the division), and the weighted sum adds n u per term: |error| <= sum_j p_ij |v_j| (2
//     max delta + (n + 8) u). Bounded with a factor 2 below: a wrong scale, mask or K/V group
//     is off by orders of magnitude more;
//   - the kernel's lse within max delta + n u (|lse| + 1).
// Returns the largest error seen over the bound (<= 1 passes).
double check_layer_against_float64(Context& ctx, const AttentionParams& p) {
  const i64 n = p.q.shape[1], heads = p.q.shape[2], kv_heads = p.k.shape[2], d = p.q.shape[3],
            dv = p.v.shape[3], group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<float> probs(static_cast<std::size_t>(heads * n * n)), scratch;
  reference_probabilities(
      ctx, p, TensorView::contiguous(probs.data(), DType::f32, {1, heads, n, n}), scratch);
  double probs_worst = 0, lse_worst = 0, out_worst = 0;
  for (i64 h = 0; h < heads; ++h)
    for (i64 i = 0; i < n; ++i) {
      std::vector<double> s(static_cast<std::size_t>(i + 1));
      double max = -INFINITY, delta = 0;
      for (i64 j = 0; j <= i; ++j) {
        double dot = 0, abs_dot = 0;
        for (i64 e = 0; e < d; ++e) {
          const double q = p.q.ptr<const float>()[p.q.offset({0, i, h, e})];
          const double k = p.k.ptr<const float>()[p.k.offset({0, j, h / group, e})];
          dot += q * k;
          abs_dot += std::abs(q * k);
        }
        s[static_cast<std::size_t>(j)] = dot * scale;
        max = std::max(max, dot * scale);
        delta = std::max(delta, static_cast<double>(d + 1) * kU * scale * abs_dot);
      }
      const std::vector<double> score = s;
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - max));
      const double lse = max + std::log(sum);
      const double lse_error = std::abs(p.lse.ptr<const float>()[p.lse.offset({0, h, i})] - lse);
      lse_worst = std::max(
          lse_worst, lse_error / (2 * (delta + static_cast<double>(n) * kU * (std::abs(lse) + 1))));
      // The reference multiplies by the fp32 scale (relative error <= u), which moves log p_ij
      // by <= u |s_ij - mean_p(s)|; then one rounding to fp32.
      double mean_score = 0;
      for (i64 j = 0; j <= i; ++j)
        mean_score += s[static_cast<std::size_t>(j)] / sum * score[static_cast<std::size_t>(j)];
      for (i64 j = 0; j < n; ++j) {
        const double want = j <= i ? s[static_cast<std::size_t>(j)] / sum : 0.0;
        const double got = probs[static_cast<std::size_t>((h * n + i) * n + j)];
        const double s_ij = j <= i ? score[static_cast<std::size_t>(j)] : 0.0;
        const double bound = 2 * kU * want * (1 + std::abs(s_ij - mean_score)) + 1e-300;
        probs_worst = std::max(probs_worst, std::abs(got - want) / bound);
      }
      for (i64 e = 0; e < dv; ++e) {
        double want = 0, magnitude = 0;
        for (i64 j = 0; j <= i; ++j) {
          const double v = p.v.ptr<const float>()[p.v.offset({0, j, h / group, e})];
          want += s[static_cast<std::size_t>(j)] / sum * v;
          magnitude += s[static_cast<std::size_t>(j)] / sum * std::abs(v);
        }
        const double got = p.out.ptr<const float>()[p.out.offset({0, i, h, e})];
        const double bound = 2 * magnitude * (2 * delta + static_cast<double>(n + 8) * kU) + 1e-30;
        out_worst = std::max(out_worst, std::abs(got - want) / bound);
      }
    }
  if (std::getenv("HEADCOUNT_TEST_VERBOSE"))
    std::printf("probs %.3g lse %.3g out %.3g\n", probs_worst, lse_worst, out_worst);
  return std::max({probs_worst, lse_worst, out_worst});
}

// Runs `ids` with and without the hook: the logits must be the same bits, and every layer's
// hook params must pass check_layer_against_float64. Returns the worst ratio over all layers.
double check_hook(const LlamaDecoder& decoder, std::span<const std::int32_t> ids) {
  Context ctx({.threads = 2});
  const i64 n = static_cast<i64>(ids.size()), layers = decoder.config().layer_count();
  KvCache plain_cache = decoder.make_cache(n), hooked_cache = decoder.make_cache(n);
  const Tensor plain = decoder.executor().forward(ctx, ids, plain_cache, Logits::all);
  double worst = 0;
  std::vector<i64> seen;
  const Tensor hooked =
      decoder.executor().forward(ctx, ids, hooked_cache, Logits::all,
                                 {.observe_attention = [&](i64 layer, const AttentionParams& p) {
                                   seen.push_back(layer);
                                   EXPECT_TRUE(p.causal);
                                   EXPECT_EQ(p.q.shape[1], n);
                                   worst = std::max(worst, check_layer_against_float64(ctx, p));
                                 }});
  std::vector<i64> all(static_cast<std::size_t>(layers));
  for (i64 l = 0; l < layers; ++l) all[static_cast<std::size_t>(l)] = l;
  EXPECT_EQ(seen, all);
  EXPECT_EQ(std::memcmp(plain.data<const void>(), hooked.data<const void>(), plain.bytes()), 0)
      << "the hook changed the logits";
  return worst;
}

TEST(DecoderHeadsSmall, ObserveHookSeesWhatTheKernelUsedAndChangesNothing) {
  const LlamaDecoder decoder(small_llama(), small_tokenizer(40));
  const std::vector<std::int32_t> ids = {3, 17, 5, 39, 0, 22, 8, 8, 30, 12, 1, 7, 3, 17, 5};
  const double worst = check_hook(decoder, ids);
  EXPECT_LE(worst, 1.0);
  EXPECT_GT(worst, 0.0);  // the kernel's fp32 arithmetic is visible: the check compares values

  // The hook is for the prompt's prefill only.
  Context ctx;
  KvCache cache = decoder.make_cache(16);
  (void)decoder.executor().forward(ctx, std::span(ids).first(4), cache);
  headcount::testing::expect_error(
      [&] {
        (void)decoder.executor().forward(ctx, std::span(ids).subspan(4, 1), cache, Logits::last,
                                         {.observe_attention = [](i64, const AttentionParams&) {}});
      },
      {"observe_attention", "an empty cache", "holding 4 tokens"});
}

// The corpus statistics (streaming second pass over the kernel's lse) against the same
// measures summed in double from the reference probabilities of decoder_attention_maps, window
// by window. Each field is a mean of fp32-rounded row sums: 1e-5 covers the rounding of
// probabilities that are exact to ~1e-7 (entropy: ~n 1e-7 ln n per row).
TEST(DecoderHeadsSmall, CorpusStatisticsEqualTheReferenceProbabilities) {
  const LlamaDecoder decoder(small_llama(), small_tokenizer(40));
  std::vector<std::int32_t> ids(52);
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<std::int32_t>((i * 13 + 7) % 40);
  Context ctx({.threads = 2});
  const i64 n = 16, heads = 4;
  const DecoderCorpusResult r = decoder_corpus_statistics(ctx, decoder, ids, {.context = n});
  EXPECT_EQ(r.windows, 3);  // 52 tokens: three windows of 16, the rest dropped
  ASSERT_EQ(r.per_head.size(), 12u);
  std::vector<DecoderCorpusStats> want(12);
  for (i64 w = 0; w < 3; ++w) {
    const AttentionMaps maps = decoder_attention_maps(
        ctx, decoder, std::span(ids).subspan(static_cast<std::size_t>(w * n), n));
    for (i64 l = 0; l < 3; ++l)
      for (i64 h = 0; h < heads; ++h) {
        DecoderCorpusStats& s = want[static_cast<std::size_t>(l * heads + h)];
        const float* p = maps.map(l, h);
        for (i64 i = 1; i < n; ++i) {
          for (i64 j = 0; j <= i; ++j) {
            const double x = p[i * n + j];
            s.entropy -= x > 0 ? x * std::log(x) : 0.0;
            s.distance += x * static_cast<double>(i - j);
            s.mass += x;
          }
          for (i64 j = i + 1; j < n; ++j) EXPECT_EQ(p[i * n + j], 0.0f);  // causal
          s.previous += p[i * n + i - 1];
          s.self += p[i * n + i];
          s.first += p[i * n];
          s.uniform_entropy += std::log(static_cast<double>(i + 1));
          ++s.rows;
        }
      }
  }
  for (std::size_t k = 0; k < 12; ++k) {
    const DecoderCorpusStats& got = r.per_head[k];
    const DecoderCorpusStats& w = want[k];
    const double rows = static_cast<double>(w.rows);
    EXPECT_EQ(got.rows, w.rows);
    EXPECT_NEAR(got.previous, w.previous / rows, 1e-5) << k;
    EXPECT_NEAR(got.self, w.self / rows, 1e-5) << k;
    EXPECT_NEAR(got.first, w.first / rows, 1e-5) << k;
    EXPECT_NEAR(got.entropy, w.entropy / rows, 1e-5) << k;
    EXPECT_NEAR(got.uniform_entropy, w.uniform_entropy / rows, 1e-12) << k;
    EXPECT_NEAR(got.distance, w.distance / rows, 1e-5) << k;
    EXPECT_NEAR(got.mass, 1.0, 1e-5) << k;
  }
  headcount::testing::expect_error(
      [&] {
        (void)decoder_corpus_statistics(ctx, decoder, std::span(ids).first(10), {.context = n});
      },
      {"corpus", "at least 16 tokens", "10 tokens"});
  headcount::testing::expect_error(
      [&] { (void)decoder_corpus_statistics(ctx, decoder, ids, {.context = 65}); },
      {"context", "64", "65"});
}

// The copying z-score from the Gram-matrix shortcut against the full direct logits
// l = W_U (g * W_O,h v) over all 40 tokens in double. The shortcut's c_t,h comes from an fp32
// GEMM of length 32 (relative ~32 u of sum |terms|); mean and second moment are double: 1e-4
// absolute on z-scores of order 1 covers it, and a wrong head slice, K/V group or missing g
// moves z by more than 0.1.
TEST(DecoderHeadsSmall, CopyingScoresEqualTheFullLogitsInDouble) {
  const model::Weights weights = small_llama();
  Context ctx({.threads = 2});
  const OvCopyingCircuit circuit(ctx, weights);
  const i64 n = 6, kv_heads = 2, hd = 8, heads = 4, d = 32, vocab = 40;
  std::vector<float> values(static_cast<std::size_t>(n * kv_heads * hd));
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& v : values) v = dist(rng);
  const std::vector<std::int32_t> tokens = {0, 5, 39, 5, 17, 2};
  const TensorView view = TensorView::contiguous(values.data(), DType::f32, {n, kv_heads, hd});
  const float* w_u = weights.at(model::Role::token_embedding).data<const float>();
  const float* g = weights.at(model::Role::final_norm_weight).data<const float>();
  double moved = 0;
  for (i64 layer = 0; layer < 3; ++layer) {
    std::vector<double> z(static_cast<std::size_t>(heads * n));
    circuit.z_scores(ctx, layer, tokens, view, z);
    const float* w_o = weights.at(model::Role::o_weight, layer).data<const float>();  // [d, 32]
    for (i64 h = 0; h < heads; ++h)
      for (i64 i = 0; i < n; ++i) {
        const float* v = values.data() + (i * kv_heads + h / 2) * hd;
        std::vector<double> y(static_cast<std::size_t>(d));
        for (i64 r = 0; r < d; ++r) {
          double o = 0;
          for (i64 e = 0; e < hd; ++e)
            o += static_cast<double>(w_o[r * heads * hd + h * hd + e]) * v[e];
          y[static_cast<std::size_t>(r)] = g[r] * o;
        }
        std::vector<double> logits(static_cast<std::size_t>(vocab));
        double mean = 0;
        for (i64 t = 0; t < vocab; ++t) {
          double l = 0;
          for (i64 r = 0; r < d; ++r)
            l += static_cast<double>(w_u[t * d + r]) * y[static_cast<std::size_t>(r)];
          logits[static_cast<std::size_t>(t)] = l;
          mean += l / vocab;
        }
        double var = 0;
        for (double l : logits) var += (l - mean) * (l - mean) / vocab;
        const double want =
            (logits[static_cast<std::size_t>(tokens[static_cast<std::size_t>(i)])] - mean) /
            std::sqrt(var);
        EXPECT_NEAR(z[static_cast<std::size_t>(h * n + i)], want, 1e-4)
            << layer << ' ' << h << ' ' << i;
        moved = std::max(moved, std::abs(want));
      }
  }
  EXPECT_GT(moved, 0.5);  // the scores are not all near 0: the comparison can fail
  std::vector<double> z(static_cast<std::size_t>(heads * n));
  headcount::testing::expect_error([&] { circuit.z_scores(ctx, 3, tokens, view, z); },
                                   {"copying layer", "0 to 2", "3"});
  const std::vector<std::int32_t> bad = {0, 5, 40, 5, 17, 2};
  headcount::testing::expect_error([&] { circuit.z_scores(ctx, 0, bad, view, z); },
                                   {"copying tokens[2]", "[0, 40)"});
}

// The induction measures are what they summarise: the prefix-matching score is the mean of the
// maps' entries (p, p - L + 1) over the second copy, and the two losses are the mean next-token
// losses of the logits over each copy; the sequences are BOS, L tokens, the same L again.
TEST(DecoderHeadsSmall, InductionScoresSummariseTheMapsAndLogits) {
  const LlamaDecoder decoder(small_llama(), small_tokenizer(40, 0));
  const model::Weights weights = small_llama();
  Context ctx({.threads = 2});
  const OvCopyingCircuit circuit(ctx, weights);
  const InductionOptions options{.sequences = 3, .length = 9, .seed = 5};
  const auto sequences = repeated_random_sequences(decoder.tokenizer(), options);
  ASSERT_EQ(sequences.size(), 3u);
  for (const auto& s : sequences) {
    ASSERT_EQ(s.size(), 19u);
    EXPECT_EQ(s[0], 0);
    for (std::size_t i = 1; i <= 9; ++i) EXPECT_EQ(s[i], s[i + 9]);
  }
  EXPECT_NE(sequences[0], sequences[1]);
  EXPECT_EQ(repeated_random_sequences(decoder.tokenizer(), options), sequences);  // seeded

  const InductionResult r = decoder_induction_scores(ctx, decoder, circuit, options);
  EXPECT_TRUE(r.bos);
  const i64 L = 9, n = 19, heads = 4;
  std::vector<double> prefix(12, 0.0);
  double first = 0, second = 0;
  for (const auto& s : sequences) {
    const AttentionMaps maps = decoder_attention_maps(ctx, decoder, s);
    for (i64 l = 0; l < 3; ++l)
      for (i64 h = 0; h < heads; ++h)
        for (i64 p = 1 + L; p < 1 + 2 * L; ++p)
          prefix[static_cast<std::size_t>(l * heads + h)] +=
              maps.map(l, h)[p * n + p - L + 1] / (3.0 * L);
    KvCache cache = decoder.make_cache(n);
    const Tensor logits = decoder.executor().forward(ctx, s, cache, Logits::all);
    for (i64 t = 1; t < n; ++t) {
      const float* row = logits.data<const float>() + (t - 1) * 40;
      double sum = 0;
      for (i64 v = 0; v < 40; ++v) sum += std::exp(static_cast<double>(row[v]));
      const double nll = std::log(sum) - row[s[static_cast<std::size_t>(t)]];
      (t <= L ? first : second) += nll / (3.0 * L);
    }
  }
  for (std::size_t k = 0; k < 12; ++k) {
    EXPECT_NEAR(r.per_head[k].prefix_matching, prefix[k], 1e-6) << k;
    EXPECT_TRUE(std::isfinite(r.per_head[k].copying));
  }
  EXPECT_NEAR(r.loss_first_copy, first, 1e-9);
  EXPECT_NEAR(r.loss_second_copy, second, 1e-9);
  EXPECT_NEAR(r.loss_drop(), first - second, 1e-9);

  headcount::testing::expect_error(
      [&] {
        (void)decoder_induction_scores(ctx, decoder, circuit, {.sequences = 1, .length = 32});
      },
      {"sequence length", "<= the model's context 64", "65"});
  headcount::testing::expect_error(
      [&] { (void)repeated_random_sequences(decoder.tokenizer(), {.sequences = 0}); },
      {"sequences", ">= 1", "0"});
  headcount::testing::expect_error(
      [&] { (void)repeated_random_sequences(decoder.tokenizer(), {.length = 1}); },
      {"sequence length", ">= 2", "1"});
}

TEST(DecoderHeadsSmall, RolesFollowTheRuleStatedInAdvance) {
  DecoderCorpusStats corpus{.rows = 10, .entropy = 0.5, .uniform_entropy = 1.0};
  EXPECT_EQ(assign_decoder_role(corpus, {.prefix_matching = 0.3, .copying = 0.01}),
            DecoderHeadRole::induction);
  EXPECT_EQ(assign_decoder_role(corpus, {.prefix_matching = 0.3, .copying = 0.0}),
            DecoderHeadRole::mixed);  // prefix matching without copying is not induction
  EXPECT_EQ(assign_decoder_role(corpus, {.prefix_matching = 0.29, .copying = 5}),
            DecoderHeadRole::mixed);
  DecoderCorpusStats prev = corpus;
  prev.previous = 0.5;
  prev.first = 0.5;
  EXPECT_EQ(assign_decoder_role(prev, {}), DecoderHeadRole::previous_token);  // first match
  DecoderCorpusStats sink = corpus;
  sink.first = 0.5;
  EXPECT_EQ(assign_decoder_role(sink, {}), DecoderHeadRole::sink);
  DecoderCorpusStats self = corpus;
  self.self = 0.6;
  EXPECT_EQ(assign_decoder_role(self, {}), DecoderHeadRole::self);
  DecoderCorpusStats broad = corpus;
  broad.entropy = 0.9;
  EXPECT_EQ(assign_decoder_role(broad, {}), DecoderHeadRole::broad);
  EXPECT_STREQ(decoder_role_name(DecoderHeadRole::induction), "induction");
}

// ---- SmolLM2-135M ----------------------------------------------------------------------------

const fs::path kModel =
    fs::path(HEADCOUNT_TESTDATA_DIR) / ".." / ".." / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";

// The hook on the real model (30 layers, 9 query heads over 3 K/V heads, head_dim 64): every
// layer's probabilities and the streaming kernel's output against float64, logits unchanged.
TEST(DecoderHeadsSmolLM2, ObserveHookSeesWhatTheKernelUsedAndChangesNothing) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "model file absent: " << kModel << " (scripts/setup.sh)";
  const LlamaDecoder decoder = LlamaDecoder::load(kModel.string());
  const std::vector<std::int32_t> ids = decoder.tokenizer().encode(
      "It is a truth universally acknowledged, that a single man in possession of a good "
      "fortune must be in want of a wife.");
  EXPECT_LE(check_hook(decoder, ids), 1.0);
}

}  // namespace
}  // namespace headcount
