// The trainable model: parameters in the header's order and names, a forward that keeps
// what the backward needs in buffers the model owns (sized once per batch shape, so a warm
// training step allocates nothing), and the backward pass written out block by block.
//
// Per block l (N = batch·seq_len rows), the buffers:
//   x[l]        [N, d_model]  the block's input (x[layers] is the last block's output)
//   pre-LN:  h1 = LN1(x[l]); mid = x[l] + Attn(h1); h2 = LN2(mid); u = h2·W_up + b_up;
//            g = gelu(u); x[l+1] = mid + g·W_down + b_down
//   post-LN: s1 = x[l] + Attn(x[l]); mid = LN1(s1); u = mid·W_up + b_up; g = gelu(u);
//            s2 = mid + g·W_down + b_down; x[l+1] = LN2(s2)
//   attention-only blocks stop at mid, which is then x[l+1].
// The backward walks the same lines bottom-up with one running gradient of the residual
// stream (d_x) and two spare [N, d_model] buffers.
#include "headcount/train/model.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "headcount/error.h"
#include "layers/gemm.h"
#include "train/attention_block.h"
#include "train/cross_entropy.h"
#include "train/embedding.h"
#include "train/gelu.h"
#include "train/layer_norm.h"
#include "train/linear.h"
#include "train/rms_norm.h"
#include "train/rng.h"
#include "train/swiglu.h"

namespace headcount::train {

using detail::concat;

namespace {

// Indices into Model::parameters() of one block's tensors (-1: absent).
struct BlockIndex {
  int ln1_w = -1, ln1_b = -1, w_qkv = -1, b_qkv = -1, w_o = -1, b_o = -1;
  int ln2_w = -1, ln2_b = -1, w_gate = -1, w_up = -1, b_up = -1, w_down = -1, b_down = -1;
};

struct BlockBuffers {
  Tensor x;             // input [N, D]
  Tensor ln1_in_or_h1;  // pre: h1 = LN1(x); post: s1 (LN1's input)
  Tensor ln1_mean, ln1_rstd;
  Tensor qkv, concat, gated, lse;
  Tensor mid;           // [N, D]
  Tensor ln2_in_or_h2;  // pre: h2 = LN2(mid); post: s2 (LN2's input)
  Tensor ln2_mean, ln2_rstd;
  Tensor u, g;   // [N, d_ff]: the FFN's pre-activation (swiglu: x·W_gate) and activation
  Tensor up;     // [N, d_ff]: swiglu's x·W_up
  Tensor probs;  // [B, heads, T, T] when kept
};

Tensor f32(std::vector<std::int64_t> shape) { return Tensor(DType::f32, std::move(shape)); }

}  // namespace

struct Model::Impl {
  int tok_emb = -1, pos_emb = -1, lnf_w = -1, lnf_b = -1, head_w = -1, head_b = -1;
  std::vector<BlockIndex> blocks;

  std::int64_t batch = 0, seq_len = 0;  // the shape the buffers were sized for
  bool has_probs = false;
  std::vector<BlockBuffers> layer;
  Tensor x_final;  // [N, D]: x[layers]
  Tensor lnf_out, lnf_mean, lnf_rstd;
  Tensor logits;  // [N, vocab]; the backward overwrites it with dlogits
  std::vector<double> row_loss;
  std::vector<std::int32_t> tokens, targets;
  Tensor d_x, d_a, d_b, d_qkv, d_concat, d_split, d_u, d_up, attn_out;
  std::vector<float> gates;  // every layer's heads in turn: layer l's start at gate_offset[l]
  std::vector<std::size_t> gate_offset;  // [layers + 1]
  std::vector<std::vector<double>> gate_grads;
  std::vector<std::vector<double>>
      sequence_gate_grads;                // [layers][batch * heads_l], the last backward's
  std::vector<std::int64_t> key_lengths;  // the last forward's key padding (its backward uses it)
  bool hidden_ready = false;  // forward_hidden ran and nothing has used the buffers since
  Kernel hidden_kernel = Kernel::streaming;
  Model::PartialSum partial_sum;  // tensor parallel: sums a block's partial output over ranks
};

namespace {

void add_parameter(std::vector<Parameter>& params, std::string name,
                   std::vector<std::int64_t> shape, bool decay) {
  Parameter p{.name = std::move(name), .value = f32(shape), .grad = f32(shape), .decay = decay};
  params.push_back(std::move(p));
}

}  // namespace

Model::Model(const ModelConfig& config, std::uint64_t seed)
    : config_(resolve(config)), impl_(std::make_shared<Impl>()) {
  const ModelConfig& c = config_;
  Impl& m = *impl_;
  const std::int64_t D = c.d_model;
  auto add = [&](std::string name, std::vector<std::int64_t> shape) {
    // nanoGPT's rule: matrices (and embeddings) decay, vectors (biases, LayerNorm) do not.
    const bool decay = shape.size() >= 2;
    add_parameter(params_, std::move(name), std::move(shape), decay);
    return static_cast<int>(params_.size()) - 1;
  };
  m.tok_emb = add("tok_emb", {c.vocab, D});
  if (c.rope_base == 0) m.pos_emb = add("pos_emb", {c.context, D});
  auto add_bias = [&](std::string name, std::int64_t n) {
    return c.biases ? add(std::move(name), {n}) : -1;
  };
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = concat("blocks.", l, ".");
    const std::int64_t W = (c.heads_in(l) + 2 * c.kv_heads_in(l)) * c.head_dim,
                       C = c.heads_in(l) * c.head_dim;
    BlockIndex b;
    b.ln1_w = add(p + "ln1.weight", {D});
    if (!c.rms_norm) b.ln1_b = add(p + "ln1.bias", {D});
    b.w_qkv = add(p + "attn.w_qkv", {D, W});
    b.b_qkv = add_bias(p + "attn.b_qkv", W);
    b.w_o = add(p + "attn.w_o", {C, D});
    b.b_o = add_bias(p + "attn.b_o", D);
    if (!c.attention_only) {
      b.ln2_w = add(p + "ln2.weight", {D});
      if (!c.rms_norm) b.ln2_b = add(p + "ln2.bias", {D});
      if (c.swiglu) b.w_gate = add(p + "ffn.w_gate", {D, c.d_ff});
      b.w_up = add(p + "ffn.w_up", {D, c.d_ff});
      b.b_up = add_bias(p + "ffn.b_up", c.d_ff);
      b.w_down = add(p + "ffn.w_down", {c.d_ff, D});
      b.b_down = add_bias(p + "ffn.b_down", D);
    }
    m.blocks.push_back(b);
  }
  if (c.norm == NormPlacement::pre) {
    m.lnf_w = add("ln_f.weight", {D});
    if (!c.rms_norm) m.lnf_b = add("ln_f.bias", {D});
  }
  if (!c.tied_head) m.head_w = add("head.weight", {D, c.vocab});
  m.head_b = add_bias("head.bias", c.vocab);
  if (c.frozen_biases)
    for (Parameter& p : params_) p.frozen = p.value.rank() == 1 && !p.name.ends_with(".weight");

  // Init in parameter order from one stream: matrices ~ N(0, init_std), LayerNorm weights 1,
  // every bias 0.
  // With qk_init_std, W_qkv's Q and K columns (the first (heads + kv_heads) head_dim of each
  // row) take that std: the same draws, scaled.
  NormalSampler normal(seed);
  for (Parameter& p : params_) {
    float* v = p.value.data<float>();
    const bool is_ln_weight = p.name.find("ln") != std::string::npos && p.name.ends_with(".weight");
    if (p.value.rank() >= 2) {
      std::int64_t qk_cols = 0;  // W_qkv's Q and K columns: (heads + kv_heads) * head_dim
      if (c.qk_init_std > 0 && p.name.ends_with(".attn.w_qkv")) {
        const std::int64_t layer = std::stoll(p.name.substr(7, p.name.find('.', 7) - 7));
        qk_cols = (c.heads_in(layer) + c.kv_heads_in(layer)) * c.head_dim;
      }
      const std::int64_t cols = p.value.size(p.value.rank() - 1);
      for (std::int64_t i = 0; i < p.value.numel(); ++i)
        v[i] =
            static_cast<float>(normal.next() * (i % cols < qk_cols ? c.qk_init_std : c.init_std));
    } else if (is_ln_weight) {
      std::fill(v, v + p.value.numel(), 1.0f);
    }
  }
  m.gate_offset.assign(1, 0);
  for (std::int64_t l = 0; l < c.layers; ++l) {
    m.gate_offset.push_back(m.gate_offset.back() + static_cast<std::size_t>(c.heads_in(l)));
    m.gate_grads.emplace_back(static_cast<std::size_t>(c.heads_in(l)));
    m.sequence_gate_grads.emplace_back();
  }
  m.gates.assign(m.gate_offset.back(), 1.0f);
}

void Model::set_partial_sum(PartialSum sum) { impl_->partial_sum = std::move(sum); }

std::int64_t Model::parameter_count() const {
  std::int64_t count = 0;
  for (const Parameter& p : params_) count += p.value.numel();
  return count;
}

const Tensor& Model::probs(std::int64_t layer) const {
  HEADCOUNT_CHECK(impl_->has_probs, "probs", "a forward call with keep_probs", "none");
  HEADCOUNT_CHECK(layer >= 0 && layer < config_.layers, "layer",
                  concat("in [0, ", config_.layers, ")"), layer);
  return impl_->layer[static_cast<std::size_t>(layer)].probs;
}

namespace {

struct Run {
  const ModelConfig& c;
  std::vector<Parameter>& params;
  Model::Impl& m;
  // A parameter the configuration does not have (index -1): null, which the kernels read as
  // "no bias" / "no position table".
  const float* value(int i) const {
    return i < 0 ? nullptr : params[static_cast<std::size_t>(i)].value.data<const float>();
  }
  float* grad(int i) const {
    return i < 0 ? nullptr : params[static_cast<std::size_t>(i)].grad.data<float>();
  }
};

void check_batch(const ModelConfig& c, const Batch& batch) {
  HEADCOUNT_CHECK(batch.batch >= 1, "batch.batch", ">= 1", batch.batch);
  HEADCOUNT_CHECK(batch.seq_len >= 1 && batch.seq_len <= c.context, "batch.seq_len",
                  concat("in [1, context = ", c.context, "]"), batch.seq_len);
  const auto n = static_cast<std::size_t>(batch.batch * batch.seq_len);
  HEADCOUNT_CHECK(batch.tokens.size() == n, "batch.tokens", concat(n, " entries (batch * seq_len)"),
                  batch.tokens.size());
  HEADCOUNT_CHECK(batch.targets.size() == n, "batch.targets",
                  concat(n, " entries (batch * seq_len)"), batch.targets.size());
  for (std::size_t i = 0; i < n; ++i) {
    HEADCOUNT_CHECK(batch.tokens[i] >= 0 && batch.tokens[i] < c.vocab, "batch.tokens",
                    concat("values in [0, vocab = ", c.vocab, ")"),
                    concat(batch.tokens[i], " at index ", i));
    HEADCOUNT_CHECK(
        batch.targets[i] == Batch::kIgnore || (batch.targets[i] >= 0 && batch.targets[i] < c.vocab),
        "batch.targets", concat("values in [0, vocab = ", c.vocab, ") or -1 (ignored)"),
        concat(batch.targets[i], " at index ", i));
  }
}

void set_gates(const ModelConfig& c, Model::Impl& m, const ForwardOptions& options) {
  if (options.head_gates.empty()) {
    std::fill(m.gates.begin(), m.gates.end(), 1.0f);
    return;
  }
  HEADCOUNT_CHECK(static_cast<std::int64_t>(options.head_gates.size()) == c.layers, "head_gates",
                  concat(c.layers, " layers"), options.head_gates.size());
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const auto& row = options.head_gates[static_cast<std::size_t>(l)];
    HEADCOUNT_CHECK(static_cast<std::int64_t>(row.size()) == c.heads_in(l),
                    concat("head_gates[", l, "]"), concat(c.heads_in(l), " heads"), row.size());
    for (std::int64_t h = 0; h < c.heads_in(l); ++h) {
      const float g = row[static_cast<std::size_t>(h)];
      HEADCOUNT_CHECK(std::isfinite(g), concat("head_gates[", l, "][", h, "]"), "a finite value",
                      g);
      m.gates[m.gate_offset[static_cast<std::size_t>(l)] + static_cast<std::size_t>(h)] = g;
    }
  }
}

void set_key_lengths(Model::Impl& m, std::int64_t batch, std::int64_t seq_len,
                     const ForwardOptions& options) {
  HEADCOUNT_CHECK(
      options.key_lengths.empty() || static_cast<std::int64_t>(options.key_lengths.size()) == batch,
      "key_lengths", concat("empty or ", batch, " entries (one per batch element)"),
      options.key_lengths.size());
  for (std::size_t b = 0; b < options.key_lengths.size(); ++b)
    HEADCOUNT_CHECK(options.key_lengths[b] >= 0 && options.key_lengths[b] <= seq_len,
                    concat("key_lengths[", b, "]"), concat("in [0, seq_len = ", seq_len, "]"),
                    options.key_lengths[b]);
  m.key_lengths = options.key_lengths;
}

bool gates_all_one(const Model::Impl& m, const ModelConfig& c, std::int64_t l) {
  for (std::int64_t h = 0; h < c.heads_in(l); ++h)
    if (m.gates[m.gate_offset[static_cast<std::size_t>(l)] + static_cast<std::size_t>(h)] != 1.0f)
      return false;
  return true;
}

void size_buffers(const ModelConfig& c, Model::Impl& m, std::int64_t batch, std::int64_t seq_len,
                  bool probs) {
  if (m.batch == batch && m.seq_len == seq_len && (!probs || m.has_probs)) return;
  const std::int64_t N = batch * seq_len, D = c.d_model, F = c.d_ff;
  // The backward's scratch (d_qkv, d_split, d_concat) serves every layer: the widest one's size.
  std::int64_t W = 0, C = 0;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    W = std::max(W, (c.heads_in(l) + 2 * c.kv_heads_in(l)) * c.head_dim);
    C = std::max(C, c.heads_in(l) * c.head_dim);
  }
  m.layer.clear();
  m.layer.resize(static_cast<std::size_t>(c.layers));
  for (std::int64_t l = 0; l < c.layers; ++l) {
    BlockBuffers& b = m.layer[static_cast<std::size_t>(l)];
    const std::int64_t heads = c.heads_in(l), W_l = (heads + 2 * c.kv_heads_in(l)) * c.head_dim,
                       C_l = heads * c.head_dim;
    b.x = f32({N, D});
    b.ln1_in_or_h1 = f32({N, D});
    b.ln1_mean = f32({N});
    b.ln1_rstd = f32({N});
    b.qkv = f32({N, W_l});
    b.concat = f32({N, C_l});
    b.gated = f32({N, C_l});
    b.lse = f32({batch, heads, seq_len});
    b.mid = f32({N, D});
    if (!c.attention_only) {
      b.ln2_in_or_h2 = f32({N, D});
      b.ln2_mean = f32({N});
      b.ln2_rstd = f32({N});
      b.u = f32({N, F});
      b.g = f32({N, F});
      if (c.swiglu) b.up = f32({N, F});
    }
    if (probs) b.probs = f32({batch, heads, seq_len, seq_len});
  }
  m.x_final = f32({N, D});
  if (c.norm == NormPlacement::pre) {
    m.lnf_out = f32({N, D});
    m.lnf_mean = f32({N});
    m.lnf_rstd = f32({N});
  }
  m.logits = f32({N, c.vocab});
  m.row_loss.assign(static_cast<std::size_t>(N), 0.0);
  m.d_x = f32({N, D});
  m.d_a = f32({N, D});
  m.d_b = f32({N, D});
  m.attn_out = f32({N, D});
  m.d_qkv = f32({N, W});
  m.d_split = f32({N * W});
  m.d_concat = f32({N, C});
  if (!c.attention_only) m.d_u = f32({N, F});
  if (!c.attention_only && c.swiglu) m.d_up = f32({N, F});
  m.batch = batch;
  m.seq_len = seq_len;
  m.has_probs = probs;
}

AttentionBlockShape attention_shape(const ModelConfig& c, const Model::Impl& m, std::int64_t layer,
                                    std::int64_t batch, std::int64_t seq_len, Kernel kernel) {
  return {.batch = batch,
          .seq_len = seq_len,
          .d_model = c.d_model,
          .heads = c.heads_in(layer),
          .kv_heads = c.kv_heads_in(layer),
          .head_dim = c.head_dim,
          .scale = *c.scale,
          .causal = c.causal,
          .rope_base = c.rope_base,
          .kernel = kernel,
          .key_lengths = m.key_lengths};
}

AttentionBlockWeights attention_weights(const Run& r, const BlockIndex& b) {
  return {.w_qkv = r.value(b.w_qkv),
          .b_qkv = r.value(b.b_qkv),
          .w_o = r.value(b.w_o),
          .b_o = r.value(b.b_o)};
}

AttentionBlockSaved attention_saved(BlockBuffers& buf, bool gated) {
  return {.qkv = buf.qkv.data<float>(),
          .concat = buf.concat.data<float>(),
          .gated = gated ? buf.gated.data<float>() : buf.concat.data<float>(),
          .lse = buf.lse.data<float>()};
}

// A tensor-parallel slice's partial sum of a block's output (or of its input's gradient) over
// the ranks; nothing in one process.
void sum_over_ranks(const Model::Impl& m, float* data, std::int64_t count) {
  if (m.partial_sum) m.partial_sum(data, count);
}

void add(Context& ctx, const float* a, const float* b, float* out, std::int64_t n) {
  constexpr std::int64_t kChunk = 16384;
  ctx.parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(n, (task + 1) * kChunk);
    for (std::int64_t i = task * kChunk; i < end; ++i) out[i] = a[i] + b[i];
  });
}

// A pre-norm model's norm (LayerNorm or RMSNorm by the config) with parameters w (and b).
void norm_forward(Context& ctx, const Run& r, int w, int b, const float* x, std::int64_t rows,
                  float* y, float* mean, float* rstd) {
  if (r.c.rms_norm)
    rms_norm_forward(ctx, x, rows, r.c.d_model, r.value(w), y, rstd, r.c.ln_eps);
  else
    layer_norm_forward(ctx, x, rows, r.c.d_model, r.value(w), r.value(b), y, mean, rstd,
                       r.c.ln_eps);
}

void norm_backward(Context& ctx, const Run& r, int w, int b, const float* x, const float* dy,
                   const float* mean, const float* rstd, std::int64_t rows, float* dx,
                   bool accumulate) {
  if (r.c.rms_norm)
    rms_norm_backward(ctx, {.x = x,
                            .dy = dy,
                            .gamma = r.value(w),
                            .rstd = rstd,
                            .rows = rows,
                            .width = r.c.d_model,
                            .dx = dx,
                            .dgamma = r.grad(w),
                            .accumulate_dx = accumulate});
  else
    layer_norm_backward(ctx, {.x = x,
                              .dy = dy,
                              .gamma = r.value(w),
                              .mean = mean,
                              .rstd = rstd,
                              .rows = rows,
                              .width = r.c.d_model,
                              .dx = dx,
                              .dgamma = r.grad(w),
                              .dbeta = r.grad(b),
                              .accumulate_dx = accumulate});
}

// The FFN of a pre-norm block on its normed input h [N, D], into out [N, D]; buf.u, buf.g (and
// buf.up for swiglu) keep what the backward needs.
void ffn_forward(Context& ctx, const Run& r, const BlockIndex& bi, BlockBuffers& buf,
                 const float* h, std::int64_t N, float* out) {
  const std::int64_t D = r.c.d_model, F = r.c.d_ff;
  float* u = buf.u.data<float>();
  float* g = buf.g.data<float>();
  if (r.c.swiglu) {
    linear_forward(ctx, h, N, D, F, r.value(bi.w_gate), nullptr, u);
    linear_forward(ctx, h, N, D, F, r.value(bi.w_up), r.value(bi.b_up), buf.up.data<float>());
    swiglu_forward(ctx, u, buf.up.data<const float>(), g, N * F);
  } else {
    linear_forward(ctx, h, N, D, F, r.value(bi.w_up), r.value(bi.b_up), u);
    gelu_forward(ctx, u, g, N * F);
  }
  linear_forward(ctx, g, N, F, D, r.value(bi.w_down), r.value(bi.b_down), out);
}

// Its backward from d_out = dL/d(out): the FFN's parameter gradients, and dL/dh into d_h
// (added to what is there when `accumulate`).
void ffn_backward(Context& ctx, const Run& r, const BlockIndex& bi, const BlockBuffers& buf,
                  const float* h, const float* d_out, std::int64_t N, float* d_h, bool accumulate) {
  const std::int64_t D = r.c.d_model, F = r.c.d_ff;
  float* d_u = r.m.d_u.data<float>();
  linear_backward(ctx, {.x = buf.g.data<const float>(),
                        .dy = d_out,
                        .w = r.value(bi.w_down),
                        .rows = N,
                        .in = F,
                        .out = D,
                        .dw = r.grad(bi.w_down),
                        .db = r.grad(bi.b_down),
                        .dx = d_u});
  // dL/dh from one of the projections of h (W_gate or W_up), and that projection's gradients.
  auto input_backward = [&](int w, int b, const float* dy, bool accumulate_dh) {
    linear_backward(ctx, {.x = h,
                          .dy = dy,
                          .w = r.value(w),
                          .rows = N,
                          .in = D,
                          .out = F,
                          .dw = r.grad(w),
                          .db = r.grad(b),
                          .dx = d_h,
                          .accumulate_dx = accumulate_dh});
  };
  if (r.c.swiglu) {
    float* d_up = r.m.d_up.data<float>();
    swiglu_backward(ctx, buf.u.data<const float>(), buf.up.data<const float>(), d_u, d_u, d_up,
                    N * F);
    input_backward(bi.w_gate, -1, d_u, accumulate);  // the gate has no bias
    input_backward(bi.w_up, bi.b_up, d_up, true);
    return;
  }
  gelu_backward(ctx, buf.u.data<const float>(), d_u, d_u, N * F);
  input_backward(bi.w_up, bi.b_up, d_u, accumulate);
}

// The blocks' forward from m.layer[0].x to m.x_final.
void run_blocks(Context& ctx, const Run& r, std::int64_t B, std::int64_t T,
                const ForwardOptions& options) {
  const ModelConfig& c = r.c;
  Model::Impl& m = r.m;
  const std::int64_t N = B * T, D = c.d_model;
  const bool pre = c.norm == NormPlacement::pre;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const AttentionBlockShape shape = attention_shape(c, m, l, B, T, options.kernel);
    BlockBuffers& buf = m.layer[static_cast<std::size_t>(l)];
    const BlockIndex& bi = m.blocks[static_cast<std::size_t>(l)];
    float* next = l + 1 < c.layers ? m.layer[static_cast<std::size_t>(l + 1)].x.data<float>()
                                   : m.x_final.data<float>();
    const float* x = buf.x.data<const float>();
    const bool gated = !gates_all_one(m, c, l);
    const float* gates =
        gated ? m.gates.data() + m.gate_offset[static_cast<std::size_t>(l)] : nullptr;
    float* mid = c.attention_only ? next : buf.mid.data<float>();
    float* a = m.attn_out.data<float>();
    const TensorView probs = options.keep_probs ? buf.probs.view() : TensorView{};
    if (pre) {
      float* h1 = buf.ln1_in_or_h1.data<float>();
      norm_forward(ctx, r, bi.ln1_w, bi.ln1_b, x, N, h1, buf.ln1_mean.data<float>(),
                   buf.ln1_rstd.data<float>());
      attention_block_forward(ctx, shape, attention_weights(r, bi), h1, gates,
                              attention_saved(buf, gated), a, probs);
      sum_over_ranks(m, a, N * D);
      add(ctx, x, a, mid, N * D);
    } else {
      float* s1 = buf.ln1_in_or_h1.data<float>();
      attention_block_forward(ctx, shape, attention_weights(r, bi), x, gates,
                              attention_saved(buf, gated), a, probs);
      sum_over_ranks(m, a, N * D);
      add(ctx, x, a, s1, N * D);
      layer_norm_forward(ctx, s1, N, D, r.value(bi.ln1_w), r.value(bi.ln1_b), mid,
                         buf.ln1_mean.data<float>(), buf.ln1_rstd.data<float>(), c.ln_eps);
    }
    if (c.attention_only) continue;
    if (pre) {
      float* h2 = buf.ln2_in_or_h2.data<float>();
      norm_forward(ctx, r, bi.ln2_w, bi.ln2_b, mid, N, h2, buf.ln2_mean.data<float>(),
                   buf.ln2_rstd.data<float>());
      ffn_forward(ctx, r, bi, buf, h2, N, a);
      sum_over_ranks(m, a, N * D);
      add(ctx, mid, a, next, N * D);
    } else {
      float* s2 = buf.ln2_in_or_h2.data<float>();
      ffn_forward(ctx, r, bi, buf, mid, N, a);
      sum_over_ranks(m, a, N * D);
      add(ctx, mid, a, s2, N * D);
      layer_norm_forward(ctx, s2, N, D, r.value(bi.ln2_w), r.value(bi.ln2_b), next,
                         buf.ln2_mean.data<float>(), buf.ln2_rstd.data<float>(), c.ln_eps);
    }
  }
}

// The forward pass over a checked batch; returns the loss (dlogits into m.logits if asked).
CrossEntropyResult run_forward(Context& ctx, const Run& r, const Batch& batch,
                               const ForwardOptions& options, bool gradient) {
  const ModelConfig& c = r.c;
  Model::Impl& m = r.m;
  const std::int64_t B = batch.batch, T = batch.seq_len, N = B * T, D = c.d_model;
  const bool pre = c.norm == NormPlacement::pre;
  embedding_forward(
      ctx, {.batch = B, .seq_len = T, .d_model = D, .vocab = c.vocab, .context = c.context},
      batch.tokens.data(), r.value(m.tok_emb), r.value(m.pos_emb), m.layer[0].x.data<float>());
  run_blocks(ctx, r, B, T, options);
  const float* top = m.x_final.data<const float>();
  if (pre) {
    norm_forward(ctx, r, m.lnf_w, m.lnf_b, top, N, m.lnf_out.data<float>(),
                 m.lnf_mean.data<float>(), m.lnf_rstd.data<float>());
    top = m.lnf_out.data<const float>();
  }
  if (c.tied_head)  // logits = top · tok_embᵀ: tok_emb [vocab, D] read transposed in place
    layers::gemm(ctx, {.m = N,
                       .n = c.vocab,
                       .k = D,
                       .a = top,
                       .lda = D,
                       .b = r.value(m.tok_emb),
                       .ldb = D,
                       .c = m.logits.data<float>(),
                       .ldc = c.vocab,
                       .bias = r.value(m.head_b),
                       .trans_b = true});
  else
    linear_forward(ctx, top, N, D, c.vocab, r.value(m.head_w), r.value(m.head_b),
                   m.logits.data<float>());
  if (options.teacher_logits != nullptr)
    return distillation_loss(ctx, m.logits.data<const float>(), options.teacher_logits,
                             batch.targets.data(), N, c.vocab, m.row_loss.data(),
                             gradient ? m.logits.data<float>() : nullptr, options.loss_normalizer);
  return cross_entropy(ctx, m.logits.data<const float>(), batch.targets.data(), N, c.vocab,
                       m.row_loss.data(), gradient ? m.logits.data<float>() : nullptr,
                       options.loss_normalizer);
}

void run_blocks_backward(Context& ctx, const Run& r, std::int64_t B, std::int64_t T, Kernel kernel);

void run_backward(Context& ctx, const Run& r, const Batch& batch, const ForwardOptions& options) {
  const ModelConfig& c = r.c;
  Model::Impl& m = r.m;
  const std::int64_t B = batch.batch, T = batch.seq_len, N = B * T, D = c.d_model;
  const bool pre = c.norm == NormPlacement::pre;
  float* d_x = m.d_x.data<float>();  // dL/d(residual stream) at the current point
  float* d_a = m.d_a.data<float>();
  const float* dlogits = m.logits.data<const float>();

  // Head and final norm.
  if (pre) {
    if (c.tied_head) {  // d_top = dlogits · tok_emb; tok_emb's share is added after the embedding
      layers::gemm(ctx, {.m = N,
                         .n = D,
                         .k = c.vocab,
                         .a = dlogits,
                         .lda = c.vocab,
                         .b = r.value(m.tok_emb),
                         .ldb = D,
                         .c = d_a,
                         .ldc = D});
      if (m.head_b >= 0) column_sums(ctx, dlogits, N, c.vocab, r.grad(m.head_b));
    } else {
      linear_backward(ctx, {.x = m.lnf_out.data<const float>(),
                            .dy = dlogits,
                            .w = r.value(m.head_w),
                            .rows = N,
                            .in = D,
                            .out = c.vocab,
                            .dw = r.grad(m.head_w),
                            .db = r.grad(m.head_b),
                            .dx = d_a});
    }
    norm_backward(ctx, r, m.lnf_w, m.lnf_b, m.x_final.data<const float>(), d_a,
                  m.lnf_mean.data<const float>(), m.lnf_rstd.data<const float>(), N, d_x, false);
  } else {
    linear_backward(ctx, {.x = m.x_final.data<const float>(),
                          .dy = dlogits,
                          .w = r.value(m.head_w),
                          .rows = N,
                          .in = D,
                          .out = c.vocab,
                          .dw = r.grad(m.head_w),
                          .db = r.grad(m.head_b),
                          .dx = d_x});
  }

  run_blocks_backward(ctx, r, B, T, options.kernel);
  embedding_backward(
      ctx, {.batch = B, .seq_len = T, .d_model = D, .vocab = c.vocab, .context = c.context},
      batch.tokens.data(), d_x, r.grad(m.tok_emb), r.grad(m.pos_emb));
  if (c.tied_head)  // d_tok_emb += dlogitsᵀ · top (the head's share of the tied matrix)
    layers::gemm(ctx, {.m = c.vocab,
                       .n = D,
                       .k = N,
                       .a = dlogits,
                       .lda = c.vocab,
                       .b = m.lnf_out.data<const float>(),
                       .ldb = D,
                       .c = r.grad(m.tok_emb),
                       .ldc = D,
                       .accumulate = true,
                       .trans_a = true});
}

// The blocks' backward from m.d_x = dL/d(x_final) down to m.d_x = dL/d(layer 0's input).
void run_blocks_backward(Context& ctx, const Run& r, std::int64_t B, std::int64_t T,
                         Kernel kernel) {
  const ModelConfig& c = r.c;
  Model::Impl& m = r.m;
  const std::int64_t N = B * T, D = c.d_model;
  const bool pre = c.norm == NormPlacement::pre;
  float* d_x = m.d_x.data<float>();
  float* d_a = m.d_a.data<float>();
  float* d_b = m.d_b.data<float>();
  for (std::int64_t l = c.layers - 1; l >= 0; --l) {
    const AttentionBlockShape shape = attention_shape(c, m, l, B, T, kernel);
    BlockBuffers& buf = m.layer[static_cast<std::size_t>(l)];
    const BlockIndex& bi = m.blocks[static_cast<std::size_t>(l)];
    const bool gated = !gates_all_one(m, c, l);
    const float* gates =
        gated ? m.gates.data() + m.gate_offset[static_cast<std::size_t>(l)] : nullptr;
    double* gate_grads = m.gate_grads[static_cast<std::size_t>(l)].data();
    std::vector<double>& sequence_gates = m.sequence_gate_grads[static_cast<std::size_t>(l)];
    sequence_gates.assign(static_cast<std::size_t>(B * c.heads_in(l)), 0.0);
    const float* x = buf.x.data<const float>();
    const float* mid =
        c.attention_only
            ? (l + 1 < c.layers ? m.layer[static_cast<std::size_t>(l + 1)].x.data<const float>()
                                : m.x_final.data<const float>())
            : buf.mid.data<const float>();
    AttentionBlockBackward attn{.x = nullptr,
                                .gates = gates,
                                .saved = attention_saved(buf, gated),
                                .d_qkv = m.d_qkv.data<float>(),
                                .d_concat = m.d_concat.data<float>(),
                                .d_split = m.d_split.data<float>()};
    const AttentionBlockGrads attn_grads{.w_qkv = r.grad(bi.w_qkv),
                                         .b_qkv = r.grad(bi.b_qkv),
                                         .w_o = r.grad(bi.w_o),
                                         .b_o = r.grad(bi.b_o),
                                         .gates = gate_grads,
                                         .sequence_gates = sequence_gates.data()};
    if (pre) {
      if (!c.attention_only) {
        // x_next = mid + FFN(norm2(mid)): d_x flows to mid directly and through the FFN.
        ffn_backward(ctx, r, bi, buf, buf.ln2_in_or_h2.data<const float>(), d_x, N, d_a, false);
        sum_over_ranks(m, d_a, N * D);
        norm_backward(ctx, r, bi.ln2_w, bi.ln2_b, mid, d_a, buf.ln2_mean.data<const float>(),
                      buf.ln2_rstd.data<const float>(), N, d_x, true);
      }
      // mid = x + Attn(norm1(x)).
      attn.x = buf.ln1_in_or_h1.data<const float>();
      attn.dy = d_x;
      attn.dx = d_a;
      attention_block_backward(ctx, shape, attention_weights(r, bi), attn, attn_grads);
      sum_over_ranks(m, d_a, N * D);
      norm_backward(ctx, r, bi.ln1_w, bi.ln1_b, x, d_a, buf.ln1_mean.data<const float>(),
                    buf.ln1_rstd.data<const float>(), N, d_x, true);
    } else {
      float* d_mid = d_x;
      if (!c.attention_only) {
        // x_next = LN2(s2), s2 = mid + FFN(mid).
        layer_norm_backward(ctx, {.x = buf.ln2_in_or_h2.data<const float>(),
                                  .dy = d_x,
                                  .gamma = r.value(bi.ln2_w),
                                  .mean = buf.ln2_mean.data<const float>(),
                                  .rstd = buf.ln2_rstd.data<const float>(),
                                  .rows = N,
                                  .width = D,
                                  .dx = d_a,
                                  .dgamma = r.grad(bi.ln2_w),
                                  .dbeta = r.grad(bi.ln2_b)});
        // d_a = d_s2 goes to mid directly and through the FFN (added to it). A tensor-parallel
        // slice's FFN gives a partial dL/dmid, summed over the ranks before d_s2 is added.
        if (m.partial_sum) {
          ffn_backward(ctx, r, bi, buf, mid, d_a, N, d_b, false);
          sum_over_ranks(m, d_b, N * D);
          add(ctx, d_a, d_b, d_a, N * D);
        } else {
          ffn_backward(ctx, r, bi, buf, mid, d_a, N, d_a, true);
        }
        d_mid = d_a;
      }
      // mid = LN1(s1), s1 = x + Attn(x): d_s1 goes to x directly and through the attention.
      float* d_s1 = d_mid == d_x ? d_a : d_b;
      layer_norm_backward(ctx, {.x = buf.ln1_in_or_h1.data<const float>(),
                                .dy = d_mid,
                                .gamma = r.value(bi.ln1_w),
                                .mean = buf.ln1_mean.data<const float>(),
                                .rstd = buf.ln1_rstd.data<const float>(),
                                .rows = N,
                                .width = D,
                                .dx = d_s1,
                                .dgamma = r.grad(bi.ln1_w),
                                .dbeta = r.grad(bi.ln1_b)});
      attn.x = x;
      attn.dy = d_s1;
      attn.dx = d_x;
      attention_block_backward(ctx, shape, attention_weights(r, bi), attn, attn_grads);
      sum_over_ranks(m, d_x, N * D);
      add(ctx, d_x, d_s1, d_x, N * D);
    }
  }
}

// What forward and forward_backward do before running: the batch, gates and key padding checked
// and set, the buffers sized for the batch, the hidden-state hand-off of forward_hidden ended.
Run prepare_batch_call(const ModelConfig& c, std::vector<Parameter>& params, Model::Impl& m,
                       const Batch& batch, const ForwardOptions& options) {
  check_batch(c, batch);
  HEADCOUNT_CHECK(options.loss_normalizer >= 0, "options.loss_normalizer",
                  ">= 0 (0: the batch's scored positions)", options.loss_normalizer);
  set_gates(c, m, options);
  set_key_lengths(m, batch.batch, batch.seq_len, options);
  size_buffers(c, m, batch.batch, batch.seq_len, options.keep_probs);
  m.hidden_ready = false;
  return Run{c, params, m};
}

// A frozen parameter's gradient is zero, so AdamW leaves it exactly where it is (m and v stay
// 0, and p - step * 0 / (0 + eps) = p) and the clipping norm does not count it.
void zero_frozen_grads(std::vector<Parameter>& params) {
  for (Parameter& p : params)
    if (p.frozen) std::fill_n(p.grad.data<float>(), p.grad.numel(), 0.0f);
}

}  // namespace

double Model::forward(Context& ctx, const Batch& batch, float* logits,
                      const ForwardOptions& options) {
  const Run run = prepare_batch_call(config_, params_, *impl_, batch, options);
  const CrossEntropyResult ce = run_forward(ctx, run, batch, options, false);
  if (logits != nullptr)
    std::copy_n(impl_->logits.data<const float>(), impl_->logits.numel(), logits);
  return ce.loss;
}

StepResult Model::forward_backward(Context& ctx, const Batch& batch,
                                   const ForwardOptions& options) {
  const Run run = prepare_batch_call(config_, params_, *impl_, batch, options);
  const CrossEntropyResult ce = run_forward(ctx, run, batch, options, true);
  run_backward(ctx, run, batch, options);
  zero_frozen_grads(params_);
  return {.loss = ce.loss, .scored = ce.scored, .gate_grads = impl_->gate_grads};
}

void Model::forward_hidden(Context& ctx, std::int64_t batch, std::int64_t seq_len,
                           const float* x_in, float* hidden, const ForwardOptions& options) {
  HEADCOUNT_CHECK(batch >= 1, "batch", ">= 1", batch);
  HEADCOUNT_CHECK(seq_len >= 1 && seq_len <= config_.context, "seq_len",
                  concat("in [1, context = ", config_.context, "]"), seq_len);
  HEADCOUNT_CHECK(x_in != nullptr && hidden != nullptr, "x_in / hidden", "two buffers",
                  "a null pointer");
  HEADCOUNT_CHECK(!options.keep_probs, "options.keep_probs", "false in forward_hidden", "true");
  set_gates(config_, *impl_, options);
  set_key_lengths(*impl_, batch, seq_len, options);
  size_buffers(config_, *impl_, batch, seq_len, false);
  const std::int64_t n = batch * seq_len * config_.d_model;
  for (std::int64_t i = 0; i < n; ++i)
    HEADCOUNT_CHECK(std::isfinite(x_in[i]), "x_in", "finite values",
                    concat(x_in[i], " at index ", i));
  std::copy_n(x_in, n, impl_->layer[0].x.data<float>());
  const Run run{config_, params_, *impl_};
  run_blocks(ctx, run, batch, seq_len, options);
  std::copy_n(impl_->x_final.data<const float>(), n, hidden);
  impl_->hidden_kernel = options.kernel;
  impl_->hidden_ready = true;
}

std::vector<std::vector<double>> Model::backward_hidden(Context& ctx, const float* d_hidden,
                                                        float* d_x_in) {
  Impl& m = *impl_;
  HEADCOUNT_CHECK(m.hidden_ready, "backward_hidden", "a forward_hidden call before it", "none");
  HEADCOUNT_CHECK(d_hidden != nullptr, "d_hidden", "a buffer", "a null pointer");
  m.hidden_ready = false;  // the buffers may be reused by any other call from here on
  const std::int64_t n = m.batch * m.seq_len * config_.d_model;
  std::copy_n(d_hidden, n, m.d_x.data<float>());
  const Run run{config_, params_, m};
  run_blocks_backward(ctx, run, m.batch, m.seq_len, m.hidden_kernel);
  for (int i : {m.tok_emb, m.pos_emb, m.lnf_w, m.lnf_b, m.head_w, m.head_b})
    if (i >= 0) {
      Tensor& g = params_[static_cast<std::size_t>(i)].grad;
      std::fill_n(g.data<float>(), g.numel(), 0.0f);
    }
  zero_frozen_grads(params_);
  if (d_x_in != nullptr) std::copy_n(m.d_x.data<const float>(), n, d_x_in);
  return m.gate_grads;
}

std::vector<std::vector<std::vector<double>>> Model::sequence_gate_grads() const {
  const Impl& m = *impl_;
  const std::int64_t L = config_.layers;
  HEADCOUNT_CHECK(L > 0 && !m.sequence_gate_grads[0].empty(), "sequence_gate_grads",
                  "a backward before it", "none");
  const std::int64_t B =
      static_cast<std::int64_t>(m.sequence_gate_grads[0].size()) / config_.heads_in(0);
  std::vector<std::vector<std::vector<double>>> out(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t l = 0; l < L; ++l) {
      const std::int64_t H = config_.heads_in(l);
      const auto first = m.sequence_gate_grads[static_cast<std::size_t>(l)].begin() + b * H;
      out[static_cast<std::size_t>(b)].emplace_back(first, first + H);
    }
  return out;
}

}  // namespace headcount::train
