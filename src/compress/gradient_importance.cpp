// Michel et al. 2019's head importance through the bridged encoder (encoder_training.h):
//
//   per STS pair (s1, s2, gold):
//     x1, x2 = embedding LayerNorm outputs (the encoder's, frozen)
//     h1 = layers(x1) [T1, d], h2 = layers(x2) [T2, d]        two models, one per sentence,
//     u = mean_t h1[t], v = mean_t h2[t]                        so both backwards can follow
//     L = (cos(u, v) - gold / 5)²                               cosine-MSE
//     dh1[t] = dL/du / T1, dh2[t] = dL/dv / T2  -> backward_hidden -> dL/dξ (each sentence)
//     g_h = dL/dξ_h(s1) + dL/dξ_h(s2); raw_h += |g_h|
//   raw /= pairs; importance[l] = raw[l] / ||raw[l]||_2.
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
    HEADCOUNT_CHECK(batch.lengths[i] == batch.seq_len, "batch lengths",
                    concat("all equal to seq_len = ", batch.seq_len, " (no padding)"),
                    concat(batch.lengths[i], " at row ", i));
  Tensor x(DType::f32, {batch.batch, batch.seq_len, encoder.dim()});
  encoder.forward(ctx, batch, x.view(), EncoderForwardOptions{.end_layer = 0});
  return x;
}

namespace {

// One sentence through the model: its layer input, its final hidden states and their mean.
struct Sentence {
  std::int64_t length = 0;
  Tensor hidden;               // [T, d]
  std::vector<double> pooled;  // [d], the mean in double
};

Sentence run_sentence(Context& ctx, const BertEncoder& encoder, train::Model& model,
                      const std::string& text, const GradientImportanceOptions& options) {
  const std::vector<std::int32_t> ids = encoder.tokenizer().encode(text);
  const std::int64_t T = static_cast<std::int64_t>(ids.size()), d = encoder.dim();
  const TokenBatch batch{.batch = 1, .seq_len = T, .ids = ids, .lengths = {T}};
  const Tensor x = encoder_layer_input(ctx, encoder, batch);
  Sentence s{.length = T,
             .hidden = Tensor(DType::f32, {T, d}),
             .pooled = std::vector<double>(static_cast<std::size_t>(d))};
  model.forward_hidden(ctx, 1, T, x.data<const float>(), s.hidden.data<float>(),
                       {.kernel = options.kernel});
  const float* h = s.hidden.data<const float>();
  for (std::int64_t k = 0; k < d; ++k) {
    double sum = 0;
    for (std::int64_t t = 0; t < T; ++t) sum += h[t * d + k];
    s.pooled[static_cast<std::size_t>(k)] = sum / static_cast<double>(T);
  }
  return s;
}

// dL/dh[t] = dL/dpooled / T for every row, then the backward; returns dL/dξ [layers][heads].
std::vector<std::vector<double>> backward_sentence(Context& ctx, train::Model& model,
                                                   const Sentence& s,
                                                   const std::vector<double>& d_pooled) {
  const std::int64_t d = static_cast<std::int64_t>(d_pooled.size());
  Tensor dh(DType::f32, {s.length, d});
  float* g = dh.data<float>();
  for (std::int64_t t = 0; t < s.length; ++t)
    for (std::int64_t k = 0; k < d; ++k)
      g[t * d + k] =
          static_cast<float>(d_pooled[static_cast<std::size_t>(k)] / static_cast<double>(s.length));
  return model.backward_hidden(ctx, g);
}

}  // namespace

GradientImportance gradient_head_importance(Context& ctx, const BertEncoder& encoder,
                                            const EncoderWeights& weights,
                                            const std::vector<StsPair>& pairs,
                                            const GradientImportanceOptions& options) {
  HEADCOUNT_CHECK(!pairs.empty(), "pairs", "at least one STS pair", "none");
  HEADCOUNT_CHECK(!weights.config.is_pruned() && !weights.config.is_grouped(), "model",
                  "an unpruned multi-head model for the gradient ranking",
                  "a pruned or grouped one");
  HEADCOUNT_CHECK(weights.config.hidden_size == encoder.dim() &&
                      weights.config.layers == encoder.config().layers,
                  "weights", "the encoder's own weights", "another model's");
  train::Model first = train::from_weights(weights.model, train::WeightParts::layers),
               second = train::from_weights(weights.model, train::WeightParts::layers);
  const train::ModelConfig& mc = first.config();
  const std::int64_t L = mc.layers, H = mc.heads, d = mc.d_model;
  GradientImportance r{.pairs = static_cast<std::int64_t>(pairs.size()),
                       .raw = std::vector<double>(static_cast<std::size_t>(L * H)),
                       .importance = std::vector<double>(static_cast<std::size_t>(L * H))};
  std::vector<double> du(static_cast<std::size_t>(d)), dv(static_cast<std::size_t>(d));
  double loss_sum = 0;
  for (std::size_t p = 0; p < pairs.size(); ++p) {
    const Sentence a = run_sentence(ctx, encoder, first, pairs[p].sentence1, options);
    const Sentence b = run_sentence(ctx, encoder, second, pairs[p].sentence2, options);
    loss_sum +=
        cosine_mse_loss(a.pooled.data(), b.pooled.data(), d, pairs[p].score, du.data(), dv.data());
    const auto ga = backward_sentence(ctx, first, a, du),
               gb = backward_sentence(ctx, second, b, dv);
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t h = 0; h < H; ++h)
        r.raw[static_cast<std::size_t>(l * H + h)] +=
            std::fabs(ga[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)] +
                      gb[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)]);
    if (options.progress) options.progress(static_cast<std::int64_t>(p) + 1, r.pairs);
  }
  r.mean_loss = loss_sum / static_cast<double>(r.pairs);
  for (double& v : r.raw) v /= static_cast<double>(r.pairs);
  for (std::int64_t l = 0; l < L; ++l) {
    double norm = 0;
    for (std::int64_t h = 0; h < H; ++h)
      norm +=
          r.raw[static_cast<std::size_t>(l * H + h)] * r.raw[static_cast<std::size_t>(l * H + h)];
    norm = std::sqrt(norm);
    for (std::int64_t h = 0; h < H; ++h)
      r.importance[static_cast<std::size_t>(l * H + h)] =
          norm > 0 ? r.raw[static_cast<std::size_t>(l * H + h)] / norm : 0.0;
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
