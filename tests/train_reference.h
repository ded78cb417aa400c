// A float64 forward of the trainable model, written here independently of src/train: the
// oracle of the gradient checks (finite differences of it) and of the loss checks. Plain
// loops, every sum in double, the formulas of include/headcount/train/model.h read off the
// header, not the implementation. Parameters come in by name as double vectors.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "headcount/train/model.h"

namespace headcount::testing::ref {

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;

inline Params params_of(const train::Model& model) {
  Params out;
  for (const train::Parameter& p : model.parameters())
    out[p.name] = Vec(p.value.data<const float>(), p.value.data<const float>() + p.value.numel());
  return out;
}

// y[m, n] = x[m, k] · w[k, n] + b[n]
inline Vec linear(const Vec& x, std::int64_t m, std::int64_t k, const Vec& w, const Vec& b,
                  std::int64_t n) {
  Vec y(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = b.empty() ? 0.0 : b[static_cast<std::size_t>(j)];
      for (std::int64_t r = 0; r < k; ++r)
        acc += x[static_cast<std::size_t>(i * k + r)] * w[static_cast<std::size_t>(r * n + j)];
      y[static_cast<std::size_t>(i * n + j)] = acc;
    }
  return y;
}

inline Vec layer_norm(const Vec& x, std::int64_t rows, std::int64_t width, const Vec& gamma,
                      const Vec& beta) {
  Vec y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t c = 0; c < width; ++c) mean += x[static_cast<std::size_t>(r * width + c)];
    mean /= static_cast<double>(width);
    for (std::int64_t c = 0; c < width; ++c) {
      const double d = x[static_cast<std::size_t>(r * width + c)] - mean;
      var += d * d;
    }
    var /= static_cast<double>(width);
    const double inv = 1.0 / std::sqrt(var + 1e-5);
    for (std::int64_t c = 0; c < width; ++c) {
      const auto i = static_cast<std::size_t>(r * width + c);
      y[i] = (x[i] - mean) * inv * gamma[static_cast<std::size_t>(c)] +
             beta[static_cast<std::size_t>(c)];
    }
  }
  return y;
}

inline Vec rms_norm(const Vec& x, std::int64_t rows, std::int64_t width, const Vec& gamma) {
  Vec y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double squares = 0;
    for (std::int64_t c = 0; c < width; ++c)
      squares +=
          x[static_cast<std::size_t>(r * width + c)] * x[static_cast<std::size_t>(r * width + c)];
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(width) + 1e-5);
    for (std::int64_t c = 0; c < width; ++c) {
      const auto i = static_cast<std::size_t>(r * width + c);
      y[i] = x[i] * inv * gamma[static_cast<std::size_t>(c)];
    }
  }
  return y;
}

// Rotary positions in Hugging Face's half-pair form on the first `heads` heads of each row of
// qkv [rows, width]: row r is position r % seq_len; pair (i, i + hd/2) turns by
// (r % seq_len) · base^(-2i / hd).
inline void rotary(Vec& qkv, std::int64_t rows, std::int64_t width, std::int64_t seq_len,
                   std::int64_t heads, std::int64_t hd, double base) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < hd / 2; ++i) {
        const double theta =
            static_cast<double>(r % seq_len) *
            std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
        double& a = qkv[static_cast<std::size_t>(r * width + h * hd + i)];
        double& b = qkv[static_cast<std::size_t>(r * width + h * hd + i + hd / 2)];
        const double x1 = a, x2 = b;
        a = x1 * std::cos(theta) - x2 * std::sin(theta);
        b = x2 * std::cos(theta) + x1 * std::sin(theta);
      }
}

inline double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

struct AttentionShape {
  std::int64_t batch, seq_len, heads, kv_heads, head_dim;
  double scale;
  bool causal;
};

// qkv [B*T, (H + 2G) hd] -> concat [B*T, H hd]; query head h reads kv head h / (H / G).
inline Vec attention(const Vec& qkv, const AttentionShape& s) {
  const std::int64_t W = (s.heads + 2 * s.kv_heads) * s.head_dim, hd = s.head_dim, T = s.seq_len;
  const std::int64_t group = s.heads / s.kv_heads;
  Vec out(static_cast<std::size_t>(s.batch * T * s.heads * hd), 0.0);
  auto at = [&](std::int64_t b, std::int64_t t, std::int64_t col) {
    return qkv[static_cast<std::size_t>((b * T + t) * W + col)];
  };
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t g = h / group;
      const std::int64_t qc = h * hd, kc = s.heads * hd + g * hd,
                         vc = (s.heads + s.kv_heads) * hd + g * hd;
      for (std::int64_t i = 0; i < T; ++i) {
        const std::int64_t keys = s.causal ? i + 1 : T;
        Vec score(static_cast<std::size_t>(keys));
        double max = -INFINITY;
        for (std::int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (std::int64_t e = 0; e < hd; ++e) dot += at(b, i, qc + e) * at(b, j, kc + e);
          score[static_cast<std::size_t>(j)] = s.scale * dot;
          max = std::max(max, s.scale * dot);
        }
        double sum = 0;
        for (double& v : score) sum += (v = std::exp(v - max));
        for (std::int64_t j = 0; j < keys; ++j)
          for (std::int64_t e = 0; e < hd; ++e)
            out[static_cast<std::size_t>((b * T + i) * s.heads * hd + h * hd + e)] +=
                score[static_cast<std::size_t>(j)] / sum * at(b, j, vc + e);
      }
    }
  return out;
}

// Mean cross-entropy over the rows whose target is not -1.
inline double cross_entropy(const Vec& logits, const std::vector<std::int32_t>& targets,
                            std::int64_t vocab) {
  double total = 0;
  std::int64_t scored = 0;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] < 0) continue;
    double max = -INFINITY, sum = 0;
    for (std::int64_t v = 0; v < vocab; ++v)
      max =
          std::max(max, logits[r * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(v)]);
    for (std::int64_t v = 0; v < vocab; ++v)
      sum +=
          std::exp(logits[r * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(v)] - max);
    total += max + std::log(sum) -
             logits[r * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(targets[r])];
    ++scored;
  }
  return scored > 0 ? total / static_cast<double>(scored) : 0.0;
}

inline Vec add(const Vec& a, const Vec& b) {
  Vec y(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
  return y;
}

// The whole model: loss of `batch` (config must be resolved). gates [layers][heads] or empty.
inline double model_loss(const train::ModelConfig& c, const Params& p, const train::Batch& batch,
                         const std::vector<std::vector<double>>& gates = {}) {
  const std::int64_t B = batch.batch, T = batch.seq_len, N = B * T, D = c.d_model, hd = c.head_dim;
  auto P = [&](const std::string& name) -> const Vec& { return p.at(name); };
  static const Vec kNone;
  auto bias = [&](const std::string& name) -> const Vec& {  // absent without biases
    return p.count(name) != 0 ? p.at(name) : kNone;
  };
  auto norm = [&](const Vec& in, const std::string& prefix) {
    return c.rms_norm ? rms_norm(in, N, D, P(prefix + ".weight"))
                      : layer_norm(in, N, D, P(prefix + ".weight"), P(prefix + ".bias"));
  };
  Vec x(static_cast<std::size_t>(N * D));
  for (std::int64_t r = 0; r < N; ++r)
    for (std::int64_t e = 0; e < D; ++e)
      x[static_cast<std::size_t>(r * D + e)] =
          P("tok_emb")[static_cast<std::size_t>(batch.tokens[static_cast<std::size_t>(r)] * D +
                                                e)] +
          (c.rope_base == 0 ? P("pos_emb")[static_cast<std::size_t>((r % T) * D + e)] : 0.0);
  for (std::int64_t l = 0; l < c.layers; ++l) {
    // Each layer's own head counts (per-layer for a pruned model, ModelConfig::heads_in).
    const std::int64_t H = c.heads_in(l), W = (H + 2 * c.kv_heads_in(l)) * hd, C = H * hd;
    const AttentionShape shape{.batch = B,
                               .seq_len = T,
                               .heads = H,
                               .kv_heads = c.kv_heads_in(l),
                               .head_dim = hd,
                               .scale = static_cast<double>(*c.scale),
                               .causal = c.causal};
    const std::string b = "blocks." + std::to_string(l) + ".";
    auto attn = [&](const Vec& in) {
      Vec qkv = linear(in, N, D, P(b + "attn.w_qkv"), bias(b + "attn.b_qkv"), W);
      if (c.rope_base != 0) rotary(qkv, N, W, T, H + c.kv_heads_in(l), hd, c.rope_base);
      Vec concat = attention(qkv, shape);
      if (!gates.empty())
        for (std::int64_t r = 0; r < N; ++r)
          for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t e = 0; e < hd; ++e)
              concat[static_cast<std::size_t>(r * C + h * hd + e)] *=
                  gates[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)];
      return linear(concat, N, C, P(b + "attn.w_o"), bias(b + "attn.b_o"), D);
    };
    auto ffn = [&](const Vec& in) {
      Vec u = linear(in, N, D, P(b + "ffn.w_up"), bias(b + "ffn.b_up"), c.d_ff);
      if (c.swiglu) {  // silu(x·W_gate) · (x·W_up + b_up)
        const Vec a = linear(in, N, D, P(b + "ffn.w_gate"), kNone, c.d_ff);
        for (std::size_t i = 0; i < u.size(); ++i) u[i] *= a[i] / (1.0 + std::exp(-a[i]));
      } else {
        for (double& v : u) v = gelu(v);
      }
      return linear(u, N, c.d_ff, P(b + "ffn.w_down"), bias(b + "ffn.b_down"), D);
    };
    if (c.norm == train::NormPlacement::pre) {
      x = add(x, attn(norm(x, b + "ln1")));
      if (!c.attention_only) x = add(x, ffn(norm(x, b + "ln2")));
    } else {
      x = layer_norm(add(x, attn(x)), N, D, P(b + "ln1.weight"), P(b + "ln1.bias"));
      if (!c.attention_only)
        x = layer_norm(add(x, ffn(x)), N, D, P(b + "ln2.weight"), P(b + "ln2.bias"));
    }
  }
  if (c.norm == train::NormPlacement::pre) x = norm(x, "ln_f");
  Vec head = c.tied_head ? Vec(static_cast<std::size_t>(D * c.vocab)) : P("head.weight");
  if (c.tied_head)  // [D, vocab] = tok_embᵀ
    for (std::int64_t v = 0; v < c.vocab; ++v)
      for (std::int64_t e = 0; e < D; ++e)
        head[static_cast<std::size_t>(e * c.vocab + v)] =
            P("tok_emb")[static_cast<std::size_t>(v * D + e)];
  return cross_entropy(linear(x, N, D, head, bias("head.bias"), c.vocab), batch.targets, c.vocab);
}

}  // namespace headcount::testing::ref
