// prune_speed (sweeps.h): how fast physically pruned encoders embed, beside their multiply-adds.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "compress/sweeps.h"
#include "headcount/cost.h"
#include "headcount/error.h"

namespace headcount::compress {

using nlohmann::json;

namespace {

// Multiply-adds of one pass over the sentences: every layer's cost at each sentence's length.
std::int64_t model_macs(const EncoderConfig& c, const std::vector<std::int64_t>& lengths) {
  std::int64_t macs = 0;
  for (std::int64_t l = 0; l < c.layers; ++l)
    for (std::int64_t n : lengths) {
      const CostReport cost = estimate_cost({.d_model = c.hidden_size,
                                             .heads = c.layer_heads(l),
                                             .kv_heads = c.layer_kv_heads(l),
                                             .head_dim = c.head_dim(),
                                             .seq_len = n,
                                             .d_ff = c.intermediate_size});
      macs += cost.stages.back().macs;  // "layer"
    }
  return macs;
}

}  // namespace

json prune_speed(Context& ctx, const EncoderWeights& weights, const std::vector<std::string>& texts,
                 const std::vector<std::size_t>& order, const PruneSpeedOptions& o) {
  HEADCOUNT_CHECK(o.repeats >= 1, "repeats", ">= 1", o.repeats);
  HEADCOUNT_CHECK(!o.fractions.empty() && !o.batches.empty(), "fractions / batches",
                  "at least one value each", "none");
  HEADCOUNT_CHECK(!texts.empty(), "sentences", "at least one", "none");
  for (std::int64_t b : o.batches) HEADCOUNT_CHECK(b >= 1, "batches", "values >= 1", b);
  const EncoderConfig& c = weights.config;
  HEADCOUNT_CHECK(!c.is_pruned(), "model", "an unpruned model", "a pruned one");
  const std::int64_t total = c.layers * c.heads;

  struct Variant {
    double fraction;
    std::int64_t removed;
    BertEncoder encoder;
    std::int64_t macs;
  };
  std::vector<Variant> variants;
  std::vector<std::int64_t> lengths;
  for (double f : o.fractions) {
    HEADCOUNT_CHECK(f >= 0 && f < 1, "fractions", "values in [0, 1)", f);
    const std::int64_t k = std::llround(f * static_cast<double>(total));
    const std::vector<float> mask = removal_mask(c, order, k);
    std::vector<std::vector<std::int64_t>> remove(static_cast<std::size_t>(c.layers));
    for (std::size_t h = 0; h < mask.size(); ++h)
      if (mask[h] == 0.0f)
        remove[h / static_cast<std::size_t>(c.heads)].push_back(
            static_cast<std::int64_t>(h % static_cast<std::size_t>(c.heads)));
    BertEncoder e = encoder_from_weights(prune_heads(weights, remove));
    if (lengths.empty())
      for (const std::string& t : texts)
        lengths.push_back(static_cast<std::int64_t>(e.tokenizer().encode(t).size()));
    const std::int64_t macs = model_macs(e.config(), lengths);
    variants.push_back({f, k, std::move(e), macs});
  }

  json rows = json::array();
  for (std::int64_t batch : o.batches) {
    const EmbedOptions options{.batch_size = batch};
    for (const Variant& v : variants) v.encoder.embed(ctx, texts, options);  // warm-up
    std::vector<std::vector<double>> seconds(variants.size());
    for (int r = 0; r < o.repeats; ++r)
      for (std::size_t i = 0; i < variants.size(); ++i) {
        const auto start = std::chrono::steady_clock::now();
        variants[i].encoder.embed(ctx, texts, options);
        seconds[i].push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    double full_rate = 0;
    for (std::size_t i = 0; i < variants.size(); ++i) {
      std::vector<double> s = seconds[i];
      std::sort(s.begin(), s.end());
      const double rate = static_cast<double>(texts.size()) / s[s.size() / 2];
      if (i == 0) full_rate = rate;
      const Variant& v = variants[i];
      const double mac_ratio = static_cast<double>(variants[0].macs) / static_cast<double>(v.macs);
      rows.push_back({{"fraction", v.fraction},
                      {"heads_removed", v.removed},
                      {"heads_left", total - v.removed},
                      {"batch", batch},
                      {"sentences_per_second", rate},
                      {"speedup_vs_first", rate / full_rate},
                      {"macs_per_pass", v.macs},
                      {"mac_ratio_vs_first", mac_ratio},
                      {"seconds", seconds[i]}});
      if (o.row) o.row(rows.back());
    }
  }
  return rows;
}

}  // namespace headcount::compress
