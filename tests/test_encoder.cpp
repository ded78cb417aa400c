// The BERT encoder: all-MiniLM-L6-v2 embeddings against sentence-transformers, and every kind of
// bad model directory as a clear error (tiny model directories written here).
//
// Bounds: the reference is the sentence-transformers pipeline in float64. PyTorch's own fp32 run
// of the same pipeline differs from it by at most ~2e-7 per component (recorded in golden.json),
// which is the error a plain fp32 implementation makes: rounding in 6 layers of GEMMs with
// K <= 1536 and LayerNorms, on unit-norm embeddings whose components are ~0.05. The issue's
// bounds, cosine >= 0.99999 and max |error| <= 1e-4, leave room for a different summation order
// (BLAS blocking, the online softmax, erf) by a factor of several hundred, yet catch any real
// error: a wrong token, a missing [CLS]/[SEP] in the mean, or a wrong epsilon moves components by
// 1e-3 or more. We also assert the tighter figure we reach (within 10x PyTorch's error) so that a
// silent loss of precision shows.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "headcount/encoder.h"
#include "headcount/error.h"
#include "headcount/npy.h"
#include "headcount/sts.h"
#include "minilm_golden.h"
#include "safetensors_writer.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

struct Agreement {
  double min_cosine = 1.0, max_abs_error = 0.0;
};

Agreement compare(const Tensor& ours, const Tensor& reference, std::int64_t rows) {
  Agreement a;
  const std::int64_t d = ours.size(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = ours.data<const float>() + r * d;
    const float* y = reference.data<const float>() + r * d;
    a.min_cosine = std::min(a.min_cosine, cosine_similarity(x, y, d));
    for (std::int64_t k = 0; k < d; ++k)
      a.max_abs_error = std::max(a.max_abs_error, std::fabs(static_cast<double>(x[k]) - y[k]));
  }
  return a;
}

class MiniLM : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!minilm_present()) return;
    encoder_ = new BertEncoder(BertEncoder::load(default_model_dir()));
    for (const GoldenCase& c : load_golden_cases()) texts_.push_back(c.text);
  }
  static void TearDownTestSuite() {
    delete encoder_;
    encoder_ = nullptr;
  }
  static inline BertEncoder* encoder_ = nullptr;
  static inline std::vector<std::string> texts_;
};

TEST_F(MiniLM, ConfigIsAllMiniLM) {
  HEADCOUNT_REQUIRE_MINILM();
  const EncoderConfig& c = encoder_->config();
  EXPECT_EQ(c.hidden_size, 384);
  EXPECT_EQ(c.layers, 6);
  EXPECT_EQ(c.heads, 12);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.tokenizer.max_length, 256);
  EXPECT_FLOAT_EQ(c.layer_norm_eps, 1e-12f);
  EXPECT_TRUE(c.normalize);
}

TEST_F(MiniLM, EmbeddingsMatchSentenceTransformers) {
  HEADCOUNT_REQUIRE_MINILM();
  const Tensor reference = read_npy_f32(minilm_testdata("embeddings_f64.npy"));
  const Tensor torch_f32 = read_npy_f32(minilm_testdata("embeddings_f32.npy"));
  ASSERT_EQ(reference.size(0), static_cast<std::int64_t>(texts_.size()));
  Context ctx({.threads = 2});
  const Tensor ours = encoder_->embed(ctx, texts_, {.batch_size = 16});
  const Agreement a = compare(ours, reference, reference.size(0));
  const Agreement torch = compare(torch_f32, reference, reference.size(0));
  std::printf(
      "[ minilm   ] %lld sentences vs float64: headcount min cosine %.12f, max |err| %.3g; "
      "PyTorch fp32 min cosine %.12f, max |err| %.3g\n",
      static_cast<long long>(reference.size(0)), a.min_cosine, a.max_abs_error, torch.min_cosine,
      torch.max_abs_error);
  EXPECT_GE(a.min_cosine, 0.99999);
  EXPECT_LE(a.max_abs_error, 1e-4);
  EXPECT_LE(a.max_abs_error, 10 * std::max(torch.max_abs_error, 1e-7))
      << "precision lost somewhere";
}

TEST_F(MiniLM, BatchSizeKernelAndThreadsDoNotChangeResults) {
  HEADCOUNT_REQUIRE_MINILM();
  const std::vector<std::string> some(texts_.begin(), texts_.begin() + 24);
  Context one({.threads = 1}), two({.threads = 2});
  const Tensor batched = encoder_->embed(two, some, {.batch_size = 8});
  const Tensor single = encoder_->embed(one, some, {.batch_size = 1});
  const Tensor reference_kernel =
      encoder_->embed(one, some, {.batch_size = 5, .kernel = Kernel::reference});
  EXPECT_LE(compare(single, batched, 24).max_abs_error, 1e-6);
  EXPECT_LE(compare(reference_kernel, batched, 24).max_abs_error, 1e-6);
}

// embed() runs its longest batch first, so the context's workspaces grow for that batch and
// never again: sentences of rising length allocate exactly what the longest one alone does.
// (Shortest first, every longer batch regrew them, and zeroing the fresh pages cost 6% of
// `headcount embed`'s time.)
TEST_F(MiniLM, EmbedSizesTheWorkspacesOnceForTheLongestBatch) {
  HEADCOUNT_REQUIRE_MINILM();
  std::vector<std::string> rising;
  std::string s = "word";
  for (int i = 0; i < 12; ++i, s += " and another word") rising.push_back(s);
  Context all({.threads = 2}), longest_only({.threads = 2});
  encoder_->embed(all, rising, {.batch_size = 1});
  encoder_->embed(longest_only, {rising.back()}, {.batch_size = 1});
  EXPECT_EQ(all.allocations(), longest_only.allocations());
}

TEST_F(MiniLM, NoNormalizeIsThePlainMean) {
  HEADCOUNT_REQUIRE_MINILM();
  Context ctx;
  const std::vector<std::string> s = {"A man is playing a guitar."};
  const Tensor unit = encoder_->embed(ctx, s);
  const Tensor raw = encoder_->embed(ctx, s, {.normalize = false});
  double norm = 0;
  for (std::int64_t k = 0; k < raw.numel(); ++k)
    norm += static_cast<double>(raw.data<float>()[k]) * raw.data<float>()[k];
  norm = std::sqrt(norm);
  EXPECT_GT(std::fabs(norm - 1.0), 0.01);
  for (std::int64_t k = 0; k < raw.numel(); ++k)
    EXPECT_NEAR(raw.data<float>()[k] / norm, unit.data<float>()[k], 1e-6);
}

TEST_F(MiniLM, StsOnAFewDevPairs) {
  HEADCOUNT_REQUIRE_MINILM();
  const std::string dev =
      std::string(HEADCOUNT_TESTDATA_DIR) + "/../../../shared/data/stsb/sts-dev.tsv";
  if (!fs::exists(dev)) GTEST_SKIP() << dev << " not present";
  std::vector<StsPair> pairs = read_sts(dev);
  pairs.resize(100);
  Context ctx({.threads = 2});
  const StsResult r = evaluate_sts(ctx, *encoder_, pairs);
  EXPECT_EQ(r.pairs, 100);
  EXPECT_GT(r.spearman, 70.0);  // the model scores ~82 on the full sets
}

TEST(Correlation, SpearmanAveragesTies) {
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 3, 2, 4}), 0.9486832980505138, 1e-15);
  EXPECT_NEAR(pearson({1, 2, 3}, {2, 4, 6}), 1.0, 1e-15);
  EXPECT_TRUE(std::isnan(pearson({1, 1, 1}, {1, 2, 3})));
}

// ---- Bad model directories, written here ------------------------------------------------------

class ModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headcount_model_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

  // A complete tiny BERT: d=8, 2 heads, 2 layers, ffn 16, 12-token vocabulary. `skip` drops one
  // tensor; `reshape` gives one tensor the wrong shape.
  void write_tiny_model(const std::string& skip = "", const std::string& reshape = "",
                        int ffn = 16) const {
    write("config.json",
          R"({"model_type":"bert","hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2,
      "intermediate_size":)" +
              std::to_string(ffn) +
              R"(,"vocab_size":12,"max_position_embeddings":16,"type_vocab_size":2,
      "layer_norm_eps":1e-12,"hidden_act":"gelu","position_embedding_type":"absolute"})");
    write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\nsat\n##s\non\nmat\n.\na\n");
    write("sentence_bert_config.json", R"({"max_seq_length": 12, "do_lower_case": false})");
    EncoderConfig c;
    c.hidden_size = 8;
    c.layers = 2;
    c.heads = 2;
    c.intermediate_size = ffn;
    c.vocab_size = 12;
    c.max_position_embeddings = 16;
    c.type_vocab_size = 2;
    std::vector<F32Tensor> tensors;
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    for (model::WeightSpec spec : model::weight_table(bert_definition(c))) {
      if (spec.name == skip) continue;
      if (spec.name == reshape) spec.shape.back() += 1;
      std::int64_t n = 1;
      for (auto s : spec.shape) n *= s;
      std::vector<float> values(static_cast<std::size_t>(n));
      for (float& v : values) v = normal(rng);
      tensors.push_back({spec.name, spec.shape, values});
    }
    write_f32_safetensors((dir_ / "model.safetensors").string(), tensors);
  }

  void expect_load_error(const std::string& needle) const {
    try {
      BertEncoder::load(dir_.string());
      FAIL() << "expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }

  fs::path dir_;
};

TEST_F(ModelDir, TinyModelLoadsAndEmbeds) {
  write_tiny_model();
  const BertEncoder encoder = BertEncoder::load(dir_.string());
  EXPECT_EQ(encoder.config().tokenizer.max_length, 12);
  Context ctx;
  const Tensor e = encoder.embed(ctx, {"the cats sat on the mat.", "a cat", "",
                                       "the the the the the the the the the the the the the"});
  for (std::int64_t r = 0; r < 4; ++r) {
    double norm = 0;
    for (std::int64_t k = 0; k < 8; ++k) norm += std::pow(e.data<float>()[r * 8 + k], 2);
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
}

// int8 needs input widths that are multiples of 4: a model whose FFN is 18 wide loads in fp32
// and bf16, and in int8 fails naming the config field and its value (it named only "weights").
TEST_F(ModelDir, Int8NamesTheWidthThatIsNotAMultipleOf4) {
  write_tiny_model("", "", 18);
  EXPECT_NO_THROW(BertEncoder::load(dir_.string()));
  EXPECT_NO_THROW(BertEncoder::load(dir_.string(), {.dtype = DType::bf16}));
  try {
    BertEncoder::load(dir_.string(), {.dtype = DType::i8});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "dtype int8: expected intermediate_size a multiple of 4 (the int8 kernel takes 4 "
                 "input features at "
                 "a time), got 18 (config.json intermediate_size)");
  }
}

TEST_F(ModelDir, MissingDirectory) {
  try {
    BertEncoder::load((dir_ / "nope").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "model: expected a directory with model.safetensors, config.json, vocab.txt, got "),
        std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no such directory"), std::string::npos) << e.what();
  }
}

TEST_F(ModelDir, MissingFile) {
  write_tiny_model();
  fs::remove(dir_ / "vocab.txt");
  expect_load_error("(missing vocab.txt)");
}

TEST_F(ModelDir, MalformedConfig) {
  write_tiny_model();
  write("config.json", "{\"hidden_size\": 8,");
  expect_load_error("config.json: malformed JSON");
  write("config.json", R"({"vocab_size":"twelve"})");
  expect_load_error("config.json: vocab_size: expected a positive integer, got \"twelve\"");
  write("config.json",
        R"({"model_type":"bert","hidden_size":8,"num_hidden_layers":2,"num_attention_heads":2,
      "intermediate_size":16,"vocab_size":12,"max_position_embeddings":16,"type_vocab_size":2,
      "layer_norm_eps":1e-12,"hidden_act":"relu"})");
  expect_load_error("hidden_act: expected \"gelu\"");
}

// A module whose "type" is not a string (a long fuzz run's find) is an Error naming it, and a
// Normalize module among well-formed ones still turns normalisation on.
TEST_F(ModelDir, ModulesJsonTypeMustBeAString) {
  write_tiny_model();
  write(
      "modules.json",
      R"([{"idx": 0, "type": "sentence_transformers.models.Transformer"}, {"idx": 1, "type": 0}])");
  expect_load_error("modules.json: module 1 \"type\": expected a string, got number");
  write("modules.json", R"([{"idx": 0}, "x", {"type": "sentence_transformers.models.Normalize"}])");
  EXPECT_TRUE(BertEncoder::load(dir_.string()).config().normalize);
  write("modules.json", R"([{"idx": 0, "type": "sentence_transformers.models.Pooling"}])");
  EXPECT_FALSE(BertEncoder::load(dir_.string()).config().normalize);
}

TEST_F(ModelDir, MissingTensorNamesItself) {
  write_tiny_model("encoder.layer.1.output.dense.weight");
  expect_load_error(
      "tensor 'encoder.layer.1.output.dense.weight': missing (expected shape [8, 16])");
}

TEST_F(ModelDir, MisshapenTensorNamesItself) {
  write_tiny_model("", "encoder.layer.0.attention.self.key.weight");
  expect_load_error(
      "tensor 'encoder.layer.0.attention.self.key.weight' shape: expected [8, 8], got [8, 9]");
}

TEST_F(ModelDir, VocabularyDisagreesWithConfig) {
  write_tiny_model();
  write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n");
  expect_load_error("vocab.txt: expected 12 tokens (config.json vocab_size), got 5");
}

TEST_F(ModelDir, TruncatedWeights) {
  write_tiny_model();
  fs::resize_file(dir_ / "model.safetensors", fs::file_size(dir_ / "model.safetensors") / 2);
  expect_load_error("expected inside the data region");
}

}  // namespace
}  // namespace headcount::testing
