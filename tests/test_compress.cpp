// Physical head pruning and MHA -> GQA conversion (include/headcount/compress.h), on tiny random
// model directories written here and, when it is present, on all-MiniLM-L6-v2.
//
// Tolerances. A pruned model and the full model with those heads masked compute the same
// arithmetic except the summation order of fp32 dot products (the masked heads add exact zeros;
// BLAS blocks the narrower GEMMs differently), and likewise a GQA model and its export with K/V
// heads repeated. Each of two such fp32 evaluations is within E of the exact result, so they
// differ by at most 2E. For all-MiniLM-L6-v2 the encoder test bounds E by 10x PyTorch's own fp32
// error against float64 (<= 2e-7 per component of a unit-norm embedding): 2E = 4e-6. For the tiny
// models (d 16, d_ff 32, 2 layers, weights ~N(0, 0.3)) the worst case of one fp32 dot product of
// K <= 32 terms is gamma_K = K u / (1 - K u) ~ 1.9e-6 of the sum of |terms|; six products per
// layer, two layers, and LayerNorm's rescaling (|terms| / |result| up to ~3 here) give
// E <= 2 * 6 * 3 * 1.9e-6 ~ 7e-5: 2E = 1.4e-4 per component of a unit-norm embedding. Each test
// also checks that the compared models differ from the unpruned one by far more, so it can fail.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli_runner.h"
#include "expect_error.h"
#include "headcount/compress.h"
#include "headcount/head_analysis.h"
#include "minilm_golden.h"
#include "safetensors_writer.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

constexpr double kTinyTolerance = 1.4e-4;  // 2E for the tiny models (derivation above)
constexpr double kMiniLMTolerance = 4e-6;  // 2E for all-MiniLM-L6-v2

double max_abs_difference(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

const std::vector<std::string> kTinyTexts = {"the cats sat on the mat.", "a cat", "the mat",
                                             "on a mat the cat sat .", ""};

class Compress : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("headcount_compress_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "tiny");
    write_tiny_model(root_ / "tiny");
  }
  void TearDown() override { fs::remove_all(root_); }

  // d 16, 4 heads of 4, 2 layers, d_ff 32, 12-token vocabulary, random weights.
  static void write_tiny_model(const fs::path& dir, const std::string& extra_config = "") {
    std::ofstream(dir / "config.json")
        << R"({"model_type":"bert","hidden_size":16,"num_hidden_layers":2,"num_attention_heads":4,
      "intermediate_size":32,"vocab_size":12,"max_position_embeddings":16,"type_vocab_size":2,
      "layer_norm_eps":1e-12,"hidden_act":"gelu","position_embedding_type":"absolute")"
        << extra_config << "}";
    std::ofstream(dir / "vocab.txt")
        << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\nsat\n##s\non\nmat\n.\na\n";
    std::ofstream(dir / "sentence_bert_config.json")
        << R"({"max_seq_length": 12, "do_lower_case": false})";
    EncoderConfig c;
    c.hidden_size = 16;
    c.layers = 2;
    c.heads = 4;
    c.intermediate_size = 32;
    c.vocab_size = 12;
    c.max_position_embeddings = 16;
    c.type_vocab_size = 2;
    std::vector<F32Tensor> tensors;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    for (const model::WeightSpec& spec : model::weight_table(bert_definition(c))) {
      std::int64_t n = 1;
      for (auto s : spec.shape) n *= s;
      std::vector<float> values(static_cast<std::size_t>(n));
      for (float& v : values) v = normal(rng);
      tensors.push_back({spec.name, spec.shape, values});
    }
    write_f32_safetensors((dir / "model.safetensors").string(), tensors);
  }

  Tensor embed(const BertEncoder& e, std::span<const float> mask = {}) const {
    Context ctx({.threads = 2});
    return e.embed(ctx, kTinyTexts, {.batch_size = 2, .head_mask = mask});
  }

  fs::path root_;
};

TEST_F(Compress, ConfigReadsPrunedHeadsAndKvHeads) {
  EncoderWeights w = read_encoder_weights((root_ / "tiny").string());
  const EncoderWeights pruned = prune_heads(w, {{3, 1}, {0}});
  EXPECT_EQ(pruned.config.layer_heads(0), 2);
  EXPECT_EQ(pruned.config.layer_heads(1), 3);
  EXPECT_EQ(pruned.config.total_heads(), 5);
  EXPECT_EQ(pruned.config.head_offset(1), 2);
  EXPECT_EQ(pruned.config.original_head(0, 1), 2);  // layer 0 keeps heads 0 and 2
  EXPECT_EQ(pruned.config.original_head(1, 0), 1);
  EXPECT_EQ(pruned.model.tensors.at("encoder.layer.0.attention.self.query.weight").shape(),
            (std::vector<std::int64_t>{8, 16}));
  EXPECT_EQ(pruned.model.tensors.at("encoder.layer.0.attention.output.dense.weight").shape(),
            (std::vector<std::int64_t>{16, 8}));
  write_encoder_dir(pruned, (root_ / "pruned").string());
  std::ifstream in(root_ / "pruned" / "config.json");
  const nlohmann::json config = nlohmann::json::parse(in);
  EXPECT_EQ(config.at("pruned_heads"), nlohmann::json::parse(R"({"0": [1, 3], "1": [0]})"));
  EXPECT_EQ(config.at("num_attention_heads"), 4);  // Hugging Face keeps the original count
  EXPECT_TRUE(fs::exists(root_ / "pruned" / "vocab.txt"));
  EXPECT_TRUE(fs::exists(root_ / "pruned" / "sentence_bert_config.json"));
  const EncoderConfig back = read_encoder_config((root_ / "pruned").string());
  EXPECT_EQ(back.pruned_heads, pruned.config.pruned_heads);

  // Pruning a pruned model: original indices, only heads still there.
  const EncoderWeights again =
      prune_heads(read_encoder_weights((root_ / "pruned").string()), {{2}, {}});
  EXPECT_EQ(again.config.pruned_heads[0], (std::vector<std::int64_t>{1, 2, 3}));
  expect_error(
      [&] {
        prune_heads(read_encoder_weights((root_ / "pruned").string()), {{1}, {}});
      },
      {"layer 0 head 1", "one pruned before"});

  const EncoderWeights gqa = convert_kv_heads(w, 2, KvConvertMethod::mean);
  write_encoder_dir(gqa, (root_ / "gqa").string());
  const EncoderConfig g = read_encoder_config((root_ / "gqa").string());
  EXPECT_EQ(g.kv_heads, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(kv_cache_bytes_per_token(g),
            2 * 2 * 2 * 4 * 4);  // layers x (K, V) x kv heads x head_dim x f32
}

TEST_F(Compress, BadHeadLayoutsAreErrors) {
  const fs::path dir = root_ / "bad";
  auto load_with = [&](const std::string& extra) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    write_tiny_model(dir, extra);
    return read_encoder_config(dir.string());
  };
  expect_error([&] { load_with(R"(,"pruned_heads":{"0":[4]})"); },
               {"pruned_heads[0]", "head indices in [0, 4)", "4"});
  expect_error([&] { load_with(R"(,"pruned_heads":{"2":[0]})"); }, {"pruned_heads key", "\"2\""});
  expect_error([&] { load_with(R"(,"pruned_heads":{"x":[0]})"); }, {"pruned_heads key"});
  expect_error([&] { load_with(R"(,"pruned_heads":{"1":[0,1,2,3]})"); },
               {"pruned_heads[1]", "one must stay"});
  expect_error([&] { load_with(R"(,"pruned_heads":[1])"); }, {"pruned_heads", "an object"});
  expect_error([&] { load_with(R"(,"headcount_kv_heads":3)"); }, {"kv_heads[0]", "a divisor"});
  expect_error([&] { load_with(R"(,"headcount_kv_heads":[2])"); },
               {"headcount_kv_heads", "2 entries"});
  // Heads sorted and deduplicated as Hugging Face's set does; the weights then must match.
  EXPECT_EQ(load_with(R"(,"pruned_heads":{"1":[2,0,2]})").pruned_heads[1],
            (std::vector<std::int64_t>{0, 2}));
  expect_error([&] { BertEncoder::load(dir.string()); },
               {"encoder.layer.1.attention.self.query.weight"});

  const EncoderWeights w = read_encoder_weights((root_ / "tiny").string());
  expect_error([&] { prune_heads(w, {{0, 1, 2, 3}, {}}); }, {"layer 0", "at least one head left"});
  expect_error(
      [&] {
        prune_heads(convert_kv_heads(w, 2, KvConvertMethod::mean), {{0}, {}});
      },
      {"layer 0 K/V group 0", "whole group", "1 of them"});
  expect_error([&] { parse_head_list("0:1,x", w.config); }, {"--heads", "\"x\""});
  expect_error([&] { parse_head_list("2:0", w.config); }, {"--heads", "\"2:0\""});
  expect_error([&] { parse_head_list("0:4", w.config); }, {"--heads"});
  expect_error([&] { convert_kv_heads(w, 3, KvConvertMethod::mean); }, {"--kv-heads", "a divisor"});
  // The output directory: refused when it holds something, and nothing left behind on failure.
  fs::create_directories(root_ / "full");
  std::ofstream(root_ / "full" / "x") << "x";
  expect_error([&] { write_encoder_dir(w, (root_ / "full").string()); },
               {"--out", "does not exist yet"});
  EncoderWeights broken = prune_heads(w, {{0}, {}});
  broken.model.tensors.erase("encoder.layer.1.output.dense.bias");
  expect_error([&] { write_encoder_dir(broken, (root_ / "broken").string()); },
               {"encoder.layer.1.output.dense.bias"});
  EXPECT_FALSE(fs::exists(root_ / "broken"));
}

TEST_F(Compress, PrunedModelEqualsMaskedModel) {
  const BertEncoder full = BertEncoder::load((root_ / "tiny").string());
  const EncoderWeights w = read_encoder_weights((root_ / "tiny").string());
  const BertEncoder pruned = encoder_from_weights(prune_heads(w, {{1, 3}, {0}}));
  const std::vector<float> mask = {1, 0, 1, 0, 0, 1, 1, 1};
  const Tensor masked = embed(full, mask), ours = embed(pruned), unpruned = embed(full);
  EXPECT_LE(max_abs_difference(ours, masked), kTinyTolerance);
  EXPECT_GT(max_abs_difference(ours, unpruned), 100 * kTinyTolerance);  // the heads mattered
}

// A grouped model loses a K/V head only with its whole group: pruning heads 0 and 1 of layer 0
// (group 0 of 2) removes K/V head 0 and equals masking those two heads.
TEST_F(Compress, PruningAWholeGroupRemovesItsKvHead) {
  const EncoderWeights gqa =
      convert_kv_heads(read_encoder_weights((root_ / "tiny").string()), 2, KvConvertMethod::mean);
  const EncoderWeights pruned = prune_heads(gqa, {{0, 1}, {}});
  EXPECT_EQ(pruned.config.kv_heads, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(pruned.model.tensors.at("encoder.layer.0.attention.self.key.weight").shape(),
            (std::vector<std::int64_t>{4, 16}));
  const BertEncoder grouped = encoder_from_weights(gqa);
  const std::vector<float> mask = {0, 0, 1, 1, 1, 1, 1, 1};
  const Tensor ours = embed(encoder_from_weights(pruned));
  EXPECT_LE(max_abs_difference(ours, embed(grouped, mask)), kTinyTolerance);
  EXPECT_GT(max_abs_difference(ours, embed(grouped)), 100 * kTinyTolerance);
}

TEST_F(Compress, GqaModelEqualsItsRepeatedExport) {
  const EncoderWeights w = read_encoder_weights((root_ / "tiny").string());
  for (std::int64_t g : {1, 2}) {
    const EncoderWeights gqa = convert_kv_heads(w, g, KvConvertMethod::mean);
    const BertEncoder grouped = encoder_from_weights(gqa);
    const BertEncoder repeated = encoder_from_weights(repeat_kv_heads(gqa));
    EXPECT_FALSE(repeated.config().is_grouped());
    EXPECT_LE(max_abs_difference(embed(grouped), embed(repeated)), kTinyTolerance)
        << g << " K/V heads";
  }
  // kv_heads = heads changes no weight: the same model bit for bit.
  const BertEncoder same = encoder_from_weights(convert_kv_heads(w, 4, KvConvertMethod::aligned));
  EXPECT_EQ(max_abs_difference(embed(same), embed(BertEncoder::load((root_ / "tiny").string()))),
            0.0);
}

// Weights where heads 1 and 3 compute exactly what heads 0 and 2 compute, but in rotated
// coordinates (head j+1 = R^T head j for Q, K; S^T for V; W_o S): aligned pooling of the pairs
// must find the rotations and lose nothing, mean pooling of the same pairs must lose.
TEST_F(Compress, AlignedPoolingUndoesRotations) {
  EncoderWeights w = read_encoder_weights((root_ / "tiny").string());
  const std::int64_t hd = 4, d = 16;
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  auto random_orthogonal = [&] {  // Gram-Schmidt of a random matrix, rows orthonormal
    std::vector<double> m(hd * hd);
    for (double& x : m) x = normal(rng);
    for (std::int64_t i = 0; i < hd; ++i) {
      for (std::int64_t j = 0; j < i; ++j) {
        double dot = 0;
        for (std::int64_t k = 0; k < hd; ++k) dot += m[i * hd + k] * m[j * hd + k];
        for (std::int64_t k = 0; k < hd; ++k) m[i * hd + k] -= dot * m[j * hd + k];
      }
      double norm = 0;
      for (std::int64_t k = 0; k < hd; ++k) norm += m[i * hd + k] * m[i * hd + k];
      for (std::int64_t k = 0; k < hd; ++k) m[i * hd + k] /= std::sqrt(norm);
    }
    return m;
  };
  for (std::int64_t l = 0; l < 2; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".attention.";
    for (std::int64_t src : {0, 2}) {
      const std::vector<double> r = random_orthogonal(), s = random_orthogonal();
      auto rotate_rows = [&](const std::string& weight, const std::string& bias,
                             const std::vector<double>& rot) {
        Tensor& W = w.model.tensors.at(p + weight);
        Tensor& b = w.model.tensors.at(p + bias);
        for (std::int64_t i = 0; i < hd;
             ++i) {  // row (src+1)*hd + i = sum_k rot[k][i] row src*hd + k
          for (std::int64_t c = 0; c < d; ++c) {
            double acc = 0;
            for (std::int64_t k = 0; k < hd; ++k)
              acc += rot[k * hd + i] * W.data<float>()[(src * hd + k) * d + c];
            W.data<float>()[((src + 1) * hd + i) * d + c] = static_cast<float>(acc);
          }
          double acc = 0;
          for (std::int64_t k = 0; k < hd; ++k)
            acc += rot[k * hd + i] * b.data<float>()[src * hd + k];
          b.data<float>()[(src + 1) * hd + i] = static_cast<float>(acc);
        }
      };
      rotate_rows("self.query.weight", "self.query.bias", r);
      rotate_rows("self.key.weight", "self.key.bias", r);
      rotate_rows("self.value.weight", "self.value.bias", s);
      Tensor& wo = w.model.tensors.at(
          p + "output.dense.weight");  // [d, heads*hd]: columns of head src+1 = W_o_src S
      for (std::int64_t row = 0; row < d; ++row)
        for (std::int64_t j = 0; j < hd; ++j) {
          double acc = 0;
          for (std::int64_t k = 0; k < hd; ++k)
            acc += static_cast<double>(wo.data<float>()[row * 16 + src * hd + k]) * s[k * hd + j];
          wo.data<float>()[row * 16 + (src + 1) * hd + j] = static_cast<float>(acc);
        }
    }
  }
  const BertEncoder original = encoder_from_weights(w);
  const Tensor reference = embed(original);
  const double aligned = max_abs_difference(
      embed(encoder_from_weights(convert_kv_heads(w, 2, KvConvertMethod::aligned))), reference);
  const double mean = max_abs_difference(
      embed(encoder_from_weights(convert_kv_heads(w, 2, KvConvertMethod::mean))), reference);
  EXPECT_LE(aligned, kTinyTolerance);
  EXPECT_GT(mean, 100 * kTinyTolerance);
}

// Heads 0 and 2 identical, 1 and 3 identical: clustering must pair them (lossless), contiguous
// groups {0, 1}, {2, 3} must not.
TEST_F(Compress, ClusteredPoolingGroupsSimilarHeads) {
  EncoderWeights w = read_encoder_weights((root_ / "tiny").string());
  const std::int64_t hd = 4, d = 16;
  for (std::int64_t l = 0; l < 2; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".attention.";
    for (const char* name : {"self.query.", "self.key.", "self.value."}) {
      Tensor& W = w.model.tensors.at(p + name + "weight");
      Tensor& b = w.model.tensors.at(p + name + "bias");
      for (std::int64_t src : {0, 1}) {
        std::copy_n(W.data<float>() + src * hd * d, hd * d, W.data<float>() + (src + 2) * hd * d);
        std::copy_n(b.data<float>() + src * hd, hd, b.data<float>() + (src + 2) * hd);
      }
    }
  }
  const Tensor reference = embed(encoder_from_weights(w));
  const double clustered = max_abs_difference(
      embed(encoder_from_weights(convert_kv_heads(w, 2, KvConvertMethod::clustered))), reference);
  const double mean = max_abs_difference(
      embed(encoder_from_weights(convert_kv_heads(w, 2, KvConvertMethod::mean))), reference);
  EXPECT_LE(clustered, kTinyTolerance);
  EXPECT_GT(mean, 100 * kTinyTolerance);
}

TEST_F(Compress, RemovalMaskKeepsOneHeadPerLayer) {
  EncoderConfig c;
  c.layers = 2;
  c.heads = 3;
  const std::vector<std::size_t> order = {0, 1, 2, 3, 4, 5};
  EXPECT_EQ(removal_mask(c, order, 3), (std::vector<float>{0, 0, 1, 0, 1, 1}));
  EXPECT_EQ(removal_mask(c, order, 4), (std::vector<float>{0, 0, 1, 0, 0, 1}));
  expect_error([&] { removal_mask(c, order, 5); }, {"heads to remove", "in [0, 4]"});
}

TEST_F(Compress, PruneCommandWritesALoadableModel) {
  const std::string tiny = (root_ / "tiny").string(), out = (root_ / "cli").string();
  const CliResult r =
      run_cli("prune --model '" + tiny + "' --heads 0:1,1:2,1:3 --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(BertEncoder::load(out).config().total_heads(), 5);
  const CliResult again = run_cli("prune --model '" + tiny + "' --heads 0:1 --out '" + out + "'");
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("does not exist yet"), std::string::npos) << again.err;
  const CliResult both =
      run_cli("prune --model '" + tiny + "' --heads 0:1 --keep 3 --out '" + out + "2'");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("exactly one of them"), std::string::npos) << both.err;
  const CliResult gqa =
      run_cli("convert --model '" + tiny + "' --kv-heads 2 --method aligned --out '" + out + "3'");
  ASSERT_EQ(gqa.exit_code, 0) << gqa.err;
  EXPECT_TRUE(BertEncoder::load(out + "3").config().is_grouped());
  const CliResult bad =
      run_cli("convert --model '" + tiny + "' --kv-heads 2 --method median --out '" + out + "4'");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("mean, aligned or clustered"), std::string::npos) << bad.err;
}

// The real model: 30% of its heads (a fixed spread over all layers) removed physically against
// the same heads masked, and a 4-K/V-head conversion against its repeated export.
TEST(CompressMiniLM, PrunedEqualsMaskedAndGqaEqualsRepeated) {
  HEADCOUNT_REQUIRE_MINILM();
  std::vector<std::string> texts;
  for (const GoldenCase& c : load_golden_cases()) texts.push_back(c.text);
  texts.resize(std::min<std::size_t>(texts.size(), 48));
  const EncoderWeights w = read_encoder_weights(default_model_dir());
  const EncoderConfig& c = w.config;
  std::vector<std::vector<std::int64_t>> remove(static_cast<std::size_t>(c.layers));
  std::vector<float> mask(static_cast<std::size_t>(c.layers * c.heads), 1.0f);
  for (std::int64_t l = 0; l < c.layers; ++l)
    for (std::int64_t h = l % 3; h < c.heads; h += 3) {  // 4 of 12 per layer, a different set each
      if (static_cast<std::int64_t>(remove[static_cast<std::size_t>(l)].size()) == 4) break;
      remove[static_cast<std::size_t>(l)].push_back(h);
      mask[static_cast<std::size_t>(l * c.heads + h)] = 0.0f;
    }
  Context ctx({.threads = 2});
  const BertEncoder full = BertEncoder::load(default_model_dir());
  const Tensor masked = full.embed(ctx, texts, {.head_mask = mask});
  const Tensor pruned = encoder_from_weights(prune_heads(w, remove)).embed(ctx, texts);
  const double diff = max_abs_difference(pruned, masked);
  std::printf("[ compress ] pruned vs masked max |diff| %.3g\n", diff);
  EXPECT_LE(diff, kMiniLMTolerance);
  EXPECT_GT(max_abs_difference(pruned, full.embed(ctx, texts)), 100 * kMiniLMTolerance);

  const EncoderWeights gqa = convert_kv_heads(w, 4, KvConvertMethod::mean);
  const double gqa_diff =
      max_abs_difference(encoder_from_weights(gqa).embed(ctx, texts),
                         encoder_from_weights(repeat_kv_heads(gqa)).embed(ctx, texts));
  std::printf("[ compress ] GQA vs repeated max |diff| %.3g\n", gqa_diff);
  EXPECT_LE(gqa_diff, kMiniLMTolerance);
}

}  // namespace
}  // namespace headcount::testing

namespace headcount::testing {
namespace {

// prune-curve, prune --order-from and prune-speed end to end on the tiny model and a tiny STS
// file: the JSON's shape, every series equal at 0% removed, and a ranking reused by prune.
TEST_F(Compress, CurveAndSpeedCommandsRunOnATinyModel) {
  const fs::path sts = root_ / "sts.tsv";
  {
    std::ofstream out(sts);
    const char* s[] = {"the cat sat", "a cat sat on the mat",    "the mat",
                       "a mat",       "the cats sat on a mat .", "on the cat"};
    for (int i = 0; i < 6; ++i)
      for (int j = i + 1; j < 6; ++j)
        out << "g\tf\ty\t" << i << j << '\t' << (i * 7 + j * 3) % 6 << '\t' << s[i] << '\t' << s[j]
            << '\n';
  }
  const std::string tiny = (root_ / "tiny").string(), json_path = (root_ / "curve.json").string();
  const CliResult r =
      run_cli("prune-curve --model '" + tiny + "' --dev '" + sts.string() + "' --test '" +
              sts.string() + "' --random-orders 2 --threads 1 --json-out '" + json_path +
              "' --out '" + (root_ / "c.html").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(json_path);
  const nlohmann::json curve = nlohmann::json::parse(in);
  const auto& points = curve.at("points");
  // 8 heads, at most 2 x 3 removable: 0..80% (round(0.8 x 8) = 6); 90% (7) cannot be taken.
  ASSERT_EQ(points.size(), 9u);
  EXPECT_EQ(points[8].at("heads_removed"), 6);
  for (const char* key : {"iterative", "physical", "random_mean"})
    EXPECT_DOUBLE_EQ(points[0].at(key).get<double>(), points[0].at("ablation").get<double>())
        << key;
  // The physically pruned models score what the masked ones do (Spearman of rank-identical
  // cosines).
  for (const auto& p : points)
    EXPECT_NEAR(p.at("physical").get<double>(), p.at("ablation").get<double>(), 1e-6);
  EXPECT_EQ(curve.at("ablation_order").size(), 8u);
  // Ranked and scored on the same pairs, the first re-ranking step is the plain ablation's.
  EXPECT_DOUBLE_EQ(points[1].at("iterative").get<double>(), points[1].at("ablation").get<double>());

  // The conversion table, and both results drawn into the heads report.
  const std::string sweep_path = (root_ / "sweep.json").string(),
                    report = (root_ / "heads.html").string();
  const CliResult sweep = run_cli("convert-sweep --model '" + tiny + "' --test '" + sts.string() +
                                  "' --kv-heads 4,2,1 --threads 1 --json-out '" + sweep_path + "'");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  std::ifstream sweep_in(sweep_path);
  const nlohmann::json sweep_rows = nlohmann::json::parse(sweep_in).at("rows");
  ASSERT_EQ(sweep_rows.size(), 9u);
  EXPECT_EQ(sweep_rows[0].at("kv_cache_bytes_per_token"), 2 * 2 * 4 * 4 * 4);
  EXPECT_EQ(sweep_rows[8].at("kv_cache_bytes_per_token"), 2 * 2 * 1 * 4 * 4);
  const CliResult heads = run_cli("heads --model '" + tiny + "' --corpus '" + sts.string() +
                                  "' --text 'the cat sat' --threads 1 --prune-curve '" + json_path +
                                  "' --convert-sweep '" + sweep_path + "' --out '" + report + "'");
  ASSERT_EQ(heads.exit_code, 0) << heads.err;
  std::ifstream html_in(report);
  const std::string html((std::istreambuf_iterator<char>(html_in)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("id=\"prune-curve\""), std::string::npos);
  EXPECT_NE(html.find("id=\"convert-sweep\""), std::string::npos);
  EXPECT_NE(html.find("Michel et al. 2019"), std::string::npos);

  const CliResult pruned = run_cli("prune --model '" + tiny + "' --fraction 0.5 --order-from '" +
                                   json_path + "' --out '" + (root_ / "half").string() + "'");
  ASSERT_EQ(pruned.exit_code, 0) << pruned.err;
  EXPECT_EQ(BertEncoder::load((root_ / "half").string()).config().total_heads(), 4);

  const CliResult speed = run_cli("prune-speed --model '" + tiny +
                                  "' --fractions 0,0.5 --batches 1,3 --repeats 1 --sentences '" +
                                  (root_ / "tiny" / "vocab.txt").string() + "' --json-out '" +
                                  (root_ / "speed.json").string() + "'");
  ASSERT_EQ(speed.exit_code, 0) << speed.err;
  std::ifstream speed_in(root_ / "speed.json");
  const nlohmann::json rows = nlohmann::json::parse(speed_in).at("rows");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_LT(rows[1].at("macs_per_pass").get<std::int64_t>(),
            rows[0].at("macs_per_pass").get<std::int64_t>());
  // An STS-B file: both sentences of each of its 15 pairs.
  const CliResult from_sts = run_cli(
      "prune-speed --model '" + tiny + "' --fractions 0 --batches 4 --repeats 1 --sentences '" +
      sts.string() + "' --json-out '" + (root_ / "speed-sts.json").string() + "'");
  ASSERT_EQ(from_sts.exit_code, 0) << from_sts.err;
  std::ifstream sts_in(root_ / "speed-sts.json");
  EXPECT_EQ(nlohmann::json::parse(sts_in).at("sentences"), 30);
}

}  // namespace
}  // namespace headcount::testing
