// The attention sub-block's forward and backward (data path in attention_block.h).
#include "train/attention_block.h"

#include <algorithm>

#include "headcount/attention_backward.h"
#include "layers/rotary.h"
#include "train/linear.h"

namespace headcount::train {
namespace {

// A [batch, len, heads, dim] view of columns [column, column + heads·dim) of a row-major
// [batch·len, row_width] matrix.
TensorView head_view(float* matrix, std::int64_t row_width, std::int64_t column, std::int64_t batch,
                     std::int64_t len, std::int64_t heads, std::int64_t dim) {
  return TensorView::strided(matrix + column, DType::f32, {batch, len, heads, dim},
                             {len * row_width, row_width, dim, 1});
}

AttentionParams kernel_params(const AttentionBlockShape& s, float* qkv, float* concat, float* lse) {
  const std::int64_t width = s.qkv_width(), hd = s.head_dim;
  AttentionParams p;
  p.q = head_view(qkv, width, 0, s.batch, s.seq_len, s.heads, hd);
  p.k = head_view(qkv, width, s.heads * hd, s.batch, s.seq_len, s.kv_heads, hd);
  p.v = head_view(qkv, width, (s.heads + s.kv_heads) * hd, s.batch, s.seq_len, s.kv_heads, hd);
  p.out = head_view(concat, s.concat_width(), 0, s.batch, s.seq_len, s.heads, hd);
  p.lse = TensorView::contiguous(lse, DType::f32, {s.batch, s.heads, s.seq_len});
  p.scale = s.scale;
  p.causal = s.causal;
  p.key_lengths = s.key_lengths;
  return p;
}

// Rotary positions on the Q and K columns of a [batch·seq_len, qkv_width] matrix, each sequence
// from position 0 (inverse: the transpose, for gradients). Nothing without rotary positions.
void turn_rotary(Context& ctx, const AttentionBlockShape& s, float* qkv, bool inverse) {
  if (s.rope_base == 0) return;
  for (std::int64_t b = 0; b < s.batch; ++b)
    layers::apply_rotary(ctx, qkv + b * s.seq_len * s.qkv_width(), s.seq_len, s.qkv_width(),
                         s.heads + s.kv_heads, s.head_dim, s.rope_base, 0, inverse);
}

}  // namespace

void attention_block_forward(Context& ctx, const AttentionBlockShape& s,
                             const AttentionBlockWeights& w, const float* x, const float* gates,
                             const AttentionBlockSaved& saved, float* y, const TensorView& probs) {
  const std::int64_t rows = s.rows(), cw = s.concat_width();
  linear_forward(ctx, x, rows, s.d_model, s.qkv_width(), w.w_qkv, w.b_qkv, saved.qkv);
  turn_rotary(ctx, s, saved.qkv, false);
  AttentionParams p = kernel_params(s, saved.qkv, saved.concat, saved.lse);
  Kernel kernel = s.kernel;
  if (!probs.empty()) {
    p.probs_mode = ProbsMode::per_head;
    p.probs = probs;
    kernel = Kernel::reference;
  }
  attention(ctx, kernel, p);
  if (gates != nullptr) {
    ctx.parallel_for(s.batch, [&](std::int64_t b, int) {
      for (std::int64_t r = b * s.seq_len; r < (b + 1) * s.seq_len; ++r)
        for (std::int64_t h = 0; h < s.heads; ++h)
          for (std::int64_t e = 0; e < s.head_dim; ++e) {
            const std::int64_t i = r * cw + h * s.head_dim + e;
            saved.gated[i] = saved.concat[i] * gates[h];
          }
    });
  }
  linear_forward(ctx, saved.gated, rows, cw, s.d_model, w.w_o, w.b_o, y);
}

void attention_block_backward(Context& ctx, const AttentionBlockShape& s,
                              const AttentionBlockWeights& w, const AttentionBlockBackward& a,
                              const AttentionBlockGrads& grads) {
  const std::int64_t rows = s.rows(), cw = s.concat_width(), hd = s.head_dim;
  // 4. Output projection: d_concat first holds d_gated.
  linear_backward(ctx, {.x = a.saved.gated,
                        .dy = a.dy,
                        .w = w.w_o,
                        .rows = rows,
                        .in = cw,
                        .out = s.d_model,
                        .dw = grads.w_o,
                        .db = grads.b_o,
                        .dx = a.d_concat});
  // 3. Gates: dL/dgate[h] in double over (rows, columns) in order, and the same sum restarted
  //    at each sequence's first row for the per-sequence gradients; then d_concat = gate · d_gated.
  for (std::int64_t h = 0; h < s.heads; ++h) {
    double sum = 0;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      double sequence = 0;
      for (std::int64_t r = b * s.seq_len; r < (b + 1) * s.seq_len; ++r)
        for (std::int64_t e = 0; e < hd; ++e) {
          const std::int64_t i = r * cw + h * hd + e;
          const double term = static_cast<double>(a.d_concat[i]) * a.saved.concat[i];
          sum += term;
          sequence += term;
        }
      if (grads.sequence_gates != nullptr) grads.sequence_gates[b * s.heads + h] = sequence;
    }
    if (grads.gates != nullptr) grads.gates[h] = sum;
  }
  if (a.gates != nullptr) {
    ctx.parallel_for(s.batch, [&](std::int64_t b, int) {
      for (std::int64_t r = b * s.seq_len; r < (b + 1) * s.seq_len; ++r)
        for (std::int64_t h = 0; h < s.heads; ++h)
          for (std::int64_t e = 0; e < hd; ++e) a.d_concat[r * cw + h * hd + e] *= a.gates[h];
    });
  }
  // 2. The kernel's backward writes dq, dk, dv into three blocks, then they are interleaved
  //    into d_qkv's columns (Q | K | V per row) for the fused projection's backward.
  AttentionParams p = kernel_params(s, a.saved.qkv, a.saved.concat, a.saved.lse);
  const std::int64_t width = s.qkv_width(), qw = s.heads * hd, kw = s.kv_heads * hd;
  float* dq = a.d_split;
  float* dk = dq + rows * qw;
  float* dv = dk + rows * kw;
  AttentionGrads g;
  g.d_out = head_view(a.d_concat, cw, 0, s.batch, s.seq_len, s.heads, hd);
  g.d_q = head_view(dq, qw, 0, s.batch, s.seq_len, s.heads, hd);
  g.d_k = head_view(dk, kw, 0, s.batch, s.seq_len, s.kv_heads, hd);
  g.d_v = head_view(dv, kw, 0, s.batch, s.seq_len, s.kv_heads, hd);
  attention_backward(ctx, s.kernel, p, g);
  ctx.parallel_for(s.batch, [&](std::int64_t b, int) {
    for (std::int64_t r = b * s.seq_len; r < (b + 1) * s.seq_len; ++r) {
      float* row = a.d_qkv + r * width;
      std::copy_n(dq + r * qw, qw, row);
      std::copy_n(dk + r * kw, kw, row + qw);
      std::copy_n(dv + r * kw, kw, row + qw + kw);
    }
  });
  turn_rotary(ctx, s, a.d_qkv, true);
  // 1. Fused projection.
  linear_backward(ctx, {.x = a.x,
                        .dy = a.d_qkv,
                        .w = w.w_qkv,
                        .rows = rows,
                        .in = s.d_model,
                        .out = width,
                        .dw = grads.w_qkv,
                        .db = grads.b_qkv,
                        .dx = a.dx,
                        .accumulate_dx = a.accumulate_dx});
}

}  // namespace headcount::train
