// Gradients through a BERT encoder (include/headcount/encoder_training.h): the bridge from the
// encoder's weights to train::Model and back, Model::forward_hidden / backward_hidden, the
// cosine-MSE pair loss, the gradient head importance, distillation, and the CLI options.
//
// Tolerances.
// - Finite differences (as in test_train_gradients.cpp): central differences of a float64
//   forward written here with h = 1e-5; truncation estimated per element by Richardson,
//   |fd(h) - fd(2h)|, allowed twice; rounding ~ε64·|f|/h ~ 1e-11 covered by an absolute 1e-9.
//   The fp32 side errs by at most 4·depth·n·u·S (u = 2^-24, n the longest sum, depth the chained
//   rounded stages, S the largest reference gradient of the tensor), the bound that file derives.
//   The loss is double throughout: only the FD terms remain.
// - Bridge against the encoder: two fp32 evaluations of the same arithmetic in different
//   summation orders (the training executor's LayerNorm, attention and residual steps vs the
//   encoder's fused ones), each within E of the exact result: 2E, as
//   test_compress.cpp derives it for the same tiny shape (d 16, d_ff 32, 2 layers, weights
//   ~N(0, 0.3): 2E = 1.4e-4 per component of a unit-norm embedding) and for all-MiniLM-L6-v2
//   (2E = 4e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli_runner.h"
#include "expect_error.h"
#include "headcount/encoder_training.h"
#include "minilm_golden.h"
#include "safetensors_writer.h"
#include "train_reference.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;
using ref::Vec;

constexpr double kU = 1.0 / (1 << 24);
constexpr double kStep = 1e-5;
constexpr double kTinyTolerance = 1.4e-4;  // 2E, tiny model (derivation above)
constexpr double kMiniLMTolerance = 4e-6;  // 2E, all-MiniLM-L6-v2

struct Fd {
  Vec grad, truncation;
};
Fd finite_differences(const std::function<double()>& f, Vec& v) {
  Fd out{Vec(v.size()), Vec(v.size())};
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    auto at = [&](double dx) {
      v[i] = x + dx;
      const double y = f();
      v[i] = x;
      return y;
    };
    const double g1 = (at(kStep) - at(-kStep)) / (2 * kStep),
                 g2 = (at(2 * kStep) - at(-2 * kStep)) / (4 * kStep);
    out.grad[i] = g1;
    out.truncation[i] = std::abs(g1 - g2);
  }
  return out;
}

template <typename T>
void expect_gradient(const T* got, const Fd& fd, double fp32_bound_per_scale,
                     const std::string& what) {
  double scale = 0;
  for (double g : fd.grad) scale = std::max(scale, std::abs(g));
  for (std::size_t i = 0; i < fd.grad.size(); ++i) {
    const double tol = fp32_bound_per_scale * scale + 2 * fd.truncation[i] + 1e-9;
    EXPECT_NEAR(static_cast<double>(got[i]), fd.grad[i], tol) << what << "[" << i << "]";
  }
  EXPECT_GT(scale, 0) << what;  // the check can fail
}

// LayerNorm in double with an explicit eps (ref::layer_norm has PyTorch's 1e-5).
Vec layer_norm(const Vec& x, std::int64_t rows, std::int64_t width, const Vec& gamma,
               const Vec& beta, double eps) {
  Vec y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t c = 0; c < width; ++c) mean += x[static_cast<std::size_t>(r * width + c)];
    mean /= static_cast<double>(width);
    for (std::int64_t c = 0; c < width; ++c)
      var += std::pow(x[static_cast<std::size_t>(r * width + c)] - mean, 2);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(width) + eps);
    for (std::int64_t c = 0; c < width; ++c) {
      const auto i = static_cast<std::size_t>(r * width + c);
      y[i] = (x[i] - mean) * inv * gamma[static_cast<std::size_t>(c)] +
             beta[static_cast<std::size_t>(c)];
    }
  }
  return y;
}

// The post-LN blocks of model.h in double, from x_in [B, T, d]: BERT's layer stack.
Vec hidden_reference(const train::ModelConfig& c, const ref::Params& p, const Vec& x_in,
                     std::int64_t B, std::int64_t T, const std::vector<Vec>& gates) {
  const std::int64_t N = B * T, D = c.d_model, hd = c.head_dim, W = (c.heads + 2 * c.kv_heads) * hd,
                     C = c.heads * hd;
  auto P = [&](const std::string& name) -> const Vec& { return p.at(name); };
  const ref::AttentionShape shape{.batch = B,
                                  .seq_len = T,
                                  .heads = c.heads,
                                  .kv_heads = c.kv_heads,
                                  .head_dim = hd,
                                  .scale = static_cast<double>(*c.scale),
                                  .causal = false};
  Vec x = x_in;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    Vec concat =
        ref::attention(ref::linear(x, N, D, P(b + "attn.w_qkv"), P(b + "attn.b_qkv"), W), shape);
    for (std::int64_t r = 0; r < N; ++r)
      for (std::int64_t h = 0; h < c.heads; ++h)
        for (std::int64_t e = 0; e < hd; ++e)
          concat[static_cast<std::size_t>(r * C + h * hd + e)] *=
              gates[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)];
    x = layer_norm(ref::add(x, ref::linear(concat, N, C, P(b + "attn.w_o"), P(b + "attn.b_o"), D)),
                   N, D, P(b + "ln1.weight"), P(b + "ln1.bias"), c.ln_eps);
    Vec u = ref::linear(x, N, D, P(b + "ffn.w_up"), P(b + "ffn.b_up"), c.d_ff);
    for (double& v : u) v = ref::gelu(v);
    x = layer_norm(
        ref::add(x, ref::linear(u, N, c.d_ff, P(b + "ffn.w_down"), P(b + "ffn.b_down"), D)), N, D,
        P(b + "ln2.weight"), P(b + "ln2.bias"), c.ln_eps);
  }
  return x;
}

Vec random_vec(std::size_t n, std::mt19937_64& rng, double std, double mean = 0) {
  std::normal_distribution<double> normal(mean, std);
  Vec v(n);
  for (double& x : v) x = static_cast<float>(normal(rng));  // representable in fp32
  return v;
}

TEST(EncoderTraining, CosineMseGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(3);
  Vec u = random_vec(7, rng, 1.0), v = random_vec(7, rng, 1.0, 0.3);
  Vec du(7), dv(7);
  const double gold = 3.1;
  const double loss = cosine_mse_loss(u.data(), v.data(), 7, gold, du.data(), dv.data());
  double uv = 0, uu = 0, vv = 0;
  for (int i = 0; i < 7; ++i) uv += u[i] * v[i], uu += u[i] * u[i], vv += v[i] * v[i];
  EXPECT_NEAR(loss, std::pow(uv / std::sqrt(uu * vv) - gold / 5, 2), 1e-15);
  auto f = [&] { return cosine_mse_loss(u.data(), v.data(), 7, gold, nullptr, nullptr); };
  expect_gradient(du.data(), finite_differences(f, u), 0.0,
                  "du");  // double throughout: no fp32 term
  expect_gradient(dv.data(), finite_differences(f, v), 0.0, "dv");
  const Vec zero(7, 0.0);
  expect_error([&] { cosine_mse_loss(zero.data(), v.data(), 7, gold, nullptr, nullptr); },
               {"two non-zero vectors"});
}

// forward_hidden against the double blocks, and backward_hidden's dL/dx_in, dL/dgates and every
// block gradient against finite differences of L = Σ r·hidden (so d_hidden = r).
TEST(EncoderTraining, HiddenBackwardMatchesFiniteDifferences) {
  const train::ModelConfig config{.vocab = 1,
                                  .context = 5,
                                  .layers = 2,
                                  .d_model = 6,
                                  .heads = 4,
                                  .kv_heads = 2,
                                  .head_dim = 3,
                                  .d_ff = 10,
                                  .norm = train::NormPlacement::post,
                                  .causal = false,
                                  .ln_eps = 1e-12f};
  Context ctx({.threads = 2});
  train::Model model(config, 5);
  const train::ModelConfig& c = model.config();
  std::mt19937_64 rng(7);
  for (train::Parameter& p : model.parameters()) {
    const bool ln_weight =
        p.value.rank() == 1 && p.name.find("ln") != std::string::npos && p.name.ends_with("weight");
    const Vec v = random_vec(static_cast<std::size_t>(p.value.numel()), rng,
                             p.value.rank() >= 2 ? 0.5 : 0.2, ln_weight ? 1.0 : 0.0);
    std::copy(v.begin(), v.end(), p.value.data<float>());
  }
  const std::int64_t B = 2, T = 4, n = B * T * c.d_model;
  Vec x = random_vec(static_cast<std::size_t>(n), rng, 1.0),
      r = random_vec(static_cast<std::size_t>(n), rng, 1.0);
  std::vector<Vec> gates = {random_vec(4, rng, 0.4, 1.0), random_vec(4, rng, 0.4, 1.0)};
  train::ForwardOptions options{
      .head_gates = {std::vector<float>(gates[0].begin(), gates[0].end()),
                     std::vector<float>(gates[1].begin(), gates[1].end())}};
  const std::vector<float> xf(x.begin(), x.end()), rf(r.begin(), r.end());
  std::vector<float> hidden(static_cast<std::size_t>(n)), dx(static_cast<std::size_t>(n));
  model.forward_hidden(ctx, B, T, xf.data(), hidden.data(), options);
  const std::vector<std::vector<double>> dgates = model.backward_hidden(ctx, rf.data(), dx.data());

  ref::Params p = ref::params_of(model);
  // n: the longest sum (W = 18 columns of qkv, d_ff 10, T keys); depth: ~8 rounded stages per
  // block.
  const double len = 18, depth = 8.0 * 2;
  const double fp32 = 4 * depth * len * kU;
  const Vec want = hidden_reference(c, p, x, B, T, gates);
  double scale = 0;
  for (double h : want) scale = std::max(scale, std::abs(h));
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(hidden[i], want[i], fp32 * scale) << "hidden[" << i << "]";

  auto loss = [&] {
    const Vec h = hidden_reference(c, p, x, B, T, gates);
    double s = 0;
    for (std::size_t i = 0; i < h.size(); ++i) s += r[i] * h[i];
    return s;
  };
  expect_gradient(dx.data(), finite_differences(loss, x), fp32, "d_x_in");
  for (std::size_t l = 0; l < 2; ++l)
    expect_gradient(dgates[l].data(), finite_differences(loss, gates[l]), fp32, "gates");
  for (train::Parameter& param : model.parameters()) {
    if (!param.name.starts_with("blocks.")) {  // took no part: zero gradients
      for (std::int64_t i = 0; i < param.grad.numel(); ++i)
        ASSERT_EQ(param.grad.data<float>()[i], 0.0f) << param.name;
      continue;
    }
    expect_gradient(param.grad.data<const float>(), finite_differences(loss, p.at(param.name)),
                    fp32, param.name);
  }
  // backward_hidden needs its own forward_hidden just before it.
  expect_error([&] { model.backward_hidden(ctx, rf.data()); },
               {"backward_hidden", "forward_hidden"});
}

class EncoderTrainingTiny : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("headcount_enc_training_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "tiny");
    // d 16, 4 heads of 4, 2 layers, d_ff 32, 12-token vocabulary, random weights (as
    // test_compress.cpp).
    std::ofstream(root_ / "tiny" / "config.json")
        << R"({"model_type":"bert","hidden_size":16,"num_hidden_layers":2,
      "num_attention_heads":4,"intermediate_size":32,"vocab_size":12,"max_position_embeddings":16,"type_vocab_size":2,
      "layer_norm_eps":1e-12,"hidden_act":"gelu","position_embedding_type":"absolute"})";
    std::ofstream(root_ / "tiny" / "vocab.txt")
        << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\ncat\nsat\n##s\non\nmat\n.\na\n";
    std::ofstream(root_ / "tiny" / "sentence_bert_config.json")
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
      std::int64_t count = 1;
      for (auto s : spec.shape) count *= s;
      std::vector<float> values(static_cast<std::size_t>(count));
      for (float& v : values) v = normal(rng);
      tensors.push_back({spec.name, spec.shape, values});
    }
    write_f32_safetensors((root_ / "tiny" / "model.safetensors").string(), tensors);
    sts_ = root_ / "sts.tsv";
    std::ofstream out(sts_);
    const char* s[] = {"the cat sat", "a cat sat on the mat",    "the mat",
                       "a mat",       "the cats sat on a mat .", "on the cat"};
    for (int i = 0; i < 6; ++i)
      for (int j = i + 1; j < 6; ++j)
        out << "g\tf\ty\t" << i << j << '\t' << (i * 7 + j * 3) % 6 << '\t' << s[i] << '\t' << s[j]
            << '\n';
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string tiny() const { return (root_ / "tiny").string(); }

  fs::path root_, sts_;
};

// Mean-pooled, L2-normalised embeddings of `texts` through the bridged model, one sentence at a
// time.
Tensor bridged_embeddings(Context& ctx, const BertEncoder& encoder, train::Model& model,
                          const std::vector<std::string>& texts) {
  const std::int64_t d = encoder.dim();
  Tensor out(DType::f32, {static_cast<std::int64_t>(texts.size()), d});
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::vector<std::int32_t> ids = encoder.tokenizer().encode(texts[i]);
    const auto T = static_cast<std::int64_t>(ids.size());
    const Tensor x =
        encoder_layer_input(ctx, encoder, {.batch = 1, .seq_len = T, .ids = ids, .lengths = {T}});
    std::vector<float> h(static_cast<std::size_t>(T * d));
    model.forward_hidden(ctx, 1, T, x.data<const float>(), h.data());
    std::vector<double> mean(static_cast<std::size_t>(d));
    double norm = 0;
    for (std::int64_t k = 0; k < d; ++k) {
      for (std::int64_t t = 0; t < T; ++t)
        mean[static_cast<std::size_t>(k)] +=
            h[static_cast<std::size_t>(t * d + k)] / static_cast<double>(T);
      norm += mean[static_cast<std::size_t>(k)] * mean[static_cast<std::size_t>(k)];
    }
    for (std::int64_t k = 0; k < d; ++k)
      out.data<float>()[static_cast<std::int64_t>(i) * d + k] =
          static_cast<float>(mean[static_cast<std::size_t>(k)] / std::sqrt(norm));
  }
  return out;
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

const std::vector<std::string> kTexts = {"the cats sat on the mat.", "a cat", "the mat",
                                         "on a mat the cat sat .", ""};

TEST_F(EncoderTrainingTiny, BridgeEqualsTheEncoderAndRoundTrips) {
  Context ctx({.threads = 2});
  const EncoderWeights w = read_encoder_weights(tiny());
  // MHA, a GQA conversion, and a model pruned unevenly (layer 0 loses a head, layer 1 none):
  // per-layer head counts in the training executor.
  for (int variant = 0; variant < 3; ++variant) {
    const EncoderWeights weights = variant == 0   ? read_encoder_weights(tiny())
                                   : variant == 1 ? convert_kv_heads(w, 2, KvConvertMethod::mean)
                                                  : prune_heads(w, {{0}, {}});
    const BertEncoder encoder = encoder_from_weights(weights);
    train::Model model = train::from_weights(weights.model, train::WeightParts::layers);
    for (std::int64_t l = 0; l < 2; ++l) {
      EXPECT_EQ(model.config().heads_in(l), weights.config.layer_heads(l)) << variant;
      EXPECT_EQ(model.config().kv_heads_in(l), weights.config.layer_kv_heads(l)) << variant;
    }
    EXPECT_EQ(model.config().uniform_heads(), variant != 2);
    EXPECT_FLOAT_EQ(model.config().ln_eps, 1e-12f);
    const Tensor ours = bridged_embeddings(ctx, encoder, model, kTexts),
                 want = encoder.embed(ctx, kTexts);
    EXPECT_LE(max_abs_difference(ours, want), kTinyTolerance) << "variant " << variant;
    // Back to encoder weights: every tensor bit for bit.
    model::Weights back = weights.model.clone();
    for (auto& [name, t] : back.tensors) std::fill_n(t.data<float>(), t.numel(), 0.0f);
    train::write_weights(model, back, train::WeightParts::layers);
    ASSERT_EQ(back.tensors.size(), weights.model.tensors.size());
    for (const auto& [name, t] : weights.model.tensors) {
      const Tensor& b = back.tensors.at(name);
      if (name.starts_with("embeddings.")) continue;  // not the executor's: left as they were
      ASSERT_EQ(b.shape(), t.shape()) << name;
      EXPECT_EQ(std::memcmp(b.data<const void>(), t.data<const void>(), t.bytes()), 0) << name;
    }
  }
}

// Key padding in the training executor: a batch of two sentences (5 and 3 tokens) padded to 5
// gives, on the valid rows, the bits of each sentence run alone, forward and backward: the GEMMs
// and LayerNorm are row-wise and invariant to the rows beside them, masked keys add exact zeros
// to the online softmax, and zero gradients on the padded rows add exact zeros everywhere
// (dS = 0 for a query row with dO = 0). The padded rows' input gradients are exactly 0.
TEST_F(EncoderTrainingTiny, KeyPaddingGivesEachSentenceAloneBitwise) {
  Context ctx({.threads = 2});
  train::Model model =
      train::from_weights(read_encoder_weights(tiny()).model, train::WeightParts::layers);
  const std::int64_t d = model.config().d_model, T = 5;
  const std::int64_t lengths[] = {5, 3};
  std::mt19937_64 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(2 * T * d)), dh(x.size());
  for (float& v : x) v = normal(rng);
  for (float& v : dh) v = normal(rng);
  for (std::int64_t t = lengths[1]; t < T; ++t)  // the padded rows carry no gradient
    std::fill_n(dh.begin() + (T + t) * d, d, 0.0f);
  for (Kernel kernel : {Kernel::streaming, Kernel::reference}) {
    SCOPED_TRACE(kernel_name(kernel));
    std::vector<float> hidden(x.size()), dx(x.size(), 7.0f);
    model.forward_hidden(ctx, 2, T, x.data(), hidden.data(),
                         {.kernel = kernel, .key_lengths = {5, 3}});
    const std::vector<std::vector<double>> gates = model.backward_hidden(ctx, dh.data(), dx.data());
    std::vector<std::vector<double>> gate_sum;
    for (std::int64_t b = 0; b < 2; ++b) {
      const std::int64_t n = lengths[b] * d;
      std::vector<float> alone(static_cast<std::size_t>(n)), dx_alone(static_cast<std::size_t>(n));
      model.forward_hidden(ctx, 1, lengths[b], x.data() + b * T * d, alone.data(),
                           {.kernel = kernel});
      const auto g = model.backward_hidden(ctx, dh.data() + b * T * d, dx_alone.data());
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), hidden.begin() + b * T * d))
          << "hidden, sentence " << b;
      EXPECT_TRUE(std::equal(dx_alone.begin(), dx_alone.end(), dx.begin() + b * T * d))
          << "dx, sentence " << b;
      if (gate_sum.empty())
        gate_sum = g;
      else
        for (std::size_t l = 0; l < g.size(); ++l)
          for (std::size_t h = 0; h < g[l].size(); ++h) gate_sum[l][h] += g[l][h];
    }
    for (std::int64_t i = (T + lengths[1]) * d; i < 2 * T * d; ++i)
      EXPECT_EQ(dx[static_cast<std::size_t>(i)], 0.0f) << i;
    // The gate gradients sum (in double) over the batch's rows: the two sentences' sums added
    // give the same value up to double rounding.
    for (std::size_t l = 0; l < gates.size(); ++l)
      for (std::size_t h = 0; h < gates[l].size(); ++h)
        EXPECT_NEAR(gates[l][h], gate_sum[l][h], 1e-12 * (1 + std::fabs(gate_sum[l][h])));
  }
  expect_error([&] { model.forward_hidden(ctx, 2, T, x.data(), x.data(), {.key_lengths = {5}}); },
               {"key_lengths", "2 entries"});
  std::vector<float> out(x.size());
  expect_error(
      [&] {
        model.forward_hidden(ctx, 2, T, x.data(), out.data(), {.key_lengths = {5, 6}});
      },
      {"key_lengths[1]", "seq_len = 5"});
}

// One pair's importance is |dL/dξ| of the cosine-MSE loss of the two sentences: against finite
// differences of the double blocks (the inputs are the encoder's embedding LayerNorm outputs).
TEST_F(EncoderTrainingTiny, GradientImportanceMatchesFiniteDifferences) {
  Context ctx({.threads = 2});
  const EncoderWeights w = read_encoder_weights(tiny());
  const BertEncoder encoder = BertEncoder::load(tiny());
  const StsPair pair{.score = 3.0, .sentence1 = "the cats sat on the mat.", .sentence2 = "a cat"};
  const GradientImportance g = gradient_head_importance(ctx, encoder, w, {pair});
  ASSERT_EQ(g.raw.size(), 8u);

  const train::Model model = train::from_weights(w.model, train::WeightParts::layers);
  const train::ModelConfig& c = model.config();
  const ref::Params p = ref::params_of(model);
  auto input = [&](const std::string& text) {
    const std::vector<std::int32_t> ids = encoder.tokenizer().encode(text);
    const auto T = static_cast<std::int64_t>(ids.size());
    const Tensor x =
        encoder_layer_input(ctx, encoder, {.batch = 1, .seq_len = T, .ids = ids, .lengths = {T}});
    return std::pair{Vec(x.data<const float>(), x.data<const float>() + x.numel()), T};
  };
  // Plain variables, not structured bindings: clang 14 (the sanitizer build) cannot capture those.
  const auto in1 = input(pair.sentence1), in2 = input(pair.sentence2);
  const Vec& x1 = in1.first;
  const Vec& x2 = in2.first;
  const std::int64_t t1 = in1.second, t2 = in2.second;
  std::vector<Vec> gates(2, Vec(4, 1.0));
  auto pooled = [&](const Vec& x, std::int64_t T) {
    const Vec h = hidden_reference(c, p, x, 1, T, gates);
    Vec m(16, 0.0);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::size_t k = 0; k < 16; ++k)
        m[k] += h[static_cast<std::size_t>(t) * 16 + k] / static_cast<double>(T);
    return m;
  };
  auto loss = [&] {
    const Vec u = pooled(x1, t1), v = pooled(x2, t2);
    return cosine_mse_loss(u.data(), v.data(), 16, pair.score, nullptr, nullptr);
  };
  const double len = 48, depth = 8.0 * 2 + 2;  // qkv width 48; + pooling and the cosine
  for (std::size_t l = 0; l < 2; ++l) {
    Fd fd = finite_differences(loss, gates[l]);
    for (double& v : fd.grad)
      v = std::abs(v);  // |dL/dξ| (the truncation bound is unchanged by |.|)
    expect_gradient(g.raw.data() + l * 4, fd, 4 * depth * len * kU, "layer " + std::to_string(l));
    double norm = 0;
    for (std::size_t h = 0; h < 4; ++h) norm += g.importance[l * 4 + h] * g.importance[l * 4 + h];
    EXPECT_NEAR(norm, 1.0, 1e-12);  // per-layer l2 normalisation
  }
  EXPECT_NEAR(g.mean_loss, loss(), 1e-3 * g.mean_loss + 1e-9);
}

// Pairs in padded batches give the bits of one pair at a time (each sentence's gate gradient is
// its own rows' sum, Model::sequence_gate_grads), for a multi-head model, a grouped-query
// conversion and a model pruned unevenly, whose importances follow its layer shapes.
TEST_F(EncoderTrainingTiny, GradientImportanceIsTheSameBitsForAnyBatchSizeAndModelShape) {
  Context ctx({.threads = 2});
  const EncoderWeights w = read_encoder_weights(tiny());
  const std::vector<StsPair> pairs = read_sts(sts_.string());
  ASSERT_EQ(pairs.size(), 15u);
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    const EncoderWeights weights = variant == 0   ? read_encoder_weights(tiny())
                                   : variant == 1 ? convert_kv_heads(w, 2, KvConvertMethod::mean)
                                                  : prune_heads(w, {{0, 2}, {}});
    const BertEncoder encoder = encoder_from_weights(weights);
    const GradientImportance one =
        gradient_head_importance(ctx, encoder, weights, pairs, {.batch_size = 1});
    const GradientImportance batched =
        gradient_head_importance(ctx, encoder, weights, pairs, {.batch_size = 6});
    const std::vector<std::int64_t> shape =
        variant == 2 ? std::vector<std::int64_t>{2, 4} : std::vector<std::int64_t>{4, 4};
    EXPECT_EQ(one.layer_heads, shape);
    ASSERT_EQ(one.raw.size(), static_cast<std::size_t>(shape[0] + shape[1]));
    EXPECT_EQ(one.raw, batched.raw);
    EXPECT_EQ(one.importance, batched.importance);
    EXPECT_EQ(one.mean_loss, batched.mean_loss);
    double norm = 0;  // the pruned layer is normalised over its own two heads
    for (std::size_t h = 0; h < static_cast<std::size_t>(shape[0]); ++h)
      norm += one.importance[h] * one.importance[h];
    EXPECT_NEAR(norm, 1.0, 1e-12);
  }
  expect_error(
      [&] { gradient_head_importance(ctx, encoder_from_weights(w), w, pairs, {.batch_size = 0}); },
      {"batch_size", "at least 1", "0"});
}

// Distillation: the same steps give the same student bit for bit, and they bring the GQA
// student's embeddings closer to the teacher's.
TEST_F(EncoderTrainingTiny, DistillationIsReproducibleAndApproachesTheTeacher) {
  Context ctx({.threads = 2});
  const BertEncoder teacher = BertEncoder::load(tiny());
  const EncoderWeights student =
      convert_kv_heads(read_encoder_weights(tiny()), 1, KvConvertMethod::mean);
  const std::vector<std::string> sentences = split_sentences(
      "the cat sat. a cat sat on the mat! the mat sat on a cat? the cats sat.\n\na mat on the cat. "
      "on the mat the cat sat. the cat. a mat. the cats sat on the mat.");
  ASSERT_EQ(sentences.size(), 9u);
  EXPECT_EQ(sentences[0], "the cat sat.");
  DistillOptions options{.steps = 40, .batch_size = 2, .min_tokens = 3, .seed = 1};
  options.optim.lr = options.optim.min_lr = 3e-3;
  options.optim.warmup_steps = 2;
  const DistillResult a = distill_encoder(ctx, teacher, student, sentences, options);
  const DistillResult b = distill_encoder(ctx, teacher, student, sentences, options);
  EXPECT_EQ(a.steps, 40);
  EXPECT_EQ(a.sentences, 9);
  for (const auto& [name, t] : a.student.model.tensors)
    EXPECT_EQ(std::memcmp(t.data<const void>(), b.student.model.tensors.at(name).data<const void>(),
                          t.bytes()),
              0)
        << name;
  EXPECT_TRUE(a.student.config.is_grouped());
  const Tensor want = teacher.embed(ctx, kTexts);
  const double before = max_abs_difference(encoder_from_weights(student).embed(ctx, kTexts), want);
  const double after = max_abs_difference(encoder_from_weights(a.student).embed(ctx, kTexts), want);
  std::printf("[ distill ] max |embedding - teacher's| %.4f -> %.4f, loss %.5f -> %.5f\n", before,
              after, a.first_loss, a.last_loss);
  EXPECT_LT(after, 0.5 * before);
  expect_error(
      [&] { distill_encoder(ctx, teacher, student, sentences, {.steps = 0, .seconds = 0}); },
      {"uptraining budget"});
  expect_error([&] { distill_encoder(ctx, teacher, student, {"a"}, {.steps = 1}); },
               {"uptraining corpus"});
  // A pruned teacher (layer 0 keeps 3 heads) and its GQA conversion: uneven layers train too.
  const EncoderWeights pruned = prune_heads(read_encoder_weights(tiny()), {{1}, {}});
  const EncoderWeights pruned_student = convert_kv_heads(pruned, 1, KvConvertMethod::mean);
  const DistillResult p =
      distill_encoder(ctx, encoder_from_weights(pruned), pruned_student, sentences, options);
  std::printf("[ distill ] pruned teacher: loss %.5f -> %.5f\n", p.first_loss, p.last_loss);
  EXPECT_LT(p.last_loss, 0.5 * p.first_loss);
  expect_error([&] { distill_encoder(ctx, teacher, pruned_student, sentences, options); },
               {"student", "other heads per layer"});
}

TEST_F(EncoderTrainingTiny, PruneAndConvertCommandsTakeTheNewOptions) {
  const CliResult pruned =
      run_cli("prune --model '" + tiny() + "' --fraction 0.25 --importance gradient --rank-sts '" +
              sts_.string() + "' --out '" + (root_ / "p").string() + "'");
  ASSERT_EQ(pruned.exit_code, 0) << pruned.err;
  EXPECT_EQ(BertEncoder::load((root_ / "p").string()).config().total_heads(), 6);
  const CliResult iterative = run_cli(
      "prune --model '" + tiny() + "' --fraction 0.25 --importance gradient --iterative --out '" +
      (root_ / "q").string() + "'");
  EXPECT_EQ(iterative.exit_code, 2);
  EXPECT_NE(iterative.err.find("only with --importance ablation"), std::string::npos)
      << iterative.err;

  const fs::path corpus = root_ / "corpus.txt";
  std::ofstream(corpus) << "the cat sat. a cat sat on the mat. the mat sat on a cat. the cats sat.";
  const CliResult up =
      run_cli("convert --model '" + tiny() +
              "' --kv-heads 2 --method aligned --uptrain-steps 3 --uptrain-batch 2 "
              "--uptrain-corpus '" +
              corpus.string() + "' --threads 1 --out '" + (root_ / "g").string() + "'");
  ASSERT_EQ(up.exit_code, 0) << up.err;
  EXPECT_NE(up.err.find("uptrain: 3 steps"), std::string::npos) << up.err;
  EXPECT_EQ(BertEncoder::load((root_ / "g").string()).config().layer_kv_heads(0), 2);
  const CliResult both = run_cli("convert --model '" + tiny() +
                                 "' --kv-heads 2 --uptrain-steps 3 --uptrain-minutes 1 --out '" +
                                 (root_ / "h").string() + "'");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("at most one of them"), std::string::npos) << both.err;
  EXPECT_FALSE(fs::exists(root_ / "h"));
}

// all-MiniLM-L6-v2: the bridged layers give the encoder's embeddings on real sentences.
TEST(EncoderTrainingMiniLM, BridgeEqualsTheEncoder) {
  HEADCOUNT_REQUIRE_MINILM();
  std::vector<std::string> texts;
  for (const GoldenCase& c : load_golden_cases()) texts.push_back(c.text);
  texts.resize(std::min<std::size_t>(texts.size(), 12));
  Context ctx({.threads = 2});
  const BertEncoder encoder = BertEncoder::load(default_model_dir());
  train::Model model = train::from_weights(read_encoder_weights(default_model_dir()).model,
                                           train::WeightParts::layers);
  const double diff =
      max_abs_difference(bridged_embeddings(ctx, encoder, model, texts), encoder.embed(ctx, texts));
  std::printf("[ bridge ] MiniLM bridged vs encoder max |diff| %.3g over %zu sentences\n", diff,
              texts.size());
  EXPECT_LE(diff, kMiniLMTolerance);
}

}  // namespace
}  // namespace headcount::testing
