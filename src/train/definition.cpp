// The training executor's reading and writing of the one definition (formulas in
// train/definition.h). Per layer l, with h query heads, g K/V heads, head_dim k:
//   blocks.l.attn.w_qkv [d, (h + 2g) k] = [q_weightᵀ | k_weightᵀ | v_weightᵀ]
//   blocks.l.attn.b_qkv = [q_bias | k_bias | v_bias]
//   blocks.l.attn.w_o [h k, d] = o_weightᵀ,   blocks.l.ffn.w_up = ffn_up_weightᵀ, ...
//   blocks.l.ln1 = norm1, blocks.l.ln2 = norm2 (for post-norm models: after the residual adds)
// and tok_emb, pos_emb, ln_f, head.weight = lm_head_weightᵀ, head.bias as they are.
#include "headcount/train/definition.h"

#include <algorithm>
#include <map>

#include "headcount/error.h"

namespace headcount::train {

using detail::concat;
using model::Role;

model::Config definition(const ModelConfig& config) {
  const ModelConfig c = resolve(config);
  // SwiGLU has names only in the Llama family, which takes all of its pieces.
  const bool llama = c.swiglu;
  check(!llama || (c.rms_norm && c.rope_base != 0 && !c.biases && c.causal && !c.attention_only),
        "model",
        "SwiGLU with the rest of the Llama family (RMSNorm, rotary positions, no biases, causal)",
        "SwiGLU alone");
  model::Config d{
      .family = llama ? model::Family::llama : model::Family::headcount,
      .vocab = c.vocab,
      .d_model = c.d_model,
      .d_ff = c.attention_only ? 0 : c.d_ff,
      .head_dim = c.head_dim,
      .context = c.context,
      .norm = c.rms_norm ? model::NormKind::rms_norm : model::NormKind::layer_norm,
      .placement = c.norm,
      .norm_eps = c.ln_eps,
      .activation = c.swiglu ? model::Activation::swiglu : model::Activation::gelu_erf,
      .positions = c.rope_base != 0 ? model::Positions::rotary : model::Positions::learned,
      .rope_base = c.rope_base != 0 ? c.rope_base : 10000.0f,
      .attention_bias = c.biases,
      .ffn_bias = c.biases,
      .causal = c.causal,
      .attention_only = c.attention_only,
      .output = c.tied_head ? model::Output::tied : model::Output::lm_head,
      .output_bias = c.biases && !c.tied_head,
      .scale = c.scale};
  for (std::int64_t l = 0; l < c.layers; ++l)
    d.layers.push_back({.heads = c.heads_in(l), .kv_heads = c.kv_heads_in(l)});
  return d;
}

ModelConfig model_config(const model::Config& d, WeightParts parts) {
  model::validate(d, "model");
  const std::string what = "the training executor's model";
  const bool biases = d.attention_bias;
  check(d.attention_only || d.ffn_bias == biases, "model biases",
        what + ": biases on every projection or on none", "on some projections only");
  check(d.activation != model::Activation::swiglu || !d.ffn_bias, "model biases",
        what + ": a SwiGLU FFN without biases", "FFN biases");
  if (parts == WeightParts::all) {
    check(d.token_types == 0 && !d.embedding_norm, "model embeddings",
          what + ": token and position tables only (train the layers alone otherwise)",
          concat(d.token_types, " token types", d.embedding_norm ? " and an embedding norm" : ""));
    check(d.output == model::Output::tied ||
              (d.output == model::Output::lm_head && d.output_bias == biases),
          "model.output",
          what + (biases ? ": an untied LM head with a bias, or a tied one"
                         : ": an LM head without a bias, or a tied one"),
          concat(model::output_name(d.output), d.output_bias ? " with a bias" : ""));
  }
  const bool uniform = d.uniform();
  ModelConfig c{.vocab = parts == WeightParts::all ? d.vocab : 1,
                .context = d.context,
                .layers = d.layer_count(),
                .d_model = d.d_model,
                .heads = d.heads_in(0),
                .kv_heads = d.kv_heads_in(0),
                .head_dim = d.head_dim,
                .d_ff = d.attention_only ? 0 : d.d_ff,
                .scale = d.scale,
                .norm = d.placement,
                .causal = d.causal,
                .attention_only = d.attention_only,
                .ln_eps = d.norm_eps,
                .rms_norm = d.norm == model::NormKind::rms_norm,
                .rope_base = d.positions == model::Positions::rotary ? d.rope_base : 0.0f,
                .swiglu = d.activation == model::Activation::swiglu,
                .biases = biases,
                .tied_head = parts == WeightParts::all && d.output == model::Output::tied};
  if (!uniform)
    for (const model::LayerShape& s : d.layers) {
      c.layer_heads.push_back(s.heads);
      c.layer_kv_heads.push_back(s.kv_heads);
    }
  return resolve(c);
}

namespace {

std::map<std::string, const Parameter*> by_name(const Model& model) {
  std::map<std::string, const Parameter*> out;
  for (const Parameter& p : model.parameters()) out[p.name] = &p;
  return out;
}

const Parameter& find(const std::map<std::string, const Parameter*>& params,
                      const std::string& name) {
  const auto it = params.find(name);
  if (it == params.end()) fail("train model", concat("expected a parameter ", name, ", got none"));
  return *it->second;
}

// The shapes the two layouts must agree on, before any value moves.
void check_shapes(const ModelConfig& have, const model::Config& d, WeightParts parts) {
  const ModelConfig want = model_config(d, parts);
  bool same =
      have.layers == want.layers && have.d_model == want.d_model &&
      have.head_dim == want.head_dim && have.d_ff == want.d_ff &&
      have.attention_only == want.attention_only && have.norm == want.norm &&
      have.rms_norm == want.rms_norm && have.rope_base == want.rope_base &&
      have.swiglu == want.swiglu && have.biases == want.biases &&
      have.tied_head == want.tied_head &&
      (parts == WeightParts::layers || (have.vocab == want.vocab && have.context == want.context));
  for (std::int64_t l = 0; same && l < want.layers; ++l)
    same = have.heads_in(l) == want.heads_in(l) && have.kv_heads_in(l) == want.kv_heads_in(l);
  check(same, "model",
        concat("the shape of the weights (", want.layers, " layers, ", want.heads_in(0),
               " heads over ", want.kv_heads_in(0), " K/V heads in layer 0, d_model ", want.d_model,
               ")"),
        concat(have.layers, " layers, ", have.heads_in(0), " heads over ", have.kv_heads_in(0),
               " K/V heads in layer 0, d_model ", have.d_model));
}

// dst [cols_total] row-major with rows = src's columns: dst[c, col0 + r] = src[r, c].
void put_transposed(const Tensor& src, float* dst, std::int64_t dst_cols, std::int64_t col0) {
  const std::int64_t rows = src.size(0), cols = src.size(1);
  const float* s = src.data<const float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * dst_cols + col0 + r] = s[r * cols + c];
}

// The inverse: out [rows, cols] from columns col0 .. col0 + rows of src [cols, src_cols].
void take_transposed(const float* src, std::int64_t src_cols, std::int64_t col0, Tensor& out) {
  const std::int64_t rows = out.size(0), cols = out.size(1);
  float* o = out.data<float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) o[r * cols + c] = src[c * src_cols + col0 + r];
}

void copy_vector(const float* src, std::int64_t n, Tensor& out) {
  check(out.numel() == n, "weights", concat(out.numel(), " values"), n);
  std::copy_n(src, n, out.data<float>());
}

// One direction of the copy: `reading` moves definition -> model, else model -> definition.
// Both directions share the index arithmetic, so they cannot disagree.
template <typename Weights>
void transfer(const Model& model, Weights& w, WeightParts parts, bool reading) {
  const ModelConfig& mc = model.config();
  const auto params = by_name(model);
  auto value = [&](const std::string& name) {
    return const_cast<float*>(find(params, name).value.template data<float>());
  };
  auto matrix = [&](Role role, std::int64_t l, const std::string& name, std::int64_t width,
                    std::int64_t col0) {  // [in, out] parameter <-> [out, in] weight
    Tensor& t = const_cast<Tensor&>(w.at(role, l));
    if (reading)
      put_transposed(t, value(name), width, col0);
    else
      take_transposed(value(name), width, col0, t);
  };
  auto vector = [&](Role role, std::int64_t l, const std::string& name, std::int64_t offset) {
    Tensor& t = const_cast<Tensor&>(w.at(role, l));
    if (reading)
      std::copy_n(t.template data<const float>(), t.numel(), value(name) + offset);
    else
      copy_vector(value(name) + offset, t.numel(), t);
  };
  for (std::int64_t l = 0; l < mc.layers; ++l) {
    const std::int64_t k = mc.head_dim, qw = mc.heads_in(l) * k, kw = mc.kv_heads_in(l) * k,
                       width = qw + 2 * kw;
    const std::string b = concat("blocks.", l, ".");
    matrix(Role::q_weight, l, b + "attn.w_qkv", width, 0);
    matrix(Role::k_weight, l, b + "attn.w_qkv", width, qw);
    matrix(Role::v_weight, l, b + "attn.w_qkv", width, qw + kw);
    if (mc.biases) {
      vector(Role::q_bias, l, b + "attn.b_qkv", 0);
      vector(Role::k_bias, l, b + "attn.b_qkv", qw);
      vector(Role::v_bias, l, b + "attn.b_qkv", qw + kw);
    }
    matrix(Role::o_weight, l, b + "attn.w_o", mc.d_model, 0);
    if (mc.biases) vector(Role::o_bias, l, b + "attn.b_o", 0);
    vector(Role::norm1_weight, l, b + "ln1.weight", 0);
    if (!mc.rms_norm) vector(Role::norm1_bias, l, b + "ln1.bias", 0);
    if (mc.attention_only) continue;
    if (mc.swiglu) matrix(Role::ffn_gate_weight, l, b + "ffn.w_gate", mc.d_ff, 0);
    matrix(Role::ffn_up_weight, l, b + "ffn.w_up", mc.d_ff, 0);
    if (mc.biases) vector(Role::ffn_up_bias, l, b + "ffn.b_up", 0);
    matrix(Role::ffn_down_weight, l, b + "ffn.w_down", mc.d_model, 0);
    if (mc.biases) vector(Role::ffn_down_bias, l, b + "ffn.b_down", 0);
    vector(Role::norm2_weight, l, b + "ln2.weight", 0);
    if (!mc.rms_norm) vector(Role::norm2_bias, l, b + "ln2.bias", 0);
  }
  if (parts == WeightParts::layers) return;
  vector(Role::token_embedding, -1, "tok_emb", 0);
  if (mc.rope_base == 0) vector(Role::position_embedding, -1, "pos_emb", 0);
  if (mc.norm == NormPlacement::pre) {
    vector(Role::final_norm_weight, -1, "ln_f.weight", 0);
    if (!mc.rms_norm) vector(Role::final_norm_bias, -1, "ln_f.bias", 0);
  }
  if (!mc.tied_head) matrix(Role::lm_head_weight, -1, "head.weight", mc.vocab, 0);
  if (mc.biases) vector(Role::lm_head_bias, -1, "head.bias", 0);
}

}  // namespace

void read_weights(Model& model, const model::Weights& weights, WeightParts parts) {
  check_shapes(model.config(), weights.config, parts);
  model::check_weights(weights, "weights");
  transfer(model, weights, parts, true);
}

void write_weights(const Model& model, model::Weights& weights, WeightParts parts) {
  check_shapes(model.config(), weights.config, parts);
  model::check_weights(weights, "weights");
  transfer(model, weights, parts, false);
}

model::Weights to_weights(const Model& model) {
  model::Weights w{.config = definition(model.config())};
  for (const model::WeightSpec& spec : model::weight_table(w.config))
    w.tensors.emplace(spec.name, Tensor(DType::f32, spec.shape));
  write_weights(model, w);
  return w;
}

Model from_weights(const model::Weights& weights, WeightParts parts) {
  Model model(model_config(weights.config, parts), 0);
  read_weights(model, weights, parts);
  return model;
}

}  // namespace headcount::train
