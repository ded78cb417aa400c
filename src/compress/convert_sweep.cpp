// convert_sweep (sweeps.h): what each K/V head count and pooling method costs an encoder on STS.
#include <chrono>

#include "compress/sweeps.h"
#include "headcount/error.h"

namespace headcount::compress {

using nlohmann::json;

json convert_sweep(Context& ctx, const EncoderWeights& weights, const std::vector<StsPair>& test,
                   const ConvertSweepOptions& o) {
  HEADCOUNT_CHECK(!test.empty(), "STS pairs", "at least one", "none");
  for (std::int64_t g : o.kv_heads)  // every value checked before the first evaluation
    for (std::int64_t l = 0; l < weights.config.layers; ++l)
      HEADCOUNT_CHECK(g >= 1 && weights.config.layer_heads(l) % g == 0, "kv heads",
                      "divisors of every layer's head count", g);
  json rows = json::array();
  for (std::int64_t g : o.kv_heads)
    for (KvConvertMethod m : o.methods) {
      const auto start = std::chrono::steady_clock::now();
      const EncoderWeights converted = convert_kv_heads(weights, g, m);
      const BertEncoder encoder = encoder_from_weights(converted);
      const StsResult r = evaluate_sts(ctx, encoder, test, {.batch_size = o.batch});
      rows.push_back(
          {{"kv_heads", g},
           {"method", kv_convert_method_name(m)},
           {"spearman", r.spearman},
           {"pearson", r.pearson},
           {"kv_cache_bytes_per_token", kv_cache_bytes_per_token(converted.config)},
           {"seconds",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}});
      if (o.row) o.row(rows.back());
    }
  return rows;
}

}  // namespace headcount::compress
