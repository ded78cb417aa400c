// `headcount prune`: removes heads physically and writes a model directory (headcount and
// transformers load it). Which heads: --heads L:H,... named, or the --fraction / --keep least
// important by ablation on STS-B dev (each head removed alone; --iterative: re-ranked after each
// 10% removed) or by gradient (--importance gradient: Michel et al.'s |dL/dξ_h| on STS-B dev with
// the cosine-MSE loss, per-layer l2 normalised), never a layer's last head.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "encoder_cli.h"
#include "headcount/compress.h"
#include "headcount/encoder_training.h"
#include "headcount/error.h"
#include "headcount/head_analysis.h"
#include "headcount/sts.h"
#include "prune_cli.h"
#include "report/compress_report.h"

namespace headcount::cli {
namespace {

using detail::concat;

struct PruneArgs {
  std::string model, out, heads, importance = "ablation",
                                 rank_sts = default_sts_file("sts-dev.tsv"), order_from;
  double fraction = -1;
  std::int64_t keep = -1, max_pairs = 0, batch = 32;
  bool iterative = false;
  int threads = 0;
};

void run_prune(const PruneArgs& a) {
  // 1. Options and the model, before any long computation.
  const int chosen = (!a.heads.empty() ? 1 : 0) + (a.fraction >= 0 ? 1 : 0) + (a.keep >= 0 ? 1 : 0);
  check(chosen == 1, "--heads / --fraction / --keep", "exactly one of them",
        concat(chosen, " given"));
  check(a.importance == "ablation" || a.importance == "gradient", "--importance",
        "ablation or gradient", a.importance);
  check(!(a.iterative && a.importance == "gradient"), "--iterative",
        "only with --importance ablation", "with gradient");
  check(a.out.size() > 0, "--out", "a directory for the pruned model", "nothing");
  check(!std::filesystem::exists(a.out) || std::filesystem::is_empty(a.out), "--out",
        "a directory that does not exist yet (or is empty)", a.out);
  const std::string model_dir = resolve_model_dir(a.model);
  const EncoderWeights weights = read_encoder_weights(model_dir);
  const EncoderConfig& c = weights.config;

  std::vector<std::vector<std::int64_t>> remove;
  if (!a.heads.empty()) {
    check(!a.iterative, "--iterative", "only with --fraction or --keep", "with --heads");
    remove = parse_head_list(a.heads, c);
  } else {
    check(!c.is_pruned() && !c.is_grouped(), "--model",
          "an unpruned multi-head model for --fraction / --keep",
          "a pruned or grouped one (name the heads with --heads)");
    const std::int64_t total = c.layers * c.heads, most = c.layers * (c.heads - 1);
    if (a.fraction >= 0) check(a.fraction <= 1, "--fraction", "in [0, 1]", a.fraction);
    const std::int64_t count =
        a.fraction >= 0 ? std::llround(a.fraction * static_cast<double>(total)) : total - a.keep;
    check(count >= 0 && count <= most, a.fraction >= 0 ? "--fraction" : "--keep",
          concat("a count of removed heads in [0, ", most, "] (one head stays per layer)"), count);
    std::vector<std::size_t> order;
    if (!a.order_from.empty()) {
      // A ranking prune-curve measured (on dev): its ablation or iterative removal order.
      const nlohmann::json curve = report::read_json_file(a.order_from);
      const char* key = a.iterative                  ? "iterative_order"
                        : a.importance == "gradient" ? "gradient_order"
                                                     : "ablation_order";
      check(curve.contains(key) && curve[key].is_array(), a.order_from,
            concat("a prune-curve result with \"", key, "\""), "none");
      for (const nlohmann::json& h : curve[key]) {
        const std::int64_t l = h.at("layer").get<std::int64_t>(),
                           k = h.at("head").get<std::int64_t>();
        check(l >= 0 && l < c.layers && k >= 0 && k < c.heads, a.order_from, "heads of this model",
              h.dump());
        order.push_back(static_cast<std::size_t>(l * c.heads + k));
      }
      check(!order.empty(), a.order_from, concat("a non-empty \"", key, "\""), "an empty one");
    }
    if (order.empty()) {  // measure the ranking on the STS file
      std::vector<StsPair> pairs = read_sts(a.rank_sts);
      if (a.max_pairs > 0 && static_cast<std::int64_t>(pairs.size()) > a.max_pairs)
        pairs.resize(static_cast<std::size_t>(a.max_pairs));
      const BertEncoder encoder = encoder_from_weights(weights);  // the file is read once
      Context ctx({.threads = resolve_threads(a.threads)});
      const HeadAblationOptions options{.batch_size = a.batch,
                                        .progress = progress_reporter("rank")};
      if (a.importance == "gradient")
        order = least_important_first(gradient_head_importance(
            ctx, encoder, weights, pairs,
            {.batch_size = a.batch, .progress = progress_reporter("rank")}));
      else
        order = a.iterative ? iterative_removal_order(ctx, encoder, pairs,
                                                      iterative_counts(total, count), options)
                            : least_important_first(ablate_heads(ctx, encoder, pairs, options));
    }
    const std::vector<float> mask = removal_mask(c, order, count);
    remove.assign(static_cast<std::size_t>(c.layers), {});
    for (std::size_t i = 0; i < mask.size(); ++i)
      if (mask[i] == 0.0f)
        remove[i / static_cast<std::size_t>(c.heads)].push_back(
            static_cast<std::int64_t>(i % static_cast<std::size_t>(c.heads)));
  }
  const EncoderWeights pruned = prune_heads(weights, remove);
  write_encoder_dir(pruned, a.out);
  std::int64_t removed = 0;
  for (const auto& l : remove) removed += static_cast<std::int64_t>(l.size());
  std::fprintf(stderr, "prune: removed %lld heads (%lld of %lld left); wrote %s\n",
               static_cast<long long>(removed), static_cast<long long>(pruned.config.total_heads()),
               static_cast<long long>(c.layers * c.heads), a.out.c_str());
}

}  // namespace

void register_prune(CLI::App& app) {
  auto a = std::make_shared<PruneArgs>();
  CLI::App* cmd = app.add_subcommand(
      "prune", "Remove attention heads physically and write the smaller model directory");
  cmd->add_option("--model", a->model, model_option_help());
  cmd->add_option("--heads", a->heads,
                  "Heads to remove, LAYER:HEAD,... (original indices, e.g. 0:3,5:11)");
  cmd->add_option("--fraction", a->fraction,
                  "Remove this fraction of all heads, least important first");
  cmd->add_option("--keep", a->keep, "Keep this many heads, removing the least important");
  cmd->add_option("--importance", a->importance,
                  "Ranking for --fraction / --keep: ablation | gradient (both on STS dev)")
      ->capture_default_str();
  cmd->add_flag("--iterative", a->iterative,
                "Re-rank the remaining heads after each 10% of heads removed");
  cmd->add_option("--rank-sts", a->rank_sts, "STS file the ranking is measured on")
      ->capture_default_str();
  cmd->add_option("--order-from", a->order_from,
                  "Take the ranking from a `headcount prune-curve --json-out` result (its "
                  "iterative order with --iterative, "
                  "its gradient order with --importance gradient)");
  cmd->add_option("--max-pairs", a->max_pairs, "Rank on the first N pairs (0: all)")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "The pruned model directory (must not exist yet)")->required();
  cmd->add_option("--batch", a->batch,
                  "Sentences per forward pass (the gradient ranking: pairs per batch)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->callback([a] { run_prune(*a); });
}

}  // namespace headcount::cli
