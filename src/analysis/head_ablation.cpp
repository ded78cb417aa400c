// Head ablation on STS: remove one head at a time (its concat slice zeroed before W_O) and
// measure what the Spearman correlation loses.
#include <algorithm>
#include <map>
#include <numeric>
#include <span>

#include "headcount/error.h"
#include "headcount/head_analysis.h"

namespace headcount {

namespace {

// STS Spearman x100 of `pairs` under a head mask. Each distinct sentence is embedded once per
// evaluation, in the batches embed() forms (batch_by_length), so results equal embed()'s
// bitwise. Removing a head of layer l changes nothing before layer l: an evaluation can start
// from cached inputs of layer l instead of the embeddings.
class StsEvaluator {
 public:
  StsEvaluator(const BertEncoder& encoder, const std::vector<StsPair>& pairs,
               std::int64_t batch_size)
      : encoder_(encoder) {
    check(!pairs.empty(), "pairs", "at least one", "none");
    std::map<std::string, std::size_t> index;
    std::vector<std::string> texts;
    auto row_of = [&](const std::string& s) {
      auto [it, inserted] = index.emplace(s, texts.size());
      if (inserted) texts.push_back(s);
      return it->second;
    };
    for (const StsPair& p : pairs) {
      const std::size_t a = row_of(p.sentence1);
      pair_rows_.emplace_back(a, row_of(p.sentence2));
      gold_.push_back(p.score);
    }
    std::vector<std::vector<std::int32_t>> ids;
    for (const std::string& t : texts) ids.push_back(encoder.tokenizer().encode(t));
    batches_ = batch_by_length(ids, batch_size, encoder.tokenizer().pad_id());
    texts_ = static_cast<std::int64_t>(texts.size());
  }

  // Per batch: the input of layer `layer` under `mask` (empty: every head kept; layer 0:
  // nothing to keep, the embeddings are recomputed), from the inputs of layer - 1.
  void advance_cache(Context& ctx, std::int64_t layer, std::span<const float> mask = {}) {
    const std::int64_t d = encoder_.dim();
    cache_.resize(batches_.size());
    for (std::size_t i = 0; i < batches_.size(); ++i) {
      const TokenBatch& b = batches_[i].tokens;
      std::vector<float>& hidden = cache_[i];
      hidden.resize(static_cast<std::size_t>(b.batch * b.seq_len * d));
      encoder_.executor().forward(
          ctx, b, TensorView::contiguous(hidden.data(), DType::f32, {b.batch, b.seq_len, d}),
          TransformerForwardOptions{
              .head_mask = mask, .first_layer = layer == 0 ? 0 : layer - 1, .end_layer = layer});
    }
    cached_layer_ = layer;
  }

  // Spearman with `mask`, starting from the cached inputs of the cached layer (or from the
  // embeddings when nothing is cached). The mask must agree before that layer with the one
  // the cache was advanced with.
  double spearman_with(Context& ctx, std::span<const float> mask) const {
    const std::int64_t d = encoder_.dim();
    std::vector<float> embeddings(static_cast<std::size_t>(texts_ * d)), hidden, pooled;
    for (std::size_t i = 0; i < batches_.size(); ++i) {
      const TokenBatch& b = batches_[i].tokens;
      const std::int64_t first = cache_.empty() ? 0 : cached_layer_;
      hidden = cache_.empty()
                   ? std::vector<float>(static_cast<std::size_t>(b.batch * b.seq_len * d))
                   : cache_[i];
      encoder_.executor().forward(
          ctx, b, TensorView::contiguous(hidden.data(), DType::f32, {b.batch, b.seq_len, d}),
          TransformerForwardOptions{.head_mask = mask, .first_layer = first});
      pooled.resize(static_cast<std::size_t>(b.batch * d));
      encoder_.pool(b, hidden.data(), pooled.data());
      for (std::size_t j = 0; j < batches_[i].rows.size(); ++j)
        std::copy_n(pooled.data() + static_cast<std::int64_t>(j) * d, d,
                    embeddings.data() + static_cast<std::int64_t>(batches_[i].rows[j]) * d);
    }
    std::vector<double> cosines;
    cosines.reserve(pair_rows_.size());
    for (const auto& [a, b] : pair_rows_)
      cosines.push_back(cosine_similarity(embeddings.data() + static_cast<std::int64_t>(a) * d,
                                          embeddings.data() + static_cast<std::int64_t>(b) * d, d));
    return 100.0 * spearman(cosines, gold_);
  }

 private:
  const BertEncoder& encoder_;
  std::int64_t texts_ = 0;
  std::vector<LengthBatch> batches_;
  std::vector<std::pair<std::size_t, std::size_t>> pair_rows_;
  std::vector<double> gold_;
  std::vector<std::vector<float>> cache_;  // per batch: the input of cached_layer_
  std::int64_t cached_layer_ = 0;
};

}  // namespace

HeadAblation ablate_heads(Context& ctx, const BertEncoder& encoder,
                          const std::vector<StsPair>& pairs, const HeadAblationOptions& options) {
  const EncoderConfig& c = encoder.config();
  check_unpruned(c);
  const std::int64_t total_heads = c.layers * c.heads;
  StsEvaluator evaluator(encoder, pairs, options.batch_size);
  HeadAblation result{.pairs = static_cast<std::int64_t>(pairs.size())};
  std::vector<float> mask(static_cast<std::size_t>(total_heads), 1.0f);
  result.baseline = evaluator.spearman_with(ctx, {});
  if (options.progress) options.progress(1, total_heads + 1);
  // Layer by layer: the cache moves one layer forward, then each head of that layer is removed
  // in turn and only the layers from there on are run (half the work of 72 full passes).
  for (std::int64_t layer = 0; layer < c.layers; ++layer) {
    evaluator.advance_cache(ctx, layer);
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const std::size_t head = static_cast<std::size_t>(layer * c.heads + h);
      mask[head] = 0.0f;
      result.spearman.push_back(evaluator.spearman_with(ctx, mask));
      mask[head] = 1.0f;
      if (options.progress) options.progress(static_cast<std::int64_t>(head) + 2, total_heads + 1);
    }
  }
  return result;
}

namespace {
std::vector<std::size_t> by_importance(const HeadAblation& ranking, bool most_first) {
  std::vector<std::size_t> order(ranking.spearman.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return most_first ? ranking.importance(a) > ranking.importance(b)
                      : ranking.importance(a) < ranking.importance(b);
  });
  return order;
}
}  // namespace

std::vector<std::size_t> least_important_first(const HeadAblation& ranking) {
  return by_importance(ranking, false);
}
std::vector<std::size_t> most_important_first(const HeadAblation& ranking) {
  return by_importance(ranking, true);
}

std::vector<PruningPoint> prune_least_important(Context& ctx, const BertEncoder& encoder,
                                                const HeadAblation& ranking,
                                                const std::vector<StsPair>& pairs,
                                                const std::vector<std::int64_t>& counts,
                                                const HeadAblationOptions& options) {
  check_unpruned(encoder.config());
  const std::int64_t total_heads = encoder.config().layers * encoder.config().heads;
  check(static_cast<std::int64_t>(ranking.spearman.size()) == total_heads, "ranking",
        detail::concat(total_heads, " heads (an ablation of this model)"), ranking.spearman.size());
  for (std::int64_t n : counts)
    check(n >= 0 && n <= total_heads, "prune count", detail::concat("in [0, ", total_heads, "]"),
          n);
  const StsEvaluator evaluator(encoder, pairs, options.batch_size);
  const std::vector<std::size_t> order = least_important_first(ranking);
  std::vector<PruningPoint> points;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    std::vector<float> mask(static_cast<std::size_t>(total_heads), 1.0f);
    for (std::int64_t k = 0; k < counts[i]; ++k) mask[order[static_cast<std::size_t>(k)]] = 0.0f;
    points.push_back({counts[i], evaluator.spearman_with(ctx, mask)});
    if (options.progress)
      options.progress(static_cast<std::int64_t>(i) + 1, static_cast<std::int64_t>(counts.size()));
  }
  return points;
}

std::vector<float> removal_mask(const EncoderConfig& c, const std::vector<std::size_t>& order,
                                std::int64_t count) {
  check_unpruned(c);
  const std::int64_t total = c.layers * c.heads;
  check(count >= 0 && count <= c.layers * (c.heads - 1), "heads to remove",
        detail::concat("in [0, ", c.layers * (c.heads - 1), "] (one head stays in each layer)"),
        count);
  std::vector<float> mask(static_cast<std::size_t>(total), 1.0f);
  std::vector<std::int64_t> left(static_cast<std::size_t>(c.layers), c.heads);
  std::int64_t removed = 0;
  for (std::size_t k = 0; k < order.size() && removed < count; ++k) {
    const std::size_t head = order[k];
    check(head < mask.size(), "order", detail::concat("head indices in [0, ", total, ")"), head);
    std::int64_t& in_layer = left[head / static_cast<std::size_t>(c.heads)];
    if (mask[head] == 0.0f || in_layer == 1) continue;
    mask[head] = 0.0f;
    --in_layer;
    ++removed;
  }
  check(removed == count, "order", detail::concat("at least ", count, " removable heads"), removed);
  return mask;
}

std::vector<double> sts_spearman_for_masks(Context& ctx, const BertEncoder& encoder,
                                           const std::vector<StsPair>& pairs,
                                           const std::vector<std::vector<float>>& masks,
                                           const HeadAblationOptions& options) {
  const StsEvaluator evaluator(encoder, pairs, options.batch_size);
  std::vector<double> out;
  std::map<std::vector<float>, double> seen;  // equal masks (e.g. every order's 0%) are scored once
  for (std::size_t i = 0; i < masks.size(); ++i) {
    auto it = seen.find(masks[i]);
    if (it == seen.end()) it = seen.emplace(masks[i], evaluator.spearman_with(ctx, masks[i])).first;
    out.push_back(it->second);
    if (options.progress)
      options.progress(static_cast<std::int64_t>(i) + 1, static_cast<std::int64_t>(masks.size()));
  }
  return out;
}

std::vector<std::size_t> iterative_removal_order(Context& ctx, const BertEncoder& encoder,
                                                 const std::vector<StsPair>& pairs,
                                                 const std::vector<std::int64_t>& counts,
                                                 const HeadAblationOptions& options) {
  const EncoderConfig& c = encoder.config();
  check_unpruned(c);
  const std::int64_t total = c.layers * c.heads;
  StsEvaluator evaluator(encoder, pairs, options.batch_size);
  std::vector<float> mask(static_cast<std::size_t>(total), 1.0f);
  std::vector<std::int64_t> left(static_cast<std::size_t>(c.layers), c.heads);
  std::vector<std::size_t> order;
  std::int64_t done = 0;
  for (std::size_t step = 0; step < counts.size(); ++step) {
    const std::int64_t target = counts[step];
    check(target >= static_cast<std::int64_t>(order.size()) && target <= c.layers * (c.heads - 1),
          "prune counts", detail::concat("ascending, in [0, ", c.layers * (c.heads - 1), "]"),
          target);
    if (target == static_cast<std::int64_t>(order.size())) continue;
    // Re-rank: each head still kept (and not its layer's last) removed alone on top of `mask`.
    std::vector<std::pair<double, std::size_t>> scores;
    for (std::int64_t layer = 0; layer < c.layers; ++layer) {
      if (left[static_cast<std::size_t>(layer)] == 1) continue;
      evaluator.advance_cache(ctx, layer, mask);
      for (std::int64_t h = 0; h < c.heads; ++h) {
        const std::size_t head = static_cast<std::size_t>(layer * c.heads + h);
        if (mask[head] == 0.0f) continue;
        mask[head] = 0.0f;
        scores.emplace_back(-evaluator.spearman_with(ctx, mask), head);  // least loss first
        mask[head] = 1.0f;
      }
    }
    std::stable_sort(scores.begin(), scores.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [score, head] : scores) {
      if (static_cast<std::int64_t>(order.size()) == target) break;
      std::int64_t& in_layer = left[head / static_cast<std::size_t>(c.heads)];
      if (in_layer == 1) continue;
      mask[head] = 0.0f;
      --in_layer;
      order.push_back(head);
    }
    if (options.progress) options.progress(++done, static_cast<std::int64_t>(counts.size()));
  }
  return order;
}

}  // namespace headcount
