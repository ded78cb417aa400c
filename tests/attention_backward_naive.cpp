#include "attention_backward_naive.h"

#include <cmath>
#include <limits>

namespace headcount::testing {
namespace {

// Forced inline: clang under AddressSanitizer kept it out of line, 28% of a long backward case.
[[gnu::always_inline]] inline double at(const TensorView& t, std::int64_t a, std::int64_t b,
                                        std::int64_t c, std::int64_t d) {
  return t.ptr<const float>()[a * t.strides[0] + b * t.strides[1] + c * t.strides[2] +
                              d * t.strides[3]];
}

template <typename Real>
NaiveGrads naive_backward(const AttentionInputs& in, const TensorView& d_out) {
  const AttentionCase& c = in.c;
  const Real scale =
      Real(c.scale ? *c.scale : static_cast<float>(1.0 / std::sqrt(double(c.head_dim))));
  const std::int64_t B = c.batch, H = c.heads, G = c.kv_heads, D = c.head_dim, Dv = c.v_head_dim;
  const std::int64_t Lq = c.q_len, Lk = c.kv_len, group = H / G;
  std::vector<Real> dq(static_cast<std::size_t>(B * Lq * H * D), 0),
      dk(static_cast<std::size_t>(B * Lk * G * D), 0),
      dv(static_cast<std::size_t>(B * Lk * G * Dv), 0), db;
  const bool has_bias = !in.bias.empty();
  const std::int64_t nb = has_bias ? in.bias.shape[0] : 0, nh = has_bias ? in.bias.shape[1] : 0;
  if (has_bias) db.assign(static_cast<std::size_t>(nb * nh * Lq * Lk), 0);
  std::vector<double> cq(dq.size(), 0), ck(dk.size(), 0), cv(dv.size(), 0), cb(db.size(), 0);

  std::vector<Real> p(static_cast<std::size_t>(Lk)), o(static_cast<std::size_t>(Dv));
  std::vector<char> seen(static_cast<std::size_t>(Lk));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < Lq; ++i) {
        const std::int64_t g = h / group;
        // softmax row, -inf for hidden keys
        Real m = -std::numeric_limits<Real>::infinity();
        for (std::int64_t j = 0; j < Lk; ++j) {
          Real x = -std::numeric_limits<Real>::infinity();
          if (key_visible(in, b, i, j)) {
            Real dot = 0;
            for (std::int64_t d = 0; d < D; ++d)
              dot += Real(at(in.q, b, i, h, d)) * Real(at(in.k, b, j, g, d));
            x = scale * dot;
            if (has_bias) x += Real(at(in.bias, nb == 1 ? 0 : b, nh == 1 ? 0 : h, i, j));
          }
          p[static_cast<std::size_t>(j)] = x;
          m = std::max(m, x);
        }
        if (m == -std::numeric_limits<Real>::infinity()) continue;  // sees no key: every gradient 0
        Real l = 0;
        for (Real& x : p) {
          x = std::exp(x - m);
          l += x;
        }
        for (Real& x : p) x /= l;
        // out row and D = dO·O
        Real delta = 0;
        double abs_delta = 0;
        for (std::int64_t e = 0; e < Dv; ++e) {
          Real acc = 0;
          for (std::int64_t j = 0; j < Lk; ++j)
            acc += p[static_cast<std::size_t>(j)] * Real(at(in.v, b, j, g, e));
          delta += acc * Real(at(d_out, b, i, h, e));
          abs_delta += std::fabs(double(acc) * at(d_out, b, i, h, e));
        }
        for (std::int64_t j = 0; j < Lk; ++j) {
          const Real pj = p[static_cast<std::size_t>(j)];
          if (pj == 0) continue;
          Real dp = 0;
          double abs_dp = 0;
          for (std::int64_t e = 0; e < Dv; ++e) {
            const std::size_t at_v = static_cast<std::size_t>(((b * Lk + j) * G + g) * Dv + e);
            dp += Real(at(d_out, b, i, h, e)) * Real(at(in.v, b, j, g, e));
            abs_dp += std::fabs(at(d_out, b, i, h, e) * at(in.v, b, j, g, e));
            dv[at_v] += pj * Real(at(d_out, b, i, h, e));
            cv[at_v] += double(pj) * std::fabs(at(d_out, b, i, h, e));
          }
          const Real ds = pj * (dp - delta);
          const double abs_ds = double(pj) * (abs_dp + abs_delta);
          for (std::int64_t d = 0; d < D; ++d) {
            const std::size_t at_q = static_cast<std::size_t>(((b * Lq + i) * H + h) * D + d);
            const std::size_t at_k = static_cast<std::size_t>(((b * Lk + j) * G + g) * D + d);
            dq[at_q] += scale * ds * Real(at(in.k, b, j, g, d));
            dk[at_k] += scale * ds * Real(at(in.q, b, i, h, d));
            cq[at_q] += double(scale) * abs_ds * std::fabs(at(in.k, b, j, g, d));
            ck[at_k] += double(scale) * abs_ds * std::fabs(at(in.q, b, i, h, d));
          }
          if (has_bias) {
            const std::size_t at_b = static_cast<std::size_t>(
                (((nb == 1 ? 0 : b) * nh + (nh == 1 ? 0 : h)) * Lq + i) * Lk + j);
            db[at_b] += ds;
            cb[at_b] += abs_ds;
          }
        }
      }
  auto widen = [](const std::vector<Real>& x) { return std::vector<double>(x.begin(), x.end()); };
  return NaiveGrads{.d_q = widen(dq),
                    .d_k = widen(dk),
                    .d_v = widen(dv),
                    .d_bias = widen(db),
                    .cond_q = cq,
                    .cond_k = ck,
                    .cond_v = cv,
                    .cond_bias = cb};
}

}  // namespace

NaiveGrads naive_backward_f64(const AttentionInputs& in, const TensorView& d_out) {
  return naive_backward<double>(in, d_out);
}
NaiveGrads naive_backward_f32(const AttentionInputs& in, const TensorView& d_out) {
  return naive_backward<float>(in, d_out);
}

double naive_loss_f64(const AttentionInputs& in, const TensorView& d_out) {
  const NaiveResult r = naive_attention_f64(in);
  const AttentionCase& c = in.c;
  double loss = 0;
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t i = 0; i < c.q_len; ++i)
      for (std::int64_t h = 0; h < c.heads; ++h)
        for (std::int64_t e = 0; e < c.v_head_dim; ++e)
          loss += r.out[static_cast<std::size_t>(((b * c.q_len + i) * c.heads + h) * c.v_head_dim +
                                                 e)] *
                  at(d_out, b, i, h, e);
  return loss;
}

}  // namespace headcount::testing
