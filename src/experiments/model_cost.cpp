// model_cost.h: one estimate_cost() per layer shape, times the layer count, plus the LM head.
#include "experiments/model_cost.h"

#include "headcount/cost.h"
#include "headcount/error.h"

namespace headcount::experiments {

ModelCost model_cost(const train::ModelConfig& m, std::int64_t batch, std::int64_t seq_len) {
  HEADCOUNT_CHECK(batch >= 1 && seq_len >= 1, "model_cost", "batch and seq_len >= 1",
                  detail::concat(batch, ", ", seq_len));
  const CostReport layer = estimate_cost({.d_model = m.d_model,
                                          .heads = m.heads,
                                          .kv_heads = m.kv_heads,
                                          .head_dim = m.head_dim,
                                          .seq_len = seq_len,
                                          .batch = batch,
                                          .d_ff = m.d_ff});
  ModelCost c;
  c.attention_macs = m.layers * layer.stage("attention block").macs;
  c.ffn_macs = m.attention_only ? 0 : m.layers * layer.stage("feed-forward").macs;
  c.head_macs = batch * seq_len * m.d_model * m.vocab;
  c.forward_macs = c.attention_macs + c.ffn_macs + c.head_macs;
  c.train_macs = 3 * c.forward_macs;
  const std::int64_t layer_weights = layer.stage("attention block").weights +
                                     (m.attention_only ? 0 : layer.stage("feed-forward").weights);
  c.weights =
      m.layers * layer_weights + m.vocab * m.d_model + m.context * m.d_model + m.d_model * m.vocab;
  c.kv_cache_bytes_per_token = m.layers * layer.kv_cache_bytes_per_token;
  return c;
}

nlohmann::json to_json(const ModelCost& c) {
  return {{"attention_macs", c.attention_macs},
          {"ffn_macs", c.ffn_macs},
          {"head_macs", c.head_macs},
          {"forward_macs", c.forward_macs},
          {"train_macs", c.train_macs},
          {"weights", c.weights},
          {"kv_cache_bytes_per_token", c.kv_cache_bytes_per_token}};
}

}  // namespace headcount::experiments
