// LlamaDecoder: the definition read from a GGUF file by role, the one executor
// (headcount/transformer.h) built on it, generation and perplexity (decoder.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "headcount/decoder.h"
#include "headcount/error.h"
#include "headcount/gguf.h"

#ifndef HEADCOUNT_DEFAULT_DECODER_MODEL
#define HEADCOUNT_DEFAULT_DECODER_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#endif

namespace headcount {

std::string default_decoder_model() { return HEADCOUNT_DEFAULT_DECODER_MODEL; }

using detail::concat;
using i64 = std::int64_t;

namespace {

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
  BpeTokenizer tokenizer;
  Transformer executor;

  Impl(BpeTokenizer t, Transformer e) : tokenizer(std::move(t)), executor(std::move(e)) {}
};

LlamaDecoder LlamaDecoder::load(const std::string& gguf_path, const DecoderOptions& options) {
  const GgufFile file = GgufFile::open(gguf_path);
  // The architecture, shapes and tensor types first: the clearest errors, before any work.
  check_tensor_types(file, llama_config(file));
  BpeTokenizer tokenizer = BpeTokenizer::from_gguf(file);
  check(!options.quantized || options.weights == DType::f32, "decoder weights",
        "f32 beside quantized (the file's blocks replace the packed weights)",
        dtype_name(options.weights));
  if (options.quantized) {
    // The file's own blocks, with no fp32 copy of the projections built first.
    LlamaDecoder decoder;
    decoder.impl_ = std::make_unique<Impl>(std::move(tokenizer),
                                           Transformer::on_file_blocks(file, llama_config(file)));
    return decoder;
  }
  return LlamaDecoder(llama_definition(file), std::move(tokenizer), {.weights = options.weights});
}

std::string auto_decoder_weights(const std::string& gguf_path) {
  const GgufFile file = GgufFile::open(gguf_path);
  const model::Config c = llama_config(file);
  for (const model::WeightSpec& spec : model::weight_table(c)) {
    const bool multiplied = spec.layer >= 0 ? spec.shape.size() == 2
                                            : spec.role == (c.output == model::Output::tied
                                                                ? model::Role::token_embedding
                                                                : model::Role::lm_head_weight);
    if (!multiplied) continue;
    const GgufTensorInfo* t = file.find_tensor(spec.gguf_name);
    if (t == nullptr || (t->type != GgmlType::q4_1 && t->type != GgmlType::q8_0)) return "fp32";
  }
  return "quantized";
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
  check(c.family == model::Family::llama, "decoder weights family", "llama",
        model::family_name(c.family));
  model::check_weights(weights, "decoder weights");
  check(tokenizer.vocab_size() == c.vocab, "decoder tokenizer",
        concat(c.vocab, " tokens (the config's vocab)"), tokenizer.vocab_size());
  check(!options.quantized, "decoder weights quantized",
        "the GGUF file's blocks: LlamaDecoder::load(path, {.quantized = true})",
        "a definition in memory (fp32)");
  impl_ = std::make_unique<Impl>(std::move(tokenizer), Transformer(weights, options.weights));
}

LlamaDecoder::LlamaDecoder() = default;
LlamaDecoder::~LlamaDecoder() = default;
LlamaDecoder::LlamaDecoder(LlamaDecoder&&) noexcept = default;
LlamaDecoder& LlamaDecoder::operator=(LlamaDecoder&&) noexcept = default;

const model::Config& LlamaDecoder::config() const { return impl_->executor.config(); }
const BpeTokenizer& LlamaDecoder::tokenizer() const { return impl_->tokenizer; }
const Transformer& LlamaDecoder::executor() const { return impl_->executor; }
DType LlamaDecoder::weights_dtype() const { return impl_->executor.dtype(); }
bool LlamaDecoder::quantized() const { return impl_->executor.quantized(); }
std::string LlamaDecoder::weights_name() const {
  if (quantized()) return "quantized";
  const DType dtype = weights_dtype();
  return dtype == DType::bf16 ? "bf16" : dtype == DType::i8 ? "int8" : "fp32";
}

KvCache LlamaDecoder::make_cache(i64 capacity, CacheDType dtype) const {
  return impl_->executor.make_cache(capacity, dtype);
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
  return generate_tokens(ctx, impl_->executor, prompt, options, impl_->tokenizer.eos_id());
}

TokenChooser::TokenChooser(float temperature, float top_p, std::uint64_t seed)
    : temperature_(temperature), top_p_(top_p), rng_(seed) {
  check(std::isfinite(temperature) && temperature >= 0, "temperature", "a finite number >= 0",
        temperature);
  check(top_p > 0 && top_p <= 1, "top_p", "in (0, 1]", top_p);
}

std::int32_t TokenChooser::operator()(std::span<const float> logits) {
  // 53 random bits -> [0, 1), the same on every standard library.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  return sample_token(logits, temperature_, top_p_, u);
}

GenerateResult generate_tokens(Context& ctx, const Transformer& model,
                               std::span<const std::int32_t> prompt, const GenerateOptions& options,
                               std::int32_t eos) {
  const model::Config& c = model.config();
  const i64 n = static_cast<i64>(prompt.size());
  check(n >= 1 && n < c.context, "prompt", concat("1 to ", c.context - 1, " tokens"), n);
  check(options.max_tokens >= 1, "max_tokens", ">= 1", options.max_tokens);
  TokenChooser chooser(options.temperature, options.top_p, options.seed);
  const i64 max_tokens = std::min(options.max_tokens, c.context - n);
  // The prompt and every new token but the last (which is never fed back).
  KvCache cache = model.make_cache(n + max_tokens - 1, options.kv_dtype);
  auto choose = [&](const Tensor& logits) {
    return chooser({logits.data<const float>(), static_cast<std::size_t>(c.vocab)});
  };
  using clock = std::chrono::steady_clock;
  GenerateResult result{.prompt_tokens = n, .cache_bytes = cache.bytes()};
  auto t0 = clock::now();
  std::int32_t token = choose(model.forward(ctx, prompt, cache));
  result.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  t0 = clock::now();
  while (true) {
    result.tokens.push_back(token);
    if (options.on_token) options.on_token(token);
    if ((options.stop_at_eos && token == eos) ||
        static_cast<i64>(result.tokens.size()) >= max_tokens)
      break;
    token = choose(model.forward(ctx, std::span<const std::int32_t>(&token, 1), cache));
    ++result.decode_steps;
  }
  result.decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return result;
}

PerplexityResult LlamaDecoder::perplexity(Context& ctx, std::span<const std::int32_t> ids,
                                          i64 context) const {
  const model::Config& c = config();
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
    const Tensor logits = impl_->executor.forward(ctx, window, cache, Logits::all);
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
