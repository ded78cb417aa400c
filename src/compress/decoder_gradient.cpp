// Gradient head importance of a Llama-family decoder (decoder_training.h): the decoder's
// definition on the training executor, gates ξ_h = 1 on every query head's output, one forward
// and backward per text window; Model::sequence_gate_grads gives dL/dξ_h of the window (batch 1).
#include <cmath>

#include "headcount/decoder_training.h"
#include "headcount/error.h"
#include "headcount/train/definition.h"

namespace headcount {

using detail::concat;

DecoderGradientImportance decoder_gradient_importance(Context& ctx, const model::Weights& weights,
                                                      std::span<const std::int32_t> ids,
                                                      std::int64_t context) {
  HEADCOUNT_CHECK(context >= 4 && context <= weights.config.context, "context",
                  concat("in [4, the model's context = ", weights.config.context, "]"), context);
  HEADCOUNT_CHECK(static_cast<std::int64_t>(ids.size()) >= context, "text",
                  concat("at least one window of ", context, " tokens"),
                  concat(ids.size(), " tokens"));
  for (std::int32_t id : ids)
    HEADCOUNT_CHECK(id >= 0 && id < weights.config.vocab, "text",
                    concat("token ids in [0, ", weights.config.vocab, ")"), id);
  train::Model model = train::from_weights(weights);
  const model::Config& c = weights.config;
  DecoderGradientImportance r;
  r.windows = static_cast<std::int64_t>(ids.size()) / context;
  for (std::int64_t l = 0; l < c.layer_count(); ++l)
    r.raw.emplace_back(static_cast<std::size_t>(c.heads_in(l)), 0.0);
  double loss_sum = 0;
  train::Batch batch{.batch = 1, .seq_len = context};
  for (std::int64_t w = 0; w < r.windows; ++w) {
    const auto first = ids.begin() + w * context;
    batch.tokens.assign(first, first + context);
    batch.targets.assign(static_cast<std::size_t>(context), train::Batch::kIgnore);
    for (std::int64_t t = context / 2; t + 1 < context; ++t)
      batch.targets[static_cast<std::size_t>(t)] = first[t + 1];
    const train::StepResult s = model.forward_backward(ctx, batch);
    HEADCOUNT_CHECK(std::isfinite(s.loss), "gradient importance", "a finite loss",
                    concat(s.loss, " in window ", w, " (weights with NaN or Inf?)"));
    loss_sum += s.loss * static_cast<double>(s.scored);
    r.scored_tokens += s.scored;
    for (std::int64_t l = 0; l < c.layer_count(); ++l)
      for (std::int64_t h = 0; h < c.heads_in(l); ++h)
        r.raw[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)] +=
            std::abs(s.gate_grads[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)]) /
            static_cast<double>(r.windows);
  }
  r.mean_loss = loss_sum / static_cast<double>(r.scored_tokens);
  r.importance = r.raw;
  for (auto& layer : r.importance) {
    double norm = 0;
    for (double v : layer) norm += v * v;
    norm = std::sqrt(norm);
    if (norm > 0)
      for (double& v : layer) v /= norm;
  }
  return r;
}

}  // namespace headcount
