// Head ablation on STS: remove one head at a time (its concat slice zeroed before W_O) and
// measure what the Spearman correlation loses.
#include <map>

#include "headcount/error.h"
#include "headcount/head_analysis.h"

namespace headcount {

HeadAblation ablate_heads(Context& ctx, const BertEncoder& encoder, const std::vector<StsPair>& pairs,
                          const HeadAblationOptions& options) {
  check(!pairs.empty(), "pairs", "at least one", "none");
  const EncoderConfig& c = encoder.config();
  const std::int64_t total_heads = c.layers * c.heads;

  // Each distinct sentence is embedded once per evaluation (STS files repeat sentences).
  std::vector<std::string> texts;
  std::map<std::string, std::size_t> index;
  std::vector<std::pair<std::size_t, std::size_t>> pair_rows;
  auto row_of = [&](const std::string& s) {
    auto [it, inserted] = index.emplace(s, texts.size());
    if (inserted) texts.push_back(s);
    return it->second;
  };
  std::vector<double> gold;
  for (const StsPair& p : pairs) {
    const std::size_t a = row_of(p.sentence1);
    pair_rows.emplace_back(a, row_of(p.sentence2));
    gold.push_back(p.score);
  }

  const std::int64_t d = encoder.dim();
  auto evaluate = [&](std::span<const float> mask) {
    const Tensor embeddings = encoder.embed(ctx, texts, {.batch_size = options.batch_size, .head_mask = mask});
    std::vector<double> cosines;
    cosines.reserve(pair_rows.size());
    for (const auto& [a, b] : pair_rows)
      cosines.push_back(cosine_similarity(embeddings.data<const float>() + static_cast<std::int64_t>(a) * d,
                                          embeddings.data<const float>() + static_cast<std::int64_t>(b) * d, d));
    return 100.0 * spearman(cosines, gold);
  };

  HeadAblation result{.pairs = static_cast<std::int64_t>(pairs.size())};
  std::vector<float> mask(static_cast<std::size_t>(total_heads), 1.0f);
  result.baseline = evaluate({});
  if (options.progress) options.progress(1, total_heads + 1);
  for (std::int64_t head = 0; head < total_heads; ++head) {
    mask[static_cast<std::size_t>(head)] = 0.0f;
    result.spearman.push_back(evaluate(mask));
    mask[static_cast<std::size_t>(head)] = 1.0f;
    if (options.progress) options.progress(head + 2, total_heads + 1);
  }
  return result;
}

}  // namespace headcount
