// `headcount prune-curve`: STS-B test Spearman against the fraction of heads removed, for the
// ablation, gradient, iterative and random orders (the sweep itself: src/compress/sweeps.h's
// prune_curve). Rankings never see the test file. This command reads the files (the model, the
// STS pairs, rankings measured earlier) and writes the numbers as JSON (--json-out) and a page
// with the plot (--out).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "compress/sweeps.h"
#include "encoder_cli.h"
#include "headcount/bpe.h"
#include "headcount/compress.h"
#include "headcount/decoder.h"
#include "headcount/error.h"
#include "headcount/gguf.h"
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
  // A GGUF decoder: K/V groups removed; dev and test are consecutive token ranges of --text.
  std::string text = HEADCOUNT_SOURCE_DIR "/data/pride-and-prejudice.txt", weights = "fp32";
  std::int64_t dev_tokens = 2048, test_tokens = 4096, context = 512, speed_prompt = 512;
  std::int64_t in_context_sequences = 16;
  bool speed = true;
};

std::vector<StsPair> read_pairs(const std::string& path, std::int64_t max_pairs) {
  std::vector<StsPair> pairs = read_sts(path);
  if (max_pairs > 0 && static_cast<std::int64_t>(pairs.size()) > max_pairs)
    pairs.resize(static_cast<std::size_t>(max_pairs));
  return pairs;
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

// The iterative order of an earlier `prune-curve --json-out` result re-ranked on `pairs` pairs.
std::vector<std::size_t> read_iterative_order(const std::string& path, std::size_t pairs,
                                              const EncoderConfig& c, double& seconds) {
  const json earlier = report::read_json_file(path);
  check(earlier.contains("iterative_order") && earlier["iterative_order"].is_array() &&
            earlier.value("iterative_rank_pairs", std::size_t{0}) == pairs,
        path,
        concat("a prune-curve result with \"iterative_order\" re-ranked on ", pairs, " pairs"),
        "something else");
  std::vector<std::size_t> order;
  for (const json& h : earlier["iterative_order"]) {
    const std::int64_t l = h.at("layer").get<std::int64_t>(), k = h.at("head").get<std::int64_t>();
    check(l >= 0 && l < c.layers && k >= 0 && k < c.heads, path, "heads of this model", h.dump());
    order.push_back(static_cast<std::size_t>(l * c.heads + k));
  }
  seconds = earlier.value("iterative_seconds", 0.0);
  return order;
}

// The decoder's curve (compress::decoder_prune_curve): the first --dev-tokens tokens of --text
// rank the K/V groups, the --test-tokens after them score the pruned models.
void run_decoder_curve(const CurveArgs& a) {
  check(a.context >= 4, "--context", ">= 4", a.context);
  check(a.in_context_sequences >= 0, "--in-context-sequences", ">= 0 (0: not measured)",
        a.in_context_sequences);
  check(a.dev_tokens >= a.context, "--dev-tokens", concat(">= --context = ", a.context),
        a.dev_tokens);
  check(a.test_tokens >= a.context, "--test-tokens", concat(">= --context = ", a.context),
        a.test_tokens);
  const DType weights_dtype = parse_dtype_option(a.weights, "--weights");
  std::ifstream in(a.text, std::ios::binary);
  check(static_cast<bool>(in), "--text", "a readable file", a.text);
  const std::string text_shown = path_as_recorded(a.text);
  const GgufFile file = GgufFile::open(a.model);
  const model::Weights weights = llama_definition(file);
  const BpeTokenizer tokenizer = BpeTokenizer::from_gguf(file);
  std::ostringstream text;
  text << in.rdbuf();
  const std::vector<std::int32_t> ids = tokenizer.encode(text.str(), {.parse_special = false});
  check(static_cast<std::int64_t>(ids.size()) >= a.dev_tokens + a.test_tokens, "--text",
        concat("at least --dev-tokens + --test-tokens = ", a.dev_tokens + a.test_tokens, " tokens"),
        concat(ids.size(), " tokens in ", a.text));
  const std::span<const std::int32_t> all(ids);
  Context ctx({.threads = resolve_threads(a.threads)});
  compress::DecoderPruneCurveOptions options{.context = a.context,
                                             .random_orders = a.random_orders,
                                             .seed = a.seed,
                                             .weights = weights_dtype,
                                             .log = [](const std::string& line) {
                                               std::fprintf(stderr, "prune-curve: %s\n",
                                                            line.c_str());
                                             }};
  options.speed_prompt = a.speed_prompt;
  options.in_context.sequences = a.in_context_sequences;
  options.gradient = a.gradient;
  if (!a.ablation_from.empty()) {
    // The "ablation" rises of an earlier `prune-curve --model FILE.gguf --json-out` result.
    const json earlier = report::read_json_file(a.ablation_from);
    const std::int64_t groups = weights.config.layer_count() * weights.config.kv_heads_in(0);
    check(earlier.contains("ablation") && earlier["ablation"].is_array() &&
              static_cast<std::int64_t>(earlier["ablation"].size()) == groups &&
              earlier.value("dev_tokens", std::int64_t{-1}) == a.dev_tokens &&
              earlier.value("context", std::int64_t{-1}) == a.context &&
              earlier.value("text", std::string()) == text_shown,
          "--ablation-from",
          concat("a decoder prune-curve result with ", groups, " groups ranked on the first ",
                 a.dev_tokens, " tokens of ", text_shown, " in windows of ", a.context),
          a.ablation_from);
    std::vector<double> rises;
    for (const json& g : earlier["ablation"]) {
      check(g.contains("nll_rise") && g["nll_rise"].is_number() &&
                g.value("layer", std::int64_t{-1}) * weights.config.kv_heads_in(0) +
                        g.value("group", std::int64_t{-1}) ==
                    static_cast<std::int64_t>(rises.size()),
            "--ablation-from", "groups in order with layer, group, nll_rise", g.dump());
      rises.push_back(g["nll_rise"].get<double>());
    }
    options.ablation = rises;
    options.ablation_from = a.ablation_from;
  }
  if (!a.speed) options.speed_fractions.clear();
  json r = compress::decoder_prune_curve(
      ctx, weights, tokenizer, all.first(static_cast<std::size_t>(a.dev_tokens)),
      all.subspan(static_cast<std::size_t>(a.dev_tokens), static_cast<std::size_t>(a.test_tokens)),
      options);
  r["model"] = a.model;
  r["text"] = text_shown;
  if (!a.json_out.empty()) io::write_file_atomically(a.json_out, r.dump(2) + "\n");
  if (!a.out.empty())
    io::write_file_atomically(
        a.out, report::page("headcount prune-curve", "",
                            concat("<h1>Pruning the K/V groups of ", report::escape(a.model),
                                   "</h1>\n", report::decoder_prune_curve_section(r))));
}

void run_curve(const CurveArgs& a) {
  check(!a.json_out.empty() || !a.out.empty(), "--json-out / --out", "at least one output file",
        "neither");
  check(a.random_orders >= 0 && a.random_orders <= 100, "--random-orders", "in [0, 100]",
        a.random_orders);
  if (names_a_decoder(a.model, "prune-curve")) return run_decoder_curve(a);
  const std::vector<StsPair> dev = read_pairs(a.dev, a.max_pairs),
                             test = read_pairs(a.test, a.max_pairs);
  const std::string model_dir = resolve_model_dir(a.model);
  // One read of the file: the encoders are built from the weights in memory.
  const EncoderWeights weights = read_encoder_weights(model_dir);
  const EncoderConfig& c = weights.config;
  check_unpruned(c);
  check(!c.is_grouped(), "--model", "a multi-head model", "a grouped one");
  Context ctx({.threads = resolve_threads(a.threads)});
  compress::PruneCurveOptions options{
      .model_name = model_dir,
      .rank_file = a.dev,
      .test_file = a.test,
      .random_orders = a.random_orders,
      .seed = a.seed,
      .batch = a.batch,
      .iterative = a.iterative,
      .physical = a.physical,
      .gradient = a.gradient,
      .gradient_pairs = a.gradient_pairs,
      .iterative_pairs = a.iterative_pairs,
      .ablation_from = a.ablation_from,
      .iterative_from = a.iterative_from,
      .log =
          [](const std::string& line) { std::fprintf(stderr, "prune-curve: %s\n", line.c_str()); },
      .test_progress = progress_reporter("test")};
  if (!a.ablation_from.empty()) options.ablation = read_ablation(a.ablation_from, c);
  if (a.iterative && !a.iterative_from.empty()) {
    const std::size_t pairs =
        a.iterative_pairs > 0 ? std::min(dev.size(), static_cast<std::size_t>(a.iterative_pairs))
                              : dev.size();
    options.iterative_order =
        read_iterative_order(a.iterative_from, pairs, c, options.iterative_seconds_measured);
  }
  const json r = compress::prune_curve(ctx, weights, dev, test, options);
  if (!a.json_out.empty()) io::write_file_atomically(a.json_out, r.dump(2) + "\n");
  if (!a.out.empty()) io::write_file_atomically(a.out, render_page(r));
  for (const json& p : r["points"])
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
                "Skip the gradient ranking (Michel et al.'s |dL/d gate| on dev; a decoder: "
                "on the dev text, scored beside the ablation order)");
  cmd->add_option("--gradient-pairs", a->gradient_pairs,
                  "Rank by gradient on the first N dev pairs only (0: all)")
      ->capture_default_str();
  cmd->add_option("--max-pairs", a->max_pairs, "Use the first N pairs of each STS file (0: all)")
      ->capture_default_str();
  cmd->add_option("--ablation-from", a->ablation_from,
                  "Take the ablation ranking from `headcount heads --ablate --json` output (a "
                  "decoder: an earlier prune-curve --json-out) instead of measuring it");
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
  // A GGUF decoder (--model FILE.gguf): whole K/V groups removed, scored by perplexity.
  cmd->add_option("--text", a->text,
                  "decoder: the text whose first --dev-tokens rank and next --test-tokens score")
      ->capture_default_str();
  cmd->add_option("--dev-tokens", a->dev_tokens, "decoder: tokens the ranking sees")
      ->capture_default_str();
  cmd->add_option("--test-tokens", a->test_tokens, "decoder: held-out tokens that score")
      ->capture_default_str();
  cmd->add_option("--context", a->context, "decoder: perplexity windows (the second half scored)")
      ->capture_default_str();
  cmd->add_option("--weights", a->weights, "decoder: fp32 | bf16 | int8")->capture_default_str();
  cmd->add_option("--speed-prompt", a->speed_prompt,
                  "decoder: prompt tokens (of the test text) prefilled before 32 decoded ones")
      ->capture_default_str();
  cmd->add_option("--in-context-sequences", a->in_context_sequences,
                  "decoder: repeated random sequences (64 tokens twice) on which every pruned "
                  "model's in-context loss drop is measured (0: none)")
      ->capture_default_str();
  cmd->add_flag("!--no-speed", a->speed,
                "decoder: skip timing the pruned models (prefill and decode tokens/s)");
  cmd->callback([a] { run_curve(*a); });
}

}  // namespace headcount::cli
