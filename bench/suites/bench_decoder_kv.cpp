// `headcount bench --suite decoder-kv` (bench_decoder_kv.h). Per context N: every variant gets
// a cache of N positions and one timed prefill of the text's first N - D tokens; then, in
// `repeats` rounds after a warm-up round, each variant in turn is cut back to N - D positions
// (KvCache::truncate) and decodes D greedy tokens one at a time, so the last D positions of
// the context are decoded and every variant's ratio comes from the same minutes of the machine.
// Decode reads every weight and the whole cache once per token: the bytes per decoded token
// (the projections' and the LM head's weights at 4 bytes, plus the cache at the mean length
// decoded over) times the tokens/s is the memory traffic the run sustained, which shows
// whether the cache or the weights bound the speed.
#include "bench_decoder_kv.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "headcount/bpe.h"
#include "headcount/compress.h"
#include "headcount/decode.h"
#include "headcount/decoder.h"
#include "headcount/error.h"
#include "headcount/gguf.h"

namespace headcount::cli::bench {
namespace {

using clock_type = std::chrono::steady_clock;
using headcount::detail::concat;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Variant {
  std::int64_t kv_heads = 0;
  const char* method = "";
  model::Config config;
  LlamaDecoder decoder;
};

// K and V of every layer for one position, f32: the cost model's count (decode.h).
std::int64_t cost_model_cache_bytes_per_token(const model::Config& c) {
  std::int64_t bytes = 0;
  for (std::int64_t l = 0; l < c.layer_count(); ++l)
    bytes += cache_token_bytes(CacheDType::f32, c.kv_heads_in(l), c.head_dim, c.head_dim);
  return bytes;
}

// The weights a decode step multiplies by (fp32): Q, K, V, O, the FFN and the LM head (the
// token embedding when tied). Norm weights and the one embedding row are left out (< 0.1%).
std::int64_t weight_bytes_per_token(const model::Weights& w) {
  using model::Role;
  std::int64_t elements = 0;
  for (std::int64_t l = 0; l < w.config.layer_count(); ++l)
    for (Role r : {Role::q_weight, Role::k_weight, Role::v_weight, Role::o_weight,
                   Role::ffn_gate_weight, Role::ffn_up_weight, Role::ffn_down_weight})
      if (w.has(r, l)) elements += w.at(r, l).numel();
  elements += w.config.output == model::Output::tied ? w.at(Role::token_embedding).numel()
                                                     : w.at(Role::lm_head_weight).numel();
  return elements * 4;
}

std::int32_t greedy(const Tensor& logits, std::int64_t vocab) {
  return sample_token({logits.data<const float>(), static_cast<std::size_t>(vocab)}, 0, 1, 0);
}

}  // namespace

void run_decoder_kv_suite(const DecoderKvSuiteOptions& o) {
  check(o.repeats >= 1, "--repeats", ">= 1", o.repeats);
  std::ifstream file(o.text, std::ios::binary);
  check(static_cast<bool>(file), "decoder-kv suite text", "a readable file", o.text);
  std::string text(64 << 10, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(file.gcount()));

  const GgufFile gguf = GgufFile::open(o.model);
  const model::Weights loaded = llama_definition(gguf);  // Error for another architecture
  const BpeTokenizer tokenizer = BpeTokenizer::from_gguf(gguf);
  const model::Config& c = loaded.config;
  check(c.uniform() && c.grouped(), "decoder-kv suite model",
        "a grouped-query decoder with the same heads in every layer", o.model);
  const std::int64_t heads = c.heads_in(0), own = c.kv_heads_in(0);
  const std::vector<std::int32_t> ids = tokenizer.encode(text, {.parse_special = false});
  const std::int64_t decoded = o.quick ? 8 : 32;
  std::vector<std::int64_t> contexts;
  for (std::int64_t n :
       o.quick ? std::vector<std::int64_t>{64, 128} : std::vector<std::int64_t>{512, 2048, 8192})
    if (n <= c.context) contexts.push_back(n);
  check(!contexts.empty() && static_cast<std::int64_t>(ids.size()) >= contexts.back(),
        "decoder-kv suite text", concat("at least ", contexts.back(), " tokens"),
        concat(ids.size(), " tokens in the first 64 KiB of ", o.text));

  std::vector<Variant> variants;
  for (std::int64_t g : {heads, own, std::int64_t{1}}) {
    std::fprintf(stderr, "bench: building the %lld-K/V-head variant\n", static_cast<long long>(g));
    const model::Weights w = g == own ? loaded.clone()
                             : g == heads
                                 ? model::repeat_kv_heads(loaded)
                                 : model::convert_kv_heads(loaded, g, KvConvertMethod::mean);
    variants.push_back({g,
                        g == own     ? "as loaded"
                        : g == heads ? "repeated (MHA)"
                                     : "mean (MQA)",
                        w.config, LlamaDecoder(w, BpeTokenizer(tokenizer.vocabulary()))});
  }
  const std::int64_t weight_bytes = weight_bytes_per_token(loaded);  // the same in all three

  Context ctx({.threads = o.threads});
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json)
    std::printf(
        "decoder-kv suite: %s, %d thread%s, fp32 weights and cache, %lld tokens decoded at the "
        "end of each context, median of %d rounds\n%8s %16s %14s %12s %14s %13s %13s %9s\n",
        o.model.c_str(), o.threads, o.threads == 1 ? "" : "s", static_cast<long long>(decoded),
        o.repeats, "context", "kv heads", "cache MiB", "B/token", "prefill tok/s", "decode tok/s",
        "vs as loaded", "GB/s");
  for (std::int64_t n : contexts) {
    const std::int64_t prefix = n - decoded;
    const std::span<const std::int32_t> prompt(ids.data(), static_cast<std::size_t>(prefix));
    std::vector<KvCache> caches;
    std::vector<double> prefill_seconds;
    std::vector<std::int32_t> first;  // each variant's greedy token after the prefix
    for (Variant& v : variants) {
      caches.push_back(v.decoder.make_cache(n));
      const auto t0 = clock_type::now();
      first.push_back(greedy(v.decoder.executor().forward(ctx, prompt, caches.back()), c.vocab));
      prefill_seconds.push_back(seconds_between(t0, clock_type::now()));
    }
    std::vector<std::vector<double>> decode_rates(variants.size());
    for (int round = 0; round <= o.repeats; ++round) {  // round 0 warms up
      for (std::size_t i = 0; i < variants.size(); ++i) {
        caches[i].truncate(0, prefix);
        std::int32_t token = first[i];
        const auto t0 = clock_type::now();
        for (std::int64_t k = 0; k < decoded; ++k)
          token = greedy(variants[i].decoder.executor().forward(
                             ctx, std::span<const std::int32_t>(&token, 1), caches[i]),
                         c.vocab);
        if (round > 0)
          decode_rates[i].push_back(static_cast<double>(decoded) /
                                    seconds_between(t0, clock_type::now()));
      }
    }
    double base_rate = 0;
    for (std::size_t i = 0; i < variants.size(); ++i)
      if (variants[i].kv_heads == own) base_rate = median(decode_rates[i]);
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const Variant& v = variants[i];
      const std::int64_t per_token = cost_model_cache_bytes_per_token(v.config);
      const double rate = median(decode_rates[i]);
      // Decoding position p reads p + 1 cached positions; the D steps average prefix + (D+1)/2.
      const double mean_length = static_cast<double>(prefix) + (decoded + 1) / 2.0;
      const double bytes_per_step = static_cast<double>(weight_bytes) + per_token * mean_length;
      rows.push_back(
          {{"suite", "decoder-kv"},
           {"context", n},
           {"kv_heads", v.kv_heads},
           {"method", v.method},
           {"threads", o.threads},
           {"cache_bytes", caches[i].bytes()},
           {"cache_bytes_per_token", caches[i].bytes() / n},
           {"cost_model_cache_bytes_per_token", per_token},
           {"weight_bytes_per_token", weight_bytes},
           {"prefill_tokens", prefix},
           {"prefill_tokens_per_second", static_cast<double>(prefix) / prefill_seconds[i]},
           {"decoded_tokens", decoded},
           {"decode_tokens_per_second", rate},
           {"decode_runs", decode_rates[i]},
           {"decode_vs_as_loaded", rate / base_rate},
           {"bytes_read_per_decoded_token", bytes_per_step},
           {"decode_gb_per_second", bytes_per_step * rate / 1e9}});
      if (!o.json)
        std::printf("%8lld %16s %14.1f %12lld %14.1f %13.2f %13.3f %9.1f\n",
                    static_cast<long long>(n), concat(v.kv_heads, " ", v.method).c_str(),
                    static_cast<double>(caches[i].bytes()) / (1 << 20),
                    static_cast<long long>(caches[i].bytes() / n),
                    static_cast<double>(prefix) / prefill_seconds[i], rate, rate / base_rate,
                    bytes_per_step * rate / 1e9);
    }
  }
  if (o.json)
    std::printf("%s\n", nlohmann::json{{"suite", "decoder-kv"},
                                       {"model", o.model},
                                       {"weights", "fp32"},
                                       {"kv_dtype", "fp32"},
                                       {"rows", rows}}
                            .dump(2)
                            .c_str());
}

}  // namespace headcount::cli::bench
