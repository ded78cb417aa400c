// ModelConfig: defaults, validation (each error names its field) and the JSON form that
// checkpoints and `headcount train --config` use.
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "headcount/error.h"
#include "headcount/train/model.h"

namespace headcount::train {

using detail::concat;
using nlohmann::json;

ModelConfig resolve(const ModelConfig& config) {
  ModelConfig c = config;
  HEADCOUNT_CHECK(c.vocab >= 1, "model.vocab", ">= 1", c.vocab);
  HEADCOUNT_CHECK(c.context >= 1, "model.context", ">= 1", c.context);
  HEADCOUNT_CHECK(c.layers >= 1, "model.layers", ">= 1", c.layers);
  HEADCOUNT_CHECK(c.d_model >= 1, "model.d_model", ">= 1", c.d_model);
  HEADCOUNT_CHECK(c.heads >= 1, "model.heads", ">= 1", c.heads);
  if (c.kv_heads == 0) c.kv_heads = c.heads;
  HEADCOUNT_CHECK(c.kv_heads >= 1 && c.heads % c.kv_heads == 0, "model.kv_heads",
                  concat("a divisor of heads = ", c.heads), c.kv_heads);
  if (c.head_dim == 0) {
    HEADCOUNT_CHECK(c.d_model % c.heads == 0, "model.heads",
                    concat("a divisor of d_model = ", c.d_model, " (or set head_dim)"), c.heads);
    c.head_dim = c.d_model / c.heads;
  }
  HEADCOUNT_CHECK(c.head_dim >= 1, "model.head_dim", ">= 1", c.head_dim);
  if (c.d_ff == 0) c.d_ff = 4 * c.d_model;
  HEADCOUNT_CHECK(c.d_ff >= 1, "model.d_ff", ">= 1", c.d_ff);
  if (!c.scale) c.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  HEADCOUNT_CHECK(std::isfinite(*c.scale) && *c.scale > 0, "model.scale", "a finite value > 0",
                  *c.scale);
  HEADCOUNT_CHECK(std::isfinite(c.init_std) && c.init_std > 0, "model.init_std",
                  "a finite value > 0", c.init_std);
  HEADCOUNT_CHECK(std::isfinite(c.qk_init_std) && c.qk_init_std >= 0, "model.qk_init_std",
                  "a finite value >= 0 (0: init_std)", c.qk_init_std);
  HEADCOUNT_CHECK(std::isfinite(c.ln_eps) && c.ln_eps > 0, "model.ln_eps", "a finite value > 0",
                  c.ln_eps);
  // Sizes stay far inside what the GEMM's BLAS integers and the tensors can index.
  constexpr std::int64_t kMaxWidth = 1 << 20;
  for (auto [name, value] : {std::pair{"model.vocab", c.vocab},
                             {"model.context", c.context},
                             {"model.d_model", c.d_model},
                             {"model.d_ff", c.d_ff},
                             {"model.layers", c.layers},
                             {"model.heads", c.heads}})
    HEADCOUNT_CHECK(value <= kMaxWidth, name, concat("<= ", kMaxWidth), value);
  HEADCOUNT_CHECK(c.heads * c.head_dim <= kMaxWidth, "model.head_dim",
                  concat("heads * head_dim <= ", kMaxWidth), c.heads * c.head_dim);
  const bool llama_piece = c.rms_norm || c.rope_base != 0 || c.swiglu || !c.biases || c.tied_head;
  HEADCOUNT_CHECK(!llama_piece || c.norm == NormPlacement::pre, "model.norm",
                  "\"pre\" with the Llama pieces (rms_norm, rope_base, swiglu, biases, tied_head)",
                  "\"post\"");
  HEADCOUNT_CHECK(c.rope_base == 0 || (std::isfinite(c.rope_base) && c.rope_base > 1),
                  "model.rope_base", "0 (learned positions) or a finite value > 1", c.rope_base);
  HEADCOUNT_CHECK(c.rope_base == 0 || c.head_dim % 2 == 0, "model.head_dim",
                  "even with rotary positions (they turn pairs)", c.head_dim);
  HEADCOUNT_CHECK(!c.tied_head || !c.biases, "model.tied_head",
                  "false in a model with biases (a tied head has no bias of its own)", "true");
  HEADCOUNT_CHECK(!c.frozen_biases || c.biases, "model.frozen_biases",
                  "false in a model without biases", "true");
  HEADCOUNT_CHECK(!c.layer_heads.empty() || c.layer_kv_heads.empty(), "model.layer_kv_heads",
                  "empty unless layer_heads is set", concat(c.layer_kv_heads.size(), " entries"));
  if (!c.layer_heads.empty()) {
    HEADCOUNT_CHECK(static_cast<std::int64_t>(c.layer_heads.size()) == c.layers,
                    "model.layer_heads", concat(c.layers, " entries (one per layer)"),
                    c.layer_heads.size());
    if (c.layer_kv_heads.empty()) c.layer_kv_heads = c.layer_heads;
    HEADCOUNT_CHECK(c.layer_kv_heads.size() == c.layer_heads.size(), "model.layer_kv_heads",
                    concat(c.layers, " entries (one per layer)"), c.layer_kv_heads.size());
    for (std::int64_t l = 0; l < c.layers; ++l) {
      const std::int64_t h = c.heads_in(l), g = c.kv_heads_in(l);
      HEADCOUNT_CHECK(h >= 1 && h * c.head_dim <= kMaxWidth, concat("model.layer_heads[", l, "]"),
                      concat(">= 1 and heads * head_dim <= ", kMaxWidth), h);
      HEADCOUNT_CHECK(g >= 1 && h % g == 0, concat("model.layer_kv_heads[", l, "]"),
                      concat("a divisor of layer_heads[", l, "] = ", h), g);
    }
  }
  return c;
}

json to_json(const ModelConfig& c) {
  json j{{"vocab", c.vocab},
         {"context", c.context},
         {"layers", c.layers},
         {"d_model", c.d_model},
         {"heads", c.heads},
         {"kv_heads", c.kv_heads},
         {"head_dim", c.head_dim},
         {"d_ff", c.d_ff},
         {"norm", c.norm == NormPlacement::pre ? "pre" : "post"},
         {"causal", c.causal},
         {"attention_only", c.attention_only},
         {"init_std", c.init_std},
         {"ln_eps", c.ln_eps}};
  j["scale"] = c.scale ? json(*c.scale) : json(nullptr);
  if (c.frozen_biases) j["frozen_biases"] = true;  // absent = false: older files stay the same
  if (c.qk_init_std > 0) j["qk_init_std"] = c.qk_init_std;  // absent = 0, likewise
  // The Llama pieces only when set: files without them read as before.
  if (c.rms_norm) j["rms_norm"] = true;
  if (c.rope_base != 0) j["rope_base"] = c.rope_base;
  if (c.swiglu) j["swiglu"] = true;
  if (!c.biases) j["biases"] = false;
  if (c.tied_head) j["tied_head"] = true;
  if (!c.layer_heads.empty()) {
    j["layer_heads"] = c.layer_heads;
    j["layer_kv_heads"] = c.layer_kv_heads;
  }
  return j;
}

namespace {

std::int64_t integer(const json& j, const char* key, std::int64_t fallback) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  HEADCOUNT_CHECK(v.is_number_integer(), concat("model.", key), "an integer", v.dump());
  return v.get<std::int64_t>();
}

}  // namespace

ModelConfig model_config_from_json(const json& j) {
  HEADCOUNT_CHECK(j.is_object(), "model", "a JSON object", j.dump());
  static const std::set<std::string> known = {
      "vocab",     "context", "layers",      "d_model",        "heads",         "kv_heads",
      "head_dim",  "d_ff",    "scale",       "norm",           "causal",        "attention_only",
      "init_std",  "ln_eps",  "layer_heads", "layer_kv_heads", "frozen_biases", "rms_norm",
      "rope_base", "swiglu",  "biases",      "tied_head",      "qk_init_std"};
  for (const auto& item : j.items())
    HEADCOUNT_CHECK(
        known.count(item.key()) == 1, "model",
        "known fields (vocab, context, layers, d_model, "
        "heads, kv_heads, head_dim, d_ff, scale, norm, causal, attention_only, init_std, ln_eps, "
        "layer_heads, layer_kv_heads, frozen_biases, rms_norm, rope_base, swiglu, biases, "
        "tied_head, qk_init_std)",
        concat("\"", item.key(), "\""));
  ModelConfig c;
  c.vocab = integer(j, "vocab", c.vocab);
  c.context = integer(j, "context", c.context);
  c.layers = integer(j, "layers", c.layers);
  c.d_model = integer(j, "d_model", c.d_model);
  c.heads = integer(j, "heads", c.heads);
  c.kv_heads = integer(j, "kv_heads", c.kv_heads);
  c.head_dim = integer(j, "head_dim", c.head_dim);
  c.d_ff = integer(j, "d_ff", c.d_ff);
  if (j.contains("scale") && !j.at("scale").is_null()) {
    HEADCOUNT_CHECK(j.at("scale").is_number(), "model.scale", "a number or null",
                    j.at("scale").dump());
    c.scale = j.at("scale").get<float>();
  }
  if (j.contains("norm")) {
    const json& v = j.at("norm");
    HEADCOUNT_CHECK(v.is_string() && (v == "pre" || v == "post"), "model.norm",
                    "\"pre\" or \"post\"", v.dump());
    c.norm = v == "pre" ? NormPlacement::pre : NormPlacement::post;
  }
  for (auto [key, field] : {std::pair{"causal", &c.causal},
                            {"attention_only", &c.attention_only},
                            {"frozen_biases", &c.frozen_biases},
                            {"rms_norm", &c.rms_norm},
                            {"swiglu", &c.swiglu},
                            {"biases", &c.biases},
                            {"tied_head", &c.tied_head}}) {
    if (!j.contains(key)) continue;
    HEADCOUNT_CHECK(j.at(key).is_boolean(), concat("model.", key), "true or false",
                    j.at(key).dump());
    *field = j.at(key).get<bool>();
  }
  if (j.contains("rope_base")) {
    HEADCOUNT_CHECK(j.at("rope_base").is_number(), "model.rope_base", "a number",
                    j.at("rope_base").dump());
    c.rope_base = j.at("rope_base").get<float>();
  }
  if (j.contains("qk_init_std")) {
    HEADCOUNT_CHECK(j.at("qk_init_std").is_number(), "model.qk_init_std", "a number",
                    j.at("qk_init_std").dump());
    c.qk_init_std = j.at("qk_init_std").get<float>();
  }
  if (j.contains("init_std")) {
    HEADCOUNT_CHECK(j.at("init_std").is_number(), "model.init_std", "a number",
                    j.at("init_std").dump());
    c.init_std = j.at("init_std").get<float>();
  }
  for (auto [key, field] :
       {std::pair{"layer_heads", &c.layer_heads}, {"layer_kv_heads", &c.layer_kv_heads}}) {
    if (!j.contains(key)) continue;
    const json& v = j.at(key);
    HEADCOUNT_CHECK(v.is_array(), concat("model.", key), "an array of integers", v.dump());
    for (const json& e : v) {
      HEADCOUNT_CHECK(e.is_number_integer(), concat("model.", key), "an array of integers",
                      v.dump());
      field->push_back(e.get<std::int64_t>());
    }
  }
  if (j.contains("ln_eps")) {  // absent in checkpoints written before it existed: the default
    HEADCOUNT_CHECK(j.at("ln_eps").is_number(), "model.ln_eps", "a number", j.at("ln_eps").dump());
    c.ln_eps = j.at("ln_eps").get<float>();
  }
  return c;
}

}  // namespace headcount::train
