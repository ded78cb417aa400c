// BertEncoder: the one executor (headcount/transformer.h) over BERT's definition, with
// WordPiece, mean pooling and dynamic batching by length.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>

#include "headcount/encoder.h"
#include "headcount/error.h"
#include "headcount/transformer.h"

namespace headcount {

using detail::concat;

namespace {

// Context workspace slots of the encoder's pooling (the executor uses 40 and up).
enum EncoderSlot : int { kSlotHidden = 32, kSlotPooled = 35 };

}  // namespace

struct BertEncoder::Impl {
  EncoderConfig config;
  WordPieceTokenizer tokenizer;
  std::optional<Transformer> executor;

  Impl(EncoderConfig c, WordPieceTokenizer t) : config(std::move(c)), tokenizer(std::move(t)) {}
};

DType parse_encoder_dtype(const std::string& name) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "int8") return DType::i8;
  fail("dtype", concat("expected fp32, bf16 or int8, got '", name, "'"));
}

std::string bert_checkpoint_prefix(const SafetensorsFile& file) {
  const std::string word =
      model::name_of(model::Config{.family = model::Family::bert}, model::Role::token_embedding);
  return file.find(word) == nullptr && file.find("bert." + word) != nullptr ? "bert." : "";
}

namespace {

// The file's tensors by their table names; some checkpoints (BertForPreTraining exports)
// prefix the names with "bert.".
BertEncoder::WeightSource from_file(const SafetensorsFile& weights) {
  const std::string prefix = bert_checkpoint_prefix(weights);
  return [&weights, prefix](const std::string& name, const std::vector<std::int64_t>& shape) {
    return weights.load_f32(prefix + name, shape);
  };
}

}  // namespace

BertEncoder::BertEncoder(EncoderConfig config, const SafetensorsFile& weights,
                         WordPieceTokenizer tokenizer, const EncoderLoadOptions& options)
    : BertEncoder(std::move(config), from_file(weights), std::move(tokenizer), options) {}

BertEncoder::BertEncoder(EncoderConfig config, const WeightSource& weights,
                         WordPieceTokenizer tokenizer, const EncoderLoadOptions& options)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(tokenizer))) {
  const EncoderConfig& c = impl_->config;
  check(options.dtype == DType::f32 || options.dtype == DType::bf16 || options.dtype == DType::i8,
        "dtype", "f32, bf16 or i8", dtype_name(options.dtype));
  if (options.dtype == DType::i8) {
    // The int8 kernel multiplies 4 depths at a time (vpdpbusd): every projection's input width
    // must be a multiple of 4. Said here with the config's names, before any weight is packed.
    check(c.hidden_size % 4 == 0, "dtype int8",
          "hidden_size a multiple of 4 (the int8 kernel takes 4 input features at a time)",
          concat(c.hidden_size, " (config.json hidden_size)"));
    check(c.intermediate_size % 4 == 0, "dtype int8",
          "intermediate_size a multiple of 4 (the int8 kernel takes 4 input features at a time)",
          concat(c.intermediate_size, " (config.json intermediate_size)"));
    for (std::int64_t l = 0; l < c.layers; ++l)
      check(c.layer_heads(l) * c.head_dim() % 4 == 0, "dtype int8",
            concat("layer ", l, "'s heads x head_dim a multiple of 4 (W_O's input width)"),
            concat(c.layer_heads(l), " x ", c.head_dim()));
  }
  check(impl_->tokenizer.vocab_size() == c.vocab_size, "vocab.txt",
        concat(c.vocab_size, " tokens (config.json vocab_size)"), impl_->tokenizer.vocab_size());

  // 1. Every tensor of the definition's table, present and of the right shape, before any is
  // used; from here on a weight is named by its role, not by the checkpoint's name.
  model::Weights loaded{.config = bert_definition(c)};
  for (const model::WeightSpec& spec : model::weight_table(loaded.config))
    loaded.tensors.emplace(spec.name, weights(spec.name, spec.shape));
  impl_->executor.emplace(loaded, options.dtype);
}

BertEncoder BertEncoder::load(const std::string& model_dir, const EncoderLoadOptions& options) {
  EncoderConfig config = read_encoder_config(model_dir);  // checks the directory first
  const std::filesystem::path dir(model_dir);
  WordPieceTokenizer tokenizer =
      WordPieceTokenizer::from_vocab_file((dir / "vocab.txt").string(), config.tokenizer);
  const SafetensorsFile weights = SafetensorsFile::open((dir / "model.safetensors").string());
  return BertEncoder(std::move(config), weights, std::move(tokenizer), options);
}

BertEncoder::~BertEncoder() = default;
BertEncoder::BertEncoder(BertEncoder&&) noexcept = default;
BertEncoder& BertEncoder::operator=(BertEncoder&&) noexcept = default;

const EncoderConfig& BertEncoder::config() const { return impl_->config; }

void BertEncoder::set_partial_sum(std::function<void(float*, std::int64_t)> sum) {
  impl_->executor->set_partial_sum(std::move(sum));
}
const Transformer& BertEncoder::executor() const { return *impl_->executor; }
const WordPieceTokenizer& BertEncoder::tokenizer() const { return impl_->tokenizer; }
DType BertEncoder::dtype() const { return impl_->executor->dtype(); }

void BertEncoder::embed_batch(Context& ctx, const TokenBatch& batch, const TensorView& out,
                              bool normalize, Kernel kernel,
                              std::span<const float> head_mask) const {
  const std::int64_t B = batch.batch, n = batch.seq_len, d = dim();
  check(!out.empty() && out.dtype == DType::f32 && out.rank == 2 && out.is_contiguous() &&
            out.shape[0] == B && out.shape[1] == d,
        "out", concat("a contiguous f32 tensor [", B, ", ", d, "]"), out.shape_string());
  float* hidden = static_cast<float*>(
      ctx.workspace(kSlotHidden, static_cast<std::size_t>(B * n * d) * sizeof(float)));
  check(n <= impl_->config.max_position_embeddings, "batch seq_len",
        concat("at most max_position_embeddings = ", impl_->config.max_position_embeddings), n);
  impl_->executor->forward(ctx, batch, TensorView::contiguous(hidden, DType::f32, {B, n, d}),
                           {.kernel = kernel, .head_mask = head_mask});

  pool(batch, hidden, out.ptr<float>(), normalize);
}

void BertEncoder::pool(const TokenBatch& batch, const float* hidden, float* out,
                       bool normalize) const {
  const std::int64_t B = batch.batch, n = batch.seq_len, d = dim();
  // 3. Mean over the valid tokens ([CLS] and [SEP] count), then L2 (F.normalize: / max(|v|,
  // 1e-12)).
  std::vector<double> sum(static_cast<std::size_t>(d));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t len = batch.lengths[static_cast<std::size_t>(b)];
    std::fill(sum.begin(), sum.end(), 0.0);
    for (std::int64_t i = 0; i < len; ++i) {
      const float* row = hidden + (b * n + i) * d;
      for (std::int64_t k = 0; k < d; ++k) sum[static_cast<std::size_t>(k)] += row[k];
    }
    double norm = 0.0;
    for (double& s : sum) {
      s /= static_cast<double>(len);
      norm += s * s;
    }
    const double scale =
        normalize && impl_->config.normalize ? 1.0 / std::max(std::sqrt(norm), 1e-12) : 1.0;
    float* dst = out + b * d;
    for (std::int64_t k = 0; k < d; ++k)
      dst[k] = static_cast<float>(sum[static_cast<std::size_t>(k)] * scale);
  }
}

Tensor BertEncoder::embed(Context& ctx, const std::vector<std::string>& texts,
                          const EmbedOptions& options) const {
  check(options.batch_size >= 1, "batch size", ">= 1", options.batch_size);
  check(!texts.empty(), "texts", "at least one sentence", "none");
  const std::int64_t count = static_cast<std::int64_t>(texts.size()), d = dim();
  std::vector<std::vector<std::int32_t>> ids(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) ids[i] = impl_->tokenizer.encode(texts[i]);

  // Dynamic batching (batch_by_length); each result goes back to its input row. The longest
  // batch runs first: it sizes every workspace of ctx once, and the shorter batches reuse them.
  // In ascending order each longer batch regrew them, and the fresh pages' zeroing by the kernel
  // (first touch, in the GEMM's stores) was 6% of `headcount embed`'s time at batch 32.
  // Embeddings do not depend on the batch (tests/test_encoder_invariance.cpp), so neither on the
  // order.
  Tensor out(DType::f32, {count, d});
  std::int64_t done = 0;
  const std::vector<LengthBatch> batches =
      batch_by_length(ids, options.batch_size, impl_->tokenizer.pad_id());
  for (auto it = batches.rbegin(); it != batches.rend(); ++it) {
    const LengthBatch& b = *it;
    const TokenBatch& batch = b.tokens;
    float* pooled = static_cast<float*>(
        ctx.workspace(kSlotPooled, static_cast<std::size_t>(batch.batch * d) * sizeof(float)));
    embed_batch(ctx, batch, TensorView::contiguous(pooled, DType::f32, {batch.batch, d}),
                options.normalize, options.kernel, options.head_mask);
    for (std::size_t r = 0; r < b.rows.size(); ++r)
      std::copy_n(pooled + static_cast<std::int64_t>(r) * d, d,
                  out.data<float>() + static_cast<std::int64_t>(b.rows[r]) * d);
    done += batch.batch;
    if (options.progress) options.progress(done, count);
  }
  return out;
}

double cosine_similarity(const float* a, const float* b, std::int64_t n) {
  double dot = 0, na = 0, nb = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0.0;
}

}  // namespace headcount
