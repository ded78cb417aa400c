// Michel et al. 2019's head importance through the bridged encoder (encoder_training.h):
//
//   per STS pair (s1, s2, gold), in padded batches of pairs (key padding in the training
//   executor gives each sentence the bits of its run alone):
//     x1, x2 = embedding LayerNorm outputs (the encoder's, frozen)
//     h1 = layers(x1) [T1, d], h2 = layers(x2) [T2, d]        two models, one per side,
//     u = mean_t h1[t], v = mean_t h2[t]                        so both backwards can follow
//     L = (cos(u, v) - gold / 5)²                               cosine-MSE
//     dh1[t] = dL/du / T1, dh2[t] = dL/dv / T2  -> backward_hidden -> dL/dξ per sentence
//                                                  (Model::sequence_gate_grads)
//     g_h = dL/dξ_h(s1) + dL/dξ_h(s2); raw_h += |g_h|          in pair order
//   raw /= pairs; importance[l] = raw[l] / ||raw[l]||_2.
// Any model the encoder runs: pruned layers have fewer entries, a grouped model one per query
// head.
// Cosine-MSE rather than CoSENT: it is a loss of one pair, so |dL/dξ| is the per-example
// gradient Michel et al. average; CoSENT ranks pairs against each other within a batch, so its
// gradient of one pair depends on which other pairs share the batch. The encoder's final L2
// normalisation does not change a cosine, so the plain mean serves.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "headcount/encoder_training.h"
#include "headcount/error.h"
#include "headcount/train/definition.h"

namespace headcount {

using detail::concat;

double cosine_mse_loss(const double* u, const double* v, std::int64_t n, double gold, double* du,
                       double* dv) {
  double uv = 0, uu = 0, vv = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    uv += u[i] * v[i];
    uu += u[i] * u[i];
    vv += v[i] * v[i];
  }
  HEADCOUNT_CHECK(uu > 0 && vv > 0, "cosine_mse_loss", "two non-zero vectors",
                  concat("|u|² = ", uu, ", |v|² = ", vv));
  const double norms = std::sqrt(uu * vv), c = uv / norms, y = gold / 5.0, r = c - y;
  for (std::int64_t i = 0; i < n; ++i) {
    if (du != nullptr) du[i] = 2 * r * (v[i] / norms - c * u[i] / uu);
    if (dv != nullptr) dv[i] = 2 * r * (u[i] / norms - c * v[i] / vv);
  }
  return r * r;
}

Tensor encoder_layer_input(Context& ctx, const BertEncoder& encoder, const TokenBatch& batch) {
  for (std::size_t i = 0; i < batch.lengths.size(); ++i)
    HEADCOUNT_CHECK(batch.lengths[i] >= 1 && batch.lengths[i] <= batch.seq_len,
                    concat("batch lengths[", i, "]"),
                    concat("in [1, seq_len = ", batch.seq_len, "]"), batch.lengths[i]);
  Tensor x(DType::f32, {batch.batch, batch.seq_len, encoder.dim()});
  encoder.executor().forward(ctx, batch, x.view(), TransformerForwardOptions{.end_layer = 0});
  return x;
}

namespace {

// One side of a batch of pairs (the first or the second sentences) through the model: the
// layer input, the final hidden states, each sentence's mean over its own rows (in double, in
// row order: the bits of the sentence run alone), then the backward from d pooled.
struct Side {
  TokenBatch tokens;
  Tensor hidden;                              // [B, T, d]
  std::vector<std::vector<double>> pooled;    // [B][d]
  std::vector<std::vector<double>> d_pooled;  // [B][d], set by the loss
};

void run_forward(Context& ctx, const BertEncoder& encoder, train::Model& model, Side& s,
                 Kernel kernel) {
  const std::int64_t B = s.tokens.batch, T = s.tokens.seq_len, d = encoder.dim();
  const Tensor x = encoder_layer_input(ctx, encoder, s.tokens);
  s.hidden = Tensor(DType::f32, {B, T, d});
  model.forward_hidden(ctx, B, T, x.data<const float>(), s.hidden.data<float>(),
                       {.kernel = kernel, .key_lengths = s.tokens.lengths});
  const float* h = s.hidden.data<const float>();
  s.pooled.assign(static_cast<std::size_t>(B), std::vector<double>(static_cast<std::size_t>(d)));
  s.d_pooled = s.pooled;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t n = s.tokens.lengths[static_cast<std::size_t>(b)];
    for (std::int64_t k = 0; k < d; ++k) {
      double sum = 0;
      for (std::int64_t t = 0; t < n; ++t) sum += h[(b * T + t) * d + k];
      s.pooled[static_cast<std::size_t>(b)][static_cast<std::size_t>(k)] =
          sum / static_cast<double>(n);
    }
  }
}

// dL/dh[b, t] = dL/dpooled[b] / length_b on a sentence's rows and 0 on its padding, then the
// backward; returns each sentence's dL/dξ [B][layers][heads].
std::vector<std::vector<std::vector<double>>> run_backward(Context& ctx, train::Model& model,
                                                           const Side& s) {
  const std::int64_t B = s.tokens.batch, T = s.tokens.seq_len, d = s.hidden.size(2);
  Tensor dh(DType::f32, {B, T, d});
  float* g = dh.data<float>();
  std::fill_n(g, dh.numel(), 0.0f);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t n = s.tokens.lengths[static_cast<std::size_t>(b)];
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t k = 0; k < d; ++k)
        g[(b * T + t) * d + k] = static_cast<float>(
            s.d_pooled[static_cast<std::size_t>(b)][static_cast<std::size_t>(k)] /
            static_cast<double>(n));
  }
  model.backward_hidden(ctx, g);
  return model.sequence_gate_grads();
}

TokenBatch padded(const std::vector<std::vector<std::int32_t>>& ids,
                  const std::vector<std::size_t>& rows, std::int32_t pad_id) {
  std::vector<std::vector<std::int32_t>> chosen;
  for (std::size_t r : rows) chosen.push_back(ids[r]);
  return pad_batch(chosen, pad_id);
}

}  // namespace

GradientImportance gradient_head_importance(Context& ctx, const BertEncoder& encoder,
                                            const EncoderWeights& weights,
                                            const std::vector<StsPair>& pairs,
                                            const GradientImportanceOptions& options) {
  HEADCOUNT_CHECK(!pairs.empty(), "pairs", "at least one STS pair", "none");
  HEADCOUNT_CHECK(options.batch_size >= 1, "batch_size", "at least 1", options.batch_size);
  HEADCOUNT_CHECK(weights.config.hidden_size == encoder.dim() &&
                      weights.config.layers == encoder.config().layers,
                  "weights", "the encoder's own weights", "another model's");
  train::Model first = train::from_weights(weights.model, train::WeightParts::layers),
               second = train::from_weights(weights.model, train::WeightParts::layers);
  const train::ModelConfig& mc = first.config();
  const std::int64_t L = mc.layers, d = mc.d_model;
  GradientImportance r{.pairs = static_cast<std::int64_t>(pairs.size())};
  std::vector<std::size_t> offset{0};  // layer l's heads start at offset[l]
  for (std::int64_t l = 0; l < L; ++l) {
    r.layer_heads.push_back(mc.heads_in(l));
    offset.push_back(offset.back() + static_cast<std::size_t>(mc.heads_in(l)));
  }
  r.raw.assign(offset.back(), 0.0);
  r.importance.assign(offset.back(), 0.0);

  // Pairs batched by the longer sentence's token count (padding then costs little); each
  // pair's loss and signed gate gradient kept, and summed afterwards in pair order, so the
  // result is the same bits for any batch size.
  const WordPieceTokenizer& tok = encoder.tokenizer();
  std::vector<std::vector<std::int32_t>> ids1, ids2, longer;
  for (const StsPair& p : pairs) {
    ids1.push_back(tok.encode(p.sentence1));
    ids2.push_back(tok.encode(p.sentence2));
    longer.push_back(ids1.back().size() >= ids2.back().size() ? ids1.back() : ids2.back());
  }
  std::vector<double> loss(pairs.size());
  std::vector<std::vector<double>> gate(pairs.size());
  std::int64_t done = 0;
  for (const LengthBatch& batch : batch_by_length(longer, options.batch_size, tok.pad_id())) {
    Side a{.tokens = padded(ids1, batch.rows, tok.pad_id())},
        b{.tokens = padded(ids2, batch.rows, tok.pad_id())};
    run_forward(ctx, encoder, first, a, options.kernel);
    run_forward(ctx, encoder, second, b, options.kernel);
    for (std::size_t i = 0; i < batch.rows.size(); ++i)
      loss[batch.rows[i]] =
          cosine_mse_loss(a.pooled[i].data(), b.pooled[i].data(), d, pairs[batch.rows[i]].score,
                          a.d_pooled[i].data(), b.d_pooled[i].data());
    const auto ga = run_backward(ctx, first, a), gb = run_backward(ctx, second, b);
    for (std::size_t i = 0; i < batch.rows.size(); ++i) {
      std::vector<double>& g = gate[batch.rows[i]];
      for (std::int64_t l = 0; l < L; ++l)
        for (std::size_t h = 0; h < ga[i][static_cast<std::size_t>(l)].size(); ++h)
          g.push_back(ga[i][static_cast<std::size_t>(l)][h] +
                      gb[i][static_cast<std::size_t>(l)][h]);
    }
    done += static_cast<std::int64_t>(batch.rows.size());
    if (options.progress) options.progress(done, r.pairs);
  }
  double loss_sum = 0;
  for (std::size_t p = 0; p < pairs.size(); ++p) {
    loss_sum += loss[p];
    for (std::size_t i = 0; i < r.raw.size(); ++i) r.raw[i] += std::fabs(gate[p][i]);
  }
  r.mean_loss = loss_sum / static_cast<double>(r.pairs);
  for (double& v : r.raw) v /= static_cast<double>(r.pairs);
  for (std::int64_t l = 0; l < L; ++l) {
    const std::size_t lo = offset[static_cast<std::size_t>(l)],
                      hi = offset[static_cast<std::size_t>(l) + 1];
    double norm = 0;
    for (std::size_t i = lo; i < hi; ++i) norm += r.raw[i] * r.raw[i];
    norm = std::sqrt(norm);
    for (std::size_t i = lo; i < hi; ++i) r.importance[i] = norm > 0 ? r.raw[i] / norm : 0.0;
  }
  return r;
}

std::vector<std::size_t> least_important_first(const GradientImportance& importance) {
  std::vector<std::size_t> order(importance.importance.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return importance.importance[a] < importance.importance[b];
  });
  return order;
}

}  // namespace headcount
