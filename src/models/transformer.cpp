// Transformer: the one layer loop every model family runs (headcount/transformer.h).
#include "headcount/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "headcount/decode.h"
#include "headcount/error.h"
#include "headcount/gguf.h"
#include "headcount/multi_head_attention.h"
#include "layers/block_weights.h"
#include "layers/feed_forward.h"
#include "layers/layer_norm.h"
#include "layers/packed_gemm.h"
#include "layers/rms_norm.h"

namespace headcount {

using detail::concat;
using i64 = std::int64_t;
using model::Role;

namespace {

// Context workspace slots of the executor (the attention layer uses the low ones; callers
// above it, such as BertEncoder's pooling, 32..39).
enum Slot : int { kSlotResidual = 40, kSlotNormed, kSlotSublayer, kSlotFfn, kSlotLse };

// [out, in] (PyTorch, GGUF) -> [in, out] (x · W).
Tensor transposed(const Tensor& t) {
  const i64 rows = t.size(0), cols = t.size(1);
  Tensor out(DType::f32, {cols, rows});
  const float* src = t.data<const float>();
  float* dst = out.data<float>();
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  return out;
}

Tensor copy(const Tensor& t) {
  Tensor out(t.dtype(), t.shape());
  std::memcpy(out.data<void>(), t.data<const void>(), t.bytes());
  return out;
}

struct Norm {
  Tensor gamma, beta;  // beta empty for RMSNorm
};

struct Layer {
  MultiHeadAttention attention;
  Norm norm1, norm2;
  // One of the two, by the config's activation; neither when attention_only.
  layers::FeedForward gelu;
  layers::GatedFeedForward swiglu;
};

layers::BlockSource block_source(const GgufFile& file, const std::string& name,
                                 std::span<const i64> row_order = {}) {
  const GgufTensorView view = file.view(name);
  const GgmlType type = view.info->type;
  check(type == GgmlType::q4_1 || type == GgmlType::q8_0, concat(file.path(), ": ", name),
        "Q4_1 or Q8_0 blocks for --weights quantized (use fp32, bf16 or int8 for this file)",
        ggml_type_name(type));
  return {.type = type,
          .bytes = view.bytes,
          .rows = view.info->rows(),
          .cols = view.info->cols(),
          .row_order = row_order};
}

std::shared_ptr<const layers::BlockWeights> pack_blocks(
    std::initializer_list<layers::BlockSource> parts) {
  return std::make_shared<const layers::BlockWeights>(layers::BlockWeights::pack(
      std::span<const layers::BlockSource>(parts.begin(), parts.size())));
}

}  // namespace

struct Transformer::Impl {
  model::Config config;
  DType dtype = DType::f32;
  bool quantized = false;
  Tensor token, position, token_type;  // [vocab | context | types, d_model]
  Norm embedding_norm, final_norm;
  std::vector<Layer> layers;
  Tensor head;  // packed [d_model, vocab] (the token table's transpose when tied); empty: none
  Tensor head_bias;
  std::shared_ptr<const layers::BlockWeights> head_blocks;  // use_file_blocks
  std::function<void(float*, i64)> partial_sum;

  // x = Norm(x + residual), in place (post-norm).
  void add_norm(Context& ctx, const Norm& n, float* x, const float* residual, i64 rows) const {
    const i64 d = config.d_model;
    if (config.norm == model::NormKind::layer_norm)
      layers::add_layer_norm(ctx, x, residual, rows, d, n.gamma.data<const float>(),
                             n.beta.data<const float>(), config.norm_eps);
    else
      layers::add_rms_norm(ctx, x, residual, rows, d, n.gamma.data<const float>(), config.norm_eps,
                           x);
  }
  // x += residual; y = Norm(x) (pre-norm: x keeps the residual stream).
  void add_norm_into(Context& ctx, const Norm& n, float* x, const float* residual, i64 rows,
                     float* y) const {
    const i64 d = config.d_model;
    if (config.norm == model::NormKind::layer_norm)
      layers::add_layer_norm_into(ctx, x, residual, rows, d, n.gamma.data<const float>(),
                                  n.beta.data<const float>(), config.norm_eps, y);
    else
      layers::add_rms_norm(ctx, x, residual, rows, d, n.gamma.data<const float>(), config.norm_eps,
                           y);
  }
};

Transformer::Transformer(const model::Weights& weights, DType dtype)
    : impl_(std::make_unique<Impl>()) {
  const model::Config& c = weights.config;
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::i8, "weights dtype",
        "f32, bf16 or i8", dtype_name(dtype));
  model::check_weights(weights, "model weights");
  if (dtype == DType::i8) {
    // The int8 kernel takes 4 input features at a time (vpdpbusd): every projection's input
    // width must be a multiple of 4. Said with the config's names, before any weight is packed.
    check(c.d_model % 4 == 0 && (c.attention_only || c.d_ff % 4 == 0), "weights dtype i8",
          "d_model and d_ff multiples of 4 (the int8 kernel takes 4 input features at a time)",
          concat(c.d_model, " and ", c.d_ff));
    for (i64 l = 0; l < c.layer_count(); ++l)
      check(c.heads_in(l) * c.head_dim % 4 == 0, "weights dtype i8",
            concat("layer ", l, "'s heads x head_dim a multiple of 4 (W_O's input width)"),
            concat(c.heads_in(l), " x ", c.head_dim));
  }
  check(c.activation != model::Activation::swiglu || !c.ffn_bias, "model ffn_bias",
        "no FFN biases with SwiGLU (the gated FFN has none)", "biases");
  Impl& m = *impl_;
  m.config = c;
  m.dtype = dtype;
  auto has = [&](Role role, i64 layer = -1) { return weights.has(role, layer); };
  auto norm = [&](Role weight, Role bias, i64 layer = -1) {
    return Norm{.gamma = copy(weights.at(weight, layer)),
                .beta = has(bias, layer) ? copy(weights.at(bias, layer)) : Tensor()};
  };

  // 1. Embeddings, their norm, the final norm.
  m.token = copy(weights.at(Role::token_embedding));
  if (c.positions == model::Positions::learned)
    m.position = copy(weights.at(Role::position_embedding));
  if (c.token_types > 0) m.token_type = copy(weights.at(Role::token_type_embedding));
  if (c.embedding_norm)
    m.embedding_norm = norm(Role::embedding_norm_weight, Role::embedding_norm_bias);
  if (c.final_norm()) m.final_norm = norm(Role::final_norm_weight, Role::final_norm_bias);

  // 2. Layers: projections transposed to [in, out] and packed by the layers.
  for (i64 l = 0; l < c.layer_count(); ++l) {
    const bool bias = c.attention_bias;
    MultiHeadAttentionWeights w{.w_q = transposed(weights.at(Role::q_weight, l)),
                                .w_k = transposed(weights.at(Role::k_weight, l)),
                                .w_v = transposed(weights.at(Role::v_weight, l)),
                                .w_o = transposed(weights.at(Role::o_weight, l))};
    if (bias) {
      w.b_q = copy(weights.at(Role::q_bias, l));
      w.b_k = copy(weights.at(Role::k_bias, l));
      w.b_v = copy(weights.at(Role::v_bias, l));
      w.b_o = copy(weights.at(Role::o_bias, l));
    }
    MultiHeadAttention attention(
        resolve(MultiHeadAttentionConfig{
            .d_model = c.d_model,
            .heads = c.heads_in(l),
            .kv_heads = c.kv_heads_in(l),
            .head_dim = c.head_dim,
            .bias = bias,
            .rope_base = c.positions == model::Positions::rotary ? c.rope_base : 0.0f}),
        std::move(w));
    if (dtype != DType::f32) attention.set_projection_dtype(dtype);
    Layer layer{.attention = std::move(attention),
                .norm1 = norm(Role::norm1_weight, Role::norm1_bias, l)};
    if (!c.attention_only) {
      layer.norm2 = norm(Role::norm2_weight, Role::norm2_bias, l);
      if (c.activation == model::Activation::swiglu) {
        layer.swiglu =
            layers::GatedFeedForward::make(transposed(weights.at(Role::ffn_gate_weight, l)),
                                           transposed(weights.at(Role::ffn_up_weight, l)),
                                           transposed(weights.at(Role::ffn_down_weight, l)), dtype);
      } else {
        auto bias_of = [&](Role role) { return c.ffn_bias ? copy(weights.at(role, l)) : Tensor(); };
        layer.gelu = {.up = layers::Linear::make(transposed(weights.at(Role::ffn_up_weight, l)),
                                                 bias_of(Role::ffn_up_bias), dtype),
                      .down = layers::Linear::make(transposed(weights.at(Role::ffn_down_weight, l)),
                                                   bias_of(Role::ffn_down_bias), dtype)};
      }
    }
    m.layers.push_back(std::move(layer));
  }

  // 3. The LM head packed once as [d_model, vocab].
  if (c.output != model::Output::hidden) {
    const Tensor head_t =
        transposed(c.output == model::Output::tied ? weights.at(Role::token_embedding)
                                                   : weights.at(Role::lm_head_weight));
    m.head = layers::pack_weights(head_t.data<const float>(), c.d_model, c.vocab, c.vocab, dtype);
    if (c.output == model::Output::lm_head && c.output_bias)
      m.head_bias = copy(weights.at(Role::lm_head_bias));
  }
}

Transformer::~Transformer() = default;
Transformer::Transformer(Transformer&&) noexcept = default;
Transformer& Transformer::operator=(Transformer&&) noexcept = default;

const model::Config& Transformer::config() const { return impl_->config; }
DType Transformer::dtype() const { return impl_->dtype; }
bool Transformer::quantized() const { return impl_->quantized; }

void Transformer::set_partial_sum(std::function<void(float*, std::int64_t)> sum) {
  impl_->partial_sum = std::move(sum);
}

Transformer::Transformer() : impl_(std::make_unique<Impl>()) {}

Transformer Transformer::on_file_blocks(const GgufFile& file, const model::Config& config) {
  const model::Config& c = config;
  model::validate(c, file.path());
  check(c.family == model::Family::llama && c.activation == model::Activation::swiglu &&
            c.placement == model::NormPlacement::pre && !c.attention_bias && !c.embedding_norm &&
            c.positions == model::Positions::rotary && c.output != model::Output::hidden,
        "quantized weights", "a Llama-family model read from a GGUF file",
        model::family_name(c.family));
  // The GGUF names and shapes of each role and layer, from the definition's own table.
  std::vector<std::vector<const model::WeightSpec*>> specs(c.layer_count());
  const std::vector<model::WeightSpec> table = model::weight_table(c);
  const model::WeightSpec* head = nullptr;
  for (const model::WeightSpec& spec : table) {
    if (spec.layer >= 0) {
      auto& row = specs[static_cast<std::size_t>(spec.layer)];
      if (row.size() <= static_cast<std::size_t>(spec.role))
        row.resize(static_cast<std::size_t>(spec.role) + 1);
      row[static_cast<std::size_t>(spec.role)] = &spec;
    } else if (spec.role ==
               (c.output == model::Output::tied ? Role::token_embedding : Role::lm_head_weight)) {
      head = &spec;
    }
  }
  auto fp32 = [&](const model::WeightSpec& spec) {
    return file.load_f32(spec.gguf_name, spec.shape);
  };
  // llama.cpp's Q/K row order undone by choosing rows (unpermute_rotary_rows's map): packed
  // row (head, h · head_dim/2 + i) is the file's row (head, 2i + h).
  auto rotary_order = [&](i64 heads) {
    std::vector<i64> order(static_cast<std::size_t>(heads * c.head_dim));
    const i64 half = c.head_dim / 2;
    for (i64 h0 = 0; h0 < heads; ++h0)
      for (i64 h = 0; h < 2; ++h)
        for (i64 i = 0; i < half; ++i)
          order[static_cast<std::size_t>(h0 * c.head_dim + h * half + i)] =
              h0 * c.head_dim + 2 * i + h;
    return order;
  };

  Transformer t;
  Impl& m = *t.impl_;
  m.config = c;
  m.quantized = true;
  for (const model::WeightSpec& spec : table) {
    if (spec.role == Role::token_embedding) m.token = fp32(spec);
    if (spec.role == Role::final_norm_weight) m.final_norm.gamma = fp32(spec);
  }
  for (i64 l = 0; l < c.layer_count(); ++l) {
    const auto& row = specs[static_cast<std::size_t>(l)];
    auto name = [&](Role role) { return row.at(static_cast<std::size_t>(role))->gguf_name; };
    const std::vector<i64> q_order = rotary_order(c.heads_in(l)),
                           k_order = rotary_order(c.kv_heads_in(l));
    Layer layer{.attention = MultiHeadAttention(
                    {.d_model = c.d_model,
                     .heads = c.heads_in(l),
                     .kv_heads = c.kv_heads_in(l),
                     .head_dim = c.head_dim,
                     .bias = false,
                     .rope_base = c.rope_base},
                    pack_blocks({block_source(file, name(Role::q_weight), q_order),
                                 block_source(file, name(Role::k_weight), k_order),
                                 block_source(file, name(Role::v_weight))}),
                    pack_blocks({block_source(file, name(Role::o_weight))})),
                .norm1 = {.gamma = fp32(*row.at(static_cast<std::size_t>(Role::norm1_weight)))},
                .norm2 = {.gamma = fp32(*row.at(static_cast<std::size_t>(Role::norm2_weight)))}};
    layer.swiglu = layers::GatedFeedForward::from_blocks(
        pack_blocks({block_source(file, name(Role::ffn_gate_weight)),
                     block_source(file, name(Role::ffn_up_weight))}),
        pack_blocks({block_source(file, name(Role::ffn_down_weight))}));
    m.layers.push_back(std::move(layer));
  }
  m.head_blocks = pack_blocks({block_source(file, head->gguf_name)});
  return t;
}

KvCache Transformer::make_cache(i64 capacity, CacheDType dtype) const {
  const model::Config& c = impl_->config;
  check(c.causal, "kv cache", "a causal model (a decoder)", "a bidirectional encoder");
  check(capacity >= 1 && capacity <= c.context, "kv cache capacity",
        concat("1 to the model's context ", c.context), capacity);
  KvCacheConfig config{.layers = c.layer_count(),
                       .batch = 1,
                       .kv_heads = c.kv_heads_in(0),
                       .head_dim = c.head_dim,
                       .capacity = capacity,
                       .dtype = dtype};
  // A model pruned by whole K/V groups: each layer's part of the cache has its own count.
  if (!c.uniform())
    for (i64 m = 0; m < c.layer_count(); ++m) config.layer_kv_heads.push_back(c.kv_heads_in(m));
  return KvCache(config);
}

void Transformer::run(Context& ctx, std::span<const std::int32_t> ids, i64 B, i64 n, float* x,
                      std::span<KvCache* const> caches, const TransformerForwardOptions& options,
                      bool continue_prefill) const {
  const Impl& m = *impl_;
  const model::Config& c = m.config;
  const i64 d = c.d_model, rows = B * n;
  const bool pre = c.placement == model::NormPlacement::pre;
  // No cache; one sequence's (prefill or decode steps); or one per sequence (batched decoding).
  const bool per_sequence = caches.size() > 1;
  auto start_of = [&](i64 b) {
    return caches.empty() ? 0
                          : caches[per_sequence ? static_cast<std::size_t>(b) : 0]->length(0, 0);
  };
  const i64 start = start_of(0);
  const i64 end_layer = options.end_layer < 0 ? c.layer_count() : options.end_layer;
  auto buffer = [&](int slot, i64 floats) {
    return static_cast<float*>(
        ctx.workspace(slot, static_cast<std::size_t>(floats) * sizeof(float)));
  };

  // 1. Embeddings: token (+ position) (+ token type 0), then their norm.
  if (options.first_layer == 0) {
    const float* token = m.token.data<const float>();
    const float* position = m.position.empty() ? nullptr : m.position.data<const float>();
    const float* type0 = m.token_type.empty() ? nullptr : m.token_type.data<const float>();
    for (i64 b = 0; b < B; ++b)
      for (i64 i = 0; i < n; ++i) {
        float* row = x + (b * n + i) * d;
        const float* w = token + static_cast<i64>(ids[static_cast<std::size_t>(b * n + i)]) * d;
        const float* p = position != nullptr ? position + (start_of(b) + i) * d : nullptr;
        if (p != nullptr && type0 != nullptr)
          for (i64 k = 0; k < d; ++k) row[k] = w[k] + p[k] + type0[k];
        else if (p != nullptr)
          for (i64 k = 0; k < d; ++k) row[k] = w[k] + p[k];
        else
          std::copy_n(w, d, row);
      }
    if (c.embedding_norm) m.add_norm(ctx, m.embedding_norm, x, nullptr, rows);
  }

  // 2. Layers. Pre-norm keeps x as the residual stream and h as each sub-layer's normed
  // input; a sub-layer's output waits in `pending` to be added by the norm that follows it.
  float* h = pre ? buffer(kSlotNormed, rows * d) : nullptr;
  float* sub = buffer(kSlotSublayer, rows * d);
  const i64 ffn_floats = c.activation == model::Activation::swiglu ? 3 * c.d_ff : c.d_ff;
  float* ffn = c.attention_only ? nullptr : buffer(kSlotFfn, rows * ffn_floats);
  const TensorView sub_view = TensorView::contiguous(sub, DType::f32, {B, n, d});
  const float* pending = nullptr;
  i64 head_offset = 0;
  for (i64 l = 0; l < options.first_layer; ++l) head_offset += c.heads_in(l);
  for (i64 l = options.first_layer; l < end_layer; ++l) {
    const Layer& layer = m.layers[static_cast<std::size_t>(l)];
    const i64 heads = c.heads_in(l);
    if (pre) m.add_norm_into(ctx, layer.norm1, x, pending, rows, h);
    const TensorView in = TensorView::contiguous(pre ? h : x, DType::f32, {B, n, d});
    TensorView lse;
    std::function<void(const AttentionParams&)> observe;
    if (options.observe_attention) {
      lse = TensorView::contiguous(buffer(kSlotLse, B * heads * n), DType::f32, {B, heads, n});
      observe = [&options, l](const AttentionParams& params) {
        options.observe_attention(l, params);
      };
    }
    if (caches.empty()) {
      AttentionOptions attention{.kernel = options.kernel,
                                 .causal = c.causal,
                                 .key_lengths = options.key_lengths,
                                 .scale = c.scale,
                                 .lse = lse,
                                 .observe = observe};
      if (!options.head_mask.empty())
        attention.head_mask = options.head_mask.subspan(static_cast<std::size_t>(head_offset),
                                                        static_cast<std::size_t>(heads));
      layer.attention.forward(ctx, in, sub_view, attention);
    } else if (per_sequence) {
      layer.attention.decode_rows(ctx, in, caches, l, sub_view, {.scale = c.scale});
    } else if (start == 0 || continue_prefill) {
      // The prompt (or its next chunk): its K/V into the cache, causal streaming attention.
      layer.attention.prefill(
          ctx, in, *caches[0], l, sub_view,
          PrefillOptions{
              .kernel = options.kernel, .scale = c.scale, .lse = lse, .observe = observe});
    } else {
      // After a cached prefix: the decode kernel, up to kMaxDecodeTokens at a time.
      for (i64 i = 0; i < n; i += kMaxDecodeTokens) {
        const i64 t = std::min(kMaxDecodeTokens, n - i);
        layer.attention.decode_step(
            ctx, TensorView::contiguous(in.ptr<float>() + i * d, DType::f32, {1, t, d}), *caches[0],
            l, TensorView::contiguous(sub + i * d, DType::f32, {1, t, d}), {.scale = c.scale});
      }
    }
    head_offset += heads;
    if (m.partial_sum) m.partial_sum(sub, rows * d);
    if (c.attention_only) {
      if (pre)
        pending = sub;
      else
        m.add_norm(ctx, layer.norm1, x, sub, rows);
      continue;
    }
    if (pre)
      m.add_norm_into(ctx, layer.norm2, x, sub, rows, h);
    else
      m.add_norm(ctx, layer.norm1, x, sub, rows);
    const float* ffn_in = pre ? h : x;
    if (c.activation == model::Activation::swiglu)
      layer.swiglu.forward(ctx, ffn_in, rows, ffn, sub);
    else
      layer.gelu.forward(ctx, ffn_in, rows, ffn, sub);
    if (m.partial_sum) m.partial_sum(sub, rows * d);
    if (pre)
      pending = sub;
    else
      m.add_norm(ctx, layer.norm2, x, sub, rows);
  }

  // 3. Pre-norm: the last sub-layer's output added, then the final norm (in place) when the
  // range ends at the last layer.
  if (pre && end_layer == c.layer_count())
    m.add_norm(ctx, m.final_norm, x, pending, rows);
  else if (pending != nullptr)
    for (i64 i = 0; i < rows * d; ++i) x[i] += pending[i];
}

namespace {

// HEADCOUNT_CHECK here and in decode(): they run every decoded token, and the messages are
// built only on failure.
void check_ids(std::span<const std::int32_t> ids, i64 vocab) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    HEADCOUNT_CHECK(ids[i] >= 0 && ids[i] < vocab, concat("token id ", "(ids[", i, "])"),
                    concat("in [0, ", vocab, ")"), ids[i]);
}

}  // namespace

void Transformer::forward(Context& ctx, std::span<const std::int32_t> ids, i64 B, i64 n,
                          const TensorView& hidden,
                          const TransformerForwardOptions& options) const {
  const model::Config& c = impl_->config;
  const i64 d = c.d_model;
  check(B >= 1 && n >= 1, "batch", "at least one sequence of at least one token",
        concat(B, " x ", n));
  check(n <= c.context || c.positions == model::Positions::rotary, "batch seq_len",
        concat("at most the model's ", c.context, " positions"), n);
  check(static_cast<i64>(ids.size()) == B * n, "ids", concat(B * n, " ids (", B, " x ", n, ")"),
        ids.size());
  check(options.key_lengths.empty() || static_cast<i64>(options.key_lengths.size()) == B,
        "key_lengths", concat(B, " lengths (one per sequence) or none"),
        options.key_lengths.size());
  for (i64 len : options.key_lengths)
    check(len >= 1 && len <= n, "batch lengths", concat("in [1, ", n, "]"), len);
  check_ids(ids, c.vocab);
  check(!hidden.empty() && hidden.dtype == DType::f32 && hidden.rank == 3 &&
            hidden.is_contiguous() && hidden.shape[0] == B && hidden.shape[1] == n &&
            hidden.shape[2] == d,
        "hidden", concat("a contiguous f32 tensor [", B, ", ", n, ", ", d, "]"),
        hidden.shape_string());
  i64 total_heads = 0;
  for (i64 l = 0; l < c.layer_count(); ++l) total_heads += c.heads_in(l);
  check(options.head_mask.empty() || static_cast<i64>(options.head_mask.size()) == total_heads,
        "head_mask", concat(total_heads, " factors (one per head of every layer) or none"),
        options.head_mask.size());
  for (i64 l = 0, offset = 0; l < c.layer_count() && !options.head_mask.empty(); ++l)
    for (i64 h = 0; h < c.heads_in(l); ++h, ++offset)
      if (const float f = options.head_mask[static_cast<std::size_t>(offset)]; !std::isfinite(f))
        fail(concat("head_mask[", offset, "] (layer ", l, ", head ", h, ")"),
             concat("expected a finite factor, got ", f));
  check(options.first_layer >= 0 && options.first_layer <= c.layer_count(), "first_layer",
        concat("in [0, ", c.layer_count(), "]"), options.first_layer);
  const i64 end_layer = options.end_layer < 0 ? c.layer_count() : options.end_layer;
  check(end_layer >= options.first_layer && end_layer <= c.layer_count(), "end_layer",
        concat("-1 or in [first_layer = ", options.first_layer, ", ", c.layer_count(), "]"),
        options.end_layer);
  run(ctx, ids, B, n, hidden.ptr<float>(), {}, options);
}

void Transformer::forward(Context& ctx, const TokenBatch& batch, const TensorView& hidden,
                          const TransformerForwardOptions& options) const {
  check(static_cast<i64>(batch.lengths.size()) == batch.batch, "batch",
        concat(batch.batch, " lengths (one per sequence)"), batch.lengths.size());
  check(options.key_lengths.empty(), "key_lengths", "none beside a TokenBatch (its lengths serve)",
        options.key_lengths.size());
  TransformerForwardOptions padded = options;
  padded.key_lengths = batch.lengths;
  forward(ctx, batch.ids, batch.batch, batch.seq_len, hidden, padded);
}

Tensor Transformer::forward(Context& ctx, std::span<const std::int32_t> ids, KvCache& cache,
                            Logits which, const TransformerForwardOptions& options) const {
  return forward_cached(ctx, ids, cache, which, options, /*continue_prefill=*/false);
}

Tensor Transformer::prefill(Context& ctx, std::span<const std::int32_t> ids, KvCache& cache,
                            Logits which) const {
  return forward_cached(ctx, ids, cache, which, {}, /*continue_prefill=*/true);
}

Tensor Transformer::forward_cached(Context& ctx, std::span<const std::int32_t> ids, KvCache& cache,
                                   Logits which, const TransformerForwardOptions& options,
                                   bool continue_prefill) const {
  const model::Config& c = impl_->config;
  const i64 n = static_cast<i64>(ids.size()), d = c.d_model;
  check(n >= 1, "ids", "at least one token", "none");
  check(c.output != model::Output::hidden, "model output", "an LM head (a decoder)",
        "hidden states only");
  check_ids(ids, c.vocab);
  check_cache(cache, n);
  const i64 start = cache.length(0, 0);
  // HEADCOUNT_CHECK: the message is built only on failure (forward runs once per decoded token).
  HEADCOUNT_CHECK(!options.observe_attention || start == 0, "observe_attention",
                  "an empty cache (the hook sees the prompt's prefill only)",
                  concat("a cache holding ", start, " tokens"));
  HEADCOUNT_CHECK(options.head_mask.empty() && options.key_lengths.empty() &&
                      options.first_layer == 0 && options.end_layer < 0,
                  "forward options", "no head_mask, key_lengths or layer range with a KV cache",
                  "some");
  float* x = static_cast<float*>(
      ctx.workspace(kSlotResidual, static_cast<std::size_t>(n * d) * sizeof(float)));
  KvCache* one[] = {&cache};
  run(ctx, ids, 1, n, x, one, options, continue_prefill);
  const i64 rows = which == Logits::all ? n : 1;
  Tensor out(DType::f32, {rows, c.vocab});
  logits(ctx, x + (n - rows) * d, rows, out.data<float>());
  return out;
}

void Transformer::check_cache(const KvCache& cache, i64 tokens) const {
  const model::Config& c = impl_->config;
  const KvCacheConfig& k = cache.config();
  bool same_kv_heads = k.layers == c.layer_count();
  for (i64 l = 0; same_kv_heads && l < c.layer_count(); ++l)
    same_kv_heads = k.kv_heads_in(l) == c.kv_heads_in(l);
  HEADCOUNT_CHECK(
      k.layers == c.layer_count() && k.batch == 1 && same_kv_heads && k.head_dim == c.head_dim,
      "kv cache",
      concat(c.layer_count(), " layers, batch 1, ", c.kv_heads_in(0), " kv heads",
             c.uniform() ? "" : " in layer 0 (the model's count in each layer)", " of ", c.head_dim,
             " (make_cache)"),
      concat(k.layers, " layers, batch ", k.batch, ", ", k.kv_heads, " kv heads of ", k.head_dim));
  const i64 start = cache.length(0, 0);
  HEADCOUNT_CHECK(start + tokens <= cache.capacity(), "kv cache capacity",
                  concat("room for ", tokens, " more tokens after the ", start, " cached"),
                  cache.capacity());
}

Tensor Transformer::decode(Context& ctx, std::span<const std::int32_t> ids,
                           std::span<KvCache* const> caches) const {
  const model::Config& c = impl_->config;
  const i64 B = static_cast<i64>(ids.size()), d = c.d_model;
  HEADCOUNT_CHECK(B >= 1, "ids", "one token per sequence", "none");
  HEADCOUNT_CHECK(static_cast<i64>(caches.size()) == B, "caches", concat(B, " (one per id)"),
                  caches.size());
  HEADCOUNT_CHECK(c.output != model::Output::hidden, "model output", "an LM head (a decoder)",
                  "hidden states only");
  check_ids(ids, c.vocab);
  for (std::size_t b = 0; b < caches.size(); ++b) {
    HEADCOUNT_CHECK(caches[b] != nullptr, concat("caches[", b, "]"), "a cache", "null");
    for (std::size_t other = 0; other < b; ++other)
      HEADCOUNT_CHECK(caches[other] != caches[b], concat("caches[", b, "]"), "a cache of its own",
                      concat("the cache of sequence ", other));
    check_cache(*caches[b], 1);
    HEADCOUNT_CHECK(caches[b]->length(0, 0) >= 1, concat("caches[", b, "]"),
                    "a sequence's cache holding its prompt (forward() prefills it)",
                    "an empty cache");
  }
  float* x = static_cast<float*>(
      ctx.workspace(kSlotResidual, static_cast<std::size_t>(B * d) * sizeof(float)));
  run(ctx, ids, B, 1, x, caches, {});
  Tensor out(DType::f32, {B, c.vocab});
  logits(ctx, x, B, out.data<float>());
  return out;
}

void Transformer::logits(Context& ctx, const float* hidden, i64 rows, float* out) const {
  const Impl& m = *impl_;
  const model::Config& c = m.config;
  check(c.output != model::Output::hidden, "model output", "an LM head", "hidden states only");
  layers::packed_gemm(ctx, {.m = rows,
                            .x = hidden,
                            .ldx = c.d_model,
                            .w = m.head_blocks ? nullptr : &m.head,
                            .blocks = m.head_blocks.get(),
                            .n = c.vocab,
                            .bias = m.head_bias.empty() ? nullptr : m.head_bias.data<const float>(),
                            .y = out,
                            .ldy = c.vocab});
}

}  // namespace headcount
