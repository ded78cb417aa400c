// The exact merge of partial softmax states by log-sum-exp, shared by the decode kernel (its
// chunks of one cache) and ring attention (src/distributed/: one partial per K/V block that
// passed a rank).
//
// A partial c of one query row, over some subset of its keys, holds
//   m_c   the largest scaled score it saw (-inf: it saw no key),
//   l_c   sum over its keys of e^(s - m_c),
//   acc_c sum over its keys of e^(s - m_c) v   (dim values).
// A kernel's finished output (O, lse) is the partial (m = lse, l = 1, acc = O). The merge
//   M = max_c m_c,  L = sum_c l_c e^(m_c - M),  acc = sum_c acc_c e^(m_c - M)
// is the online softmax over the union of the keys; the row's output is acc / L and its
// log-sum-exp M + log L (lse_finish). Partials are added in index order, so the result
// depends only on the partials, never on which worker or rank made them or when.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace headcount::kernels {

struct LsePartial {
  float m = 0, l = 0;
  const float* acc = nullptr;
};

struct LseMerged {
  float m = 0, l = 0;
};

// Merges `count` partials (part(c) returns partial c) into acc_out[0, dim), which must not
// alias any partial's acc. Returns (M, L); L = 0 when no partial saw a key (acc_out zeros).
template <class PartialOf>
inline LseMerged lse_merge(std::int64_t count, PartialOf part, std::int64_t dim, float* acc_out) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  float m = minus_inf;
  for (std::int64_t c = 0; c < count; ++c) m = std::max(m, part(c).m);
  float l = 0.0f;
  std::fill(acc_out, acc_out + dim, 0.0f);
  if (m != minus_inf) {
    for (std::int64_t c = 0; c < count; ++c) {
      const LsePartial p = part(c);
      if (p.m == minus_inf) continue;
      const float f = std::exp(p.m - m);
      l += p.l * f;
      for (std::int64_t e = 0; e < dim; ++e) acc_out[e] += p.acc[e] * f;
    }
  }
  return {m, l};
}

// The row's output factor and log-sum-exp: out = acc * lse_inverse(L), lse = lse_finish(M, L)
// (zeros and -inf for a row that saw no key).
inline float lse_inverse(LseMerged r) { return r.l > 0.0f ? 1.0f / r.l : 0.0f; }
inline float lse_finish(LseMerged r) {
  return r.l > 0.0f ? r.m + std::log(r.l) : -std::numeric_limits<float>::infinity();
}

}  // namespace headcount::kernels
