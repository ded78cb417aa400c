// The reference kernel: the oracle every other path is tested against.
//
// It is written to be checked by eye, not to be fast: every score of every head is
// materialised (the seeds' h·n·m term, in double), each pass is numbered, and all sums
// are accumulated in double. Per (batch, head), in parallel over the context's workers:
//   1. scores   S[i, j] = scale · q_i·k_j + bias[i, j]   for visible keys j, -inf elsewhere
//   2. softmax  m_i = max_j S, l_i = sum_j exp(S - m_i), lse_i = m_i + log l_i,
//               P[i, j] = exp(S[i, j] - lse_i); a row with no finite score: P = 0, lse = -inf
//   3. output   O_i = sum_j P[i, j] · v_j
// then, once all heads are done,
//   4. probabilities, per head or averaged over heads, if asked for.
#include <cmath>
#include <limits>
#include <vector>

#include "headcount/attention.h"
#include "kernels/count_work.h"
#include "kernels/masking.h"

namespace headcount {

using kernels::KeyRange;
using kernels::MaskSpec;

AttentionStats attention_reference(Context& ctx, const AttentionParams& p) {
  const AttentionShape s = validate(p);
  const MaskSpec mask = MaskSpec::from(p, s);
  const double minus_inf = -std::numeric_limits<double>::infinity();

  // [batch, heads, q_len, kv_len]: after pass 2 it holds P instead of S.
  std::vector<double> probs(static_cast<std::size_t>(s.batch * s.heads * s.q_len * s.kv_len));
  std::vector<std::int64_t> computed_entries(static_cast<std::size_t>(s.batch * s.heads), 0);

  // Inputs are f32 or bf16; every value is widened exactly to double.
  auto value = [](const TensorView& t, std::int64_t off) {
    return t.dtype == DType::bf16 ? static_cast<double>(to_float(t.ptr<const bf16>()[off]))
                                  : static_cast<double>(t.ptr<const float>()[off]);
  };
  float* out = p.out.ptr<float>();
  const float* bias = p.bias.empty() ? nullptr : p.bias.ptr<const float>();

  ctx.parallel_for(s.batch * s.heads, [&](std::int64_t task, int /*worker*/) {
    const std::int64_t b = task / s.heads;
    const std::int64_t h = task % s.heads;
    const std::int64_t kv_h = kv_head_of(h, s.group);
    const std::int64_t key_length = kernels::key_length_of(p, s, b);
    double* P = probs.data() + task * s.q_len * s.kv_len;
    std::int64_t entries = 0;

    std::vector<double> acc(static_cast<std::size_t>(s.v_head_dim));

    for (std::int64_t i = 0; i < s.q_len; ++i) {
      double* row = P + i * s.kv_len;
      const KeyRange keys = mask.keys_for(i, key_length);
      const std::int64_t q_row = p.q.offset({b, i, h, 0});

      // 1. scores
      for (std::int64_t j = 0; j < s.kv_len; ++j) {
        row[j] = minus_inf;
        if (j < keys.begin || j >= keys.end) continue;
        const std::int64_t k_row = p.k.offset({b, j, kv_h, 0});
        double dot = 0.0;
        for (std::int64_t d = 0; d < s.head_dim; ++d)
          dot += value(p.q, q_row + d * p.q.strides[3]) * value(p.k, k_row + d * p.k.strides[3]);
        row[j] = static_cast<double>(s.scale) * dot;
        if (bias) {
          const std::int64_t bb = p.bias.shape[0] == 1 ? 0 : b;
          const std::int64_t bh = p.bias.shape[1] == 1 ? 0 : h;
          row[j] += static_cast<double>(bias[p.bias.offset({bb, bh, i, j})]);
        }
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
      if (!p.lse.empty()) p.lse.ptr<float>()[p.lse.offset({b, h, i})] = static_cast<float>(lse);

      // 3. output
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t j = keys.begin; j < keys.end; ++j) {
        const std::int64_t v_row = p.v.offset({b, j, kv_h, 0});
        for (std::int64_t e = 0; e < s.v_head_dim; ++e)
          acc[static_cast<std::size_t>(e)] += row[j] * value(p.v, v_row + e * p.v.strides[3]);
      }
      for (std::int64_t e = 0; e < s.v_head_dim; ++e)
        out[p.out.offset({b, i, h, e})] = static_cast<float>(acc[static_cast<std::size_t>(e)]);
    }
    computed_entries[static_cast<std::size_t>(task)] = entries;
  });

  // 4. probabilities
  if (p.probs_mode != ProbsMode::none) {
    float* dst = p.probs.ptr<float>();
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t i = 0; i < s.q_len; ++i)
        for (std::int64_t j = 0; j < s.kv_len; ++j) {
          double mean = 0.0;
          for (std::int64_t h = 0; h < s.heads; ++h) {
            const double prob =
                probs[static_cast<std::size_t>(((b * s.heads + h) * s.q_len + i) * s.kv_len + j)];
            if (p.probs_mode == ProbsMode::per_head)
              dst[p.probs.offset({b, h, i, j})] = static_cast<float>(prob);
            mean += prob;
          }
          if (p.probs_mode == ProbsMode::averaged)
            dst[p.probs.offset({b, i, j})] =
                static_cast<float>(mean / static_cast<double>(s.heads));
        }
  }

  AttentionStats stats;
  for (std::int64_t entries : computed_entries) {
    stats.score_macs += entries * s.head_dim;
    stats.weighted_sum_macs += entries * s.v_head_dim;
  }
  stats.peak_score_entries = s.batch * s.heads * s.q_len * s.kv_len;
  return kernels::counted(stats, s);
}

}  // namespace headcount
