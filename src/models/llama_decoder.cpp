// LlamaDecoder: the definition read from a GGUF file by role, the layers built on it, the
// forward pass in numbered steps, generation and perplexity (decoder.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "headcount/decoder.h"
#include "headcount/error.h"
#include "headcount/gguf.h"
#include "headcount/multi_head_attention.h"
#include "layers/block_weights.h"
#include "layers/feed_forward.h"
#include "layers/packed_gemm.h"
#include "layers/rms_norm.h"

#ifndef HEADCOUNT_DEFAULT_DECODER_MODEL
#define HEADCOUNT_DEFAULT_DECODER_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

namespace headcount {

std::string default_decoder_model() { return HEADCOUNT_DEFAULT_DECODER_MODEL; }

using detail::concat;
using i64 = std::int64_t;

namespace {

// Context workspace slots of the decoder (the attention layer uses the low ones, the encoder
// 32..36).
enum DecoderSlot : int { kSlotResidual = 40, kSlotNormed, kSlotSublayer, kSlotFfn, kSlotLse };

// [out, in] (PyTorch) -> [in, out] (x · W).
Tensor transposed(const Tensor& t) {
  const i64 rows = t.size(0), cols = t.size(1);
  Tensor out(DType::f32, {cols, rows});
  const float* src = t.data<const float>();
  float* dst = out.data<float>();
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  return out;
}

// A per-layer count: a number, or an array of one per layer.
std::vector<i64> per_layer(const GgufFile& file, const std::string& key, i64 layers) {
  const GgufValue* v = file.find(key);
  check(v != nullptr, concat(file.path(), ": ", key), "a count (or one per layer)", "none");
  std::vector<i64> out;
  if (v->type == GgufValueType::array) {
    out = file.get_int_array(key);
    check(static_cast<i64>(out.size()) == layers, concat(file.path(), ": ", key),
          concat(layers, " entries (llama.block_count)"), out.size());
  } else {
    out.assign(static_cast<std::size_t>(layers), static_cast<i64>(file.get_uint(key)));
  }
  return out;
}

i64 checked_uint(const GgufFile& file, const std::string& key) {
  const std::uint64_t v = file.get_uint(key);
  check(v >= 1 && v <= (std::uint64_t{1} << 30), concat(file.path(), ": ", key),
        "a positive count up to 2^30", v);
  return static_cast<i64>(v);
}

struct DecoderLayer {
  MultiHeadAttention attention;
  Tensor norm1, norm2;  // [d_model]
  layers::GatedFeedForward ffn;
};

}  // namespace

void unpermute_rotary_rows(float* w, i64 heads, i64 head_dim, i64 cols) {
  const i64 half = head_dim / 2;
  std::vector<float> head(static_cast<std::size_t>(head_dim * cols));
  for (i64 h = 0; h < heads; ++h) {
    float* rows = w + h * head_dim * cols;
    std::copy_n(rows, head_dim * cols, head.data());
    for (i64 i = 0; i < half; ++i)
      for (i64 part = 0; part < 2; ++part)
        std::copy_n(head.data() + (2 * i + part) * cols, cols, rows + (part * half + i) * cols);
  }
}

model::Config llama_config(const GgufFile& file) {
  const std::string& path = file.path();
  const std::string arch = file.get_string("general.architecture");
  check(arch == "llama", concat(path, ": general.architecture"), "llama", arch);
  const i64 layers = checked_uint(file, "llama.block_count");
  model::Config c{
      .family = model::Family::llama,
      .d_model = checked_uint(file, "llama.embedding_length"),
      .d_ff = checked_uint(file, "llama.feed_forward_length"),
      .context = checked_uint(file, "llama.context_length"),
      .norm = model::NormKind::rms_norm,
      .placement = model::NormPlacement::pre,
      .norm_eps = static_cast<float>(file.get_float("llama.attention.layer_norm_rms_epsilon")),
      .activation = model::Activation::swiglu,
      .positions = model::Positions::rotary,
      .attention_bias = false,
      .ffn_bias = false,
      .causal = true,
      .output_bias = false};
  const std::vector<i64> heads = per_layer(file, "llama.attention.head_count", layers);
  const std::vector<i64> kv_heads = file.find("llama.attention.head_count_kv") != nullptr
                                        ? per_layer(file, "llama.attention.head_count_kv", layers)
                                        : heads;
  for (i64 l = 0; l < layers; ++l)
    c.layers.push_back({.heads = heads[static_cast<std::size_t>(l)],
                        .kv_heads = kv_heads[static_cast<std::size_t>(l)]});
  check(heads[0] >= 1 && c.d_model % heads[0] == 0, concat(path, ": llama.attention.head_count"),
        concat("a divisor of llama.embedding_length = ", c.d_model), heads[0]);
  c.head_dim = file.find("llama.attention.key_length") != nullptr
                   ? checked_uint(file, "llama.attention.key_length")
                   : c.d_model / heads[0];
  if (file.find("llama.attention.value_length") != nullptr)
    check(checked_uint(file, "llama.attention.value_length") == c.head_dim,
          concat(path, ": llama.attention.value_length"),
          concat("the key length ", c.head_dim, " (one head_dim)"),
          file.get_uint("llama.attention.value_length"));
  if (file.find("llama.rope.dimension_count") != nullptr)
    check(file.get_uint("llama.rope.dimension_count") == static_cast<std::uint64_t>(c.head_dim),
          concat(path, ": llama.rope.dimension_count"),
          concat("the head dim ", c.head_dim, " (partial rotary is not supported)"),
          file.get_uint("llama.rope.dimension_count"));
  if (const GgufValue* s = file.find("llama.rope.scaling.type"))
    check(s->type == GgufValueType::string && s->text == "none",
          concat(path, ": llama.rope.scaling.type"), "none (rope scaling is not supported)",
          s->type == GgufValueType::string ? s->text : std::string("a non-string"));
  c.rope_base = file.find("llama.rope.freq_base") != nullptr
                    ? static_cast<float>(file.get_float("llama.rope.freq_base"))
                    : 10000.0f;
  const GgufTensorInfo* embedding = file.find_tensor("token_embd.weight");
  check(embedding != nullptr && embedding->ne.size() == 2, concat(path, ": token_embd.weight"),
        "a 2-D tensor",
        embedding == nullptr ? std::string("none") : shape_string(embedding->shape()));
  c.vocab = embedding->shape()[0];
  c.output =
      file.find_tensor("output.weight") != nullptr ? model::Output::lm_head : model::Output::tied;
  model::validate(c, path);
  return c;
}

namespace {

void check_tensor_types(const GgufFile& file, const model::Config& config) {
  // Every tensor the model reads, before any is read: a file quantized to K-quants (or any
  // other ggml type) is refused at once with one line, not after dequantizing the tensors
  // listed before its first such tensor.
  const GgufTensorInfo* first = nullptr;
  std::vector<std::string> types;  // the unsupported ones met, in order met
  i64 unsupported = 0, read = 0;
  for (const model::WeightSpec& spec : model::weight_table(config)) {
    const GgufTensorInfo* t = file.find_tensor(spec.gguf_name);
    if (t == nullptr) continue;  // load_f32 names a missing tensor with its expected shape
    ++read;
    if (ggml_type_traits(t->type).dequantizable) continue;
    ++unsupported;
    if (first == nullptr) first = t;
    const std::string name = ggml_type_name(t->type);
    if (std::find(types.begin(), types.end(), name) == types.end()) types.push_back(name);
  }
  if (first == nullptr) return;
  std::string kinds;
  for (const std::string& t : types) kinds += (kinds.empty() ? "" : ", ") + t;
  fail(concat(file.path(), ": tensor '", first->name, "' type"),
       concat("expected F32, F16, Q8_0 or Q4_1 (headcount reads no other ggml type; K-quants are "
              "not supported), got ",
              ggml_type_name(first->type), " (", unsupported, " of the model's ", read,
              unsupported == 1 ? " tensors is " : " tensors are ", kinds, ")"));
}

}  // namespace

model::Weights llama_definition(const GgufFile& file) {
  model::Weights w{.config = llama_config(file)};
  const model::Config& c = w.config;
  check_tensor_types(file, c);
  for (const model::WeightSpec& spec : model::weight_table(c)) {
    Tensor t = file.load_f32(spec.gguf_name, spec.shape);
    if (spec.role == model::Role::q_weight || spec.role == model::Role::k_weight)
      unpermute_rotary_rows(t.data<float>(), t.size(0) / c.head_dim, c.head_dim, t.size(1));
    w.tensors.emplace(spec.name, std::move(t));
  }
  return w;
}

struct LlamaDecoder::Impl {
  model::Config config;
  BpeTokenizer tokenizer;
  Tensor embedding;   // [vocab, d_model]
  Tensor final_norm;  // [d_model]
  Tensor head;        // packed [d_model, vocab]: the LM head (the embedding when tied)
  std::vector<DecoderLayer> layers;
  DType dtype = DType::f32;  // of the packed weights
  // --weights quantized: the LM head as the file's blocks (then `head` is empty).
  std::shared_ptr<const layers::BlockWeights> head_blocks;
  bool quantized = false;

  // Replaces every projection, FFN matrix and the head by `file`'s own blocks.
  void use_file_blocks(const GgufFile& file);

  Impl(model::Config c, BpeTokenizer t) : config(std::move(c)), tokenizer(std::move(t)) {}
};

namespace {

// The blocks of the tensor `name` (its row order when given), Error naming the tensor and its
// type unless it is Q4_1 or Q8_0.
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

void LlamaDecoder::Impl::use_file_blocks(const GgufFile& file) {
  const model::Config& c = config;
  // The GGUF names of each role and layer, from the definition's own table.
  std::vector<std::vector<std::string>> names(c.layer_count());
  std::string head_name;
  for (const model::WeightSpec& spec : model::weight_table(c)) {
    if (spec.layer >= 0) {
      auto& row = names[static_cast<std::size_t>(spec.layer)];
      if (row.size() <= static_cast<std::size_t>(spec.role))
        row.resize(static_cast<std::size_t>(spec.role) + 1);
      row[static_cast<std::size_t>(spec.role)] = spec.gguf_name;
    } else if (spec.role == (c.output == model::Output::tied ? model::Role::token_embedding
                                                             : model::Role::lm_head_weight)) {
      head_name = spec.gguf_name;
    }
  }
  // llama.cpp's Q/K row order undone by choosing rows (unpermute_rotary_rows's map): packed
  // row (head, h · head_dim/2 + i) is the file's row (head, 2i + h).
  auto rotary_order = [&](i64 heads) {
    std::vector<i64> order(static_cast<std::size_t>(heads * c.head_dim));
    const i64 half = c.head_dim / 2;
    for (i64 head = 0; head < heads; ++head)
      for (i64 h = 0; h < 2; ++h)
        for (i64 i = 0; i < half; ++i)
          order[static_cast<std::size_t>(head * c.head_dim + h * half + i)] =
              head * c.head_dim + 2 * i + h;
    return order;
  };
  for (i64 l = 0; l < c.layer_count(); ++l) {
    const auto& n = names[static_cast<std::size_t>(l)];
    auto name = [&](model::Role role) { return n.at(static_cast<std::size_t>(role)); };
    const std::vector<i64> q_order = rotary_order(c.heads_in(l)),
                           k_order = rotary_order(c.kv_heads_in(l));
    DecoderLayer& layer = layers[static_cast<std::size_t>(l)];
    layer.attention.set_projection_blocks(
        pack_blocks({block_source(file, name(model::Role::q_weight), q_order),
                     block_source(file, name(model::Role::k_weight), k_order),
                     block_source(file, name(model::Role::v_weight))}),
        pack_blocks({block_source(file, name(model::Role::o_weight))}));
    layer.ffn = layers::GatedFeedForward::from_blocks(
        pack_blocks({block_source(file, name(model::Role::ffn_gate_weight)),
                     block_source(file, name(model::Role::ffn_up_weight))}),
        pack_blocks({block_source(file, name(model::Role::ffn_down_weight))}));
  }
  head_blocks = pack_blocks({block_source(file, head_name)});
  head = Tensor();
}

LlamaDecoder LlamaDecoder::load(const std::string& gguf_path, const DecoderOptions& options) {
  const GgufFile file = GgufFile::open(gguf_path);
  // The architecture, shapes and tensor types first: the clearest errors, before any work.
  check_tensor_types(file, llama_config(file));
  BpeTokenizer tokenizer = BpeTokenizer::from_gguf(file);
  check(!options.quantized || options.weights == DType::f32, "decoder weights",
        "f32 beside quantized (the file's blocks replace the packed weights)",
        dtype_name(options.weights));
  LlamaDecoder decoder(llama_definition(file), std::move(tokenizer), {.weights = options.weights});
  if (options.quantized) {
    decoder.impl_->use_file_blocks(file);
    decoder.impl_->quantized = true;
  }
  return decoder;
}

DecoderOptions parse_decoder_weights(const std::string& name, const std::string& option) {
  if (name == "fp32") return {.weights = DType::f32};
  if (name == "bf16") return {.weights = DType::bf16};
  if (name == "int8") return {.weights = DType::i8};
  if (name == "quantized") return {.weights = DType::f32, .quantized = true};
  fail(option, concat("expected fp32, bf16, int8 or quantized, got ", name));
}

LlamaDecoder::LlamaDecoder(const model::Weights& weights, BpeTokenizer tokenizer,
                           const DecoderOptions& options) {
  const model::Config& c = weights.config;
  const DType dtype = options.weights;
  check(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::i8, "decoder weights dtype",
        "f32, bf16 or i8", dtype_name(dtype));
  if (dtype == DType::i8) {
    // The int8 kernel takes 4 input features at a time (vpdpbusd).
    check(c.d_model % 4 == 0 && c.d_ff % 4 == 0, "decoder weights dtype i8",
          "d_model and d_ff multiples of 4", concat(c.d_model, " and ", c.d_ff));
    for (i64 l = 0; l < c.layer_count(); ++l)
      check(c.heads_in(l) * c.head_dim % 4 == 0, "decoder weights dtype i8",
            concat("layer ", l, "'s heads x head_dim a multiple of 4 (W_O's input width)"),
            c.heads_in(l) * c.head_dim);
  }
  check(c.family == model::Family::llama, "decoder weights family", "llama",
        model::family_name(c.family));
  model::check_weights(weights, "decoder weights");
  check(tokenizer.vocab_size() == c.vocab, "decoder tokenizer",
        concat(c.vocab, " tokens (the config's vocab)"), tokenizer.vocab_size());
  check(!options.quantized, "decoder weights quantized",
        "the GGUF file's blocks: LlamaDecoder::load(path, {.quantized = true})",
        "a definition in memory (fp32)");
  impl_ = std::make_unique<Impl>(c, std::move(tokenizer));
  impl_->dtype = dtype;
  using model::Role;
  auto copy = [&](Role role, i64 layer = -1) {
    const Tensor& t = weights.at(role, layer);
    Tensor out(DType::f32, t.shape());
    std::memcpy(out.data<void>(), t.data<const void>(), t.bytes());
    return out;
  };
  // 1. Embeddings, final norm and the LM head packed once as [d_model, vocab].
  impl_->embedding = copy(Role::token_embedding);
  impl_->final_norm = copy(Role::final_norm_weight);
  {
    const Tensor head_t =
        transposed(c.output == model::Output::tied ? weights.at(Role::token_embedding)
                                                   : weights.at(Role::lm_head_weight));
    impl_->head =
        layers::pack_weights(head_t.data<const float>(), c.d_model, c.vocab, c.vocab, dtype);
  }
  // 2. Layers: projections transposed to [in, out] and packed by the layers.
  for (i64 l = 0; l < c.layer_count(); ++l) {
    MultiHeadAttentionWeights w{.w_q = transposed(weights.at(Role::q_weight, l)),
                                .w_k = transposed(weights.at(Role::k_weight, l)),
                                .w_v = transposed(weights.at(Role::v_weight, l)),
                                .w_o = transposed(weights.at(Role::o_weight, l))};
    MultiHeadAttention attention({.d_model = c.d_model,
                                  .heads = c.heads_in(l),
                                  .kv_heads = c.kv_heads_in(l),
                                  .head_dim = c.head_dim,
                                  .bias = false,
                                  .rope_base = c.rope_base},
                                 std::move(w));
    if (dtype != DType::f32) attention.set_projection_dtype(dtype);
    impl_->layers.push_back(DecoderLayer{
        .attention = std::move(attention),
        .norm1 = copy(Role::norm1_weight, l),
        .norm2 = copy(Role::norm2_weight, l),
        .ffn = layers::GatedFeedForward::make(transposed(weights.at(Role::ffn_gate_weight, l)),
                                              transposed(weights.at(Role::ffn_up_weight, l)),
                                              transposed(weights.at(Role::ffn_down_weight, l)),
                                              dtype)});
  }
}

LlamaDecoder::~LlamaDecoder() = default;
LlamaDecoder::LlamaDecoder(LlamaDecoder&&) noexcept = default;
LlamaDecoder& LlamaDecoder::operator=(LlamaDecoder&&) noexcept = default;

const model::Config& LlamaDecoder::config() const { return impl_->config; }
const BpeTokenizer& LlamaDecoder::tokenizer() const { return impl_->tokenizer; }
DType LlamaDecoder::weights_dtype() const { return impl_->dtype; }
bool LlamaDecoder::quantized() const { return impl_->quantized; }
std::string LlamaDecoder::weights_name() const {
  if (impl_->quantized) return "quantized";
  return impl_->dtype == DType::bf16 ? "bf16" : impl_->dtype == DType::i8 ? "int8" : "fp32";
}

KvCache LlamaDecoder::make_cache(i64 capacity, CacheDType dtype) const {
  const model::Config& c = impl_->config;
  check(capacity >= 1 && capacity <= c.context, "kv cache capacity",
        concat("1 to the model's context ", c.context), capacity);
  KvCacheConfig config{.layers = c.layer_count(),
                       .batch = 1,
                       .kv_heads = c.kv_heads_in(0),
                       .head_dim = c.head_dim,
                       .capacity = capacity,
                       .dtype = dtype};
  // A model pruned by whole K/V groups: each layer's part of the cache has its own count.
  for (i64 l = 0; l < c.layer_count(); ++l)
    if (c.kv_heads_in(l) != c.kv_heads_in(0)) {
      for (i64 m = 0; m < c.layer_count(); ++m) config.layer_kv_heads.push_back(c.kv_heads_in(m));
      break;
    }
  return KvCache(config);
}

Tensor LlamaDecoder::forward(Context& ctx, std::span<const std::int32_t> ids, KvCache& cache,
                             Logits which, const DecoderForwardOptions& options) const {
  const model::Config& c = impl_->config;
  const i64 n = static_cast<i64>(ids.size()), d = c.d_model;
  check(n >= 1, "ids", "at least one token", "none");
  for (std::size_t i = 0; i < ids.size(); ++i)
    check(ids[i] >= 0 && ids[i] < c.vocab, concat("ids[", i, "]"), concat("in [0, ", c.vocab, ")"),
          ids[i]);
  const KvCacheConfig& k = cache.config();
  bool same_kv_heads = k.layers == c.layer_count();
  for (i64 l = 0; same_kv_heads && l < c.layer_count(); ++l)
    same_kv_heads = k.kv_heads_in(l) == c.kv_heads_in(l);
  check(
      k.layers == c.layer_count() && k.batch == 1 && same_kv_heads && k.head_dim == c.head_dim,
      "kv cache",
      concat(c.layer_count(), " layers, batch 1, ", c.kv_heads_in(0), " kv heads",
             c.uniform() ? "" : " in layer 0 (the model's count in each layer)", " of ", c.head_dim,
             " (LlamaDecoder::make_cache)"),
      concat(k.layers, " layers, batch ", k.batch, ", ", k.kv_heads, " kv heads of ", k.head_dim));
  const i64 start = cache.length(0, 0);
  check(start + n <= cache.capacity(), "kv cache capacity",
        concat("room for ", n, " more tokens after the ", start, " cached"), cache.capacity());
  // HEADCOUNT_CHECK: the message is built only on failure (forward runs once per decoded token).
  HEADCOUNT_CHECK(!options.observe_attention || start == 0, "observe_attention",
                  "an empty cache (the hook sees the prompt's prefill only)",
                  concat("a cache holding ", start, " tokens"));

  auto buffer = [&](int slot, i64 floats) {
    return static_cast<float*>(
        ctx.workspace(slot, static_cast<std::size_t>(floats) * sizeof(float)));
  };
  float* x = buffer(kSlotResidual, n * d);        // the residual stream
  float* h = buffer(kSlotNormed, n * d);          // the norm's output, a sub-layer's input
  float* sub = buffer(kSlotSublayer, n * d);      // a sub-layer's output
  float* ffn = buffer(kSlotFfn, n * 3 * c.d_ff);  // the FFN's hidden values

  // 1. Embeddings.
  for (i64 i = 0; i < n; ++i)
    std::copy_n(impl_->embedding.data<const float>() + static_cast<i64>(ids[i]) * d, d, x + i * d);

  // 2. Layers, pre-norm: x += Attn(RMSNorm1(x)); x += FFN(RMSNorm2(x)). Each residual add is
  // fused into the norm that follows it.
  const float eps = c.norm_eps;
  const float* pending = nullptr;  // the sub-layer output not yet added to x
  for (i64 l = 0; l < c.layer_count(); ++l) {
    const DecoderLayer& layer = impl_->layers[static_cast<std::size_t>(l)];
    layers::add_rms_norm(ctx, x, pending, n, d, layer.norm1.data<const float>(), eps, h);
    if (start == 0) {
      // The prompt: its K/V into the cache, causal streaming attention over it.
      PrefillOptions prefill;
      if (options.observe_attention) {
        const i64 heads = c.heads_in(l);
        prefill.lse =
            TensorView::contiguous(buffer(kSlotLse, heads * n), DType::f32, {1, heads, n});
        prefill.observe = [&options, l](const AttentionParams& params) {
          options.observe_attention(l, params);
        };
      }
      layer.attention.prefill(ctx, TensorView::contiguous(h, DType::f32, {1, n, d}), cache, l,
                              TensorView::contiguous(sub, DType::f32, {1, n, d}), prefill);
    } else {
      // After a cached prefix: the decode kernel, up to kMaxDecodeTokens at a time.
      for (i64 i = 0; i < n; i += kMaxDecodeTokens) {
        const i64 t = std::min(kMaxDecodeTokens, n - i);
        layer.attention.decode_step(ctx, TensorView::contiguous(h + i * d, DType::f32, {1, t, d}),
                                    cache, l,
                                    TensorView::contiguous(sub + i * d, DType::f32, {1, t, d}));
      }
    }
    layers::add_rms_norm(ctx, x, sub, n, d, layer.norm2.data<const float>(), eps, h);
    layer.ffn.forward(ctx, h, n, ffn, sub);
    pending = sub;
  }

  // 3. Final norm, then the LM head on the rows asked for.
  layers::add_rms_norm(ctx, x, pending, n, d, impl_->final_norm.data<const float>(), eps, h);
  const i64 rows = which == Logits::all ? n : 1;
  Tensor logits(DType::f32, {rows, c.vocab});
  layers::packed_gemm(ctx, {.m = rows,
                            .x = h + (n - rows) * d,
                            .ldx = d,
                            .w = impl_->head_blocks ? nullptr : &impl_->head,
                            .blocks = impl_->head_blocks.get(),
                            .n = c.vocab,
                            .y = logits.data<float>(),
                            .ldy = c.vocab});
  return logits;
}

std::int32_t sample_token(std::span<const float> logits, float temperature, float top_p,
                          double uniform) {
  check(!logits.empty(), "logits", "at least one value", "none");
  check(std::isfinite(temperature) && temperature >= 0, "temperature", "a finite number >= 0",
        temperature);
  check(top_p > 0 && top_p <= 1, "top_p", "in (0, 1]", top_p);
  const auto argmax = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) -
                                                logits.begin());  // the first maximum
  if (temperature == 0) return argmax;
  const double max = logits[static_cast<std::size_t>(argmax)];
  std::vector<std::pair<double, std::int32_t>> p(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    p[i] = {std::exp((static_cast<double>(logits[i]) - max) / temperature),
            static_cast<std::int32_t>(i)};
    total += p[i].first;
  }
  std::sort(p.begin(), p.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  // The nucleus: the smallest prefix whose mass reaches top_p.
  std::size_t kept = 0;
  double mass = 0;
  while (kept < p.size() && (kept == 0 || mass < top_p * total)) mass += p[kept++].first;
  double target = uniform * mass;
  for (std::size_t i = 0; i < kept; ++i) {
    if (target < p[i].first) return p[i].second;
    target -= p[i].first;
  }
  return p[kept - 1].second;
}

GenerateResult LlamaDecoder::generate(Context& ctx, std::span<const std::int32_t> prompt,
                                      const GenerateOptions& options) const {
  const model::Config& c = impl_->config;
  const i64 n = static_cast<i64>(prompt.size());
  check(n >= 1 && n < c.context, "prompt", concat("1 to ", c.context - 1, " tokens"), n);
  check(options.max_tokens >= 1, "max_tokens", ">= 1", options.max_tokens);
  check(std::isfinite(options.temperature) && options.temperature >= 0, "temperature",
        "a finite number >= 0", options.temperature);
  check(options.top_p > 0 && options.top_p <= 1, "top_p", "in (0, 1]", options.top_p);
  const i64 max_tokens = std::min(options.max_tokens, c.context - n);
  // The prompt and every new token but the last (which is never fed back).
  KvCache cache = make_cache(n + max_tokens - 1, options.kv_dtype);
  std::mt19937_64 rng(options.seed);
  auto choose = [&](const Tensor& logits) {
    // 53 random bits -> [0, 1), the same on every standard library.
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    return sample_token({logits.data<const float>(), static_cast<std::size_t>(c.vocab)},
                        options.temperature, options.top_p, u);
  };
  using clock = std::chrono::steady_clock;
  GenerateResult result{.prompt_tokens = n, .cache_bytes = cache.bytes()};
  auto t0 = clock::now();
  std::int32_t token = choose(forward(ctx, prompt, cache));
  result.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  const std::int32_t eos = impl_->tokenizer.eos_id();
  t0 = clock::now();
  while (true) {
    result.tokens.push_back(token);
    if (options.on_token) options.on_token(token);
    if ((options.stop_at_eos && token == eos) ||
        static_cast<i64>(result.tokens.size()) >= max_tokens)
      break;
    token = choose(forward(ctx, std::span<const std::int32_t>(&token, 1), cache));
    ++result.decode_steps;
  }
  result.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return result;
}

PerplexityResult LlamaDecoder::perplexity(Context& ctx, std::span<const std::int32_t> ids,
                                          i64 context) const {
  const model::Config& c = impl_->config;
  check(context >= 4 && context <= c.context, "context", concat("4 to ", c.context), context);
  const i64 windows = static_cast<i64>(ids.size()) / context;
  check(windows >= 1, "text", concat("at least ", context, " tokens (one window)"), ids.size());
  const auto t0 = std::chrono::steady_clock::now();
  KvCache cache = make_cache(context);
  PerplexityResult r{.windows = windows};
  double nll = 0;
  const i64 first = context / 2;
  for (i64 w = 0; w < windows; ++w) {
    cache.reset();
    const std::span<const std::int32_t> window =
        ids.subspan(static_cast<std::size_t>(w * context), static_cast<std::size_t>(context));
    const Tensor logits = forward(ctx, window, cache, Logits::all);
    for (i64 i = first; i < context - 1; ++i) {
      const float* row = logits.data<const float>() + i * c.vocab;
      const double max = *std::max_element(row, row + c.vocab);
      double sum = 0;
      for (i64 v = 0; v < c.vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
      nll += max + std::log(sum) - row[window[static_cast<std::size_t>(i + 1)]];
      ++r.scored;
    }
  }
  r.nll = nll / static_cast<double>(r.scored);
  r.perplexity = std::exp(r.nll);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace headcount
