// BertEncoder: weights from the name -> shape table, the forward pass in numbered steps,
// mean pooling, and dynamic batching by length.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>

#include "headcount/encoder.h"
#include "headcount/error.h"
#include "headcount/multi_head_attention.h"
#include "layers/feed_forward.h"
#include "layers/layer_norm.h"

namespace headcount {

using detail::concat;

namespace {

// Context workspace slots of the encoder (the attention layer uses the low slots).
enum EncoderSlot : int { kSlotHidden = 32, kSlotSublayer, kSlotFfn, kSlotPooled, kSlotLse };

// PyTorch's nn.Linear stores [out, in]; headcount multiplies x · W with W [in, out].
Tensor transposed(const Tensor& t) {
  const std::int64_t rows = t.size(0), cols = t.size(1);
  Tensor out(DType::f32, {cols, rows});
  const float* src = t.data<const float>();
  float* dst = out.data<float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  return out;
}

struct NormWeights {
  Tensor gamma, beta;
};

struct EncoderLayer {
  MultiHeadAttention attention;
  NormWeights attention_norm;
  layers::FeedForward ffn;
  NormWeights output_norm;
};

}  // namespace

struct BertEncoder::Impl {
  EncoderConfig config;
  WordPieceTokenizer tokenizer;
  Tensor word, position, token_type;  // [vocab, d], [max_positions, d], [types, d]
  NormWeights embedding_norm;
  std::vector<EncoderLayer> layers;
  DType dtype = DType::f32;                               // of the packed projections
  std::function<void(float*, std::int64_t)> partial_sum;  // a heads-parallel slice's

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
  impl_->dtype = options.dtype;
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
  using model::Role;
  auto take = [&](Role role, std::int64_t layer = -1) { return std::move(loaded.at(role, layer)); };

  // 2. Embeddings.
  impl_->word = take(Role::token_embedding);
  impl_->position = take(Role::position_embedding);
  impl_->token_type = take(Role::token_type_embedding);
  impl_->embedding_norm = {take(Role::embedding_norm_weight), take(Role::embedding_norm_bias)};

  // 3. Layers: linear weights transposed to [in, out].
  for (std::int64_t l = 0; l < c.layers; ++l) {
    // Per layer: the heads left after pruning, their K/V heads (GQA), head_dim unchanged.
    const MultiHeadAttentionConfig attention_config =
        resolve(MultiHeadAttentionConfig{.d_model = c.hidden_size,
                                         .heads = c.layer_heads(l),
                                         .kv_heads = c.layer_kv_heads(l),
                                         .head_dim = c.head_dim()});
    MultiHeadAttentionWeights w;
    w.w_q = transposed(take(Role::q_weight, l));
    w.w_k = transposed(take(Role::k_weight, l));
    w.w_v = transposed(take(Role::v_weight, l));
    w.w_o = transposed(take(Role::o_weight, l));
    w.b_q = take(Role::q_bias, l);
    w.b_k = take(Role::k_bias, l);
    w.b_v = take(Role::v_bias, l);
    w.b_o = take(Role::o_bias, l);
    layers::FeedForward ffn{
        .up = layers::Linear::make(transposed(take(Role::ffn_up_weight, l)),
                                   take(Role::ffn_up_bias, l), options.dtype),
        .down = layers::Linear::make(transposed(take(Role::ffn_down_weight, l)),
                                     take(Role::ffn_down_bias, l), options.dtype)};
    MultiHeadAttention attention(attention_config, std::move(w));
    if (options.dtype != DType::f32) attention.set_projection_dtype(options.dtype);
    impl_->layers.push_back(
        EncoderLayer{.attention = std::move(attention),
                     .attention_norm = {take(Role::norm1_weight, l), take(Role::norm1_bias, l)},
                     .ffn = std::move(ffn),
                     .output_norm = {take(Role::norm2_weight, l), take(Role::norm2_bias, l)}});
  }
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
  impl_->partial_sum = std::move(sum);
}
const WordPieceTokenizer& BertEncoder::tokenizer() const { return impl_->tokenizer; }
DType BertEncoder::dtype() const { return impl_->dtype; }

void BertEncoder::forward(Context& ctx, const TokenBatch& batch, const TensorView& hidden,
                          Kernel kernel) const {
  forward(ctx, batch, hidden, EncoderForwardOptions{.kernel = kernel});
}

void BertEncoder::forward(Context& ctx, const TokenBatch& batch, const TensorView& hidden,
                          const EncoderForwardOptions& options) const {
  const EncoderConfig& c = impl_->config;
  const std::int64_t B = batch.batch, n = batch.seq_len, d = c.hidden_size;
  check(B >= 1 && n >= 1, "batch", "at least one sequence of at least one token",
        concat(B, " x ", n));
  check(n <= c.max_position_embeddings, "batch seq_len",
        concat("at most max_position_embeddings = ", c.max_position_embeddings), n);
  check(static_cast<std::int64_t>(batch.ids.size()) == B * n &&
            static_cast<std::int64_t>(batch.lengths.size()) == B,
        "batch", concat(B * n, " ids and ", B, " lengths"),
        concat(batch.ids.size(), " ids and ", batch.lengths.size(), " lengths"));
  for (std::int64_t len : batch.lengths)
    check(len >= 1 && len <= n, "batch lengths", concat("in [1, ", n, "]"), len);
  for (std::int32_t id : batch.ids)
    check(id >= 0 && id < c.vocab_size, "token id", concat("in [0, ", c.vocab_size, ")"), id);
  check(!hidden.empty() && hidden.dtype == DType::f32 && hidden.rank == 3 &&
            hidden.is_contiguous() && hidden.shape[0] == B && hidden.shape[1] == n &&
            hidden.shape[2] == d,
        "hidden", concat("a contiguous f32 tensor [", B, ", ", n, ", ", d, "]"),
        hidden.shape_string());
  check(options.head_mask.empty() ||
            static_cast<std::int64_t>(options.head_mask.size()) == c.total_heads(),
        "head_mask", concat(c.total_heads(), " factors (one per head of every layer) or none"),
        options.head_mask.size());
  for (std::int64_t l = 0; l < c.layers && !options.head_mask.empty(); ++l)
    for (std::int64_t h = 0; h < c.layer_heads(l); ++h)
      if (const float f = options.head_mask[static_cast<std::size_t>(c.head_offset(l) + h)];
          !std::isfinite(f))
        fail(concat("head_mask[", c.head_offset(l) + h, "] (layer ", l, ", head ", h, ")"),
             concat("expected a finite factor, got ", f));

  float* x = hidden.ptr<float>();  // [B, n, d]: the residual stream
  const std::int64_t rows = B * n;
  const float eps = c.layer_norm_eps;

  check(options.first_layer >= 0 && options.first_layer <= c.layers, "first_layer",
        concat("in [0, ", c.layers, "]"), options.first_layer);
  const std::int64_t end_layer = options.end_layer < 0 ? c.layers : options.end_layer;
  check(end_layer >= options.first_layer && end_layer <= c.layers, "end_layer",
        concat("-1 or in [first_layer = ", options.first_layer, ", ", c.layers, "]"),
        options.end_layer);
  if (options.first_layer == 0) {
    // 1. Embeddings: word + position + token type 0, then LayerNorm.
    const float* word = impl_->word.data<const float>();
    const float* position = impl_->position.data<const float>();
    const float* type0 = impl_->token_type.data<const float>();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < n; ++i) {
        float* row = x + (b * n + i) * d;
        const float* w =
            word + static_cast<std::int64_t>(batch.ids[static_cast<std::size_t>(b * n + i)]) * d;
        const float* p = position + i * d;
        for (std::int64_t k = 0; k < d; ++k) row[k] = w[k] + p[k] + type0[k];
      }
    layers::add_layer_norm(ctx, x, nullptr, rows, d,
                           impl_->embedding_norm.gamma.data<const float>(),
                           impl_->embedding_norm.beta.data<const float>(), eps);
  }

  // 2. Layers, post-LN: x = LN(x + attention(x)); x = LN(x + FFN(x)).
  float* sublayer = static_cast<float*>(
      ctx.workspace(kSlotSublayer, static_cast<std::size_t>(rows * d) * sizeof(float)));
  float* ffn_hidden = static_cast<float*>(ctx.workspace(
      kSlotFfn, static_cast<std::size_t>(rows * c.intermediate_size) * sizeof(float)));
  const TensorView x_view = TensorView::contiguous(x, DType::f32, {B, n, d});
  const TensorView sublayer_view = TensorView::contiguous(sublayer, DType::f32, {B, n, d});
  AttentionOptions attention_options{.kernel = options.kernel, .key_lengths = batch.lengths};
  for (std::int64_t l = options.first_layer; l < end_layer; ++l) {
    const EncoderLayer& layer = impl_->layers[static_cast<std::size_t>(l)];
    const std::int64_t heads = c.layer_heads(l);
    if (options.observe_attention)
      attention_options.lse = TensorView::contiguous(
          ctx.workspace(kSlotLse, static_cast<std::size_t>(B * heads * n) * sizeof(float)),
          DType::f32, {B, heads, n});
    if (!options.head_mask.empty())
      attention_options.head_mask = options.head_mask.subspan(
          static_cast<std::size_t>(c.head_offset(l)), static_cast<std::size_t>(heads));
    if (options.observe_attention)
      attention_options.observe = [&options, l](const AttentionParams& params) {
        options.observe_attention(l, params);
      };
    layer.attention.forward(ctx, x_view, sublayer_view, attention_options);
    if (impl_->partial_sum) impl_->partial_sum(sublayer, rows * d);
    layers::add_layer_norm(ctx, x, sublayer, rows, d,
                           layer.attention_norm.gamma.data<const float>(),
                           layer.attention_norm.beta.data<const float>(), eps);
    layer.ffn.forward(ctx, x, rows, ffn_hidden, sublayer);
    if (impl_->partial_sum) impl_->partial_sum(sublayer, rows * d);
    layers::add_layer_norm(ctx, x, sublayer, rows, d, layer.output_norm.gamma.data<const float>(),
                           layer.output_norm.beta.data<const float>(), eps);
  }
}

void BertEncoder::embed_batch(Context& ctx, const TokenBatch& batch, const TensorView& out,
                              bool normalize, Kernel kernel,
                              std::span<const float> head_mask) const {
  const std::int64_t B = batch.batch, n = batch.seq_len, d = dim();
  check(!out.empty() && out.dtype == DType::f32 && out.rank == 2 && out.is_contiguous() &&
            out.shape[0] == B && out.shape[1] == d,
        "out", concat("a contiguous f32 tensor [", B, ", ", d, "]"), out.shape_string());
  float* hidden = static_cast<float*>(
      ctx.workspace(kSlotHidden, static_cast<std::size_t>(B * n * d) * sizeof(float)));
  forward(ctx, batch, TensorView::contiguous(hidden, DType::f32, {B, n, d}),
          EncoderForwardOptions{.kernel = kernel, .head_mask = head_mask});

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
