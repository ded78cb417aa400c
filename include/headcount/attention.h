// The attention kernels: one params struct, two exact forward paths.
//
// Shapes, in one vocabulary (FlashAttention's BSHD, token-major):
//   q    [batch, q_len,  heads,    head_dim]
//   k    [batch, kv_len, kv_heads, head_dim]
//   v    [batch, kv_len, kv_heads, v_head_dim]
//   out  [batch, q_len,  heads,    v_head_dim]   (a view: the layer's concat buffer)
//   lse  [batch, heads,  q_len]                   (optional, float32)
// group = heads / kv_heads; query head i reads kv head i / group (kv_head_of). kv_heads ==
// heads is multi-head, 1 < kv_heads < heads grouped-query, kv_heads == 1 multi-query.
// All views are read through their strides; the last dimension of each may be strided too.
//
// Masks combine (a key is visible only if every mask allows it):
//   causal:        query i sees key j iff j <= i + (kv_len - q_len). With q_len != kv_len
//                  the diagonal is aligned to the bottom right, as in FlashAttention >= 2.1:
//                  the last query sees every key. If q_len > kv_len, the first
//                  q_len - kv_len queries see no key at all.
//   window:        with the same offset, key j is visible iff
//                  i + off - window_left <= j <= i + off + window_right; -1 = unbounded side.
//   key_lengths:   per batch element, keys j >= key_lengths[b] are padding.
//   bias:          added to the scaled scores; shape [batch or 1, heads or 1, q_len, kv_len];
//                  -inf masks a key.
// A query row that sees no key outputs zeros and lse = -inf, on every path.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "headcount/context.h"
#include "headcount/tensor.h"

namespace headcount {

enum class ProbsMode { none, per_head, averaged };

struct AttentionParams {
  TensorView q, k, v;          // all f32 or all bf16 (fp32 accumulation and softmax either way)
  TensorView out;              // f32, written
  TensorView lse;              // optional f32 [batch, heads, q_len], written
  std::optional<float> scale;  // default 1/sqrt(head_dim); must be finite
  bool causal = false;
  std::int64_t window_left = -1;              // -1: unbounded
  std::int64_t window_right = -1;             // -1: unbounded
  std::span<const std::int64_t> key_lengths;  // empty, or one entry per batch element
  TensorView bias;                            // optional f32 additive bias

  // Reference path only: the softmax probabilities, per head [batch, heads, q_len, kv_len]
  // or averaged over heads [batch, q_len, kv_len] (PyTorch's need_weights).
  ProbsMode probs_mode = ProbsMode::none;
  TensorView probs;
};

// What a kernel did, counted by the kernel itself (for the cost model's checks).
struct AttentionStats {
  std::int64_t score_macs = 0;          // multiply-adds spent on Q·K^T
  std::int64_t weighted_sum_macs = 0;   // multiply-adds spent on P·V
  std::int64_t peak_score_entries = 0;  // score values that existed at once
};

// Sizes read off a validated params struct.
struct AttentionShape {
  std::int64_t batch = 0, q_len = 0, kv_len = 0, heads = 0, kv_heads = 0, group = 0;
  std::int64_t head_dim = 0, v_head_dim = 0;
  float scale = 0;
};

inline std::int64_t kv_head_of(std::int64_t head, std::int64_t group) { return head / group; }

// Checks every view, size, stride, mask and option; throws Error naming the field.
AttentionShape validate(const AttentionParams& params);

// The oracle: plain numbered passes, double accumulation, all scores materialised.
AttentionStats attention_reference(Context& ctx, const AttentionParams& params);

// Exact tiled forward with the online softmax: never more than one tile of scores
// per worker, whatever q_len, kv_len and heads. probs are not available here.
AttentionStats attention_streaming(Context& ctx, const AttentionParams& params);

enum class Kernel { reference, streaming };
Kernel parse_kernel(const std::string& name);  // "reference" | "streaming"
const char* kernel_name(Kernel kernel);
AttentionStats attention(Context& ctx, Kernel kernel, const AttentionParams& params);

}  // namespace headcount
