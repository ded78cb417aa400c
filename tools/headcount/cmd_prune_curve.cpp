// `headcount prune-curve`: STS-B test Spearman against the fraction of heads removed (0 ... 90%
// in 10% steps) for four orders: the ablation ranking (each head removed alone, on STS-B
// dev), the gradient ranking (Michel et al.'s |dL/dξ_h| on dev, encoder_training.h), iterative
// re-ranking (re-ablated on dev after each step), and seeded random orders (mean and std); with
// the Spearman correlation of the ablation and gradient importances over all heads. Rankings
// never see the test file. The ablation points are also measured on
// the physically pruned models (prune_heads), which equal the masked ones up to fp32 order.
// Writes the numbers as JSON (--json-out) and a page with the plot (--out).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "commands.h"
#include "encoder_cli.h"
#include "headcount/compress.h"
#include "headcount/encoder_training.h"
#include "headcount/error.h"
#include "headcount/head_analysis.h"
#include "headcount/sts.h"
#include "io/atomic_file.h"
#include "prune_cli.h"
#include "report/compress_report.h"
#include "report/html.h"

namespace headcount::cli {
namespace {

using detail::concat;
using nlohmann::json;

struct CurveArgs {
  std::string model, dev = default_sts_file("sts-dev.tsv"), test = default_sts_file("sts-test.tsv"),
                     json_out, out;
  std::string ablation_from, iterative_from;
  std::int64_t random_orders = 5, seed = 0, max_pairs = 0, iterative_pairs = 0, batch = 32;
  bool iterative = true, physical = true, gradient = true;
  std::int64_t gradient_pairs = 0;
  int threads = 0;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<StsPair> read_pairs(const std::string& path, std::int64_t max_pairs) {
  std::vector<StsPair> pairs = read_sts(path);
  if (max_pairs > 0 && static_cast<std::int64_t>(pairs.size()) > max_pairs)
    pairs.resize(static_cast<std::size_t>(max_pairs));
  return pairs;
}

json order_json(const std::vector<std::size_t>& order, std::int64_t heads) {
  json out = json::array();
  for (std::size_t i : order)
    out.push_back({{"layer", i / static_cast<std::size_t>(heads)},
                   {"head", i % static_cast<std::size_t>(heads)}});
  return out;
}

// The per-head ablation of `headcount heads --ablate --json` (its "heads"[].spearman_without and
// "ablation".baseline_spearman), checked against this model's shape.
HeadAblation read_ablation(const std::string& path, const EncoderConfig& c) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  json r;
  try {
    r = json::parse(in);
  } catch (const json::parse_error& e) {
    fail(path, concat("malformed JSON (", e.what(), ")"));
  }
  check(r.contains("ablation") && r["ablation"].contains("baseline_spearman") &&
            r.contains("heads") && r["heads"].is_array() &&
            static_cast<std::int64_t>(r["heads"].size()) == c.layers * c.heads,
        path, concat("the JSON of `headcount heads --ablate` for ", c.layers * c.heads, " heads"),
        "something else");
  HeadAblation ablation{.pairs = r["ablation"].value("pairs", 0),
                        .baseline = r["ablation"]["baseline_spearman"].get<double>()};
  ablation.spearman.assign(static_cast<std::size_t>(c.layers * c.heads), 0.0);
  for (const json& h : r["heads"]) {
    const std::int64_t l = h.at("layer").get<std::int64_t>(), k = h.at("head").get<std::int64_t>();
    check(l >= 0 && l < c.layers && k >= 0 && k < c.heads && h.contains("spearman_without"), path,
          "heads with layer, head, spearman_without", h.dump());
    ablation.spearman[static_cast<std::size_t>(l * c.heads + k)] =
        h["spearman_without"].get<double>();
  }
  return ablation;
}

std::string render_page(const json& r) {
  return report::page(
      "headcount prune-curve", "",
      concat("<h1>Pruning the heads of ", report::escape(r.at("model").get<std::string>()),
             "</h1>\n", report::prune_curve_section(r)));
}

void run_curve(const CurveArgs& a) {
  check(!a.json_out.empty() || !a.out.empty(), "--json-out / --out", "at least one output file",
        "neither");
  check(a.random_orders >= 0 && a.random_orders <= 100, "--random-orders", "in [0, 100]",
        a.random_orders);
  const std::vector<StsPair> dev = read_pairs(a.dev, a.max_pairs),
                             test = read_pairs(a.test, a.max_pairs);
  const std::string model_dir = resolve_model_dir(a.model);
  // One read of the file: the encoder is built from the weights in memory (no second load).
  const EncoderWeights weights = read_encoder_weights(model_dir);
  const BertEncoder encoder = encoder_from_weights(weights);
  const EncoderConfig& c = encoder.config();
  check_unpruned(c);
  check(!c.is_grouped(), "--model", "a multi-head model", "a grouped one");
  Context ctx({.threads = resolve_threads(a.threads)});
  const std::int64_t total = c.layers * c.heads;
  // The 10% steps a model can take (one head stays per layer: at most layers * (heads - 1)).
  std::vector<std::int64_t> counts;
  for (std::int64_t k : curve_counts(total))
    if (k <= c.layers * (c.heads - 1)) counts.push_back(k);
  const HeadAblationOptions quiet{.batch_size = a.batch};
  auto log = [](const char* what, double seconds) {
    std::fprintf(stderr, "prune-curve: %s (%.0f s)\n", what, seconds);
  };

  json r = {
      {"command", "prune-curve"},
      {"model", model_dir},
      {"rank_file", a.dev},
      {"test_file", a.test},
      {"rank_pairs", dev.size()},
      {"test_pairs", test.size()},
      {"threads", ctx.threads()},
      {"reference",
       "Michel, Levy, Neubig 2019 (Are Sixteen Heads Really Better than One?): 40% of BERT's heads "
       "pruned on MNLI without noticeable loss"}};
  // 1. Rankings on dev (the ablation measured here, or read from `headcount heads --ablate
  // --json`).
  auto start = std::chrono::steady_clock::now();
  const HeadAblation ablation = a.ablation_from.empty() ? ablate_heads(ctx, encoder, dev, quiet)
                                                        : read_ablation(a.ablation_from, c);
  const std::vector<std::size_t> ablation_order = least_important_first(ablation);
  r["ablation_from"] = a.ablation_from.empty() ? json(nullptr) : json(a.ablation_from);
  r["ablation_seconds"] = seconds_since(start);
  r["dev_baseline"] = ablation.baseline;
  r["ablation_order"] = order_json(ablation_order, c.heads);
  log("ablation ranking on dev", seconds_since(start));
  std::vector<std::size_t> gradient_order;
  if (a.gradient) {
    start = std::chrono::steady_clock::now();
    std::vector<StsPair> rank_pairs = dev;
    if (a.gradient_pairs > 0 && static_cast<std::int64_t>(rank_pairs.size()) > a.gradient_pairs)
      rank_pairs.resize(static_cast<std::size_t>(a.gradient_pairs));
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
    r["gradient_order"] = order_json(gradient_order, c.heads);
    r["ablation_gradient_spearman"] = spearman(drop, g.importance);
    log("gradient ranking on dev", seconds_since(start));
    std::fprintf(
        stderr,
        "prune-curve: Spearman of the ablation and gradient importances over %zu heads: %.3f\n",
        drop.size(), r["ablation_gradient_spearman"].get<double>());
  }
  std::vector<std::size_t> iterative_order;
  if (a.iterative) {
    start = std::chrono::steady_clock::now();
    std::vector<std::int64_t> steps(counts.begin() + 1, counts.end());
    std::vector<StsPair> rank_pairs = dev;
    if (a.iterative_pairs > 0 && static_cast<std::int64_t>(rank_pairs.size()) > a.iterative_pairs)
      rank_pairs.resize(static_cast<std::size_t>(a.iterative_pairs));
    r["iterative_rank_pairs"] = rank_pairs.size();
    if (a.iterative_from.empty()) {
      iterative_order = iterative_removal_order(ctx, encoder, rank_pairs, steps, quiet);
    } else {  // the order an earlier run measured (deterministic for the same model and pairs)
      const json earlier = report::read_json_file(a.iterative_from);
      check(earlier.contains("iterative_order") && earlier["iterative_order"].is_array() &&
                earlier.value("iterative_rank_pairs", std::size_t{0}) == rank_pairs.size(),
            a.iterative_from,
            concat("a prune-curve result with \"iterative_order\" re-ranked on ", rank_pairs.size(),
                   " pairs"),
            "something else");
      for (const json& h : earlier["iterative_order"]) {
        const std::int64_t l = h.at("layer").get<std::int64_t>(),
                           k = h.at("head").get<std::int64_t>();
        check(l >= 0 && l < c.layers && k >= 0 && k < c.heads, a.iterative_from,
              "heads of this model", h.dump());
        iterative_order.push_back(static_cast<std::size_t>(l * c.heads + k));
      }
      r["iterative_from"] = a.iterative_from;
      r["iterative_seconds_measured"] = earlier.value("iterative_seconds", 0.0);
    }
    r["iterative_seconds"] = seconds_since(start);
    r["iterative_order"] = order_json(iterative_order, c.heads);
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
      ctx, encoder, test, masks, {.batch_size = a.batch, .progress = progress_reporter("test")});
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
  if (!a.json_out.empty()) io::write_file_atomically(a.json_out, r.dump(2) + "\n");
  if (!a.out.empty()) io::write_file_atomically(a.out, render_page(r));
  for (const json& p : points)
    std::fprintf(
        stderr, "  %3.0f%% (%2lld heads): ablation %.2f%s\n", 100 * p["fraction"].get<double>(),
        static_cast<long long>(p["heads_removed"].get<std::int64_t>()), p["ablation"].get<double>(),
        p.contains("iterative")
            ? concat("  iterative ", report::fixed(p["iterative"].get<double>(), 2)).c_str()
            : "");
}

}  // namespace

void register_prune_curve(CLI::App& app) {
  auto a = std::make_shared<CurveArgs>();
  CLI::App* cmd = app.add_subcommand(
      "prune-curve", "STS-B test Spearman against the fraction of heads removed, per ranking");
  cmd->add_option("--model", a->model, model_option_help());
  cmd->add_option("--dev", a->dev, "STS file the rankings are measured on")->capture_default_str();
  cmd->add_option("--test", a->test, "Held-out STS file the pruned models are scored on")
      ->capture_default_str();
  cmd->add_option("--random-orders", a->random_orders, "Seeded random removal orders (mean +- std)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the first random order")->capture_default_str();
  cmd->add_flag("!--no-iterative", a->iterative,
                "Skip the iterative re-ranking (its cost: one ablation pass per step)");
  cmd->add_flag("!--no-physical", a->physical, "Skip scoring the physically pruned models");
  cmd->add_flag("!--no-gradient", a->gradient,
                "Skip the gradient ranking (Michel et al.'s |dL/d gate| on dev)");
  cmd->add_option("--gradient-pairs", a->gradient_pairs,
                  "Rank by gradient on the first N dev pairs only (0: all)")
      ->capture_default_str();
  cmd->add_option("--max-pairs", a->max_pairs, "Use the first N pairs of each STS file (0: all)")
      ->capture_default_str();
  cmd->add_option("--ablation-from", a->ablation_from,
                  "Take the ablation ranking from `headcount heads --ablate --json` output instead "
                  "of measuring it");
  cmd->add_option("--iterative-from", a->iterative_from,
                  "Take the iterative order from an earlier `headcount prune-curve --json-out` "
                  "result instead of measuring it");
  cmd->add_option("--iterative-pairs", a->iterative_pairs,
                  "Re-rank on the first N dev pairs only (0: all)")
      ->capture_default_str();
  cmd->add_option("--json-out", a->json_out, "Write the numbers here (JSON)");
  cmd->add_option("--out", a->out, "Write an HTML page with the plot here");
  cmd->add_option("--batch", a->batch,
                  "Sentences per forward pass (the gradient ranking: pairs per batch)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->callback([a] { run_curve(*a); });
}

}  // namespace headcount::cli
