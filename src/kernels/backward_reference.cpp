// The reference backward: the oracle the streaming backward is tested against.
//
// Written to be checked by eye, not to be fast: the whole P of each head is materialised
// in double, every pass is numbered, all sums are accumulated in double, and out and lse
// are always recomputed in double (params.out and params.lse, when given, are validated
// but never read, so these are the gradients of the exact function). In parallel over
// (batch, kv head); each task runs the heads of its group one after the other, so dK and
// dV of the kv head are sums over the group with no two tasks writing one element:
//   1. scores   S[i, j] = scale · q_i·k_j + bias[i, j] for visible keys j, -inf elsewhere
//   2. softmax  lse_i = log sum_j exp(S[i, j]); P[i, j] = exp(S[i, j] - lse_i)
//               (a row with no finite score: P = 0, so all its gradients are 0)
//   3. output   O_i = sum_j P[i, j] v_j;  D_i = dO_i · O_i
//   4. dV       dV_j += sum_i P[i, j] dO_i
//   5. dS       dS[i, j] = P[i, j] (dO_i · v_j - D_i)        (kept: d_bias reads it)
//   6. dQ       dQ_i = scale · sum_j dS[i, j] k_j
//   7. dK       dK_j += scale · sum_i dS[i, j] q_i
// then, once all heads are done,
//   8. d_bias   d_bias[bb, bh, i, j] = sum of dS[b, h, i, j] over the (b, h) it broadcasts to.
#include <cmath>
#include <limits>
#include <vector>

#include "headcount/attention_backward.h"
#include "kernels/backward_checks.h"
#include "kernels/count_work.h"
#include "kernels/masking.h"

namespace headcount {

using kernels::KeyRange;
using kernels::MaskSpec;

AttentionBackwardStats attention_backward_reference(Context& ctx, const AttentionParams& p,
                                                    const AttentionGrads& g) {
  const AttentionShape s = kernels::checked_backward_shape(p, g, /*need_forward=*/false, &ctx);
  const MaskSpec mask = MaskSpec::from(p, s);
  const double minus_inf = -std::numeric_limits<double>::infinity();

  // [batch, heads, q_len, kv_len]: P after pass 2, dS after pass 5.
  std::vector<double> grid(static_cast<std::size_t>(s.batch * s.heads * s.q_len * s.kv_len));
  std::vector<std::int64_t> computed_entries(static_cast<std::size_t>(s.batch * s.kv_heads), 0);

  // Forced inline (the accessors below too): clang under AddressSanitizer kept them out of line,
  // each call with a checked stack frame, most of the time of the long-key backward tests there.
  auto value = [](const TensorView& t, std::int64_t off) __attribute__((always_inline)) {
    return t.dtype == DType::bf16 ? static_cast<double>(to_float(t.ptr<const bf16>()[off]))
                                  : static_cast<double>(t.ptr<const float>()[off]);
  };
  auto bias_at = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    const std::int64_t bb = p.bias.shape[0] == 1 ? 0 : b;
    const std::int64_t bh = p.bias.shape[1] == 1 ? 0 : h;
    return static_cast<double>(p.bias.ptr<const float>()[p.bias.offset({bb, bh, i, j})]);
  };
  // Element e of row (b, t, head) of a [batch, len, heads, dim] tensor, widened to double.
  auto at = [&](const TensorView& t, std::int64_t b, std::int64_t row, std::int64_t head,
                std::int64_t e) __attribute__((always_inline)) {
    return value(t, t.offset({b, row, head, e}));
  };

  ctx.parallel_for(s.batch * s.kv_heads, [&](std::int64_t task, int /*worker*/) {
    const std::int64_t b = task / s.kv_heads;
    const std::int64_t kv_h = task % s.kv_heads;
    const std::int64_t key_length = kernels::key_length_of(p, s, b);
    std::vector<double> dk(static_cast<std::size_t>(s.kv_len * s.head_dim), 0.0);
    std::vector<double> dv(static_cast<std::size_t>(s.kv_len * s.v_head_dim), 0.0);
    std::vector<double> o(static_cast<std::size_t>(s.v_head_dim));
    std::vector<double> delta(static_cast<std::size_t>(s.q_len));
    std::int64_t entries = 0;

    for (std::int64_t h = kv_h * s.group; h < (kv_h + 1) * s.group; ++h) {
      double* P = grid.data() + (b * s.heads + h) * s.q_len * s.kv_len;

      for (std::int64_t i = 0; i < s.q_len; ++i) {
        double* row = P + i * s.kv_len;
        const KeyRange keys = mask.keys_for(i, key_length);
        // 1. scores
        for (std::int64_t j = 0; j < s.kv_len; ++j) {
          row[j] = minus_inf;
          if (j < keys.begin || j >= keys.end) continue;
          double dot = 0.0;
          for (std::int64_t d = 0; d < s.head_dim; ++d)
            dot += at(p.q, b, i, h, d) * at(p.k, b, j, kv_h, d);
          row[j] =
              static_cast<double>(s.scale) * dot + (p.bias.empty() ? 0.0 : bias_at(b, h, i, j));
          ++entries;
        }
        // 2. softmax
        double row_max = minus_inf;
        for (std::int64_t j = 0; j < s.kv_len; ++j) row_max = std::max(row_max, row[j]);
        double lse = minus_inf;
        if (row_max != minus_inf) {
          double sum = 0.0;
          for (std::int64_t j = 0; j < s.kv_len; ++j) sum += std::exp(row[j] - row_max);
          lse = row_max + std::log(sum);
        }
        for (std::int64_t j = 0; j < s.kv_len; ++j)
          row[j] = lse == minus_inf ? 0.0 : std::exp(row[j] - lse);
        // 3. output and D
        std::fill(o.begin(), o.end(), 0.0);
        for (std::int64_t j = 0; j < s.kv_len; ++j)
          for (std::int64_t e = 0; e < s.v_head_dim; ++e)
            o[static_cast<std::size_t>(e)] += row[j] * at(p.v, b, j, kv_h, e);
        double dot = 0.0;
        for (std::int64_t e = 0; e < s.v_head_dim; ++e)
          dot += at(g.d_out, b, i, h, e) * o[static_cast<std::size_t>(e)];
        delta[static_cast<std::size_t>(i)] = dot;
      }

      // 4. dV
      for (std::int64_t j = 0; j < s.kv_len; ++j)
        for (std::int64_t i = 0; i < s.q_len; ++i)
          for (std::int64_t e = 0; e < s.v_head_dim; ++e)
            dv[static_cast<std::size_t>(j * s.v_head_dim + e)] +=
                P[i * s.kv_len + j] * at(g.d_out, b, i, h, e);

      // 5. dS, in place of P
      for (std::int64_t i = 0; i < s.q_len; ++i)
        for (std::int64_t j = 0; j < s.kv_len; ++j) {
          double& x = P[i * s.kv_len + j];
          if (x == 0.0) continue;  // masked (or underflowed): dS = 0 either way
          double dp = 0.0;
          for (std::int64_t e = 0; e < s.v_head_dim; ++e)
            dp += at(g.d_out, b, i, h, e) * at(p.v, b, j, kv_h, e);
          x *= dp - delta[static_cast<std::size_t>(i)];
        }

      // 6. dQ. Keys in the outer loop so K is read along its rows; each sum still takes its terms
      // in key order, so the values are those of a per-element loop over j.
      float* d_q = g.d_q.ptr<float>();
      std::vector<double> dq_row(static_cast<std::size_t>(s.head_dim));
      for (std::int64_t i = 0; i < s.q_len; ++i) {
        std::fill(dq_row.begin(), dq_row.end(), 0.0);
        for (std::int64_t j = 0; j < s.kv_len; ++j) {
          const double pj = P[i * s.kv_len + j];
          for (std::int64_t d = 0; d < s.head_dim; ++d)
            dq_row[static_cast<std::size_t>(d)] += pj * at(p.k, b, j, kv_h, d);
        }
        for (std::int64_t d = 0; d < s.head_dim; ++d)
          d_q[g.d_q.offset({b, i, h, d})] = static_cast<float>(static_cast<double>(s.scale) *
                                                               dq_row[static_cast<std::size_t>(d)]);
      }

      // 7. dK
      for (std::int64_t j = 0; j < s.kv_len; ++j)
        for (std::int64_t i = 0; i < s.q_len; ++i)
          for (std::int64_t d = 0; d < s.head_dim; ++d)
            dk[static_cast<std::size_t>(j * s.head_dim + d)] +=
                P[i * s.kv_len + j] * at(p.q, b, i, h, d);
    }

    float* d_k = g.d_k.ptr<float>();
    float* d_v = g.d_v.ptr<float>();
    for (std::int64_t j = 0; j < s.kv_len; ++j) {
      for (std::int64_t d = 0; d < s.head_dim; ++d)
        d_k[g.d_k.offset({b, j, kv_h, d})] = static_cast<float>(
            static_cast<double>(s.scale) * dk[static_cast<std::size_t>(j * s.head_dim + d)]);
      for (std::int64_t e = 0; e < s.v_head_dim; ++e)
        d_v[g.d_v.offset({b, j, kv_h, e})] =
            static_cast<float>(dv[static_cast<std::size_t>(j * s.v_head_dim + e)]);
    }
    computed_entries[static_cast<std::size_t>(task)] = entries;
  });

  // 8. d_bias, summed over the dimensions the bias broadcasts over, in a fixed order.
  if (!g.d_bias.empty()) {
    float* d_bias = g.d_bias.ptr<float>();
    const std::int64_t nb = g.d_bias.shape[0], nh = g.d_bias.shape[1];
    for (std::int64_t bb = 0; bb < nb; ++bb)
      for (std::int64_t bh = 0; bh < nh; ++bh)
        for (std::int64_t i = 0; i < s.q_len; ++i)
          for (std::int64_t j = 0; j < s.kv_len; ++j) {
            double sum = 0.0;
            for (std::int64_t b = (nb == 1 ? 0 : bb); b < (nb == 1 ? s.batch : bb + 1); ++b)
              for (std::int64_t h = (nh == 1 ? 0 : bh); h < (nh == 1 ? s.heads : bh + 1); ++h)
                sum += grid[static_cast<std::size_t>(((b * s.heads + h) * s.q_len + i) * s.kv_len +
                                                     j)];
            d_bias[g.d_bias.offset({bb, bh, i, j})] = static_cast<float>(sum);
          }
  }

  AttentionBackwardStats stats;
  for (std::int64_t entries : computed_entries)
    stats.macs += entries * (3 * s.head_dim + 2 * s.v_head_dim);
  stats.peak_score_entries = s.batch * s.heads * s.q_len * s.kv_len;
  return kernels::counted(stats, s);
}

AttentionBackwardStats attention_backward(Context& ctx, Kernel kernel,
                                          const AttentionParams& params,
                                          const AttentionGrads& grads) {
  return kernel == Kernel::reference ? attention_backward_reference(ctx, params, grads)
                                     : attention_backward_streaming(ctx, params, grads);
}

}  // namespace headcount
