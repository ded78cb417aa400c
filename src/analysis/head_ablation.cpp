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

// STS Spearman x100 of `pairs` under one head mask; each distinct sentence embedded once.
class StsEvaluator {
 public:
  StsEvaluator(const BertEncoder& encoder, const std::vector<StsPair>& pairs, std::int64_t batch_size)
      : encoder_(encoder), batch_size_(batch_size) {
    check(!pairs.empty(), "pairs", "at least one", "none");
    std::map<std::string, std::size_t> index;
    auto row_of = [&](const std::string& s) {
      auto [it, inserted] = index.emplace(s, texts_.size());
      if (inserted) texts_.push_back(s);
      return it->second;
    };
    for (const StsPair& p : pairs) {
      const std::size_t a = row_of(p.sentence1);
      pair_rows_.emplace_back(a, row_of(p.sentence2));
      gold_.push_back(p.score);
    }
  }

  double spearman_with(Context& ctx, std::span<const float> mask) const {
    const Tensor embeddings = encoder_.embed(ctx, texts_, {.batch_size = batch_size_, .head_mask = mask});
    const std::int64_t d = encoder_.dim();
    std::vector<double> cosines;
    cosines.reserve(pair_rows_.size());
    for (const auto& [a, b] : pair_rows_)
      cosines.push_back(cosine_similarity(embeddings.data<const float>() + static_cast<std::int64_t>(a) * d,
                                          embeddings.data<const float>() + static_cast<std::int64_t>(b) * d, d));
    return 100.0 * spearman(cosines, gold_);
  }

 private:
  const BertEncoder& encoder_;
  std::int64_t batch_size_;
  std::vector<std::string> texts_;
  std::vector<std::pair<std::size_t, std::size_t>> pair_rows_;
  std::vector<double> gold_;
};

}  // namespace

HeadAblation ablate_heads(Context& ctx, const BertEncoder& encoder, const std::vector<StsPair>& pairs,
                          const HeadAblationOptions& options) {
  const EncoderConfig& c = encoder.config();
  const std::int64_t total_heads = c.layers * c.heads;
  const StsEvaluator evaluator(encoder, pairs, options.batch_size);
  HeadAblation result{.pairs = static_cast<std::int64_t>(pairs.size())};
  std::vector<float> mask(static_cast<std::size_t>(total_heads), 1.0f);
  result.baseline = evaluator.spearman_with(ctx, {});
  if (options.progress) options.progress(1, total_heads + 1);
  for (std::int64_t head = 0; head < total_heads; ++head) {
    mask[static_cast<std::size_t>(head)] = 0.0f;
    result.spearman.push_back(evaluator.spearman_with(ctx, mask));
    mask[static_cast<std::size_t>(head)] = 1.0f;
    if (options.progress) options.progress(head + 2, total_heads + 1);
  }
  return result;
}

std::vector<std::size_t> least_important_first(const HeadAblation& ranking) {
  std::vector<std::size_t> order(ranking.spearman.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return ranking.importance(a) < ranking.importance(b); });
  return order;
}

std::vector<PruningPoint> prune_least_important(Context& ctx, const BertEncoder& encoder, const HeadAblation& ranking,
                                                const std::vector<StsPair>& pairs, const std::vector<std::int64_t>& counts,
                                                const HeadAblationOptions& options) {
  const std::int64_t total_heads = encoder.config().layers * encoder.config().heads;
  check(static_cast<std::int64_t>(ranking.spearman.size()) == total_heads, "ranking",
        detail::concat(total_heads, " heads (an ablation of this model)"), ranking.spearman.size());
  for (std::int64_t n : counts) check(n >= 0 && n <= total_heads, "prune count", detail::concat("in [0, ", total_heads, "]"), n);
  const StsEvaluator evaluator(encoder, pairs, options.batch_size);
  const std::vector<std::size_t> order = least_important_first(ranking);
  std::vector<PruningPoint> points;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    std::vector<float> mask(static_cast<std::size_t>(total_heads), 1.0f);
    for (std::int64_t k = 0; k < counts[i]; ++k) mask[order[static_cast<std::size_t>(k)]] = 0.0f;
    points.push_back({counts[i], evaluator.spearman_with(ctx, mask)});
    if (options.progress) options.progress(static_cast<std::int64_t>(i) + 1, static_cast<std::int64_t>(counts.size()));
  }
  return points;
}

}  // namespace headcount
