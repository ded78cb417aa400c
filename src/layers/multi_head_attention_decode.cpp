// MultiHeadAttention with a KV cache: prefill a prompt, then decode token by token.
//
//   prefill(x [B, n, d_model]):
//     1. project once: x · W_qkv → [B*n, q | k | v]              (one GEMM, as forward())
//        (rotary positions, if any, turn Q and K in place: positions 0 .. n-1)
//     2. append the k and v column ranges to the cache            (quantised to its dtype)
//     3. causal attention over the prompt from the fp32 projections, then W_O (as forward())
//   prefill continued (one sequence whose fp32 cache holds the prompt's first `start` rows):
//     the same steps for the next rows (positions start ..), step 3 reading every key from the
//     cache: each row gets the bits a prefill of the whole prompt gives it (chunked prefill).
//   decode_step(x_new [B, t, d_model], t = 1..16):
//     1. project the t new tokens: [B*t, q | k | v] (rotary: at positions length .. length+t-1)
//     2. append their k, v to the cache
//     3. the decode kernel: q [B, t, heads, head_dim] against the whole cache, written into the
//        concat buffer [B*t, heads * v_head_dim]
//     4. mix: concat · W_O (+ b_o) → out [B, t, d_model]
// Workspace slots are those of the layer's forward (0: the projection, 4: the concat buffer);
// the decode kernel keeps its partials in slot 7.
#include <algorithm>
#include <cmath>

#include "headcount/decode.h"
#include "headcount/error.h"
#include "headcount/multi_head_attention.h"
#include "layers/layer_checks.h"
#include "layers/packed_gemm.h"

namespace headcount {

using detail::concat;
using i64 = std::int64_t;

namespace {

enum Slot : int { kSlotQkv = 0, kSlotConcat = 4 };

void check_out(const TensorView& out, i64 batch, i64 len, i64 d_model) {
  HEADCOUNT_CHECK(!out.empty() && out.rank == 3 && out.dtype == DType::f32, "out",
                  "an f32 tensor [batch, q_len, d_model]",
                  concat(dtype_name(out.dtype), ' ', out.shape_string()));
  HEADCOUNT_CHECK(out.shape[0] == batch && out.shape[1] == len && out.shape[2] == d_model,
                  "out shape", concat("[", batch, ", ", len, ", ", d_model, "]"),
                  out.shape_string());
  HEADCOUNT_CHECK(
      out.strides[2] == 1 && out.strides[1] >= d_model && out.strides[0] >= len * out.strides[1],
      "out strides", "non-overlapping rows with unit stride along d_model", out.strides_string());
}

// [batch, len, heads, dim] view of columns [column, column + heads*dim) of a [batch*len, row_width]
// matrix.
TensorView head_view(float* matrix, i64 row_width, i64 column, i64 batch, i64 len, i64 heads,
                     i64 dim) {
  return TensorView::strided(matrix + column, DType::f32, {batch, len, heads, dim},
                             {len * row_width, row_width, dim, 1});
}

}  // namespace

void MultiHeadAttention::check_cache(const KvCache& cache, i64 layer) const {
  const auto& c = config_;
  const KvCacheConfig& k = cache.config();
  HEADCOUNT_CHECK(c.kv_dim == c.d_model, "kv_dim",
                  concat("d_model = ", c.d_model, " (a KV cache is for self-attention)"), c.kv_dim);
  HEADCOUNT_CHECK(layer >= 0 && layer < k.layers, "kv cache layer", concat("0 to ", k.layers - 1),
                  layer);
  HEADCOUNT_CHECK(k.kv_heads_in(layer) == c.kv_heads, "kv cache kv_heads",
                  concat(c.kv_heads, " (the layer's kv_heads)"), k.kv_heads_in(layer));
  HEADCOUNT_CHECK(k.head_dim == c.head_dim, "kv cache head_dim",
                  concat(c.head_dim, " (the layer's head_dim)"), k.head_dim);
  HEADCOUNT_CHECK(k.v_head_dim == c.v_head_dim, "kv cache v_head_dim",
                  concat(c.v_head_dim, " (the layer's v_head_dim)"), k.v_head_dim);
}

float* MultiHeadAttention::project_qkv(Context& ctx, const TensorView& x) const {
  const i64 batch = x.shape[0], len = x.shape[1];
  const i64 width = qkv_width_;
  float* y = static_cast<float*>(
      ctx.workspace(kSlotQkv, static_cast<std::size_t>(batch * len * width) * sizeof(float)));
  const bool one_gemm = x.strides[0] == len * x.strides[1];
  for (i64 b = 0; b < (one_gemm ? 1 : batch); ++b)
    layers::packed_gemm(ctx, {.m = one_gemm ? batch * len : len,
                              .x = x.ptr<const float>() + b * x.strides[0],
                              .ldx = x.strides[1],
                              .w = blocks_qkv_ ? nullptr : &packed_qkv_,
                              .blocks = blocks_qkv_.get(),
                              .n = width,
                              .bias = b_qkv_.empty() ? nullptr : b_qkv_.data<const float>(),
                              .y = y + b * len * width,
                              .ldy = width});
  return y;
}

LayerStats MultiHeadAttention::prefill(Context& ctx, const TensorView& x, KvCache& cache, i64 layer,
                                       const TensorView& out, const PrefillOptions& options) const {
  const auto& c = config_;
  check_cache(cache, layer);
  layers::check_input(x, "x", c.d_model, "[batch, prompt_len, d_model]");
  const i64 batch = x.shape[0], len = x.shape[1];
  HEADCOUNT_CHECK(cache.config().batch == batch, "kv cache batch",
                  concat(batch, " (the batch of x)"), cache.config().batch);
  // A prefill continued in chunks: one sequence, after a part of its prompt that an earlier
  // prefill put in an fp32 cache (those keys are the projections' own values, bit for bit).
  const i64 start = cache.length(layer, 0);
  if (start > 0) {
    HEADCOUNT_CHECK(batch == 1 && options.prompt_lengths.empty(), "prefill after a cached part",
                    "one sequence (batch 1, no prompt_lengths)", concat("batch ", batch));
    HEADCOUNT_CHECK(cache.config().dtype == CacheDType::f32, "kv cache dtype",
                    "fp32 to continue a prefill (a bf16 or int8 cache holds rounded keys)",
                    cache_dtype_name(cache.config().dtype));
  }
  for (i64 b = 1; b < batch; ++b)
    HEADCOUNT_CHECK(cache.length(layer, b) == 0,
                    concat("kv cache length (layer ", layer, ", sequence ", b, ")"),
                    "0 before prefill (extend a cached sequence with decode_step)",
                    cache.length(layer, b));
  if (!options.prompt_lengths.empty()) {
    HEADCOUNT_CHECK(static_cast<i64>(options.prompt_lengths.size()) == batch, "prompt_lengths",
                    concat(batch, " entries (one per sequence)"), options.prompt_lengths.size());
    for (std::size_t b = 0; b < options.prompt_lengths.size(); ++b)
      HEADCOUNT_CHECK(options.prompt_lengths[b] >= 0 && options.prompt_lengths[b] <= len,
                      concat("prompt_lengths[", b, "]"), concat("0 to prompt_len = ", len),
                      options.prompt_lengths[b]);
  }
  check_out(out, batch, len, c.d_model);

  // 1-2. Project once; the k and v column ranges go into the cache.
  const i64 width = qkv_width_;
  float* qkv = project_qkv(ctx, x);
  for (i64 b = 0; b < batch; ++b) rotate(ctx, qkv + b * len * width, len, start);
  AttentionParams params;
  params.q = head_view(qkv, width, 0, batch, len, c.heads, c.head_dim);
  params.k = head_view(qkv, width, q_width(), batch, len, c.kv_heads, c.head_dim);
  params.v = head_view(qkv, width, q_width() + k_width(), batch, len, c.kv_heads, c.v_head_dim);
  cache.append(layer, params.k, params.v, options.prompt_lengths);
  if (start > 0) {
    // The chunk's queries against every key so far, read from the cache: the causal mask
    // aligns them bottom-right (query i at position start + i), and the streaming kernel's key
    // tiles start at multiples of its tile from key 0 whatever the query rows, so each row sums
    // the same keys in the same order as in a prefill of the whole prompt: the same bits.
    auto prefix = [&](TensorView all) {
      all.shape[1] = start + len;  // the cached keys, of the cache's capacity
      return all;
    };
    params.k = prefix(cache.k_tensor(layer));
    params.v = prefix(cache.v_tensor(layer));
  }

  // 3. Causal attention over the prompt, then W_O.
  LayerStats stats = attend_and_mix(ctx, params, batch, len, out,
                                    {.kernel = options.kernel,
                                     .causal = true,
                                     .key_lengths = options.prompt_lengths,
                                     .scale = options.scale,
                                     .lse = options.lse,
                                     .observe = options.observe});
  stats.q_macs = batch * len * c.d_model * q_width();
  stats.k_macs = batch * len * c.d_model * k_width();
  stats.v_macs = batch * len * c.d_model * v_width();
  return stats;
}

LayerStats MultiHeadAttention::decode_step(Context& ctx, const TensorView& x_new, KvCache& cache,
                                           i64 layer, const TensorView& out,
                                           const DecodeStepOptions& options) const {
  const auto& c = config_;
  check_cache(cache, layer);
  layers::check_input(x_new, "x_new", c.d_model, "[batch, new_tokens, d_model]");
  const i64 batch = x_new.shape[0], len = x_new.shape[1];
  HEADCOUNT_CHECK(len <= kMaxDecodeTokens, "x_new new tokens", concat("1 to ", kMaxDecodeTokens),
                  len);
  HEADCOUNT_CHECK(cache.config().batch == batch, "kv cache batch",
                  concat(batch, " (the batch of x_new)"), cache.config().batch);
  check_out(out, batch, len, c.d_model);

  // 1-2. Project the new tokens; append their keys and values.
  const i64 width = qkv_width_;
  float* qkv = project_qkv(ctx, x_new);
  for (i64 b = 0; b < batch; ++b) rotate(ctx, qkv + b * len * width, len, cache.length(layer, b));
  cache.append(layer, head_view(qkv, width, q_width(), batch, len, c.kv_heads, c.head_dim),
               head_view(qkv, width, q_width() + k_width(), batch, len, c.kv_heads, c.v_head_dim));

  // 3. Attend: every head writes its columns of the concat buffer.
  float* concat_buffer = static_cast<float*>(ctx.workspace(
      kSlotConcat, static_cast<std::size_t>(batch * len * concat_width()) * sizeof(float)));
  LayerStats stats;
  stats.attention = attention_decode(
      ctx, {.q = head_view(qkv, width, 0, batch, len, c.heads, c.head_dim),
            .kv = cache.view(layer),
            .out = head_view(concat_buffer, concat_width(), 0, batch, len, c.heads, c.v_head_dim),
            .scale = options.scale});

  // 4. Mix: out = concat · W_o + b_o.
  const bool one_gemm = out.strides[0] == len * out.strides[1];
  for (i64 b = 0; b < (one_gemm ? 1 : batch); ++b)
    layers::packed_gemm(ctx, {.m = one_gemm ? batch * len : len,
                              .x = concat_buffer + b * len * concat_width(),
                              .ldx = concat_width(),
                              .w = blocks_o_ ? nullptr : &packed_o_,
                              .blocks = blocks_o_.get(),
                              .n = c.d_model,
                              .bias = c.bias ? weights_.b_o.data<const float>() : nullptr,
                              .y = out.ptr<float>() + b * out.strides[0],
                              .ldy = out.strides[1]});
  stats.q_macs = batch * len * c.d_model * q_width();
  stats.k_macs = batch * len * c.d_model * k_width();
  stats.v_macs = batch * len * c.d_model * v_width();
  stats.o_macs = batch * len * concat_width() * c.d_model;
  return stats;
}

LayerStats MultiHeadAttention::decode_rows(Context& ctx, const TensorView& x_new,
                                           std::span<KvCache* const> caches, i64 layer,
                                           const TensorView& out,
                                           const DecodeStepOptions& options) const {
  const auto& c = config_;
  layers::check_input(x_new, "x_new", c.d_model, "[sequences, 1, d_model]");
  const i64 batch = x_new.shape[0];
  HEADCOUNT_CHECK(x_new.shape[1] == 1, "x_new new tokens", "1 per sequence", x_new.shape[1]);
  HEADCOUNT_CHECK(static_cast<i64>(caches.size()) == batch, "caches",
                  concat(batch, " (one per row of x_new)"), caches.size());
  for (KvCache* cache : caches) {
    HEADCOUNT_CHECK(cache != nullptr && cache->config().batch == 1, "caches",
                    "one batch-1 cache per sequence",
                    cache == nullptr ? "a null cache" : "batch > 1");
    check_cache(*cache, layer);
  }
  check_out(out, batch, 1, c.d_model);

  // 1-2. Project every sequence's new token in one GEMM; each rotated at its own position and
  // appended to its own cache.
  const i64 width = qkv_width_;
  float* qkv = project_qkv(ctx, x_new);
  for (i64 b = 0; b < batch; ++b) {
    KvCache& cache = *caches[static_cast<std::size_t>(b)];
    float* row = qkv + b * width;
    rotate(ctx, row, 1, cache.length(layer, 0));
    cache.append(layer, head_view(row, width, q_width(), 1, 1, c.kv_heads, c.head_dim),
                 head_view(row, width, q_width() + k_width(), 1, 1, c.kv_heads, c.v_head_dim));
  }

  // 3. The decode kernel per sequence, over its own cache: each writes its row of the concat
  // buffer as decode_step does for a batch of one.
  float* concat_buffer = static_cast<float*>(
      ctx.workspace(kSlotConcat, static_cast<std::size_t>(batch * concat_width()) * sizeof(float)));
  LayerStats stats;
  for (i64 b = 0; b < batch; ++b) {
    const AttentionStats s =
        attention_decode(ctx, {.q = head_view(qkv + b * width, width, 0, 1, 1, c.heads, c.head_dim),
                               .kv = caches[static_cast<std::size_t>(b)]->view(layer),
                               .out = head_view(concat_buffer + b * concat_width(), concat_width(),
                                                0, 1, 1, c.heads, c.v_head_dim),
                               .scale = options.scale});
    stats.attention.score_macs += s.score_macs;
    stats.attention.weighted_sum_macs += s.weighted_sum_macs;
    stats.attention.peak_score_entries =
        std::max(stats.attention.peak_score_entries, s.peak_score_entries);
  }

  // 4. Mix, one GEMM over the rows (out's rows are strides[0] apart): out = concat · W_o + b_o.
  layers::packed_gemm(ctx, {.m = batch,
                            .x = concat_buffer,
                            .ldx = concat_width(),
                            .w = blocks_o_ ? nullptr : &packed_o_,
                            .blocks = blocks_o_.get(),
                            .n = c.d_model,
                            .bias = c.bias ? weights_.b_o.data<const float>() : nullptr,
                            .y = out.ptr<float>(),
                            .ldy = out.strides[0]});
  stats.q_macs = batch * c.d_model * q_width();
  stats.k_macs = batch * c.d_model * k_width();
  stats.v_macs = batch * c.d_model * v_width();
  stats.o_macs = batch * concat_width() * c.d_model;
  return stats;
}

}  // namespace headcount
