// The multi-head attention layer: project once, attend per head, mix once.
//
//   1. Project. Self-attention: one GEMM  x[B*n, d_model] · W_qkv → [B*n, (heads + kv_heads)
//      * head_dim + kv_heads * v_head_dim]. The per-head "slabs" are column ranges of that
//      matrix, handed to the kernel as strided views: splitting into heads is free.
//      Cross-attention: x_q · W_q, x_k · W_k, x_v · W_v (key/value width kv_dim).
//   2. Attend. The kernel writes head i's output straight into columns
//      [i*v_head_dim, (i+1)*v_head_dim) of the concat buffer [B*n, heads*v_head_dim].
//   3. Mix. One GEMM: concat · W_o (+ b_o) → out [B, n, d_model].
// With rotary positions (config.rope_base), Q and K are rotated in place in the projection
// between steps 1 and 2 (and before they enter a KV cache).
// Weights are stored [in, out] (x · W), the transpose of PyTorch's nn.Linear. W_qkv and W_o
// are packed once, at construction, for headcount's own GEMM (src/layers/packed_gemm.h): a
// token's projections are bitwise the same whatever the batch, its padding and the thread
// count (the cross-attention forward's separate Q/K/V projections still run on OpenBLAS).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/kv_cache.h"
#include "headcount/tensor.h"

namespace headcount {

namespace layers {
struct BlockWeights;  // src/layers/block_weights.h
}

struct MultiHeadAttentionConfig {
  std::int64_t d_model = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;    // 0: = heads
  std::int64_t head_dim = 0;    // 0: = d_model / heads (must divide)
  std::int64_t v_head_dim = 0;  // 0: = head_dim
  std::int64_t kv_dim = 0;      // width of the key/value inputs; 0: = d_model
  bool bias = true;
  // Rotary positions (Llama): 0 = none; > 1 = the base. Q and K are rotated right after the
  // projection, before they are cached or attended (layers/rotary.h: pairs (i, i + head_dim/2),
  // Hugging Face's layout), at positions 0.. for forward() and prefill() and at the cached
  // length onwards for decode_step(). Self-attention only; head_dim must be even.
  float rope_base = 0;
};

// Validates a config and fills in the defaults; throws Error naming the field.
MultiHeadAttentionConfig resolve(const MultiHeadAttentionConfig& config);

// f32 tensors, [in, out] layout. Biases are empty when config.bias is false.
struct MultiHeadAttentionWeights {
  Tensor w_q;  // [d_model, heads * head_dim]
  Tensor w_k;  // [kv_dim, kv_heads * head_dim]
  Tensor w_v;  // [kv_dim, kv_heads * v_head_dim]
  Tensor w_o;  // [heads * v_head_dim, d_model]
  Tensor b_q, b_k, b_v,
      b_o;  // [heads*head_dim], [kv_heads*head_dim], [kv_heads*v_head_dim], [d_model]

  // Xavier-uniform weights, small uniform biases; deterministic in `seed`.
  static MultiHeadAttentionWeights random(const MultiHeadAttentionConfig& config,
                                          std::uint64_t seed);
};

struct AttentionOptions {
  Kernel kernel = Kernel::streaming;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  std::span<const std::int64_t> key_lengths;  // per batch element, keys past it are padding
  TensorView bias;                            // [batch or 1, heads or 1, q_len, kv_len]
  std::optional<float> scale;
  // need_weights: the probabilities come from the reference kernel, which the layer then
  // uses whatever `kernel` says. probs: [B, heads, q_len, kv_len] or [B, q_len, kv_len].
  ProbsMode probs_mode = ProbsMode::none;
  TensorView probs;
  // Per-head factors applied to each head's slice of the concat buffer before W_O: [heads]
  // finite values; 0 removes a head (ablation, pruning), 1 keeps it. Empty: all kept.
  std::span<const float> head_mask;
  // Optional f32 [B, heads, q_len]: the kernel's log-sum-exp of every row.
  TensorView lse;
  // Called after the kernel ran (before the head mask and W_O) with the kernel's params: q, k
  // and v as views of the projection, the masks, out (the concat buffer) and lse. The views
  // are valid only during the call; analysis reads the heads there without copying them.
  std::function<void(const AttentionParams&)> observe;
};

// Decoding with a KV cache (src/layers/multi_head_attention_decode.cpp).
struct PrefillOptions {
  Kernel kernel = Kernel::streaming;  // the prompt's causal self-attention
  std::span<const std::int64_t>
      prompt_lengths;  // per sequence, <= n (the rest is padding); empty: n
  std::optional<float> scale;
  // As AttentionOptions::lse and ::observe: the kernel's log-sum-exp of every row, f32 [B,
  // heads, n], and a call after the kernel ran with its params (q, k rotated as the kernel saw
  // them, v, the causal mask, out = the concat buffer). Analysis only: without them prefill
  // runs exactly as before.
  TensorView lse;
  std::function<void(const AttentionParams&)> observe;
};
struct DecodeStepOptions {
  std::optional<float> scale;
};

struct LayerStats {
  std::int64_t q_macs = 0, k_macs = 0, v_macs = 0, o_macs = 0;
  AttentionStats attention;
};

class MultiHeadAttention {
 public:
  MultiHeadAttention(const MultiHeadAttentionConfig& config, MultiHeadAttentionWeights weights);
  // Self-attention on a GGUF file's blocks alone (set_projection_blocks's), with no fp32 copy
  // of the projections: weights() is then empty, set_projection_dtype and the cross-attention
  // forward are Errors. config.bias must be false (the blocks carry no biases).
  MultiHeadAttention(const MultiHeadAttentionConfig& config,
                     std::shared_ptr<const layers::BlockWeights> qkv,
                     std::shared_ptr<const layers::BlockWeights> o);

  const MultiHeadAttentionConfig& config() const { return config_; }
  const MultiHeadAttentionWeights& weights() const { return weights_; }

  // Self-attention: x [B, n, d_model] → out [B, n, d_model]. Requires kv_dim == d_model.
  LayerStats forward(Context& ctx, const TensorView& x, const TensorView& out,
                     const AttentionOptions& options = {}) const;

  // Cross-attention: queries from x_q [B, n, d_model], keys from x_k and values from x_v,
  // both [B, m, kv_dim] (they may be the same view). out [B, n, d_model].
  LayerStats forward(Context& ctx, const TensorView& x_q, const TensorView& x_k,
                     const TensorView& x_v, const TensorView& out,
                     const AttentionOptions& options = {}) const;

  // Step-by-step causal self-attention through a KV cache (one layer of it: `layer`).
  // prefill: x [B, n, d_model] is the prompt of every sequence (sequence b has
  // prompt_lengths[b] tokens; rows past it are padding, their outputs meaningless). Its keys
  // and values are appended to the cache, which must hold nothing yet for this layer, and out
  // [B, n, d_model] is the causal forward over the prompt (from the fp32 projections; later
  // steps read the cache in its own dtype). Or a prefill continued in chunks: B = 1 and an
  // fp32 cache holding the prompt's first rows from earlier prefill calls; x is the next rows,
  // and out is bitwise what one prefill of the whole prompt gives those rows (the streaming
  // kernel reads the cached keys in the same tiles as its own).
  LayerStats prefill(Context& ctx, const TensorView& x, KvCache& cache, std::int64_t layer,
                     const TensorView& out, const PrefillOptions& options = {}) const;
  // decode_step: x_new [B, t, d_model], t = 1..16 new tokens per sequence: their K/V are
  // appended, then they attend to everything cached (token i sees the cache and new tokens
  // <= i) through the decode kernel; out [B, t, d_model]. Nothing allocates once warm.
  LayerStats decode_step(Context& ctx, const TensorView& x_new, KvCache& cache, std::int64_t layer,
                         const TensorView& out, const DecodeStepOptions& options = {}) const;
  // decode_step for B sequences that each have their own cache (caches[b], batch 1: each
  // request's own in a server): row b of x_new [B, 1, d_model] is sequence b's new token, at
  // its own position. One projection GEMM and one W_O GEMM over the B rows, the decode kernel
  // per sequence: row b's bits are those decode_step gives it alone (the packed GEMM's rows do
  // not depend on the other rows).
  LayerStats decode_rows(Context& ctx, const TensorView& x_new, std::span<KvCache* const> caches,
                         std::int64_t layer, const TensorView& out,
                         const DecodeStepOptions& options = {}) const;

  // Repacks W_qkv and W_o for the packed GEMM in `dtype`: f32 (as constructed) or bf16 (the
  // weights rounded once; the packed projections then round their input rows to bf16 and
  // accumulate in fp32, bias in fp32; the attention kernel's inputs stay fp32) or i8 (weights
  // quantised per column, input rows per row, exact int32 sums: simd/gemm.h). Any other
  // dtype: Error. The unpacked fp32 weights (and the OpenBLAS paths) are untouched.
  void set_projection_dtype(DType dtype);

  // The decoder's `--weights quantized`: W_qkv (its rows the q, k, v outputs in that order,
  // qkv width in all) and W_o (d_model rows of concat width) as a GGUF file's own Q4_1 / Q8_0
  // blocks (src/layers/block_weights.h), multiplied by the packed GEMM's block path; the packed
  // fp32 copies are dropped. Error on another shape, or when the layer has no fused W_qkv.
  void set_projection_blocks(std::shared_ptr<const layers::BlockWeights> qkv,
                             std::shared_ptr<const layers::BlockWeights> o);

 private:
  std::int64_t q_width() const { return config_.heads * config_.head_dim; }
  std::int64_t k_width() const { return config_.kv_heads * config_.head_dim; }
  std::int64_t v_width() const { return config_.kv_heads * config_.v_head_dim; }
  std::int64_t concat_width() const { return config_.heads * config_.v_head_dim; }

  void check_cache(const KvCache& cache, std::int64_t layer) const;
  // x [B, n, d_model] · W_qkv (+ b_qkv) into a workspace matrix [B*n, width]; returns it.
  float* project_qkv(Context& ctx, const TensorView& x) const;
  // Rotary positions on Q and K of `rows` consecutive rows of the projection (one sequence),
  // the first at first_position; nothing without rope_base.
  void rotate(Context& ctx, float* qkv, std::int64_t rows, std::int64_t first_position) const;

  void apply_head_mask(std::span<const float> mask, float* concat_buffer, std::int64_t rows) const;
  LayerStats attend_and_mix(Context& ctx, AttentionParams params, std::int64_t batch,
                            std::int64_t q_len, const TensorView& out,
                            const AttentionOptions& options) const;

  MultiHeadAttentionConfig config_;
  MultiHeadAttentionWeights weights_;
  // Packed (layers::pack_weights) W_qkv = [W_q | W_k | W_v], [d_model, qkv_width_] when
  // kv_dim == d_model, and W_o; b_qkv_ is [b_q | b_k | b_v].
  std::int64_t qkv_width_ = 0;
  Tensor packed_qkv_;
  Tensor b_qkv_;
  Tensor packed_o_;
  // set_projection_blocks's weights (null: the packed tensors above serve).
  std::shared_ptr<const layers::BlockWeights> blocks_qkv_, blocks_o_;
};

}  // namespace headcount
