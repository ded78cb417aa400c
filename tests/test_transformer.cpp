// The one inference executor (headcount/transformer.h) against the training executor
// (train::Model), from the same weights: every model shape the definition admits. The two
// executors share the row arithmetic of the norms and gates but not the GEMM nor the attention
// kernel (the training executor multiplies with its own blocked loops and the reference
// attention), so their logits agree to fp32 rounding, not bitwise: 1e-5 of the largest logit
// is a few hundred ulps of the sums of d_model-long dot products they both round.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "expect_error.h"
#include "headcount/train/definition.h"
#include "headcount/train/model.h"
#include "headcount/train/trainer.h"
#include "headcount/transformer.h"

namespace headcount {
namespace {

using testing::expect_error;

struct GridPoint {
  bool pre, rms, swiglu, rotary;
  int heads;  // 0: MHA 4 heads, 1: GQA 4 heads over 2 K/V heads, 2: uneven (4, 2, 3 heads)
  bool causal = true;

  std::string name() const {
    static const char* const kHeads[] = {"mha", "gqa", "uneven"};
    return std::string(pre ? "pre" : "post") + "_" + (rms ? "rms" : "ln") + "_" +
           (swiglu ? "swiglu" : "gelu") + "_" + (rotary ? "rotary" : "learned") + "_" +
           kHeads[heads] + (causal ? "" : "_bidirectional");
  }
};

train::ModelConfig config_of(const GridPoint& p) {
  train::ModelConfig c{.vocab = 37,
                       .context = 16,
                       .layers = 3,
                       .d_model = 24,
                       .heads = 4,
                       .head_dim = 6,
                       .d_ff = 40,
                       .norm = p.pre ? train::NormPlacement::pre : train::NormPlacement::post,
                       .causal = p.causal,
                       .init_std = 0.2f,
                       .rms_norm = p.rms,
                       .rope_base = p.rotary ? 10000.0f : 0.0f,
                       .swiglu = p.swiglu,
                       .biases = !p.swiglu,
                       .tied_head = p.swiglu};
  if (p.heads == 1) c.kv_heads = 2;
  if (p.heads == 2) {
    c.layer_heads = {4, 2, 3};
    c.layer_kv_heads = {4, 1, 3};
  }
  return c;
}

// The training executor's logits and the inference executor's, for the same tokens.
void expect_same_logits(const GridPoint& p) {
  SCOPED_TRACE(p.name());
  train::Model trained(config_of(p), 7);
  const model::Weights weights = train::to_weights(trained);
  const model::Config& c = weights.config;
  const std::int64_t B = 2, n = 11;
  train::Batch batch{.batch = B, .seq_len = n};
  std::mt19937 rng(3);
  for (std::int64_t i = 0; i < B * n; ++i) {
    batch.tokens.push_back(static_cast<std::int32_t>(rng() % c.vocab));
    batch.targets.push_back(static_cast<std::int32_t>(rng() % c.vocab));
  }
  Context ctx({.threads = 2});
  std::vector<float> expected(static_cast<std::size_t>(B * n * c.vocab));
  trained.forward(ctx, batch, expected.data());

  const Transformer executor(weights);
  Tensor hidden(DType::f32, {B, n, c.d_model});
  executor.forward(ctx, batch.tokens, B, n, hidden.view());
  std::vector<float> got(expected.size());
  executor.logits(ctx, hidden.data<const float>(), B * n, got.data());

  float scale = 0, worst = 0;
  for (float v : expected) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    worst = std::max(worst, std::abs(got[i] - expected[i]));
  }
  ASSERT_GT(scale, 0.1f);  // logits that could tell a wrong model from a right one
  EXPECT_LE(worst, 1e-5f * scale) << "largest logit " << scale;
}

TEST(Transformer, MatchesTheTrainingExecutorOnEveryShapeTheDefinitionAdmits) {
  int run = 0;
  for (bool pre : {false, true})
    for (bool rms : {false, true})
      for (bool swiglu : {false, true})
        for (bool rotary : {false, true})
          for (int heads : {0, 1, 2}) {
            // What the training executor admits today: SwiGLU only with the rest of the Llama
            // family (RMSNorm, rotary; train::definition), and the Llama pieces only pre-norm
            // (its post-norm path is LayerNorm's: train/model_config.cpp). 18 of the 48 points.
            if (swiglu && !(rms && rotary)) continue;
            if (!pre && (rms || swiglu || rotary)) continue;
            expect_same_logits({pre, rms, swiglu, rotary, heads});
            ++run;
          }
  EXPECT_EQ(run, 18);
}

TEST(Transformer, MatchesTheTrainingExecutorBidirectional) {
  expect_same_logits(
      {.pre = false, .rms = false, .swiglu = false, .rotary = false, .heads = 0, .causal = false});
  expect_same_logits(
      {.pre = true, .rms = true, .swiglu = false, .rotary = true, .heads = 1, .causal = false});
}

TEST(Transformer, LayerRangesComposeBitwise) {
  // Layers [0, 1) then [1, end) give the full forward's bits, for pre- and post-norm models.
  for (bool pre : {false, true}) {
    train::Model trained(config_of({pre, pre, false, pre, 2}), 5);
    const Transformer executor(train::to_weights(trained));
    const model::Config& c = executor.config();
    const std::int64_t n = 9;
    std::vector<std::int32_t> ids(n);
    for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = (i * 7) % c.vocab;
    Context ctx({.threads = 2});
    Tensor full(DType::f32, {1, n, c.d_model}), split(DType::f32, {1, n, c.d_model});
    executor.forward(ctx, ids, 1, n, full.view());
    executor.forward(ctx, ids, 1, n, split.view(), {.end_layer = 1});
    executor.forward(ctx, ids, 1, n, split.view(), {.first_layer = 1});
    // Pre-norm: the stream handed from layer 0 to 1 is un-normed (its last sub-layer's output
    // added); the second call's range ends at the last layer, so the final norm runs there.
    EXPECT_TRUE(std::equal(full.data<const float>(), full.data<const float>() + n * c.d_model,
                           split.data<const float>()))
        << (pre ? "pre" : "post");
  }
}

TEST(Transformer, CachedDecodingEqualsTheWholeSequence) {
  // Prefill of 5 tokens then one token at a time through the cache: each step's logits equal
  // the whole sequence's row to fp32 rounding (the decode kernel sums in its own order).
  train::Model trained(config_of({true, true, true, true, 1}), 11);
  const Transformer executor(train::to_weights(trained));
  const model::Config& c = executor.config();
  const std::int64_t n = 12;
  std::vector<std::int32_t> ids(n);
  for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = (i * 5 + 1) % c.vocab;
  Context ctx({.threads = 2});
  Tensor hidden(DType::f32, {1, n, c.d_model});
  executor.forward(ctx, ids, 1, n, hidden.view());
  std::vector<float> whole(static_cast<std::size_t>(n * c.vocab));
  executor.logits(ctx, hidden.data<const float>(), n, whole.data());
  KvCache cache = executor.make_cache(n);
  const std::span<const std::int32_t> span(ids);
  const Tensor first = executor.forward(ctx, span.subspan(0, 5), cache, Logits::all);
  float scale = 0;
  for (float v : whole) scale = std::max(scale, std::abs(v));
  auto expect_row = [&](const float* got, std::int64_t row) {
    for (std::int64_t v = 0; v < c.vocab; ++v)
      EXPECT_NEAR(got[v], whole[static_cast<std::size_t>(row * c.vocab + v)], 1e-5f * scale)
          << "row " << row << " token " << v;
  };
  for (std::int64_t i = 0; i < 5; ++i) expect_row(first.data<const float>() + i * c.vocab, i);
  for (std::int64_t i = 5; i < n; ++i)
    expect_row(executor.forward(ctx, span.subspan(static_cast<std::size_t>(i), 1), cache)
                   .data<const float>(),
               i);
}

TEST(Transformer, BadInputNamesTheParameter) {
  train::Model trained(config_of({true, true, false, true, 0}), 1);
  const Transformer executor(train::to_weights(trained));
  Context ctx({.threads = 1});
  Tensor hidden(DType::f32, {1, 4, 24});
  const std::vector<std::int32_t> bad = {1, 2, 99, 3};
  expect_error([&] { executor.forward(ctx, bad, 1, 4, hidden.view()); },
               {"token id", "in [0, 37)", "99"});
  const std::vector<std::int32_t> ids = {1, 2, 3, 4};
  expect_error([&] { executor.forward(ctx, ids, 1, 4, hidden.view(), {.end_layer = 7}); },
               {"end_layer", "7"});
  const std::vector<float> mask(5, 1.0f);
  expect_error([&] { executor.forward(ctx, ids, 1, 4, hidden.view(), {.head_mask = mask}); },
               {"head_mask", "12 factors"});
  KvCache cache = executor.make_cache(4);
  expect_error([&] { (void)executor.forward(ctx, ids, cache, Logits::last, {.head_mask = mask}); },
               {"forward options", "KV cache"});
}

}  // namespace
}  // namespace headcount

namespace headcount {
namespace {

// A Llama-style model trained by main before the executors became one (tests/testdata/
// checkpoints/llama-char-2026-12-07: 2 layers, 4 heads over 2 K/V heads, RMSNorm, rotary,
// SwiGLU, no biases, tied head; 300 char-lm steps, `headcount train --config config.json`) still
// loads, and the inference executor, decoding through its KV cache, continues a prompt with the
// same greedy tokens as the training executor recomputing the whole sequence at every step.
TEST(Transformer, ACommittedCheckpointDecodesAsTheTrainingExecutorContinuesIt) {
  Context ctx({.threads = 2});
  const std::string dir =
      std::string(HEADCOUNT_TESTDATA_DIR) + "/checkpoints/llama-char-2026-12-07";
  const std::unique_ptr<train::Trainer> trainer = train::Trainer::resume(ctx, dir);
  EXPECT_EQ(trainer->step(), 300);
  train::Model& trained = trainer->model();
  const Transformer executor(train::to_weights(trained));
  const model::Config& c = executor.config();
  EXPECT_EQ(c.family, model::Family::llama);
  EXPECT_EQ(c.kv_heads_in(0), 2);
  const std::int64_t prompt = 6, steps = c.context - prompt;
  std::vector<std::int32_t> ids;
  for (std::int64_t i = 0; i < prompt; ++i)
    ids.push_back(static_cast<std::int32_t>((i * 11 + 5) % c.vocab));
  auto argmax = [&](const float* row) {
    return static_cast<std::int32_t>(std::max_element(row, row + c.vocab) - row);
  };

  // The training executor: the whole sequence again at every step.
  std::vector<std::int32_t> expected = ids;
  std::vector<float> logits(static_cast<std::size_t>(c.context * c.vocab));
  for (std::int64_t s = 0; s < steps; ++s) {
    const auto n = static_cast<std::int64_t>(expected.size());
    train::Batch batch{.batch = 1,
                       .seq_len = n,
                       .tokens = expected,
                       .targets = std::vector<std::int32_t>(static_cast<std::size_t>(n), 0)};
    trained.forward(ctx, batch, logits.data());
    expected.push_back(argmax(logits.data() + (n - 1) * c.vocab));
  }

  // The inference executor: prefill, then one token at a time through the cache.
  KvCache cache = executor.make_cache(c.context);
  std::vector<std::int32_t> got = ids;
  Tensor step = executor.forward(ctx, ids, cache);
  for (std::int64_t s = 0; s < steps; ++s) {
    got.push_back(argmax(step.data<const float>()));
    if (s + 1 < steps)
      step = executor.forward(ctx, std::span<const std::int32_t>(&got.back(), 1), cache);
  }
  EXPECT_EQ(got, expected);
  // Not a constant continuation: the trained model predicts several distinct characters.
  EXPECT_GE(std::set<std::int32_t>(got.begin() + prompt, got.end()).size(), 3u);
}

}  // namespace
}  // namespace headcount
