// The transformer definition's config checks, names and weight table (formulas in model.h).
// One table per family maps each Role to the family's tensor name; every loader, converter and
// executor goes through it, so a name is written once.
#include <cmath>
#include <cstring>

#include "headcount/error.h"
#include "headcount/model.h"

namespace headcount::model {

using detail::concat;

const char* family_name(Family family) {
  switch (family) {
    case Family::bert:
      return "bert";
    case Family::llama:
      return "llama";
    case Family::headcount:
      return "headcount";
  }
  return "?";
}
const char* norm_kind_name(NormKind kind) {
  return kind == NormKind::layer_norm ? "layer_norm" : "rms_norm";
}
const char* activation_name(Activation activation) {
  return activation == Activation::gelu_erf ? "gelu_erf" : "swiglu";
}
const char* positions_name(Positions positions) {
  return positions == Positions::learned ? "learned" : "rotary";
}
const char* output_name(Output output) {
  switch (output) {
    case Output::hidden:
      return "hidden";
    case Output::lm_head:
      return "lm_head";
    case Output::tied:
      return "tied";
  }
  return "?";
}

std::int64_t Config::heads_in(std::int64_t layer) const {
  return layers.at(static_cast<std::size_t>(layer)).heads;
}
std::int64_t Config::kv_heads_in(std::int64_t layer) const {
  return layers.at(static_cast<std::size_t>(layer)).kv_heads;
}
float Config::attention_scale() const {
  return scale ? *scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}
bool Config::uniform() const {
  for (const LayerShape& s : layers)
    if (!(s == layers.front())) return false;
  return true;
}
bool Config::grouped() const {
  for (const LayerShape& s : layers)
    if (s.kv_heads != s.heads) return true;
  return false;
}

void validate(const Config& c, const std::string& where) {
  auto positive = [&](const char* field, std::int64_t value) {
    check(value >= 1 && value <= (std::int64_t{1} << 30), concat(where, ": ", field),
          "a positive integer up to 2^30", value);
  };
  positive("vocab", c.vocab);
  positive("d_model", c.d_model);
  positive("head_dim", c.head_dim);
  positive("context", c.context);
  if (!c.attention_only) positive("d_ff", c.d_ff);
  check(!c.layers.empty(), concat(where, ": layers"), "at least one layer", "none");
  for (std::size_t l = 0; l < c.layers.size(); ++l) {
    const LayerShape& s = c.layers[l];
    const std::string field = concat(where, ": layer ", l);
    check(s.heads >= 1 && s.heads <= 4096, field + " heads", "1 .. 4096", s.heads);
    check(s.kv_heads >= 1 && s.heads % s.kv_heads == 0, field + " kv_heads",
          concat("a divisor of its ", s.heads, " heads"), s.kv_heads);
  }
  check(std::isfinite(c.norm_eps) && c.norm_eps > 0, concat(where, ": norm_eps"),
        "a positive finite number", c.norm_eps);
  if (c.scale)
    check(std::isfinite(*c.scale) && *c.scale > 0, concat(where, ": scale"),
          "a positive finite number", *c.scale);
  if (c.positions == Positions::rotary) {
    check(c.head_dim % 2 == 0, concat(where, ": head_dim"), "even (rotary positions rotate pairs)",
          c.head_dim);
    check(std::isfinite(c.rope_base) && c.rope_base > 1, concat(where, ": rope_base"),
          "a finite number > 1", c.rope_base);
  }
  check(c.token_types >= 0, concat(where, ": token_types"), ">= 0", c.token_types);
  // What each family's names can express: a config its table has no name for is refused here,
  // not found missing later.
  switch (c.family) {
    case Family::bert:
      check(c.norm == NormKind::layer_norm && c.placement == NormPlacement::post &&
                c.positions == Positions::learned && c.activation == Activation::gelu_erf &&
                c.output == Output::hidden && c.attention_bias && c.ffn_bias && c.embedding_norm,
            concat(where, ": family"),
            "bert: post-LayerNorm, learned positions, erf GELU, biases, embedding norm, "
            "hidden-state output",
            "another combination");
      break;
    case Family::llama:
      check(c.norm == NormKind::rms_norm && c.placement == NormPlacement::pre &&
                c.positions == Positions::rotary && c.activation == Activation::swiglu &&
                c.output != Output::hidden && !c.attention_bias && !c.ffn_bias &&
                !c.embedding_norm && c.token_types == 0 &&
                (c.output != Output::lm_head || !c.output_bias),
            concat(where, ": family"),
            "llama: pre-RMSNorm, rotary positions, SwiGLU, no biases, an LM head (tied or not)",
            "another combination");
      break;
    case Family::headcount:
      check(c.activation == Activation::gelu_erf && c.token_types == 0 && !c.embedding_norm,
            concat(where, ": family"), "headcount: erf GELU, no token types, no embedding norm",
            "another combination");
      break;
  }
}

const char* role_name(Role role) {
  switch (role) {
    case Role::token_embedding:
      return "token_embedding";
    case Role::position_embedding:
      return "position_embedding";
    case Role::token_type_embedding:
      return "token_type_embedding";
    case Role::embedding_norm_weight:
      return "embedding_norm_weight";
    case Role::embedding_norm_bias:
      return "embedding_norm_bias";
    case Role::q_weight:
      return "q_weight";
    case Role::q_bias:
      return "q_bias";
    case Role::k_weight:
      return "k_weight";
    case Role::k_bias:
      return "k_bias";
    case Role::v_weight:
      return "v_weight";
    case Role::v_bias:
      return "v_bias";
    case Role::o_weight:
      return "o_weight";
    case Role::o_bias:
      return "o_bias";
    case Role::norm1_weight:
      return "norm1_weight";
    case Role::norm1_bias:
      return "norm1_bias";
    case Role::norm2_weight:
      return "norm2_weight";
    case Role::norm2_bias:
      return "norm2_bias";
    case Role::ffn_gate_weight:
      return "ffn_gate_weight";
    case Role::ffn_up_weight:
      return "ffn_up_weight";
    case Role::ffn_up_bias:
      return "ffn_up_bias";
    case Role::ffn_down_weight:
      return "ffn_down_weight";
    case Role::ffn_down_bias:
      return "ffn_down_bias";
    case Role::final_norm_weight:
      return "final_norm_weight";
    case Role::final_norm_bias:
      return "final_norm_bias";
    case Role::lm_head_weight:
      return "lm_head_weight";
    case Role::lm_head_bias:
      return "lm_head_bias";
  }
  return "?";
}

namespace {

struct Names {
  const char* name;  // with {} where the layer index goes
  const char* gguf;  // llama only
};

// The families' names of each role ("" where a family has no such weight).
Names bert_names(Role role) {
  switch (role) {
    case Role::token_embedding:
      return {"embeddings.word_embeddings.weight", ""};
    case Role::position_embedding:
      return {"embeddings.position_embeddings.weight", ""};
    case Role::token_type_embedding:
      return {"embeddings.token_type_embeddings.weight", ""};
    case Role::embedding_norm_weight:
      return {"embeddings.LayerNorm.weight", ""};
    case Role::embedding_norm_bias:
      return {"embeddings.LayerNorm.bias", ""};
    case Role::q_weight:
      return {"encoder.layer.{}.attention.self.query.weight", ""};
    case Role::q_bias:
      return {"encoder.layer.{}.attention.self.query.bias", ""};
    case Role::k_weight:
      return {"encoder.layer.{}.attention.self.key.weight", ""};
    case Role::k_bias:
      return {"encoder.layer.{}.attention.self.key.bias", ""};
    case Role::v_weight:
      return {"encoder.layer.{}.attention.self.value.weight", ""};
    case Role::v_bias:
      return {"encoder.layer.{}.attention.self.value.bias", ""};
    case Role::o_weight:
      return {"encoder.layer.{}.attention.output.dense.weight", ""};
    case Role::o_bias:
      return {"encoder.layer.{}.attention.output.dense.bias", ""};
    case Role::norm1_weight:
      return {"encoder.layer.{}.attention.output.LayerNorm.weight", ""};
    case Role::norm1_bias:
      return {"encoder.layer.{}.attention.output.LayerNorm.bias", ""};
    case Role::ffn_up_weight:
      return {"encoder.layer.{}.intermediate.dense.weight", ""};
    case Role::ffn_up_bias:
      return {"encoder.layer.{}.intermediate.dense.bias", ""};
    case Role::ffn_down_weight:
      return {"encoder.layer.{}.output.dense.weight", ""};
    case Role::ffn_down_bias:
      return {"encoder.layer.{}.output.dense.bias", ""};
    case Role::norm2_weight:
      return {"encoder.layer.{}.output.LayerNorm.weight", ""};
    case Role::norm2_bias:
      return {"encoder.layer.{}.output.LayerNorm.bias", ""};
    default:
      return {"", ""};
  }
}

Names llama_names(Role role) {
  switch (role) {
    case Role::token_embedding:
      return {"model.embed_tokens.weight", "token_embd.weight"};
    case Role::q_weight:
      return {"model.layers.{}.self_attn.q_proj.weight", "blk.{}.attn_q.weight"};
    case Role::k_weight:
      return {"model.layers.{}.self_attn.k_proj.weight", "blk.{}.attn_k.weight"};
    case Role::v_weight:
      return {"model.layers.{}.self_attn.v_proj.weight", "blk.{}.attn_v.weight"};
    case Role::o_weight:
      return {"model.layers.{}.self_attn.o_proj.weight", "blk.{}.attn_output.weight"};
    case Role::norm1_weight:
      return {"model.layers.{}.input_layernorm.weight", "blk.{}.attn_norm.weight"};
    case Role::norm2_weight:
      return {"model.layers.{}.post_attention_layernorm.weight", "blk.{}.ffn_norm.weight"};
    case Role::ffn_gate_weight:
      return {"model.layers.{}.mlp.gate_proj.weight", "blk.{}.ffn_gate.weight"};
    case Role::ffn_up_weight:
      return {"model.layers.{}.mlp.up_proj.weight", "blk.{}.ffn_up.weight"};
    case Role::ffn_down_weight:
      return {"model.layers.{}.mlp.down_proj.weight", "blk.{}.ffn_down.weight"};
    case Role::final_norm_weight:
      return {"model.norm.weight", "output_norm.weight"};
    case Role::lm_head_weight:
      return {"lm_head.weight", "output.weight"};
    default:
      return {"", ""};
  }
}

Names headcount_names(Role role) {
  switch (role) {
    case Role::token_embedding:
      return {"embed.tokens.weight", ""};
    case Role::position_embedding:
      return {"embed.positions.weight", ""};
    case Role::q_weight:
      return {"layers.{}.attention.q.weight", ""};
    case Role::q_bias:
      return {"layers.{}.attention.q.bias", ""};
    case Role::k_weight:
      return {"layers.{}.attention.k.weight", ""};
    case Role::k_bias:
      return {"layers.{}.attention.k.bias", ""};
    case Role::v_weight:
      return {"layers.{}.attention.v.weight", ""};
    case Role::v_bias:
      return {"layers.{}.attention.v.bias", ""};
    case Role::o_weight:
      return {"layers.{}.attention.o.weight", ""};
    case Role::o_bias:
      return {"layers.{}.attention.o.bias", ""};
    case Role::norm1_weight:
      return {"layers.{}.norm1.weight", ""};
    case Role::norm1_bias:
      return {"layers.{}.norm1.bias", ""};
    case Role::norm2_weight:
      return {"layers.{}.norm2.weight", ""};
    case Role::norm2_bias:
      return {"layers.{}.norm2.bias", ""};
    case Role::ffn_up_weight:
      return {"layers.{}.ffn.up.weight", ""};
    case Role::ffn_up_bias:
      return {"layers.{}.ffn.up.bias", ""};
    case Role::ffn_down_weight:
      return {"layers.{}.ffn.down.weight", ""};
    case Role::ffn_down_bias:
      return {"layers.{}.ffn.down.bias", ""};
    case Role::final_norm_weight:
      return {"norm.weight", ""};
    case Role::final_norm_bias:
      return {"norm.bias", ""};
    case Role::lm_head_weight:
      return {"lm_head.weight", ""};
    case Role::lm_head_bias:
      return {"lm_head.bias", ""};
    default:
      return {"", ""};
  }
}

Names names(Family family, Role role) {
  switch (family) {
    case Family::bert:
      return bert_names(role);
    case Family::llama:
      return llama_names(role);
    case Family::headcount:
      return headcount_names(role);
  }
  return {"", ""};
}

std::string with_layer(const char* pattern, std::int64_t layer) {
  std::string s = pattern;
  const std::size_t at = s.find("{}");
  if (at != std::string::npos) s.replace(at, 2, std::to_string(layer));
  return s;
}

}  // namespace

std::string name_of(const Config& config, Role role, std::int64_t layer) {
  const Names n = names(config.family, role);
  check(n.name[0] != '\0', "weight role",
        concat("a role the ", family_name(config.family), " family has"), role_name(role));
  return with_layer(n.name, layer);
}

std::vector<WeightSpec> weight_table(const Config& c) {
  std::vector<WeightSpec> table;
  auto add = [&](Role role, std::int64_t layer, std::vector<std::int64_t> shape) {
    const Names n = names(c.family, role);
    table.push_back({.role = role,
                     .layer = layer,
                     .name = with_layer(n.name, layer),
                     .shape = std::move(shape),
                     .gguf_name = n.gguf[0] ? with_layer(n.gguf, layer) : std::string()});
  };
  const bool layer_norm = c.norm == NormKind::layer_norm;
  const std::int64_t d = c.d_model, ff = c.d_ff;
  add(Role::token_embedding, -1, {c.vocab, d});
  if (c.positions == Positions::learned) add(Role::position_embedding, -1, {c.context, d});
  if (c.token_types > 0) add(Role::token_type_embedding, -1, {c.token_types, d});
  if (c.embedding_norm) {
    add(Role::embedding_norm_weight, -1, {d});
    if (layer_norm) add(Role::embedding_norm_bias, -1, {d});
  }
  for (std::int64_t l = 0; l < c.layer_count(); ++l) {
    const std::int64_t q = c.heads_in(l) * c.head_dim, kv = c.kv_heads_in(l) * c.head_dim;
    const bool ab = c.attention_bias;
    add(Role::q_weight, l, {q, d});
    if (ab) add(Role::q_bias, l, {q});
    add(Role::k_weight, l, {kv, d});
    if (ab) add(Role::k_bias, l, {kv});
    add(Role::v_weight, l, {kv, d});
    if (ab) add(Role::v_bias, l, {kv});
    add(Role::o_weight, l, {d, q});
    if (ab) add(Role::o_bias, l, {d});
    add(Role::norm1_weight, l, {d});
    if (layer_norm) add(Role::norm1_bias, l, {d});
    if (c.attention_only) continue;
    if (c.activation == Activation::swiglu) add(Role::ffn_gate_weight, l, {ff, d});
    add(Role::ffn_up_weight, l, {ff, d});
    if (c.ffn_bias) add(Role::ffn_up_bias, l, {ff});
    add(Role::ffn_down_weight, l, {d, ff});
    if (c.ffn_bias) add(Role::ffn_down_bias, l, {d});
    add(Role::norm2_weight, l, {d});
    if (layer_norm) add(Role::norm2_bias, l, {d});
  }
  if (c.final_norm()) {
    add(Role::final_norm_weight, -1, {d});
    if (layer_norm) add(Role::final_norm_bias, -1, {d});
  }
  if (c.output == Output::lm_head) {
    add(Role::lm_head_weight, -1, {c.vocab, d});
    if (c.output_bias) add(Role::lm_head_bias, -1, {c.vocab});
  }
  return table;
}

const Tensor& Weights::at(Role role, std::int64_t layer) const {
  const std::string name = name_of(config, role, layer);
  const auto it = tensors.find(name);
  if (it == tensors.end())
    fail("model weights", concat("expected ", role_name(role),
                                 layer >= 0 ? concat(" of layer ", layer) : std::string(), " (",
                                 name, "), got none"));
  return it->second;
}

Tensor& Weights::at(Role role, std::int64_t layer) {
  return const_cast<Tensor&>(static_cast<const Weights&>(*this).at(role, layer));
}

bool Weights::has(Role role, std::int64_t layer) const {
  const Names n = names(config.family, role);
  return n.name[0] != '\0' && tensors.count(with_layer(n.name, layer)) != 0;
}

Weights Weights::clone() const {
  Weights out{.config = config};
  for (const auto& [name, t] : tensors) {
    Tensor copy(t.dtype(), t.shape());
    if (t.bytes() > 0) std::memcpy(copy.data<void>(), t.data<const void>(), t.bytes());
    out.tensors.emplace(name, std::move(copy));
  }
  return out;
}

void check_weights(const Weights& w, const std::string& where) {
  validate(w.config, where);
  for (const WeightSpec& spec : weight_table(w.config)) {
    const auto it = w.tensors.find(spec.name);
    check(it != w.tensors.end(), concat(where, ": ", spec.name), "a tensor", "none");
    const Tensor& t = it->second;
    check(t.dtype() == DType::f32, concat(where, ": ", spec.name), "f32", dtype_name(t.dtype()));
    check(t.shape() == spec.shape, concat(where, ": ", spec.name),
          concat("shape ", shape_string(spec.shape)), shape_string(t.shape()));
  }
}

}  // namespace headcount::model
