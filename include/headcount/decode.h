// The decode kernel: a few new query tokens attend to a long KV cache (flash-decoding).
//
// Shapes, in the kernels' vocabulary:
//   q      [batch, q_len, heads, head_dim]        f32, q_len = 1..16 new tokens per sequence
//   cache  K [batch, kv_heads, capacity, head_dim], V [batch, kv_heads, capacity, v_head_dim]
//          (head-major: each (sequence, kv head) is one contiguous run of rows), f32, bf16 or
//          int8 with one fp32 scale per (token, kv head); lengths[b] valid rows per sequence
//   out    [batch, q_len, heads, v_head_dim]      f32 (a view: the layer's concat buffer)
//   lse    [batch, heads, q_len]                  optional f32
// The new tokens' keys and values must already be in the cache (append first, then attend):
// with L = lengths[b], new token t (0-based) sees cache positions j <= L - q_len + t, i.e.
// every cached position and the new tokens up to itself. This is the reference kernel's
// bottom-right-aligned causal mask with kv_len = L. A row that sees no key (L < q_len - t)
// outputs zeros and lse = -inf.
//
// group = heads / kv_heads; query head i reads kv head i / group (kv_head_of), so multi-head,
// grouped-query and multi-query attention are one path, and each K/V row is read once for
// the group x q_len query rows that share it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/tensor.h"

namespace headcount {

// CacheDType (tensor.h): the element type of a KV cache. int8 is symmetric per (token, kv head):
// scale = max|x| / 127, x_q = round-to-nearest-even(x / scale), so |x - scale * x_q| <= scale / 2
// = max|x| / 254.
const char* cache_dtype_name(CacheDType dtype);
CacheDType parse_cache_dtype(const std::string& name);  // "f32" | "bf16" | "int8"
std::int64_t cache_element_bytes(CacheDType dtype);     // 4, 2, 1
// Bytes one cached token takes in one layer: kv_heads * ((head_dim + v_head_dim) * element
// bytes + (int8 ? 2 scales * 4 bytes : 0)). The cost model and KvCache::bytes() use this.
std::int64_t cache_token_bytes(CacheDType dtype, std::int64_t kv_heads, std::int64_t head_dim,
                               std::int64_t v_head_dim);

// A read-only view of one layer of a KV cache (KvCache::view(layer) makes one). Rows are
// contiguous: K row (b, h, j) starts at element ((b * kv_heads + h) * capacity + j) * head_dim.
struct KvView {
  CacheDType dtype = CacheDType::f32;
  std::int64_t batch = 0, kv_heads = 0, capacity = 0, head_dim = 0, v_head_dim = 0;
  const void* k = nullptr;                // [batch, kv_heads, capacity, head_dim]
  const void* v = nullptr;                // [batch, kv_heads, capacity, v_head_dim]
  const float* k_scale = nullptr;         // int8 only: [batch, kv_heads, capacity]
  const float* v_scale = nullptr;         // int8 only: [batch, kv_heads, capacity]
  std::span<const std::int64_t> lengths;  // [batch] valid rows per sequence, <= capacity
};

struct DecodeParams {
  TensorView q;                // f32 [batch, q_len, heads, head_dim], q_len 1..16
  KvView kv;                   // keys and values, the new tokens' included
  TensorView out;              // f32 [batch, q_len, heads, v_head_dim], written
  TensorView lse;              // optional f32 [batch, heads, q_len], written
  std::optional<float> scale;  // default 1/sqrt(head_dim); must be finite
};

// The most new tokens one decode call takes (a speculative-decoding draft, a short chunk).
inline constexpr std::int64_t kMaxDecodeTokens = 16;

// Checks every view, size and length; throws Error "<field>: expected X, got Y".
AttentionShape validate(const DecodeParams& params);

// Flash-decoding: each (sequence, kv head) cache is cut into fixed chunks of keys
// (independent of the thread count), the chunks are spread over the context's workers, each
// gives a partial (O, lse) for all group x q_len rows, and the partials are merged exactly by
// log-sum-exp in chunk order. Results are bitwise the same for any number of threads.
// Nothing is allocated once the context is warm. stats count the multiply-adds done.
AttentionStats attention_decode(Context& ctx, const DecodeParams& params);

}  // namespace headcount
