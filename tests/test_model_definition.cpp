// The one transformer definition (model.h): its weight table against the real checkpoints it
// names (MiniLM's safetensors, SmolLM2's GGUF), and its checks.
#include <gtest/gtest.h>

#include <filesystem>

#include "expect_error.h"
#include "headcount/encoder.h"
#include "headcount/gguf.h"
#include "headcount/model.h"
#include "headcount/safetensors.h"

namespace {

using namespace headcount;
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
  const fs::path path = fs::path(HEADCOUNT_TESTDATA_DIR) / ".." / ".." / "models" /
                        "SmolLM2-135M-Instruct.Q4_1.gguf";
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
  c.layers = {{.heads = 9, .kv_heads = 3}, {.heads = 6, .kv_heads = 2}, {.heads = 3, .kv_heads = 1}};
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
  headcount::testing::expect_error([&] { (void)model::validate(c); }, {"layer 4 kv_heads", "a divisor of its 9 heads", "got 4"});
  c = smollm2_config();
  c.head_dim = 63;
  headcount::testing::expect_error([&] { (void)model::validate(c); }, {"head_dim", "even (rotary positions rotate pairs)", "63"});
  c = smollm2_config();
  c.attention_bias = true;  // llama's names have no biases
  headcount::testing::expect_error([&] { (void)model::validate(c); }, {"family", "llama: pre-RMSNorm"});
  c = smollm2_config();
  c.layers.clear();
  headcount::testing::expect_error([&] { (void)model::validate(c); }, {"layers", "at least one layer"});
}

TEST(ModelDefinition, WeightsByRoleNameTheMissingOne) {
  model::Weights w{.config = smollm2_config()};
  EXPECT_FALSE(w.has(Role::q_weight, 3));
  headcount::testing::expect_error([&] { (void)w.at(Role::q_weight, 3); }, {"q_weight of layer 3",
               "model.layers.3.self_attn.q_proj.weight"});
  headcount::testing::expect_error([&] { (void)model::check_weights(w, "smollm2"); }, {"smollm2: model.embed_tokens.weight"});
  headcount::testing::expect_error([&] { (void)model::name_of(w.config, Role::q_bias, 0); }, {"weight role", "q_bias"});
}

}  // namespace
