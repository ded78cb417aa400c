// The one transformer definition (model.h): its weight table against the real checkpoints it
// names (MiniLM's safetensors, SmolLM2's GGUF), and its checks.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "expect_error.h"
#include "headcount/compress.h"
#include "headcount/decoder.h"
#include "headcount/encoder.h"
#include "headcount/gguf.h"
#include "headcount/model.h"
#include "headcount/safetensors.h"
#include "headcount/train/definition.h"
#include "small_llama.h"

namespace headcount {
namespace {

namespace fs = std::filesystem;
using model::Role;

// SmolLM2-135M as the issue states it (30 layers, d_model 576, 9 query heads over 3 K/V heads
// of 64, SwiGLU 1536, vocabulary 49152, tied embeddings).
model::Config smollm2_config() {
  model::Config c{.family = model::Family::llama,
                  .vocab = 49152,
                  .d_model = 576,
                  .d_ff = 1536,
                  .head_dim = 64,
                  .context = 8192,
                  .norm = model::NormKind::rms_norm,
                  .placement = model::NormPlacement::pre,
                  .norm_eps = 1e-5f,
                  .activation = model::Activation::swiglu,
                  .positions = model::Positions::rotary,
                  .rope_base = 100000.0f,
                  .attention_bias = false,
                  .ffn_bias = false,
                  .causal = true,
                  .output = model::Output::tied,
                  .output_bias = false};
  c.layers.assign(30, {.heads = 9, .kv_heads = 3});
  return c;
}

TEST(ModelDefinition, BertTableIsExactlyMiniLMsCheckpoint) {
  const fs::path dir = default_model_dir();
  if (!fs::exists(dir / "model.safetensors")) GTEST_SKIP() << dir << " not present";
  const EncoderConfig config = read_encoder_config(dir.string());
  const SafetensorsFile file = SafetensorsFile::open((dir / "model.safetensors").string());
  const std::vector<model::WeightSpec> table = model::weight_table(bert_definition(config));
  ASSERT_EQ(table.size(), 5u + 16u * 6u);
  for (const model::WeightSpec& spec : table) {
    // The checkpoint may carry a "bert." prefix; MiniLM's does not.
    const SafetensorsEntry* t = file.find(spec.name);
    ASSERT_NE(t, nullptr) << spec.name;
    EXPECT_EQ(t->shape, spec.shape) << spec.name;
  }
}

TEST(ModelDefinition, LlamaTableIsExactlySmolLM2sGguf) {
  const fs::path path =
      fs::path(HEADCOUNT_TESTDATA_DIR) / ".." / ".." / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not present (scripts/setup.sh fetches it)";
  const GgufFile file = GgufFile::open(path.string());
  const std::vector<model::WeightSpec> table = model::weight_table(smollm2_config());
  // embeddings, 9 per layer, the final norm; no lm_head (tied).
  ASSERT_EQ(table.size(), 1u + 30u * 9u + 1u);
  EXPECT_EQ(table.size(), file.tensors().size());
  for (const model::WeightSpec& spec : table) {
    const GgufTensorInfo* t = file.find_tensor(spec.gguf_name);
    ASSERT_NE(t, nullptr) << spec.gguf_name;
    EXPECT_EQ(t->shape(), spec.shape) << spec.gguf_name;
  }
  EXPECT_EQ(table[1].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(table[1].shape, (std::vector<std::int64_t>{576, 576}));
  EXPECT_EQ(table[2].shape, (std::vector<std::int64_t>{192, 576}));  // 3 K/V heads of 64
}

TEST(ModelDefinition, PerLayerShapesAreOrdinaryConfigs) {
  model::Config c = smollm2_config();
  c.layers = {
      {.heads = 9, .kv_heads = 3}, {.heads = 6, .kv_heads = 2}, {.heads = 3, .kv_heads = 1}};
  model::validate(c);
  EXPECT_FALSE(c.uniform());
  EXPECT_TRUE(c.grouped());
  EXPECT_FLOAT_EQ(c.attention_scale(), 0.125f);
  const auto table = model::weight_table(c);
  for (const model::WeightSpec& s : table)
    if (s.role == Role::k_weight) EXPECT_EQ(s.shape[0], c.kv_heads_in(s.layer) * 64);
}

TEST(ModelDefinition, ChecksNameTheField) {
  model::Config c = smollm2_config();
  c.layers[4].kv_heads = 4;
  headcount::testing::expect_error([&] { (void)model::validate(c); },
                                   {"layer 4 kv_heads", "a divisor of its 9 heads", "got 4"});
  c = smollm2_config();
  c.head_dim = 63;
  headcount::testing::expect_error([&] { (void)model::validate(c); },
                                   {"head_dim", "even (rotary positions rotate pairs)", "63"});
  c = smollm2_config();
  c.attention_bias = true;  // llama's names have no biases
  headcount::testing::expect_error([&] { (void)model::validate(c); },
                                   {"family", "llama: pre-RMSNorm"});
  c = smollm2_config();
  c.layers.clear();
  headcount::testing::expect_error([&] { (void)model::validate(c); },
                                   {"layers", "at least one layer"});
}

TEST(ModelDefinition, WeightsByRoleNameTheMissingOne) {
  model::Weights w{.config = smollm2_config()};
  EXPECT_FALSE(w.has(Role::q_weight, 3));
  headcount::testing::expect_error(
      [&] { (void)w.at(Role::q_weight, 3); },
      {"q_weight of layer 3", "model.layers.3.self_attn.q_proj.weight"});
  headcount::testing::expect_error([&] { (void)model::check_weights(w, "smollm2"); },
                                   {"smollm2: model.embed_tokens.weight"});
  headcount::testing::expect_error([&] { (void)model::name_of(w.config, Role::q_bias, 0); },
                                   {"weight role", "q_bias"});
}

// A small llama-family model with seeded weights: the passes on a family without biases.
model::Weights small_llama(std::int64_t heads, std::int64_t kv_heads) {
  model::Weights w{.config = {.family = model::Family::llama,
                              .vocab = 11,
                              .d_model = 16,
                              .d_ff = 24,
                              .head_dim = 4,
                              .context = 32,
                              .norm = model::NormKind::rms_norm,
                              .placement = model::NormPlacement::pre,
                              .activation = model::Activation::swiglu,
                              .positions = model::Positions::rotary,
                              .attention_bias = false,
                              .ffn_bias = false,
                              .output = model::Output::tied,
                              .output_bias = false}};
  w.config.layers.assign(2, {.heads = heads, .kv_heads = kv_heads});
  std::uint32_t state = 7;
  for (const model::WeightSpec& spec : model::weight_table(w.config)) {
    Tensor t(DType::f32, spec.shape);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      t.data<float>()[i] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    }
    w.tensors.emplace(spec.name, std::move(t));
  }
  model::check_weights(w, "small llama");
  return w;
}

TEST(ModelPasses, MeanPoolingAGroupedModelAveragesEachGroupsKvHeads) {
  const model::Weights w = small_llama(6, 3);
  const model::Weights mqa = model::convert_kv_heads(w, 1, KvConvertMethod::mean);
  EXPECT_EQ(mqa.config.kv_heads_in(1), 1);
  const Tensor &k = w.at(Role::k_weight, 1), &k1 = mqa.at(Role::k_weight, 1);
  ASSERT_EQ(k1.shape(), (std::vector<std::int64_t>{4, 16}));
  for (std::int64_t i = 0; i < 4 * 16; ++i) {  // rows of K/V head j start at j * 4 * 16
    const double mean = (static_cast<double>(k.data<const float>()[i]) +
                         k.data<const float>()[64 + i] + k.data<const float>()[128 + i]) /
                        3.0;
    EXPECT_EQ(k1.data<const float>()[i], static_cast<float>(mean));  // one rounding
  }
  EXPECT_EQ(
      std::memcmp(mqa.at(Role::q_weight, 0).data<const void>(),
                  w.at(Role::q_weight, 0).data<const void>(), w.at(Role::q_weight, 0).bytes()),
      0);
  headcount::testing::expect_error(
      [&] { (void)model::convert_kv_heads(w, 2, KvConvertMethod::mean); },
      {"--kv-heads", "a divisor of layer 0's 3 K/V heads", "2"});
  headcount::testing::expect_error(
      [&] { (void)model::convert_kv_heads(w, 1, KvConvertMethod::clustered); },
      {"multi-head model for the clustered method"});
}

TEST(ModelPasses, RepeatAndRemoveKeepTheNamesOfTheFamily) {
  const model::Weights w = small_llama(6, 2);
  const model::Weights mha = model::repeat_kv_heads(w);
  EXPECT_FALSE(mha.config.grouped());
  model::check_weights(mha, "repeated");
  const Tensor &v = w.at(Role::v_weight, 0), &v6 = mha.at(Role::v_weight, 0);
  for (std::int64_t head = 0; head < 6; ++head)  // query head i reads K/V head i / 3
    EXPECT_EQ(std::memcmp(v6.data<const float>() + head * 64, v.data<const float>() + head / 3 * 64,
                          64 * sizeof(float)),
              0);
  // Layer 1 loses its second K/V group (query heads 3, 4, 5).
  const model::Weights pruned = model::remove_heads(w, {{}, {3, 4, 5}});
  model::check_weights(pruned, "pruned");
  EXPECT_EQ(pruned.config.layers[1], (model::LayerShape{.heads = 3, .kv_heads = 1}));
  EXPECT_EQ(pruned.at(Role::o_weight, 1).shape(), (std::vector<std::int64_t>{16, 12}));
  headcount::testing::expect_error(
      [&] {
        (void)model::remove_heads(w, {{}, {3, 4}});
      },
      {"layer 1 K/V group 1", "all or none of its 3"});
}

// A small seeded Llama read into the training executor computes the decoder's logits, and
// writing it back gives every bit back. The two executors differ only in summation orders
// (GEMM blocking, the attention kernels, the norms' sums): logits of |x| <= ~3 agree to 1e-4,
// the bound of LlamaDecoderSmall.PrefillThenDecodeEqualsOnePrefill.
TEST(TrainDefinition, LlamaTrainsWhatTheDecoderRuns) {
  const model::Weights w = headcount::testing::small_llama();
  const train::Model m = train::from_weights(w);
  EXPECT_TRUE(m.config().rms_norm && m.config().tied_head);
  const model::Weights back = train::to_weights(m);
  for (const auto& [name, tensor] : w.tensors) {
    ASSERT_EQ(back.tensors.count(name), 1u) << name;
    EXPECT_EQ(std::memcmp(tensor.data<const void>(), back.tensors.at(name).data<const void>(),
                          tensor.bytes()),
              0)
        << name;
  }
  const std::vector<std::int32_t> ids = {3, 17, 5, 39, 0, 22, 8, 8, 30, 12, 1, 7};
  Context ctx({.threads = 2});
  const LlamaDecoder decoder(w, headcount::testing::small_tokenizer(40));
  KvCache cache = decoder.make_cache(12);
  const Tensor want = decoder.executor().forward(ctx, ids, cache, Logits::all);
  train::Model trained = train::from_weights(w);
  train::Batch batch{.batch = 1, .seq_len = 12, .tokens = ids, .targets = ids};
  std::vector<float> got(12 * 40);
  (void)trained.forward(ctx, batch, got.data());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want.data<const float>()[i]));
  EXPECT_LE(worst, 1e-4);
  EXPECT_GT(want.data<const float>()[0] * want.data<const float>()[0], 0.0f);
}

TEST(TrainDefinition, ReadThenWriteGivesEveryBitBack) {
  for (const bool pre : {true, false}) {
    train::ModelConfig mc{.vocab = 9,
                          .context = 8,
                          .layers = 2,
                          .d_model = 16,
                          .heads = 4,
                          .kv_heads = 2,
                          .norm = pre ? train::NormPlacement::pre : train::NormPlacement::post};
    const train::Model a(mc, 3);
    const model::Weights w = train::to_weights(a);
    model::check_weights(w, "trained model");
    EXPECT_EQ(w.at(Role::k_weight, 1).shape(), (std::vector<std::int64_t>{8, 16}));
    EXPECT_EQ(w.has(Role::final_norm_weight), pre);
    const train::Model b = train::from_weights(w);
    ASSERT_EQ(a.parameters().size(), b.parameters().size());
    for (std::size_t i = 0; i < a.parameters().size(); ++i) {
      const Tensor &x = a.parameters()[i].value, &y = b.parameters()[i].value;
      ASSERT_EQ(x.shape(), y.shape()) << a.parameters()[i].name;
      EXPECT_EQ(std::memcmp(x.data<const void>(), y.data<const void>(), x.bytes()), 0)
          << a.parameters()[i].name;
    }
  }
}

// SmolLM2's shape is a training config (the llama pieces), and back to the same definition.
TEST(TrainDefinition, SmolLM2IsAConfigOfTheExecutor) {
  const train::ModelConfig mc = train::model_config(smollm2_config());
  EXPECT_TRUE(mc.rms_norm && mc.swiglu && mc.tied_head && !mc.biases);
  EXPECT_EQ(mc.rope_base, 100000.0f);
  EXPECT_EQ(mc.kv_heads, 3);
  model::Config back = train::definition(mc);
  EXPECT_EQ(back.family, model::Family::llama);
  EXPECT_EQ(back.layers, smollm2_config().layers);
  EXPECT_EQ(model::weight_table(back).size(), model::weight_table(smollm2_config()).size());
}

TEST(TrainDefinition, RefusesWhatTheExecutorDoesNotRun) {
  model::Config some_biases = train::definition({.vocab = 9, .context = 8, .d_model = 16});
  some_biases.ffn_bias = false;
  headcount::testing::expect_error([&] { (void)train::model_config(some_biases); },
                                   {"model biases", "every projection or on none"});
  model::Config hidden = smollm2_config();
  hidden.output = model::Output::hidden;
  hidden.family = model::Family::headcount;
  hidden.activation = model::Activation::gelu_erf;
  headcount::testing::expect_error([&] { (void)train::model_config(hidden); },
                                   {"model.output", "or a tied one", "hidden"});
  headcount::testing::expect_error(
      [&] {
        (void)train::definition(
            {.vocab = 9, .context = 8, .d_model = 16, .rms_norm = true, .swiglu = true});
      },
      {"model", "SwiGLU with the rest of the Llama family"});
}

}  // namespace
}  // namespace headcount
