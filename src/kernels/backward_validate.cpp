// Validation of a backward call at the public edge: the params as the forward checks them
// (params.out may be empty here: the reference recomputes it), then every gradient view
// (rank, dtype, shape, writable strides), the values the kernels read (d_out, and out and lse
// when given: a NaN there would come out as NaN gradients without a word), and that no
// gradient shares memory with an input or another gradient (the kernels write gradients
// while still reading inputs, so an overlap would silently give wrong numbers).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "headcount/attention_backward.h"
#include "headcount/error.h"
#include "kernels/backward_checks.h"
#include "kernels/validate.h"
#include "kernels/view_checks.h"

namespace headcount {
namespace {

using detail::concat;

// The bytes [first, last) a view can touch (strides are non-negative once checked).
struct ByteRange {
  std::uintptr_t first = 0, last = 0;
};

ByteRange bytes_of(const TensorView& v) {
  std::int64_t last_offset = 0;
  for (int d = 0; d < v.rank; ++d) last_offset += (v.shape[d] - 1) * v.strides[d];
  const auto first = reinterpret_cast<std::uintptr_t>(v.data);
  return {first, first + static_cast<std::uintptr_t>(last_offset + 1) * dtype_size(v.dtype)};
}

void check_disjoint(const TensorView& written, const char* name, const TensorView& other,
                    const char* other_name) {
  if (written.empty() || other.empty()) return;
  const ByteRange a = bytes_of(written), b = bytes_of(other);
  HEADCOUNT_CHECK(a.last <= b.first || b.last <= a.first, name,
                  concat("memory not shared with ", other_name),
                  concat("a view overlapping ", other_name));
}

}  // namespace

namespace kernels {

AttentionShape checked_backward_shape(const AttentionParams& p, const AttentionGrads& g,
                                      bool need_forward, Context* ctx) {
  if (need_forward) {
    HEADCOUNT_CHECK(!p.out.empty(), "out", "the forward's output (the streaming backward reads it)",
                    "no data");
    HEADCOUNT_CHECK(!p.lse.empty(), "lse", "the forward's lse (the streaming backward reads it)",
                    "no data");
  }
  // The forward's checks; a missing out is replaced by a placeholder of the right shape
  // (validate() checks out's shape and strides but never reads it).
  AttentionParams fwd = p;
  fwd.probs_mode = ProbsMode::none;
  fwd.probs = {};
  float placeholder = 0.0f;
  if (fwd.out.empty() && p.q.rank == 4 && p.v.rank == 4 && !p.q.empty() && !p.v.empty())
    fwd.out = TensorView::contiguous(&placeholder, DType::f32,
                                     {p.q.shape[0], p.q.shape[1], p.q.shape[2], p.v.shape[3]});
  AttentionShape s;
  if (ctx != nullptr) {
    s = validate_layout(fwd);
    check_finite_inputs(*ctx, fwd);
  } else {
    s = validate(fwd);
  }

  check_rank(g.d_out, "d_out", 4, "[batch, q_len, heads, v_head_dim]");
  check_shape(g.d_out, "d_out", {s.batch, s.q_len, s.heads, s.v_head_dim},
              "[batch, q_len, heads, v_head_dim]");
  check_rank(g.d_q, "d_q", 4, "[batch, q_len, heads, head_dim]");
  check_shape(g.d_q, "d_q", {s.batch, s.q_len, s.heads, s.head_dim},
              "[batch, q_len, heads, head_dim]");
  check_writable(g.d_q, "d_q");
  check_rank(g.d_k, "d_k", 4, "[batch, kv_len, kv_heads, head_dim]");
  check_shape(g.d_k, "d_k", {s.batch, s.kv_len, s.kv_heads, s.head_dim},
              "[batch, kv_len, kv_heads, head_dim]");
  check_writable(g.d_k, "d_k");
  check_rank(g.d_v, "d_v", 4, "[batch, kv_len, kv_heads, v_head_dim]");
  check_shape(g.d_v, "d_v", {s.batch, s.kv_len, s.kv_heads, s.v_head_dim},
              "[batch, kv_len, kv_heads, v_head_dim]");
  check_writable(g.d_v, "d_v");
  if (!g.d_bias.empty()) {
    HEADCOUNT_CHECK(!p.bias.empty(), "d_bias", "no tensor (params.bias is empty)",
                    g.d_bias.shape_string());
    check_rank(g.d_bias, "d_bias", 4, "(the shape of bias)");
    check_shape(g.d_bias, "d_bias",
                {p.bias.shape[0], p.bias.shape[1], p.bias.shape[2], p.bias.shape[3]},
                "(the shape of bias)");
    check_writable(g.d_bias, "d_bias");
  }

  check_finite(g.d_out, "d_out");
  if (!p.out.empty()) check_finite(p.out, "out");
  if (!p.lse.empty()) {
    const float* lse = p.lse.ptr<const float>();
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t h = 0; h < s.heads; ++h)
        for (std::int64_t i = 0; i < s.q_len; ++i) {
          const float x = lse[p.lse.offset({b, h, i})];
          if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
            fail("lse", concat("expected finite values or -inf (a row that sees no key), got ", x,
                               " at [", b, ", ", h, ", ", i, "]"));
        }
  }

  const TensorView* written[] = {&g.d_q, &g.d_k, &g.d_v, &g.d_bias};
  const char* written_names[] = {"d_q", "d_k", "d_v", "d_bias"};
  const TensorView* read[] = {&p.q, &p.k, &p.v, &p.out, &p.lse, &p.bias, &g.d_out};
  const char* read_names[] = {"q", "k", "v", "out", "lse", "bias", "d_out"};
  for (int w = 0; w < 4; ++w) {
    for (int r = 0; r < 7; ++r)
      check_disjoint(*written[w], written_names[w], *read[r], read_names[r]);
    for (int o = w + 1; o < 4; ++o)
      check_disjoint(*written[w], written_names[w], *written[o], written_names[o]);
  }
  return s;
}

}  // namespace kernels

void validate_backward(const AttentionParams& params, const AttentionGrads& grads) {
  kernels::checked_backward_shape(params, grads, /*need_forward=*/false);
}

}  // namespace headcount
