// The trainable model's contract beyond its gradients: the platform-independent random
// numbers (splitmix64's published outputs, Box-Muller's moments), the init rule, the parameter
// names and shapes of model.h, the kept probabilities, and errors for bad batches and gates.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "headcount/train/model.h"
#include "train/rng.h"

namespace headcount::testing {
namespace {

TEST(TrainRng, SplitMix64MatchesItsReferenceOutputs) {
  // The first outputs of splitmix64 from state 0 (Vigna's splitmix64.c).
  std::uint64_t state = 0;
  EXPECT_EQ(train::splitmix64(state), 0xe220a8397b1dcdafull);
  EXPECT_EQ(train::splitmix64(state), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(train::splitmix64(state), 0x06c45d188009454full);
}

TEST(TrainRng, NormalsHaveUnitMomentsAndAreSeeded) {
  // n = 200000 standard normals: the sample mean has sd 1/sqrt(n) = 0.0022, the sample
  // variance sd sqrt(2/n) = 0.0032; 5 sd each.
  train::NormalSampler a(5), b(5), c(6);
  constexpr int n = 200000;
  double sum = 0, squares = 0;
  bool differs = false;
  for (int i = 0; i < n; ++i) {
    const double x = a.next();
    EXPECT_EQ(x, b.next());
    differs |= x != c.next();
    sum += x;
    squares += x * x;
  }
  EXPECT_TRUE(differs);
  EXPECT_LT(std::abs(sum / n), 5 * 0.0022);
  EXPECT_LT(std::abs(squares / n - 1), 5 * 0.0032);
}

TEST(TrainModel, ParametersFollowTheHeaderAndTheInitRule) {
  const train::ModelConfig config{.vocab = 11,
                                  .context = 9,
                                  .layers = 2,
                                  .d_model = 16,
                                  .heads = 4,
                                  .kv_heads = 2,
                                  .head_dim = 6,
                                  .d_ff = 20,
                                  .init_std = 0.05f};
  train::Model model(config, 3);
  std::vector<std::string> names;
  for (const auto& p : model.parameters()) names.push_back(p.name);
  const std::vector<std::string> expected_first = {"tok_emb",
                                                   "pos_emb",
                                                   "blocks.0.ln1.weight",
                                                   "blocks.0.ln1.bias",
                                                   "blocks.0.attn.w_qkv",
                                                   "blocks.0.attn.b_qkv",
                                                   "blocks.0.attn.w_o",
                                                   "blocks.0.attn.b_o",
                                                   "blocks.0.ln2.weight",
                                                   "blocks.0.ln2.bias",
                                                   "blocks.0.ffn.w_up",
                                                   "blocks.0.ffn.b_up",
                                                   "blocks.0.ffn.w_down",
                                                   "blocks.0.ffn.b_down"};
  ASSERT_EQ(names.size(), 2u + 2 * 12 + 4);
  for (std::size_t i = 0; i < expected_first.size(); ++i) EXPECT_EQ(names[i], expected_first[i]);
  EXPECT_EQ(names[names.size() - 4], "ln_f.weight");
  EXPECT_EQ(names.back(), "head.bias");
  EXPECT_EQ(model.parameters()[4].value.shape(), (std::vector<std::int64_t>{16, (4 + 2 * 2) * 6}));
  EXPECT_EQ(model.parameters()[6].value.shape(), (std::vector<std::int64_t>{4 * 6, 16}));
  double squares = 0;
  std::int64_t count = 0;
  for (const auto& p : model.parameters()) {
    const float* v = p.value.data<const float>();
    EXPECT_EQ(p.decay, p.value.rank() >= 2) << p.name;
    if (p.value.rank() >= 2) {
      for (std::int64_t i = 0; i < p.value.numel(); ++i)
        squares += static_cast<double>(v[i]) * v[i];
      count += p.value.numel();
    } else {
      const float want = p.name.ends_with("weight") ? 1.0f : 0.0f;  // LayerNorm weights 1, biases 0
      for (std::int64_t i = 0; i < p.value.numel(); ++i) ASSERT_EQ(v[i], want) << p.name;
    }
  }
  // count ~ 4000 values: the sample sd is within 5·sd/sqrt(2 count) (~5.6%) of init_std.
  EXPECT_NEAR(std::sqrt(squares / static_cast<double>(count)), 0.05,
              0.05 * 5 / std::sqrt(2.0 * static_cast<double>(count)));
  // Same seed, same weights; another seed, others.
  train::Model again(config, 3), other(config, 4);
  EXPECT_EQ(std::memcmp(again.parameters()[4].value.data<const float>(),
                        model.parameters()[4].value.data<const float>(),
                        model.parameters()[4].value.bytes()),
            0);
  EXPECT_NE(std::memcmp(other.parameters()[4].value.data<const float>(),
                        model.parameters()[4].value.data<const float>(),
                        model.parameters()[4].value.bytes()),
            0);
}

TEST(TrainModel, KeptProbabilitiesAreCausalRowsThatSumToOne) {
  Context ctx({.threads = 2});
  train::Model model(
      {.vocab = 7, .context = 8, .layers = 2, .d_model = 8, .heads = 2, .init_std = 0.5f}, 1);
  train::Batch batch{.batch = 2, .seq_len = 8};
  for (int i = 0; i < 16; ++i) {
    batch.tokens.push_back(i % 7);
    batch.targets.push_back((i + 1) % 7);
  }
  const double plain = model.forward(ctx, batch, nullptr);
  const double kept = model.forward(ctx, batch, nullptr, {.keep_probs = true});
  // Reference vs streaming forward: the same loss up to fp32 rounding of the attention
  // (~depth·n·u relative with depth ~20, n = 8).
  EXPECT_NEAR(kept, plain, 20 * 8 * 6e-8 * plain);
  for (std::int64_t l = 0; l < 2; ++l) {
    const Tensor& p = model.probs(l);
    ASSERT_EQ(p.shape(), (std::vector<std::int64_t>{2, 2, 8, 8}));
    for (std::int64_t row = 0; row < 2 * 2 * 8; ++row) {
      const std::int64_t i = row % 8;
      double sum = 0;
      for (std::int64_t j = 0; j < 8; ++j) {
        const float v = p.data<const float>()[row * 8 + j];
        if (j > i) EXPECT_EQ(v, 0.0f);
        sum += v;
      }
      EXPECT_NEAR(sum, 1.0, 8 * 6e-8 * 8);
    }
  }
  expect_error([&] { (void)model.probs(2); }, {"layer"});
}

// Per-layer head counts (a pruned model): each layer's parameters take its own widths, the
// JSON form keeps them (checkpoints), and bad counts name the field and the layer.
TEST(TrainModel, PerLayerHeadCounts) {
  const train::ModelConfig c{.vocab = 5,
                             .context = 4,
                             .layers = 2,
                             .d_model = 8,
                             .heads = 4,
                             .head_dim = 2,
                             .layer_heads = {4, 2},
                             .layer_kv_heads = {2, 1}};
  const train::Model model(c, 1);
  for (const train::Parameter& p : model.parameters()) {
    if (p.name == "blocks.0.attn.w_qkv")
      EXPECT_EQ(p.value.shape(), (std::vector<std::int64_t>{8, (4 + 2 * 2) * 2}));
    if (p.name == "blocks.1.attn.w_qkv")
      EXPECT_EQ(p.value.shape(), (std::vector<std::int64_t>{8, (2 + 2 * 1) * 2}));
    if (p.name == "blocks.1.attn.w_o")
      EXPECT_EQ(p.value.shape(), (std::vector<std::int64_t>{2 * 2, 8}));
  }
  const train::ModelConfig back = train::model_config_from_json(train::to_json(model.config()));
  EXPECT_EQ(back.layer_heads, (std::vector<std::int64_t>{4, 2}));
  EXPECT_EQ(back.layer_kv_heads, (std::vector<std::int64_t>{2, 1}));
  // layer_kv_heads left empty: one K/V head per query head in every layer.
  EXPECT_EQ(
      train::resolve(
          {.vocab = 5, .context = 4, .layers = 2, .d_model = 8, .heads = 4, .layer_heads = {3, 1}})
          .layer_kv_heads,
      (std::vector<std::int64_t>{3, 1}));
  expect_error(
      [] {
        (void)train::resolve(
            {.vocab = 5, .context = 4, .layers = 2, .d_model = 8, .heads = 4, .layer_heads = {4}});
      },
      {"model.layer_heads", "2 entries"});
  expect_error(
      [] {
        (void)train::resolve({.vocab = 5,
                              .context = 4,
                              .layers = 2,
                              .d_model = 8,
                              .heads = 4,
                              .layer_heads = {4, 3},
                              .layer_kv_heads = {2, 2}});
      },
      {"model.layer_kv_heads[1]", "a divisor of layer_heads[1] = 3"});
  expect_error(
      [] {
        (void)train::resolve({.vocab = 5,
                              .context = 4,
                              .layers = 2,
                              .d_model = 8,
                              .heads = 4,
                              .layer_heads = {4, 0}});
      },
      {"model.layer_heads[1]"});
  expect_error(
      [] {
        (void)train::resolve({.vocab = 5,
                              .context = 4,
                              .layers = 2,
                              .d_model = 8,
                              .heads = 4,
                              .layer_kv_heads = {1, 1}});
      },
      {"model.layer_kv_heads", "unless layer_heads is set"});
}

TEST(TrainModel, BadBatchesAndGatesNameTheField) {
  Context ctx;
  train::Model model({.vocab = 5, .context = 4, .layers = 1, .d_model = 4, .heads = 2}, 1);
  train::Batch good{.batch = 1, .seq_len = 4, .tokens = {0, 1, 2, 3}, .targets = {1, 2, 3, -1}};
  EXPECT_TRUE(std::isfinite(model.forward(ctx, good, nullptr)));
  train::Batch b = good;
  b.tokens[2] = 5;
  expect_error([&] { model.forward(ctx, b, nullptr); }, {"batch.tokens", "5 at index 2"});
  b = good;
  b.targets[0] = -2;
  expect_error([&] { model.forward_backward(ctx, b); }, {"batch.targets"});
  b = good;
  b.seq_len = 5;
  expect_error([&] { model.forward(ctx, b, nullptr); }, {"batch.seq_len", "context = 4"});
  b = good;
  b.tokens.pop_back();
  expect_error([&] { model.forward(ctx, b, nullptr); }, {"batch.tokens", "4 entries"});
  expect_error([&] { model.forward(ctx, good, nullptr, {.head_gates = {{1.0f}}}); },
               {"head_gates[0]", "2 heads"});
  expect_error(
      [&] {
        model.forward(ctx, good, nullptr, {.head_gates = {{1.0f, NAN}}});
      },
      {"head_gates[0][1]"});
  expect_error([] { train::Model m({.vocab = 5, .context = 4, .d_model = 6, .heads = 4}, 1); },
               {"model.heads"});
  expect_error(
      [] {
        train::Model m({.vocab = 5, .context = 4, .d_model = 8, .heads = 4, .kv_heads = 3}, 1);
      },
      {"model.kv_heads"});
  expect_error([] { train::Model m({.vocab = 0, .context = 4, .d_model = 8}, 1); },
               {"model.vocab"});
  expect_error([] { train::Model m({.vocab = 5, .context = 4, .d_model = 8, .scale = -1.0f}, 1); },
               {"model.scale"});
  // Every target ignored: loss 0 and zero gradients, not NaN.
  b = good;
  b.targets = {-1, -1, -1, -1};
  const train::StepResult r = model.forward_backward(ctx, b);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.scored, 0);
  for (const auto& p : model.parameters())
    for (std::int64_t i = 0; i < p.grad.numel(); ++i)
      ASSERT_EQ(p.grad.data<const float>()[i], 0.0f) << p.name;
}

// The Llama pieces: their parameters (no pos_emb, no biases, no head.weight, a gate per FFN),
// the JSON round trip a checkpoint makes, and the checks naming each field.
TEST(TrainModel, LlamaPiecesChangeTheParametersAndSurviveJson) {
  const train::ModelConfig c{.vocab = 7,
                             .context = 6,
                             .layers = 1,
                             .d_model = 8,
                             .heads = 2,
                             .kv_heads = 1,
                             .d_ff = 12,
                             .rms_norm = true,
                             .rope_base = 500.0f,
                             .swiglu = true,
                             .biases = false,
                             .tied_head = true};
  const train::Model model(c, 1);
  std::vector<std::string> names;
  for (const train::Parameter& p : model.parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "tok_emb", "blocks.0.ln1.weight", "blocks.0.attn.w_qkv", "blocks.0.attn.w_o",
                       "blocks.0.ln2.weight", "blocks.0.ffn.w_gate", "blocks.0.ffn.w_up",
                       "blocks.0.ffn.w_down", "ln_f.weight"}));
  const train::ModelConfig back = train::model_config_from_json(train::to_json(model.config()));
  EXPECT_TRUE(back.rms_norm && back.swiglu && back.tied_head && !back.biases);
  EXPECT_EQ(back.rope_base, 500.0f);
  EXPECT_FALSE(train::to_json(train::resolve({.vocab = 5, .context = 4, .d_model = 8}))
                   .contains("rms_norm"));  // files without the pieces read as before
  expect_error(
      [] { (void)train::resolve({.vocab = 5, .context = 4, .d_model = 8, .rope_base = 1}); },
      {"model.rope_base", "> 1"});
  expect_error(
      [] {
        (void)train::resolve({.vocab = 5,
                              .context = 4,
                              .d_model = 8,
                              .norm = train::NormPlacement::post,
                              .rms_norm = true});
      },
      {"model.norm", "\"pre\" with the Llama pieces"});
  expect_error(
      [] { (void)train::resolve({.vocab = 5, .context = 4, .d_model = 8, .tied_head = true}); },
      {"model.tied_head", "a tied head has no bias"});
  expect_error(
      [] {
        (void)train::resolve(
            {.vocab = 5, .context = 4, .d_model = 9, .heads = 1, .rope_base = 100.0f});
      },
      {"model.head_dim", "even"});
}

}  // namespace
}  // namespace headcount::testing
