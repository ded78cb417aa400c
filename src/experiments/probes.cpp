// probes.h: statistics and crops of the kept attention probabilities.
#include "experiments/probes.h"

#include <cmath>

#include "headcount/error.h"

namespace headcount::experiments {

using nlohmann::json;

AttentionStats attention_stats(Context& ctx, train::Model& model, const train::Batch& batch) {
  model.forward(ctx, batch, nullptr, {.keep_probs = true});
  const train::ModelConfig& c = model.config();
  const std::int64_t B = batch.batch, T = batch.seq_len, H = c.heads;
  AttentionStats s;
  double std_sum = 0, entropy_sum = 0, uniform_sum = 0;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const float* p = model.probs(l).data<const float>();
    for (std::int64_t bh = 0; bh < B * H; ++bh)
      for (std::int64_t t = 0; t < T; ++t) {
        const float* row = p + (bh * T + t) * T;
        const std::int64_t keys = c.causal ? t + 1 : T;
        if (keys < 2) continue;
        bool underflow = false;
        double mean = 0, entropy = 0;
        for (std::int64_t j = 0; j < keys; ++j) {
          if (row[j] <= 0)
            underflow = true;
          else
            mean += std::log(static_cast<double>(row[j])),
                entropy -= row[j] * std::log(static_cast<double>(row[j]));
        }
        if (underflow) {
          ++s.skipped_rows;
          continue;
        }
        mean /= static_cast<double>(keys);
        double squares = 0;
        for (std::int64_t j = 0; j < keys; ++j) {
          const double d = std::log(static_cast<double>(row[j])) - mean;
          squares += d * d;
        }
        std_sum += std::sqrt(squares / static_cast<double>(keys));
        entropy_sum += entropy;
        uniform_sum += std::log(static_cast<double>(keys));
        ++s.rows;
      }
  }
  if (s.rows > 0) {
    s.logit_std = std_sum / static_cast<double>(s.rows);
    s.entropy = entropy_sum / static_cast<double>(s.rows);
    s.uniform_entropy = uniform_sum / static_cast<double>(s.rows);
  }
  return s;
}

json to_json(const AttentionStats& s) {
  return {{"logit_std", s.logit_std},
          {"entropy", s.entropy},
          {"uniform_entropy", s.uniform_entropy},
          {"rows", s.rows},
          {"skipped_rows", s.skipped_rows}};
}

json attention_maps(Context& ctx, train::Model& model, const train::Batch& sequence,
                    const std::vector<std::int64_t>& layers, std::int64_t max_heads,
                    std::int64_t positions) {
  HEADCOUNT_CHECK(sequence.batch >= 1, "attention_maps", "a batch of >= 1 sequences",
                  sequence.batch);
  model.forward(ctx, sequence, nullptr, {.keep_probs = true});
  const train::ModelConfig& c = model.config();
  const std::int64_t T = sequence.seq_len, P = std::min(positions, T);
  json maps = json::array();
  for (std::int64_t layer : layers) {
    const std::int64_t l = layer < 0 ? c.layers + layer : layer;
    HEADCOUNT_CHECK(l >= 0 && l < c.layers, "attention_maps layer",
                    detail::concat("in [0, ", c.layers, ")"), layer);
    const float* p = model.probs(l).data<const float>();
    for (std::int64_t h = 0; h < std::min(max_heads, c.heads); ++h) {
      std::vector<double> values(static_cast<std::size_t>(P * P));
      for (std::int64_t t = 0; t < P; ++t)
        for (std::int64_t j = 0; j < P; ++j)
          values[static_cast<std::size_t>(t * P + j)] =
              std::round(1e4 * p[(h * T + t) * T + j]) / 1e4;
      maps.push_back({{"layer", l}, {"head", h}, {"values", values}});
    }
  }
  return {{"sequence", 0}, {"positions", P}, {"maps", maps}};
}

train::Batch first_validation_sequence(const train::Task& task) {
  return task.validation_batch(0, 1);
}

}  // namespace headcount::experiments
