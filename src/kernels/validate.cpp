// Validation of AttentionParams at the public edge: every size, stride, mask and option,
// and every input value (a NaN or inf in q, k, v or a NaN / +inf bias would otherwise come
// out as NaN without a word). Costs one read of the inputs: O(n·h·d) next to O(n²·h·d).
#include "kernels/validate.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/error.h"
#include "kernels/view_checks.h"
#include "simd/tiles.h"

namespace headcount {
using detail::concat;
using kernels::check_finite;
using kernels::check_rank;
using kernels::check_shape;
using kernels::check_writable;
using kernels::for_each_offset;
using kernels::rows_non_finite;

namespace kernels {

AttentionShape validate_layout(const AttentionParams& p) {
  check_rank(p.q, "q", 4, "[batch, q_len, heads, head_dim]", true);
  check_rank(p.k, "k", 4, "[batch, kv_len, kv_heads, head_dim]", true);
  check_rank(p.v, "v", 4, "[batch, kv_len, kv_heads, v_head_dim]", true);
  HEADCOUNT_CHECK(p.k.dtype == p.q.dtype && p.v.dtype == p.q.dtype, "k and v dtype",
                  concat(dtype_name(p.q.dtype), " (the dtype of q)"),
                  concat(dtype_name(p.k.dtype), " and ", dtype_name(p.v.dtype)));
  check_rank(p.out, "out", 4, "[batch, q_len, heads, v_head_dim]");
  check_writable(p.out, "out");

  AttentionShape s;
  s.batch = p.q.shape[0];
  s.q_len = p.q.shape[1];
  s.heads = p.q.shape[2];
  s.head_dim = p.q.shape[3];
  s.kv_len = p.k.shape[1];
  s.kv_heads = p.k.shape[2];
  s.v_head_dim = p.v.shape[3];

  check_shape(p.k, "k", {s.batch, s.kv_len, s.kv_heads, s.head_dim}, "(batch and head_dim of q)");
  check_shape(p.v, "v", {s.batch, s.kv_len, s.kv_heads, s.v_head_dim},
              "(batch, kv_len and kv_heads of k)");
  HEADCOUNT_CHECK(s.heads % s.kv_heads == 0, "kv_heads", concat("a divisor of heads = ", s.heads),
                  s.kv_heads);
  s.group = s.heads / s.kv_heads;
  check_shape(p.out, "out", {s.batch, s.q_len, s.heads, s.v_head_dim},
              "[batch, q_len, heads, v_head_dim]");

  if (!p.lse.empty()) {
    HEADCOUNT_CHECK(p.lse.rank == 3, "lse rank", "3 dims [batch, heads, q_len]", p.lse.rank);
    HEADCOUNT_CHECK(p.lse.dtype == DType::f32, "lse dtype", "f32", dtype_name(p.lse.dtype));
    check_shape(p.lse, "lse", {s.batch, s.heads, s.q_len}, "[batch, heads, q_len]");
    check_writable(p.lse, "lse");
  }

  // The scale is an fp32 value; the default is 1/sqrt(head_dim) correctly rounded to fp32.
  s.scale =
      p.scale ? *p.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  HEADCOUNT_CHECK(std::isfinite(s.scale), "scale", "a finite number", s.scale);

  HEADCOUNT_CHECK(p.window_left >= -1, "window_left", "-1 (unbounded) or >= 0", p.window_left);
  HEADCOUNT_CHECK(p.window_right >= -1, "window_right", "-1 (unbounded) or >= 0", p.window_right);

  if (!p.key_lengths.empty()) {
    HEADCOUNT_CHECK(static_cast<std::int64_t>(p.key_lengths.size()) == s.batch, "key_lengths",
                    concat(s.batch, " entries (one per batch element)"), p.key_lengths.size());
    for (std::size_t b = 0; b < p.key_lengths.size(); ++b)
      HEADCOUNT_CHECK(p.key_lengths[b] >= 0 && p.key_lengths[b] <= s.kv_len,
                      concat("key_lengths[", b, "]"), concat("0 to kv_len = ", s.kv_len),
                      p.key_lengths[b]);
  }

  if (!p.bias.empty()) {
    HEADCOUNT_CHECK(p.bias.rank == 4, "bias rank", "4 dims [batch or 1, heads or 1, q_len, kv_len]",
                    concat(p.bias.rank, " dims ", p.bias.shape_string()));
    HEADCOUNT_CHECK(p.bias.dtype == DType::f32, "bias dtype", "f32", dtype_name(p.bias.dtype));
    const bool ok = (p.bias.shape[0] == 1 || p.bias.shape[0] == s.batch) &&
                    (p.bias.shape[1] == 1 || p.bias.shape[1] == s.heads) &&
                    p.bias.shape[2] == s.q_len && p.bias.shape[3] == s.kv_len;
    HEADCOUNT_CHECK(
        ok, "bias shape",
        concat("[1 or ", s.batch, ", 1 or ", s.heads, ", ", s.q_len, ", ", s.kv_len, "]"),
        p.bias.shape_string());
    const float* bias = p.bias.ptr<const float>();
    for_each_offset(p.bias, [&](std::int64_t off, auto a, auto b, auto c, auto d) {
      const float x = bias[off];
      if (std::isnan(x) || x == INFINITY)
        fail("bias", concat("expected finite values or -inf, got ", x, " at [", a, ", ", b, ", ", c,
                            ", ", d, "]"));
    });
  }

  if (p.probs_mode == ProbsMode::per_head) {
    check_rank(p.probs, "probs", 4, "[batch, heads, q_len, kv_len]");
    check_shape(p.probs, "probs", {s.batch, s.heads, s.q_len, s.kv_len},
                "[batch, heads, q_len, kv_len]");
    check_writable(p.probs, "probs");
  } else if (p.probs_mode == ProbsMode::averaged) {
    HEADCOUNT_CHECK(!p.probs.empty(), "probs", "a tensor [batch, q_len, kv_len]", "no data");
    HEADCOUNT_CHECK(p.probs.rank == 3 && p.probs.dtype == DType::f32, "probs",
                    "an f32 tensor [batch, q_len, kv_len]",
                    concat(dtype_name(p.probs.dtype), ' ', p.probs.shape_string()));
    check_shape(p.probs, "probs", {s.batch, s.q_len, s.kv_len}, "[batch, q_len, kv_len]");
    check_writable(p.probs, "probs");
  }

  return s;
}

void check_finite_inputs(Context& ctx, const AttentionParams& p) {
  // Rows of every unit-stride view, dealt out in chunks over the pool; a chunk only says
  // whether it saw a bad value. The serial check then names the first one (or walks views
  // whose rows are strided), so the error is the same whatever the thread count.
  const TensorView* views[3] = {&p.q, &p.k, &p.v};
  const char* names[3] = {"q", "k", "v"};
  constexpr std::int64_t kChunkRows = 1024;
  std::int64_t first_chunk[4] = {0, 0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const TensorView& v = *views[i];
    const std::int64_t rows = v.strides[3] == 1 ? v.shape[0] * v.shape[1] * v.shape[2] : 0;
    first_chunk[i + 1] = first_chunk[i] + (rows + kChunkRows - 1) / kChunkRows;
  }
  std::atomic<bool> bad{false};
  const auto f32_scan = simd::tile_kernels(ctx.isa()).any_non_finite_f32;
  ctx.parallel_for(first_chunk[3], [&](std::int64_t chunk, int) {
    const int i = chunk < first_chunk[1] ? 0 : chunk < first_chunk[2] ? 1 : 2;
    const TensorView& v = *views[i];
    const std::int64_t rows = v.shape[0] * v.shape[1] * v.shape[2];
    const std::int64_t r0 = (chunk - first_chunk[i]) * kChunkRows;
    const bool seen = rows_non_finite(v, r0, std::min(rows, r0 + kChunkRows), f32_scan);
    if (seen) bad.store(true, std::memory_order_relaxed);
  });
  for (int i = 0; i < 3; ++i)
    if (bad.load() || views[i]->strides[3] != 1) check_finite(*views[i], names[i]);
}

}  // namespace kernels

AttentionShape validate(const AttentionParams& p) {
  const AttentionShape s = kernels::validate_layout(p);
  check_finite(p.q, "q");
  check_finite(p.k, "k");
  check_finite(p.v, "v");
  return s;
}

}  // namespace headcount
