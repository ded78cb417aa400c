// prune_curve (sweeps.h): the pruning curve of an encoder. Rankings come from STS dev only
// (ablation: each head removed alone; gradient: Michel et al.'s |dL/dξ_h|; iterative: re-ablated
// after each step; seeded random orders), and every order's masks are scored on STS test in one
// evaluator; the ablation points are scored again on physically pruned models, which equal the
// masked ones up to fp32 order.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "compress/sweeps.h"
#include "headcount/encoder_training.h"
#include "headcount/error.h"

namespace headcount::compress {

using detail::concat;
using nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<StsPair> first(const std::vector<StsPair>& pairs, std::int64_t count) {
  std::vector<StsPair> out = pairs;
  if (count > 0 && static_cast<std::int64_t>(out.size()) > count)
    out.resize(static_cast<std::size_t>(count));
  return out;
}

}  // namespace

json head_order_json(const std::vector<std::size_t>& order, std::int64_t heads) {
  json out = json::array();
  for (std::size_t i : order)
    out.push_back({{"layer", i / static_cast<std::size_t>(heads)},
                   {"head", i % static_cast<std::size_t>(heads)}});
  return out;
}

json prune_curve(Context& ctx, const EncoderWeights& weights, const std::vector<StsPair>& dev,
                 const std::vector<StsPair>& test, const PruneCurveOptions& a) {
  HEADCOUNT_CHECK(a.random_orders >= 0 && a.random_orders <= 100, "random orders", "in [0, 100]",
                  a.random_orders);
  HEADCOUNT_CHECK(!dev.empty() && !test.empty(), "STS pairs", "some for ranking and for testing",
                  concat(dev.size(), " and ", test.size()));
  const BertEncoder encoder = encoder_from_weights(weights);
  const EncoderConfig& c = encoder.config();
  HEADCOUNT_CHECK(!c.is_pruned() && !c.is_grouped(), "model", "an unpruned multi-head model",
                  "a pruned or grouped one");
  const std::int64_t total = c.layers * c.heads;
  // The 10% steps a model can take (one head stays per layer: at most layers * (heads - 1)).
  std::vector<std::int64_t> counts;
  for (std::int64_t k : curve_counts(total))
    if (k <= c.layers * (c.heads - 1)) counts.push_back(k);
  const HeadAblationOptions quiet{.batch_size = a.batch};
  auto log = [&](const char* what, double seconds) {
    if (a.log) a.log(concat(what, " (", std::llround(seconds), " s)"));
  };

  json r = {
      {"command", "prune-curve"},
      {"model", a.model_name},
      {"rank_file", a.rank_file},
      {"test_file", a.test_file},
      {"rank_pairs", dev.size()},
      {"test_pairs", test.size()},
      {"threads", ctx.threads()},
      {"reference",
       "Michel, Levy, Neubig 2019 (Are Sixteen Heads Really Better than One?): 40% of BERT's heads "
       "pruned on MNLI without noticeable loss"}};
  // 1. Rankings on dev.
  auto start = std::chrono::steady_clock::now();
  if (a.ablation)
    HEADCOUNT_CHECK(static_cast<std::int64_t>(a.ablation->spearman.size()) == total,
                    "the ablation ranking", concat(total, " heads"), a.ablation->spearman.size());
  const HeadAblation ablation = a.ablation ? *a.ablation : ablate_heads(ctx, encoder, dev, quiet);
  const std::vector<std::size_t> ablation_order = least_important_first(ablation);
  r["ablation_from"] = a.ablation_from.empty() ? json(nullptr) : json(a.ablation_from);
  r["ablation_seconds"] = seconds_since(start);
  r["dev_baseline"] = ablation.baseline;
  r["ablation_order"] = head_order_json(ablation_order, c.heads);
  log("ablation ranking on dev", seconds_since(start));
  std::vector<std::size_t> gradient_order;
  if (a.gradient) {
    start = std::chrono::steady_clock::now();
    const std::vector<StsPair> rank_pairs = first(dev, a.gradient_pairs);
    const GradientImportance g =
        gradient_head_importance(ctx, encoder, weights, rank_pairs, {.batch_size = a.batch});
    gradient_order = least_important_first(g);
    std::vector<double> drop;
    for (std::size_t i = 0; i < g.importance.size(); ++i) drop.push_back(ablation.importance(i));
    r["gradient_seconds"] = seconds_since(start);
    r["gradient_rank_pairs"] = rank_pairs.size();
    r["gradient_loss"] = "cosine-MSE: (cos(u, v) - gold / 5)^2 of the mean-pooled embeddings";
    r["gradient_mean_loss"] = g.mean_loss;
    r["gradient_importance"] = g.importance;
    r["gradient_order"] = head_order_json(gradient_order, c.heads);
    r["ablation_gradient_spearman"] = spearman(drop, g.importance);
    log("gradient ranking on dev", seconds_since(start));
    if (a.log)
      a.log(concat("Spearman of the ablation and gradient importances over ", drop.size(),
                   " heads: ", r["ablation_gradient_spearman"].get<double>()));
  }
  std::vector<std::size_t> iterative_order;
  if (a.iterative) {
    start = std::chrono::steady_clock::now();
    const std::vector<StsPair> rank_pairs = first(dev, a.iterative_pairs);
    r["iterative_rank_pairs"] = rank_pairs.size();
    if (a.iterative_order) {  // the order an earlier run measured (deterministic for the same
                              // model and pairs)
      iterative_order = *a.iterative_order;
      for (std::size_t h : iterative_order)
        HEADCOUNT_CHECK(h < static_cast<std::size_t>(total), "the iterative order",
                        "heads of this model", h);
      r["iterative_from"] = a.iterative_from;
      r["iterative_seconds_measured"] = a.iterative_seconds_measured;
    } else {
      const std::vector<std::int64_t> steps(counts.begin() + 1, counts.end());
      iterative_order = iterative_removal_order(ctx, encoder, rank_pairs, steps, quiet);
    }
    r["iterative_seconds"] = seconds_since(start);
    r["iterative_order"] = head_order_json(iterative_order, c.heads);
    log("iterative re-ranking on dev", seconds_since(start));
  }
  std::vector<std::vector<std::size_t>> random_orders;
  for (std::int64_t s = 0; s < a.random_orders; ++s) {
    std::vector<std::size_t> order(static_cast<std::size_t>(total));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(static_cast<std::uint64_t>(a.seed + s));
    std::shuffle(order.begin(), order.end(), rng);
    random_orders.push_back(order);
  }

  // 2. Every order's masks, scored on test in one evaluator.
  std::vector<std::vector<float>> masks;
  for (std::int64_t k : counts) masks.push_back(removal_mask(c, ablation_order, k));
  if (a.iterative)
    for (std::int64_t k : counts) masks.push_back(removal_mask(c, iterative_order, k));
  if (a.gradient)
    for (std::int64_t k : counts) masks.push_back(removal_mask(c, gradient_order, k));
  for (const auto& order : random_orders)
    for (std::int64_t k : counts) masks.push_back(removal_mask(c, order, k));
  start = std::chrono::steady_clock::now();
  const std::vector<double> scores = sts_spearman_for_masks(
      ctx, encoder, test, masks, {.batch_size = a.batch, .progress = a.test_progress});
  log("test scores", seconds_since(start));

  // 3. The ablation points again on physically pruned models.
  std::vector<double> physical;
  if (a.physical) {
    start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < counts.size(); ++i) {
      std::vector<std::vector<std::int64_t>> remove(static_cast<std::size_t>(c.layers));
      for (std::size_t h = 0; h < masks[i].size(); ++h)
        if (masks[i][h] == 0.0f)
          remove[h / static_cast<std::size_t>(c.heads)].push_back(
              static_cast<std::int64_t>(h % static_cast<std::size_t>(c.heads)));
      const BertEncoder pruned = encoder_from_weights(prune_heads(weights, remove));
      physical.push_back(evaluate_sts(ctx, pruned, test, {.batch_size = a.batch}).spearman);
    }
    log("physically pruned models", seconds_since(start));
  }

  json points = json::array();
  const std::size_t n = counts.size();
  for (std::size_t i = 0; i < n; ++i) {
    json p = {{"fraction", static_cast<double>(i) / 10.0},
              {"heads_removed", counts[i]},
              {"removed_share", static_cast<double>(counts[i]) / static_cast<double>(total)},
              {"ablation", scores[i]}};
    std::size_t next = n;
    if (a.iterative) p["iterative"] = scores[next + i], next += n;
    if (a.gradient) p["gradient"] = scores[next + i], next += n;
    if (a.physical) p["physical"] = physical[i];
    if (!random_orders.empty()) {
      std::vector<double> v;
      for (std::size_t s = 0; s < random_orders.size(); ++s) v.push_back(scores[next + s * n + i]);
      double mean = 0, var = 0;
      for (double x : v) mean += x / static_cast<double>(v.size());
      for (double x : v)
        var += (x - mean) * (x - mean) / static_cast<double>(v.size() > 1 ? v.size() - 1 : 1);
      p["random_mean"] = mean;
      p["random_std"] = std::sqrt(var);  // sample std (n - 1)
      p["random"] = v;
    }
    points.push_back(p);
  }
  r["points"] = points;
  return r;
}

}  // namespace headcount::compress
