// decoder_kv_sweep (sweeps.h): what fewer (or more) K/V heads cost a Llama-family decoder.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "compress/sweeps.h"
#include "headcount/error.h"

namespace headcount::compress {

using detail::concat;
using nlohmann::json;

namespace {

// Every layer's K and V for one token in `dtype` (decode.h's cache_token_bytes per layer).
std::int64_t cache_bytes_per_token(const model::Config& c, CacheDType dtype) {
  std::int64_t bytes = 0;
  for (std::int64_t l = 0; l < c.layer_count(); ++l)
    bytes += cache_token_bytes(dtype, c.kv_heads_in(l), c.head_dim, c.head_dim);
  return bytes;
}

Tensor first_logits(Context& ctx, const LlamaDecoder& decoder, std::span<const std::int32_t> ids) {
  KvCache cache = decoder.make_cache(static_cast<std::int64_t>(ids.size()));
  return decoder.executor().forward(ctx, ids, cache, Logits::all);
}

}  // namespace

json decoder_kv_sweep(Context& ctx, const model::Weights& weights, const BpeTokenizer& tokenizer,
                      std::span<const std::int32_t> ids, const DecoderKvSweepOptions& o) {
  const model::Config& c = weights.config;
  HEADCOUNT_CHECK(c.family == model::Family::llama, "model", "a Llama-family decoder",
                  model::family_name(c.family));
  HEADCOUNT_CHECK(c.uniform(), "model", "the same heads in every layer", "per-layer shapes");
  const std::int64_t heads = c.heads_in(0), own = c.kv_heads_in(0);
  HEADCOUNT_CHECK(o.logit_tokens >= 1 && o.logit_tokens <= o.context, "logit tokens",
                  concat("in [1, context = ", o.context, "]"), o.logit_tokens);
  HEADCOUNT_CHECK(static_cast<std::int64_t>(ids.size()) >= o.context, "text",
                  concat("at least one window of ", o.context, " tokens"),
                  concat(ids.size(), " tokens"));
  std::vector<std::int64_t> counts = o.kv_heads;
  if (counts.empty())
    for (std::int64_t g = heads; g >= 1; --g)
      if (heads % g == 0) counts.push_back(g);
  for (std::int64_t g : counts)  // every value checked before the first evaluation
    HEADCOUNT_CHECK(g == heads || (g >= 1 && g <= own && own % g == 0), "kv heads",
                    concat(heads, " (one per query head) or a divisor of ", own), g);

  HEADCOUNT_CHECK(!o.methods.empty(), "methods", "at least one of mean, aligned", "none");
  for (KvConvertMethod m : o.methods)
    HEADCOUNT_CHECK(m != KvConvertMethod::clustered, "methods",
                    "mean or aligned for a grouped decoder (clustered regroups query heads)",
                    kv_convert_method_name(m));
  struct Variant {
    std::int64_t kv_heads;
    const char* method;
  };
  std::vector<Variant> variants;
  for (std::int64_t g : counts)
    if (g == own || g == heads)
      variants.push_back({g, g == own ? "as loaded" : "repeated"});
    else
      for (KvConvertMethod m : o.methods) variants.push_back({g, kv_convert_method_name(m)});

  const std::span<const std::int32_t> head = ids.first(static_cast<std::size_t>(o.logit_tokens));
  const LlamaDecoder loaded(weights, BpeTokenizer(tokenizer.vocabulary()), {.weights = o.weights});
  const Tensor reference = first_logits(ctx, loaded, head);
  if (o.uptrain.steps > 0) {  // checked before the first evaluation
    HEADCOUNT_CHECK(o.uptrain.seq_len >= 2 && o.uptrain.seq_len <= c.context, "uptrain seq_len",
                    concat("in [2, the model's context = ", c.context, "]"), o.uptrain.seq_len);
    HEADCOUNT_CHECK(static_cast<std::int64_t>(o.uptrain_ids.size()) >= o.uptrain.seq_len + 1,
                    "uptrain text", concat("at least ", o.uptrain.seq_len + 1, " tokens"),
                    concat(o.uptrain_ids.size(), " tokens"));
  }
  // The teacher is the loaded model in fp32, whatever o.weights: the decoder already built when
  // that is fp32, a second packing only otherwise.
  std::optional<LlamaDecoder> fp32_teacher;
  if (o.uptrain.steps > 0 && o.weights != DType::f32)
    fp32_teacher.emplace(weights, BpeTokenizer(tokenizer.vocabulary()));
  const LlamaDecoder& teacher = fp32_teacher ? *fp32_teacher : loaded;
  json rows = json::array();
  for (const auto& [g, method] : variants) {
    const auto start = std::chrono::steady_clock::now();
    const model::Weights variant =
        g == own     ? weights.clone()
        : g == heads ? model::repeat_kv_heads(weights)
                     : model::convert_kv_heads(weights, g, parse_kv_convert_method(method));
    const LlamaDecoder decoder(variant, BpeTokenizer(tokenizer.vocabulary()),
                               {.weights = o.weights});
    const Tensor logits = first_logits(ctx, decoder, head);
    double max_diff = 0;
    for (std::int64_t i = 0; i < logits.numel(); ++i)
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(logits.data<const float>()[i]) -
                                              reference.data<const float>()[i]));
    const PerplexityResult p = decoder.perplexity(ctx, ids, o.context);
    rows.push_back(
        {{"kv_heads", g},
         {"method", method},
         {"perplexity", p.perplexity},
         {"nll", p.nll},
         {"scored_tokens", p.scored},
         {"windows", p.windows},
         {"max_abs_logit_diff_vs_loaded", max_diff},
         {"logit_tokens", o.logit_tokens},
         {"kv_cache_bytes_per_token",
          {{"f32", cache_bytes_per_token(variant.config, CacheDType::f32)},
           {"bf16", cache_bytes_per_token(variant.config, CacheDType::bf16)},
           {"int8", cache_bytes_per_token(variant.config, CacheDType::int8)}}},
         {"seconds",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}});
    const bool pooled = g != own && g != heads;
    if (o.uptrain.steps > 0 && (pooled || (g == own && o.uptrain.loss == UptrainLoss::text))) {
      const DecoderUptrainResult u =
          uptrain_decoder(ctx, teacher, variant, o.uptrain_ids, o.uptrain);
      const LlamaDecoder trained(u.student, BpeTokenizer(tokenizer.vocabulary()),
                                 {.weights = o.weights});
      const PerplexityResult after = trained.perplexity(ctx, ids, o.context);
      rows.back()["uptrained"] = {{"loss", uptrain_loss_name(o.uptrain.loss)},
                                  {"steps", u.steps},
                                  {"tokens", u.tokens},
                                  {"windows", u.windows},
                                  {"seq_len", o.uptrain.seq_len},
                                  {"lr", o.uptrain.optim.lr},
                                  {"first_loss", u.first_loss},
                                  {"last_loss", u.last_loss},
                                  {"perplexity", after.perplexity},
                                  {"nll", after.nll},
                                  {"scored_tokens", after.scored},
                                  {"seconds", u.seconds}};
    }
    if (o.row) o.row(rows.back());
  }
  return rows;
}

}  // namespace headcount::compress
