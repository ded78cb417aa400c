// MultiHeadAttention: project once (one fused GEMM for self-attention), attend per head
// through strided views of the projection, mix once. See the header for the data path.
#include "headcount/multi_head_attention.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "headcount/error.h"
#include "layers/block_weights.h"
#include "layers/gemm.h"
#include "layers/layer_checks.h"
#include "layers/packed_gemm.h"
#include "layers/rotary.h"

namespace headcount {

using detail::concat;

namespace {

using layers::check_input;

// Workspace slots in the context, one per intermediate the layer keeps.
enum Slot : int { kSlotQkv = 0, kSlotQ, kSlotK, kSlotV, kSlotConcat };

void check_tensor(const Tensor& t, const char* name, std::vector<std::int64_t> shape) {
  HEADCOUNT_CHECK(!t.empty(), name, concat("a tensor ", shape_string(shape)), "no data");
  HEADCOUNT_CHECK(t.dtype() == DType::f32, concat(name, " dtype"), "f32", dtype_name(t.dtype()));
  HEADCOUNT_CHECK(t.shape() == shape, concat(name, " shape"), shape_string(shape),
                  shape_string(t.shape()));
  const float* data = t.data<const float>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(data[i]))
      fail(name, concat("expected finite values, got ", data[i], " at flat index ", i));
}

// y[b] = x[b] · W (+ bias), batch by batch unless the rows are evenly spaced.
void project(Context& ctx, const TensorView& x, const Tensor& w, const Tensor& bias, float* y,
             std::int64_t ldy) {
  const std::int64_t batch = x.shape[0], len = x.shape[1];
  const std::int64_t in = w.size(0), out = w.size(1);
  const bool one_gemm = x.strides[0] == len * x.strides[1];
  for (std::int64_t b = 0; b < (one_gemm ? 1 : batch); ++b) {
    layers::gemm(ctx, {.m = one_gemm ? batch * len : len,
                       .n = out,
                       .k = in,
                       .a = x.ptr<const float>() + b * x.strides[0],
                       .lda = x.strides[1],
                       .b = w.data<const float>(),
                       .ldb = out,
                       .c = y + b * len * ldy,
                       .ldc = ldy,
                       .bias = bias.empty() ? nullptr : bias.data<const float>()});
  }
}

// y[b] = x[b] · W (+ bias) through the packed GEMM (W packed, `out` columns), one call when the
// rows are evenly spaced. Each row's result is independent of the others (packed_gemm.h).
void project_packed(Context& ctx, const TensorView& x, const Tensor& packed,
                    const layers::BlockWeights* blocks, std::int64_t out, const Tensor& bias,
                    float* y, std::int64_t ldy) {
  const std::int64_t batch = x.shape[0], len = x.shape[1];
  const bool one_gemm = x.strides[0] == len * x.strides[1];
  for (std::int64_t b = 0; b < (one_gemm ? 1 : batch); ++b)
    layers::packed_gemm(ctx, {.m = one_gemm ? batch * len : len,
                              .x = x.ptr<const float>() + b * x.strides[0],
                              .ldx = x.strides[1],
                              .w = blocks != nullptr ? nullptr : &packed,
                              .blocks = blocks,
                              .n = out,
                              .bias = bias.empty() ? nullptr : bias.data<const float>(),
                              .y = y + b * len * ldy,
                              .ldy = ldy});
}

// A [batch, len, heads, dim] view of columns [column, column + heads*dim) of a row-major
// [batch*len, row_width] matrix.
TensorView head_view(float* matrix, std::int64_t row_width, std::int64_t column, std::int64_t batch,
                     std::int64_t len, std::int64_t heads, std::int64_t dim) {
  return TensorView::strided(matrix + column, DType::f32, {batch, len, heads, dim},
                             {len * row_width, row_width, dim, 1});
}

Tensor random_tensor(std::mt19937_64& rng, std::vector<std::int64_t> shape, float bound) {
  Tensor t(DType::f32, std::move(shape));
  std::uniform_real_distribution<float> dist(-bound, bound);
  float* data = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) data[i] = dist(rng);
  return t;
}

}  // namespace

MultiHeadAttentionConfig resolve(const MultiHeadAttentionConfig& config) {
  MultiHeadAttentionConfig c = config;
  HEADCOUNT_CHECK(c.d_model >= 1, "d_model", ">= 1", c.d_model);
  HEADCOUNT_CHECK(c.heads >= 1, "heads", ">= 1", c.heads);
  if (c.kv_heads == 0) c.kv_heads = c.heads;
  HEADCOUNT_CHECK(c.kv_heads >= 1 && c.heads % c.kv_heads == 0, "kv_heads",
                  concat("a divisor of heads = ", c.heads), c.kv_heads);
  if (c.head_dim == 0) {
    HEADCOUNT_CHECK(c.d_model % c.heads == 0, "heads",
                    concat("a divisor of d_model = ", c.d_model, " (or set head_dim)"), c.heads);
    c.head_dim = c.d_model / c.heads;
  }
  HEADCOUNT_CHECK(c.head_dim >= 1, "head_dim", ">= 1", c.head_dim);
  if (c.v_head_dim == 0) c.v_head_dim = c.head_dim;
  HEADCOUNT_CHECK(c.v_head_dim >= 1, "v_head_dim", ">= 1", c.v_head_dim);
  if (c.kv_dim == 0) c.kv_dim = c.d_model;
  HEADCOUNT_CHECK(c.kv_dim >= 1, "kv_dim", ">= 1", c.kv_dim);
  HEADCOUNT_CHECK(c.rope_base == 0 || (std::isfinite(c.rope_base) && c.rope_base > 1), "rope_base",
                  "0 (no rotary positions) or a finite number > 1", c.rope_base);
  if (c.rope_base != 0) {
    HEADCOUNT_CHECK(c.head_dim % 2 == 0, "head_dim", "even (rotary positions rotate pairs)",
                    c.head_dim);
    HEADCOUNT_CHECK(c.kv_dim == c.d_model, "kv_dim",
                    concat("d_model = ", c.d_model, " (rotary positions are for self-attention)"),
                    c.kv_dim);
  }
  return c;
}

MultiHeadAttentionWeights MultiHeadAttentionWeights::random(const MultiHeadAttentionConfig& config,
                                                            std::uint64_t seed) {
  const MultiHeadAttentionConfig c = resolve(config);
  std::mt19937_64 rng(seed);
  auto xavier = [&](std::int64_t in, std::int64_t out) {
    return random_tensor(rng, {in, out}, std::sqrt(6.0f / static_cast<float>(in + out)));
  };
  MultiHeadAttentionWeights w;
  w.w_q = xavier(c.d_model, c.heads * c.head_dim);
  w.w_k = xavier(c.kv_dim, c.kv_heads * c.head_dim);
  w.w_v = xavier(c.kv_dim, c.kv_heads * c.v_head_dim);
  w.w_o = xavier(c.heads * c.v_head_dim, c.d_model);
  if (c.bias) {
    w.b_q = random_tensor(rng, {c.heads * c.head_dim}, 0.1f);
    w.b_k = random_tensor(rng, {c.kv_heads * c.head_dim}, 0.1f);
    w.b_v = random_tensor(rng, {c.kv_heads * c.v_head_dim}, 0.1f);
    w.b_o = random_tensor(rng, {c.d_model}, 0.1f);
  }
  return w;
}

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionConfig& config,
                                       MultiHeadAttentionWeights weights)
    : config_(resolve(config)), weights_(std::move(weights)) {
  const auto& c = config_;
  check_tensor(weights_.w_q, "w_q", {c.d_model, q_width()});
  check_tensor(weights_.w_k, "w_k", {c.kv_dim, k_width()});
  check_tensor(weights_.w_v, "w_v", {c.kv_dim, v_width()});
  check_tensor(weights_.w_o, "w_o", {concat_width(), c.d_model});
  const Tensor* biases[] = {&weights_.b_q, &weights_.b_k, &weights_.b_v, &weights_.b_o};
  const char* bias_names[] = {"b_q", "b_k", "b_v", "b_o"};
  const std::int64_t bias_sizes[] = {q_width(), k_width(), v_width(), c.d_model};
  for (int i = 0; i < 4; ++i) {
    if (c.bias) {
      check_tensor(*biases[i], bias_names[i], {bias_sizes[i]});
    } else {
      HEADCOUNT_CHECK(biases[i]->empty(), bias_names[i], "no tensor (config.bias is false)",
                      shape_string(biases[i]->shape()));
    }
  }

  // The fused projection: W_q, W_k, W_v side by side, so self-attention projects in one GEMM,
  // packed once for the packed GEMM; W_o likewise.
  if (c.kv_dim == c.d_model) {
    qkv_width_ = q_width() + k_width() + v_width();
    if (c.bias) {
      b_qkv_ = Tensor(DType::f32, {qkv_width_});
      float* dst = b_qkv_.data<float>();
      for (const Tensor* part : {&weights_.b_q, &weights_.b_k, &weights_.b_v})
        dst = std::copy_n(part->data<const float>(), part->numel(), dst);
    }
  }
  set_projection_dtype(DType::f32);
}

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionConfig& config,
                                       std::shared_ptr<const layers::BlockWeights> qkv,
                                       std::shared_ptr<const layers::BlockWeights> o)
    : config_(resolve(config)) {
  const auto& c = config_;
  HEADCOUNT_CHECK(!c.bias, "bias", "false (a GGUF file's blocks carry no biases)", "true");
  HEADCOUNT_CHECK(c.kv_dim == c.d_model, "projection blocks",
                  "a self-attention layer (one fused W_qkv)", concat("kv_dim ", c.kv_dim));
  qkv_width_ = q_width() + k_width() + v_width();
  set_projection_blocks(std::move(qkv), std::move(o));
}

void MultiHeadAttention::set_projection_dtype(DType dtype) {
  HEADCOUNT_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::i8,
                  "projection dtype", "f32, bf16 or i8", dtype_name(dtype));
  const MultiHeadAttentionConfig& c = config_;
  HEADCOUNT_CHECK(!weights_.w_o.empty(), "projection dtype",
                  "fp32 weights to pack (this layer was built on a file's blocks alone)", "none");
  blocks_qkv_.reset();
  blocks_o_.reset();
  if (c.kv_dim == c.d_model) {
    Tensor w_qkv(DType::f32, {c.d_model, qkv_width_});
    const Tensor* parts[] = {&weights_.w_q, &weights_.w_k, &weights_.w_v};
    std::int64_t column = 0;
    for (const Tensor* part : parts) {
      for (std::int64_t r = 0; r < c.d_model; ++r)
        std::copy_n(part->data<const float>() + r * part->size(1), part->size(1),
                    w_qkv.data<float>() + r * qkv_width_ + column);
      column += part->size(1);
    }
    packed_qkv_ =
        layers::pack_weights(w_qkv.data<const float>(), c.d_model, qkv_width_, qkv_width_, dtype);
  }
  packed_o_ = layers::pack_weights(weights_.w_o.data<const float>(), concat_width(), c.d_model,
                                   c.d_model, dtype);
}

void MultiHeadAttention::set_projection_blocks(std::shared_ptr<const layers::BlockWeights> qkv,
                                               std::shared_ptr<const layers::BlockWeights> o) {
  const MultiHeadAttentionConfig& c = config_;
  HEADCOUNT_CHECK(c.kv_dim == c.d_model, "projection blocks",
                  "a self-attention layer (one fused W_qkv)", concat("kv_dim ", c.kv_dim));
  HEADCOUNT_CHECK(qkv && qkv->n == qkv_width_ && qkv->k == c.d_model, "projection blocks W_qkv",
                  concat(qkv_width_, " rows of ", c.d_model),
                  qkv ? concat(qkv->n, " rows of ", qkv->k) : std::string("none"));
  HEADCOUNT_CHECK(o && o->n == c.d_model && o->k == concat_width(), "projection blocks W_o",
                  concat(c.d_model, " rows of ", concat_width()),
                  o ? concat(o->n, " rows of ", o->k) : std::string("none"));
  blocks_qkv_ = std::move(qkv);
  blocks_o_ = std::move(o);
  packed_qkv_ = Tensor();
  packed_o_ = Tensor();
}

LayerStats MultiHeadAttention::forward(Context& ctx, const TensorView& x, const TensorView& out,
                                       const AttentionOptions& options) const {
  const auto& c = config_;
  HEADCOUNT_CHECK(
      c.kv_dim == c.d_model, "kv_dim",
      concat("d_model = ", c.d_model, " for self-attention (use the cross-attention forward)"),
      c.kv_dim);
  check_input(x, "x", c.d_model, "[batch, seq_len, d_model]");
  const std::int64_t batch = x.shape[0], len = x.shape[1];

  // 1. Project once: [B*n, d_model] · W_qkv → [B*n, q_width + k_width + v_width].
  const std::int64_t width = qkv_width_;
  float* qkv = static_cast<float*>(
      ctx.workspace(kSlotQkv, static_cast<std::size_t>(batch * len * width) * sizeof(float)));
  project_packed(ctx, x, packed_qkv_, blocks_qkv_.get(), width, b_qkv_, qkv, width);
  for (std::int64_t b = 0; b < batch; ++b) rotate(ctx, qkv + b * len * width, len, 0);

  // 2. Heads are column ranges of the projection: views, not copies.
  AttentionParams params;
  params.q = head_view(qkv, width, 0, batch, len, c.heads, c.head_dim);
  params.k = head_view(qkv, width, q_width(), batch, len, c.kv_heads, c.head_dim);
  params.v = head_view(qkv, width, q_width() + k_width(), batch, len, c.kv_heads, c.v_head_dim);
  LayerStats stats = attend_and_mix(ctx, params, batch, len, out, options);
  stats.q_macs = batch * len * c.d_model * q_width();
  stats.k_macs = batch * len * c.d_model * k_width();
  stats.v_macs = batch * len * c.d_model * v_width();
  return stats;
}

LayerStats MultiHeadAttention::forward(Context& ctx, const TensorView& x_q, const TensorView& x_k,
                                       const TensorView& x_v, const TensorView& out,
                                       const AttentionOptions& options) const {
  const auto& c = config_;
  HEADCOUNT_CHECK(c.rope_base == 0, "rope_base",
                  "0 for cross-attention (rotary positions are for self-attention)", c.rope_base);
  HEADCOUNT_CHECK(!weights_.w_q.empty(), "cross-attention",
                  "fp32 weights (this layer was built on a file's blocks alone)", "none");
  check_input(x_q, "x_q", c.d_model, "[batch, q_len, d_model]");
  check_input(x_k, "x_k", c.kv_dim, "[batch, kv_len, kv_dim]");
  check_input(x_v, "x_v", c.kv_dim, "[batch, kv_len, kv_dim]");
  const std::int64_t batch = x_q.shape[0], q_len = x_q.shape[1], kv_len = x_k.shape[1];
  HEADCOUNT_CHECK(x_k.shape[0] == batch, "x_k shape", concat("batch = ", batch, " (of x_q)"),
                  x_k.shape_string());
  HEADCOUNT_CHECK(x_v.shape[0] == batch && x_v.shape[1] == kv_len, "x_v shape",
                  concat("[", batch, ", ", kv_len, ", ", c.kv_dim, "] (batch and kv_len of x_k)"),
                  x_v.shape_string());

  // 1. Project: three GEMMs, since queries and keys/values come from different inputs.
  auto buffer = [&](Slot slot, std::int64_t rows, std::int64_t cols) {
    return static_cast<float*>(
        ctx.workspace(slot, static_cast<std::size_t>(rows * cols) * sizeof(float)));
  };
  float* q = buffer(kSlotQ, batch * q_len, q_width());
  float* k = buffer(kSlotK, batch * kv_len, k_width());
  float* v = buffer(kSlotV, batch * kv_len, v_width());
  project(ctx, x_q, weights_.w_q, weights_.b_q, q, q_width());
  project(ctx, x_k, weights_.w_k, weights_.b_k, k, k_width());
  project(ctx, x_v, weights_.w_v, weights_.b_v, v, v_width());

  AttentionParams params;
  params.q = head_view(q, q_width(), 0, batch, q_len, c.heads, c.head_dim);
  params.k = head_view(k, k_width(), 0, batch, kv_len, c.kv_heads, c.head_dim);
  params.v = head_view(v, v_width(), 0, batch, kv_len, c.kv_heads, c.v_head_dim);
  LayerStats stats = attend_and_mix(ctx, params, batch, q_len, out, options);
  stats.q_macs = batch * q_len * c.d_model * q_width();
  stats.k_macs = batch * kv_len * c.kv_dim * k_width();
  stats.v_macs = batch * kv_len * c.kv_dim * v_width();
  return stats;
}

void MultiHeadAttention::rotate(Context& ctx, float* qkv, std::int64_t rows,
                                std::int64_t first_position) const {
  const auto& c = config_;
  if (c.rope_base == 0 || rows == 0) return;
  // Q's heads and K's heads are adjacent column ranges of the projection: one pass over both.
  layers::apply_rotary(ctx, qkv, rows, qkv_width_, c.heads + c.kv_heads, c.head_dim, c.rope_base,
                       first_position);
}

void MultiHeadAttention::apply_head_mask(std::span<const float> mask, float* concat_buffer,
                                         std::int64_t rows) const {
  const auto& c = config_;
  for (std::int64_t h = 0; h < c.heads; ++h) {
    const float factor = mask[static_cast<std::size_t>(h)];
    if (factor == 1.0f) continue;
    for (std::int64_t r = 0; r < rows; ++r) {
      float* slice = concat_buffer + r * concat_width() + h * c.v_head_dim;
      for (std::int64_t e = 0; e < c.v_head_dim; ++e) slice[e] *= factor;
    }
  }
}

LayerStats MultiHeadAttention::attend_and_mix(Context& ctx, AttentionParams params,
                                              std::int64_t batch, std::int64_t q_len,
                                              const TensorView& out,
                                              const AttentionOptions& options) const {
  const auto& c = config_;
  HEADCOUNT_CHECK(!out.empty() && out.rank == 3 && out.dtype == DType::f32, "out",
                  "an f32 tensor [batch, q_len, d_model]",
                  concat(dtype_name(out.dtype), ' ', out.shape_string()));
  HEADCOUNT_CHECK(out.shape[0] == batch && out.shape[1] == q_len && out.shape[2] == c.d_model,
                  "out shape", concat("[", batch, ", ", q_len, ", ", c.d_model, "]"),
                  out.shape_string());
  HEADCOUNT_CHECK(out.strides[2] == 1 && out.strides[1] >= c.d_model &&
                      out.strides[0] >= q_len * out.strides[1],
                  "out strides", "non-overlapping rows with unit stride along d_model",
                  out.strides_string());

  if (!options.head_mask.empty()) {
    HEADCOUNT_CHECK(static_cast<std::int64_t>(options.head_mask.size()) == c.heads, "head_mask",
                    concat(c.heads, " entries (one per head)"), options.head_mask.size());
    for (std::size_t h = 0; h < options.head_mask.size(); ++h)
      if (!std::isfinite(options.head_mask[h]))
        fail("head_mask",
             concat("expected finite factors, got ", options.head_mask[h], " for head ", h));
  }

  // 2. Attend: each head writes its columns of the concat buffer [B*n, heads * v_head_dim].
  float* concat_buffer = static_cast<float*>(ctx.workspace(
      kSlotConcat, static_cast<std::size_t>(batch * q_len * concat_width()) * sizeof(float)));
  params.out = head_view(concat_buffer, concat_width(), 0, batch, q_len, c.heads, c.v_head_dim);
  params.scale = options.scale;
  params.causal = options.causal;
  params.window_left = options.window_left;
  params.window_right = options.window_right;
  params.key_lengths = options.key_lengths;
  params.bias = options.bias;
  params.probs_mode = options.probs_mode;
  params.probs = options.probs;
  params.lse = options.lse;
  const Kernel kernel = options.probs_mode != ProbsMode::none ? Kernel::reference : options.kernel;

  LayerStats stats;
  stats.attention = attention(ctx, kernel, params);
  if (options.observe) options.observe(params);
  if (!options.head_mask.empty()) apply_head_mask(options.head_mask, concat_buffer, batch * q_len);

  // 3. Mix: out = concat · W_o + b_o, one GEMM when the output rows are evenly spaced.
  const bool one_gemm = out.strides[0] == q_len * out.strides[1];
  for (std::int64_t b = 0; b < (one_gemm ? 1 : batch); ++b)
    layers::packed_gemm(ctx, {.m = one_gemm ? batch * q_len : q_len,
                              .x = concat_buffer + b * q_len * concat_width(),
                              .ldx = concat_width(),
                              .w = blocks_o_ ? nullptr : &packed_o_,
                              .blocks = blocks_o_.get(),
                              .n = c.d_model,
                              .bias = c.bias ? weights_.b_o.data<const float>() : nullptr,
                              .y = out.ptr<float>() + b * out.strides[0],
                              .ldy = out.strides[1]});
  stats.o_macs = batch * q_len * concat_width() * c.d_model;
  return stats;
}

}  // namespace headcount
