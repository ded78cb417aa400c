#include "attention_inputs.h"

#include <cmath>
#include <limits>
#include <random>

namespace headcount::testing {
namespace {

void fill_normal(Tensor& t, std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  float* data = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) data[i] = normal(rng);
}

// The masks, each straight from its definition in attention.h.
bool visible(const AttentionInputs& in, std::int64_t b, std::int64_t i, std::int64_t j) {
  const AttentionCase& c = in.c;
  const std::int64_t diagonal = i + (c.kv_len - c.q_len);
  if (!in.key_lengths.empty() && j >= in.key_lengths[static_cast<std::size_t>(b)]) return false;
  if (c.causal && j > diagonal) return false;
  if (c.window_left >= 0 && j < diagonal - c.window_left) return false;
  if (c.window_right >= 0 && j > diagonal + c.window_right) return false;
  return true;
}

// The first element of t[a, b, c, :]. The inner loops below walk rows through it: element by
// element through at() they spent 57% of the sanitized suite's largest case in the offset
// arithmetic (ASan instruments every call), for the same values in the same order.
const float* row_of(const TensorView& t, std::int64_t a, std::int64_t b, std::int64_t c) {
  return t.ptr<const float>() + a * t.strides[0] + b * t.strides[1] + c * t.strides[2];
}

float at(const TensorView& t, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return row_of(t, a, b, c)[d * t.strides[3]];
}

template <typename Real>
NaiveResult naive(const AttentionInputs& in, std::vector<double>* probs = nullptr) {
  const AttentionCase& c = in.c;
  // The API's scale is an fp32 number: 1/sqrt(head_dim) rounded to fp32 unless given.
  const Real scale =
      Real(c.scale ? *c.scale : static_cast<float>(1.0 / std::sqrt(double(c.head_dim))));
  const Real minus_inf = -std::numeric_limits<Real>::infinity();
  const std::int64_t group = c.heads / c.kv_heads;
  NaiveResult r;
  r.out.assign(static_cast<std::size_t>(c.batch * c.q_len * c.heads * c.v_head_dim), 0.0);
  r.lse.assign(static_cast<std::size_t>(c.batch * c.heads * c.q_len), 0.0);
  std::vector<Real> s(static_cast<std::size_t>(c.kv_len));
  if (probs != nullptr)
    probs->assign(static_cast<std::size_t>(c.batch * c.heads * c.q_len * c.kv_len), 0.0);
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t h = 0; h < c.heads; ++h)
      for (std::int64_t i = 0; i < c.q_len; ++i) {
        const std::int64_t g = h / group;
        Real m = minus_inf;
        for (std::int64_t j = 0; j < c.kv_len; ++j) {
          Real x = minus_inf;
          if (visible(in, b, i, j)) {
            Real dot = 0;
            const float* q_row = row_of(in.q, b, i, h);
            const float* k_row = row_of(in.k, b, j, g);
            const std::int64_t qs = in.q.strides[3], ks = in.k.strides[3];
            for (std::int64_t d = 0; d < c.head_dim; ++d)
              dot += Real(q_row[d * qs]) * Real(k_row[d * ks]);
            x = scale * dot;
            if (!in.bias.empty())
              x += Real(
                  at(in.bias, in.bias.shape[0] == 1 ? 0 : b, in.bias.shape[1] == 1 ? 0 : h, i, j));
          }
          s[static_cast<std::size_t>(j)] = x;
          m = std::max(m, x);
        }
        double& lse = r.lse[static_cast<std::size_t>((b * c.heads + h) * c.q_len + i)];
        if (m == minus_inf) {
          lse = -std::numeric_limits<double>::infinity();
          continue;  // the output row stays zero
        }
        Real l = 0;
        for (Real& x : s) {
          x = std::exp(x - m);
          l += x;
        }
        lse = double(m + std::log(l));
        if (probs != nullptr)
          for (std::int64_t j = 0; j < c.kv_len; ++j)
            (*probs)[static_cast<std::size_t>(((b * c.heads + h) * c.q_len + i) * c.kv_len + j)] =
                double(s[static_cast<std::size_t>(j)] / l);
        for (std::int64_t e = 0; e < c.v_head_dim; ++e) {
          Real acc = 0;
          const float* v_col = row_of(in.v, b, 0, g) + e * in.v.strides[3];
          const std::int64_t vs = in.v.strides[1];
          for (std::int64_t j = 0; j < c.kv_len; ++j)
            acc += s[static_cast<std::size_t>(j)] * Real(v_col[j * vs]);
          r.out[static_cast<std::size_t>(((b * c.q_len + i) * c.heads + h) * c.v_head_dim + e)] =
              double(acc / l);
        }
      }
  return r;
}

}  // namespace

AttentionInputs make_inputs(const AttentionCase& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  AttentionInputs in;
  in.c = c;
  const std::int64_t B = c.batch, H = c.heads, G = c.kv_heads, D = c.head_dim, Dv = c.v_head_dim;
  const std::int64_t Lq = c.q_len, Lk = c.kv_len;

  // q: scaled up so that softmax rows are peaked, not flat; optionally every other float.
  const std::int64_t q_step = c.q_inner_stride ? 2 : 1;
  in.q_storage = Tensor(DType::f32, {B, Lq, H, D * q_step});
  fill_normal(in.q_storage, rng, 1.5f);
  in.q = TensorView::strided(in.q_storage.data<float>(), DType::f32, {B, Lq, H, D},
                             {Lq * H * D * q_step, H * D * q_step, D * q_step, q_step});

  switch (c.kv_layout) {
    case KvLayout::contiguous:
      in.k_storage = Tensor(DType::f32, {B, Lk, G, D});
      in.v_storage = Tensor(DType::f32, {B, Lk, G, Dv});
      fill_normal(in.k_storage, rng, 1.0f);
      fill_normal(in.v_storage, rng, 1.0f);
      in.k = in.k_storage.view();
      in.v = in.v_storage.view();
      break;
    case KvLayout::fused: {  // K and V side by side in one row of width W, as a fused projection
      const std::int64_t W = G * (D + Dv) + 5;
      in.k_storage = Tensor(DType::f32, {B, Lk, W});
      fill_normal(in.k_storage, rng, 1.0f);
      float* base = in.k_storage.data<float>();
      in.k = TensorView::strided(base, DType::f32, {B, Lk, G, D}, {Lk * W, W, D, 1});
      in.v = TensorView::strided(base + G * D, DType::f32, {B, Lk, G, Dv}, {Lk * W, W, Dv, 1});
      break;
    }
    case KvLayout::head_major:  // stored [B, G, Lk, D], read as [B, Lk, G, D]
      in.k_storage = Tensor(DType::f32, {B, G, Lk, D});
      in.v_storage = Tensor(DType::f32, {B, G, Lk, Dv});
      fill_normal(in.k_storage, rng, 1.0f);
      fill_normal(in.v_storage, rng, 1.0f);
      in.k = TensorView::strided(in.k_storage.data<float>(), DType::f32, {B, Lk, G, D},
                                 {G * Lk * D, D, Lk * D, 1});
      in.v = TensorView::strided(in.v_storage.data<float>(), DType::f32, {B, Lk, G, Dv},
                                 {G * Lk * Dv, Dv, Lk * Dv, 1});
      break;
  }

  if (c.key_padding) {
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t pattern[3] = {Lk - Lk / 4, Lk / 3, 0};  // the last: no valid key at all
      in.key_lengths.push_back(pattern[b % 3]);
    }
  }

  if (c.bias != BiasKind::none) {
    const std::int64_t bb = c.bias == BiasKind::per_head ? B : 1,
                       bh = c.bias == BiasKind::per_head ? H : 1;
    in.bias_storage = Tensor(DType::f32, {bb, bh, Lq, Lk});
    fill_normal(in.bias_storage, rng, 1.0f);
    float* data = in.bias_storage.data<float>();
    const float minus_inf = -std::numeric_limits<float>::infinity();
    for (std::int64_t i = 0; i < in.bias_storage.numel(); i += 7) data[i] = minus_inf;
    for (std::int64_t j = 0; j < Lk; ++j)
      data[j] = minus_inf;  // row 0 of the first head: all masked
    in.bias = in.bias_storage.view();
  }
  return in;
}

AttentionParams AttentionInputs::params(const Tensor& out, const Tensor& lse) const {
  AttentionParams p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out.view();
  p.lse = lse.view();
  p.scale = c.scale;
  p.causal = c.causal;
  p.window_left = c.window_left;
  p.window_right = c.window_right;
  p.key_lengths = key_lengths;
  p.bias = bias;
  return p;
}

NaiveResult naive_attention_f64(const AttentionInputs& in) { return naive<double>(in); }
std::vector<double> naive_probs_f64(const AttentionInputs& in) {
  std::vector<double> probs;
  naive<double>(in, &probs);
  return probs;
}
TensorView round_to_bf16(const TensorView& view, Tensor& storage, Tensor& copy) {
  copy = Tensor(DType::bf16, storage.shape());
  for (std::int64_t i = 0; i < storage.numel(); ++i) {
    const bf16 h = to_bf16(storage.data<float>()[i]);
    storage.data<float>()[i] = to_float(h);
    copy.data<bf16>()[i] = h;
  }
  TensorView out = view;
  out.dtype = DType::bf16;
  out.data = copy.data<bf16>() + (view.ptr<const float>() - storage.data<float>());
  return out;
}

Bf16Inputs round_inputs_to_bf16(AttentionInputs& in) {
  Bf16Inputs r;
  r.q = round_to_bf16(in.q, in.q_storage, r.q16);
  const bool shared = in.v_storage.empty();  // fused layout: k and v share one buffer
  r.k = round_to_bf16(in.k, in.k_storage, r.k16);
  if (shared) {
    r.v = in.v;
    r.v.dtype = DType::bf16;
    r.v.data = r.k16.data<bf16>() + (in.v.ptr<float>() - in.k_storage.data<float>());
  } else {
    r.v = round_to_bf16(in.v, in.v_storage, r.v16);
  }
  return r;
}

bool key_visible(const AttentionInputs& in, std::int64_t b, std::int64_t i, std::int64_t j) {
  return visible(in, b, i, j);
}
NaiveResult naive_attention_f32(const AttentionInputs& in) { return naive<float>(in); }

}  // namespace headcount::testing
