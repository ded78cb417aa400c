// A BERT encoder's layers as a train::Model and back (formulas in encoder_training.h).
//
// Weight layout: Hugging Face stores nn.Linear weights [out, in]; the train model multiplies
// x · W with W [in, out]. Per layer l (h query heads, g K/V heads, head_dim k, d, d_ff):
//   blocks.l.attn.w_qkv [d, (h + 2g) k] = [query.weightᵀ | key.weightᵀ | value.weightᵀ]
//   blocks.l.attn.b_qkv = [query.bias | key.bias | value.bias]
//   blocks.l.attn.w_o   [h k, d] = attention.output.dense.weightᵀ
//   blocks.l.ln1 = attention.output.LayerNorm, blocks.l.ln2 = output.LayerNorm
//   blocks.l.ffn.w_up [d, d_ff] = intermediate.dense.weightᵀ, w_down = output.dense.weightᵀ
// Post-LN blocks compute x = LN1(x + Attn(x)); x = LN2(x + FFN(x)): BERT's layer exactly.
#include <algorithm>

#include "compress/tensor_copy.h"
#include "headcount/encoder_training.h"
#include "headcount/error.h"

namespace headcount {

using detail::concat;

namespace {

train::Parameter& find(std::vector<train::Parameter>& params, const std::string& name) {
  for (train::Parameter& p : params)
    if (p.name == name) return p;
  fail("train model", concat("expected a parameter ", name, ", got none"));
}

const train::Parameter& find(const std::vector<train::Parameter>& params, const std::string& name) {
  return find(const_cast<std::vector<train::Parameter>&>(params), name);
}

const Tensor& tensor(const EncoderWeights& w, const std::string& name) {
  const auto it = w.tensors.find(name);
  if (it == w.tensors.end())
    fail("encoder weights", concat("expected a tensor ", name, ", got none"));
  return it->second;
}

// dst[i * dst_cols + col0 + j] = src[j, i] for src [rows, cols]: a transposed block of columns.
void put_transposed(const Tensor& src, float* dst, std::int64_t dst_cols, std::int64_t col0) {
  const std::int64_t rows = src.size(0), cols = src.size(1);
  const float* s = src.data<const float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dst[c * dst_cols + col0 + r] = s[r * cols + c];
}

// The inverse: out [rows, cols] from columns col0 .. col0 + rows of src [cols, src_cols].
Tensor take_transposed(const float* src, std::int64_t src_cols, std::int64_t col0,
                       std::int64_t rows, std::int64_t cols) {
  Tensor out(DType::f32, {rows, cols});
  float* o = out.data<float>();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) o[r * cols + c] = src[c * src_cols + col0 + r];
  return out;
}

Tensor vector_slice(const float* src, std::int64_t begin, std::int64_t n) {
  Tensor out(DType::f32, {n});
  std::copy_n(src + begin, n, out.data<float>());
  return out;
}

void copy_into(const Tensor& src, train::Parameter& p) {
  HEADCOUNT_CHECK(src.numel() == p.value.numel(), p.name, concat(p.value.numel(), " values"),
                  src.numel());
  std::copy_n(src.data<const float>(), src.numel(), p.value.data<float>());
}

}  // namespace

train::ModelConfig encoder_model_config(const EncoderConfig& c) {
  // Per-layer head counts only where the layers differ (a pruned or unevenly grouped model):
  // a uniform model keeps the plain config its checkpoints have always had.
  std::vector<std::int64_t> layer_heads, layer_kv_heads;
  bool uniform = true;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    layer_heads.push_back(c.layer_heads(l));
    layer_kv_heads.push_back(c.layer_kv_heads(l));
    uniform = uniform && c.layer_heads(l) == c.layer_heads(0) &&
              c.layer_kv_heads(l) == c.layer_kv_heads(0);
  }
  train::ModelConfig mc{.vocab = 1,
                        .context = c.max_position_embeddings,
                        .layers = c.layers,
                        .d_model = c.hidden_size,
                        .heads = c.layer_heads(0),
                        .kv_heads = c.layer_kv_heads(0),
                        .head_dim = c.head_dim(),
                        .d_ff = c.intermediate_size,
                        .norm = train::NormPlacement::post,
                        .causal = false,
                        .ln_eps = c.layer_norm_eps};
  if (!uniform) {
    mc.layer_heads = std::move(layer_heads);
    mc.layer_kv_heads = std::move(layer_kv_heads);
  }
  return train::resolve(mc);
}

train::Model encoder_to_model(const EncoderWeights& weights) {
  const train::ModelConfig mc = encoder_model_config(weights.config);
  train::Model model(mc, 0);
  std::vector<train::Parameter>& params = model.parameters();
  for (std::int64_t l = 0; l < mc.layers; ++l) {
    const std::int64_t qw = mc.heads_in(l) * mc.head_dim, kw = mc.kv_heads_in(l) * mc.head_dim,
                       width = qw + 2 * kw;
    const std::string e = concat("encoder.layer.", l, "."), b = concat("blocks.", l, ".");
    float* w_qkv = find(params, b + "attn.w_qkv").value.data<float>();
    float* b_qkv = find(params, b + "attn.b_qkv").value.data<float>();
    const char* parts[] = {"query", "key", "value"};
    const std::int64_t offsets[] = {0, qw, qw + kw};
    for (int i = 0; i < 3; ++i) {
      const Tensor& w = tensor(weights, e + "attention.self." + parts[i] + ".weight");
      const Tensor& bias = tensor(weights, e + "attention.self." + parts[i] + ".bias");
      put_transposed(w, w_qkv, width, offsets[i]);
      std::copy_n(bias.data<const float>(), bias.numel(), b_qkv + offsets[i]);
    }
    put_transposed(tensor(weights, e + "attention.output.dense.weight"),
                   find(params, b + "attn.w_o").value.data<float>(), mc.d_model, 0);
    copy_into(tensor(weights, e + "attention.output.dense.bias"), find(params, b + "attn.b_o"));
    copy_into(tensor(weights, e + "attention.output.LayerNorm.weight"),
              find(params, b + "ln1.weight"));
    copy_into(tensor(weights, e + "attention.output.LayerNorm.bias"), find(params, b + "ln1.bias"));
    put_transposed(tensor(weights, e + "intermediate.dense.weight"),
                   find(params, b + "ffn.w_up").value.data<float>(), mc.d_ff, 0);
    copy_into(tensor(weights, e + "intermediate.dense.bias"), find(params, b + "ffn.b_up"));
    put_transposed(tensor(weights, e + "output.dense.weight"),
                   find(params, b + "ffn.w_down").value.data<float>(), mc.d_model, 0);
    copy_into(tensor(weights, e + "output.dense.bias"), find(params, b + "ffn.b_down"));
    copy_into(tensor(weights, e + "output.LayerNorm.weight"), find(params, b + "ln2.weight"));
    copy_into(tensor(weights, e + "output.LayerNorm.bias"), find(params, b + "ln2.bias"));
  }
  return model;
}

EncoderWeights model_to_encoder(const train::Model& model, const EncoderWeights& base) {
  const train::ModelConfig mc = encoder_model_config(base.config);
  const train::ModelConfig& have = model.config();
  HEADCOUNT_CHECK(
      have.layers == mc.layers && have.d_model == mc.d_model && have.heads == mc.heads &&
          have.kv_heads == mc.kv_heads && have.head_dim == mc.head_dim && have.d_ff == mc.d_ff &&
          have.layer_heads == mc.layer_heads && have.layer_kv_heads == mc.layer_kv_heads,
      "model",
      concat("the shape of the base weights (", mc.layers, " layers, ", mc.heads, " heads, ",
             mc.kv_heads, " K/V heads)"),
      concat(have.layers, " layers, ", have.heads, " heads, ", have.kv_heads, " K/V heads"));
  const std::vector<train::Parameter>& params = model.parameters();
  EncoderWeights out{.source_dir = base.source_dir, .config = base.config};
  for (const auto& [name, t] : base.tensors) out.tensors.emplace(name, compress::clone(t));
  const std::int64_t D = mc.d_model, F = mc.d_ff;
  auto value = [&](const std::string& name) {
    return find(params, name).value.data<const float>();
  };
  auto vec = [&](const std::string& name) {
    const Tensor& v = find(params, name).value;
    return vector_slice(v.data<const float>(), 0, v.numel());
  };
  for (std::int64_t l = 0; l < mc.layers; ++l) {
    const std::int64_t qw = mc.heads_in(l) * mc.head_dim, kw = mc.kv_heads_in(l) * mc.head_dim,
                       width = qw + 2 * kw;
    const std::string e = concat("encoder.layer.", l, "."), b = concat("blocks.", l, ".");
    const float* w_qkv = value(b + "attn.w_qkv");
    const float* b_qkv = value(b + "attn.b_qkv");
    const char* parts[] = {"query", "key", "value"};
    const std::int64_t offsets[] = {0, qw, qw + kw}, rows[] = {qw, kw, kw};
    for (int i = 0; i < 3; ++i) {
      out.tensors[e + "attention.self." + parts[i] + ".weight"] =
          take_transposed(w_qkv, width, offsets[i], rows[i], D);
      out.tensors[e + "attention.self." + parts[i] + ".bias"] =
          vector_slice(b_qkv, offsets[i], rows[i]);
    }
    out.tensors[e + "attention.output.dense.weight"] =
        take_transposed(value(b + "attn.w_o"), D, 0, D, qw);
    out.tensors[e + "attention.output.dense.bias"] = vec(b + "attn.b_o");
    out.tensors[e + "attention.output.LayerNorm.weight"] = vec(b + "ln1.weight");
    out.tensors[e + "attention.output.LayerNorm.bias"] = vec(b + "ln1.bias");
    out.tensors[e + "intermediate.dense.weight"] =
        take_transposed(value(b + "ffn.w_up"), F, 0, F, D);
    out.tensors[e + "intermediate.dense.bias"] = vec(b + "ffn.b_up");
    out.tensors[e + "output.dense.weight"] = take_transposed(value(b + "ffn.w_down"), D, 0, D, F);
    out.tensors[e + "output.dense.bias"] = vec(b + "ffn.b_down");
    out.tensors[e + "output.LayerNorm.weight"] = vec(b + "ln2.weight");
    out.tensors[e + "output.LayerNorm.bias"] = vec(b + "ln2.bias");
  }
  return out;
}

Tensor encoder_layer_input(Context& ctx, const BertEncoder& encoder, const TokenBatch& batch) {
  for (std::size_t i = 0; i < batch.lengths.size(); ++i)
    HEADCOUNT_CHECK(batch.lengths[i] == batch.seq_len, "batch lengths",
                    concat("all equal to seq_len = ", batch.seq_len, " (no padding)"),
                    concat(batch.lengths[i], " at row ", i));
  Tensor x(DType::f32, {batch.batch, batch.seq_len, encoder.dim()});
  encoder.forward(ctx, batch, x.view(), EncoderForwardOptions{.end_layer = 0});
  return x;
}

}  // namespace headcount
