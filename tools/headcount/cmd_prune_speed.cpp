// `headcount prune-speed`: sentences/s of physically pruned models against the fraction of heads
// removed, at several batch sizes, beside the cost model's multiply-adds (the interleaved
// measurement itself: src/compress/sweeps.h's prune_speed). This command reads the sentences,
// the model and the removal order, prints the table and writes the JSON.
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
#include "headcount/compress.h"
#include "headcount/error.h"
#include "headcount/head_analysis.h"
#include "headcount/sts.h"
#include "io/atomic_file.h"
#include "prune_cli.h"

namespace headcount::cli {
namespace {

using detail::concat;
using nlohmann::json;

struct SpeedArgs {
  std::string model, order_from, sentences = HEADCOUNT_SOURCE_DIR "/data/pride-and-prejudice.txt",
                                 json_out;
  std::vector<double> fractions = {0, 0.2, 0.4, 0.5, 0.6, 0.8};
  std::vector<std::int64_t> batches = {1, 4, 16, 32, 64};
  std::int64_t max_sentences = 256;
  int repeats = 3, threads = 0;
};

// The removal order: the ablation order saved by prune-curve, or (without one) round robin over
// the layers, highest head index first; speed depends only on how many heads each layer keeps.
std::vector<std::size_t> removal_order(const SpeedArgs& a, const EncoderConfig& c) {
  std::vector<std::size_t> order;
  if (!a.order_from.empty()) {
    std::ifstream in(a.order_from);
    if (!in) fail(a.order_from, "cannot open");
    json r;
    try {
      r = json::parse(in);
    } catch (const json::parse_error& e) {
      fail(a.order_from, concat("malformed JSON (", e.what(), ")"));
    }
    check(r.contains("ablation_order") && r["ablation_order"].is_array(), a.order_from,
          "a prune-curve result with \"ablation_order\"", "none");
    for (const json& h : r["ablation_order"])
      order.push_back(h.at("layer").get<std::size_t>() * static_cast<std::size_t>(c.heads) +
                      h.at("head").get<std::size_t>());
    return order;
  }
  for (std::int64_t h = c.heads - 1; h >= 0; --h)
    for (std::int64_t l = 0; l < c.layers; ++l)
      order.push_back(static_cast<std::size_t>(l * c.heads + h));
  return order;
}

void run_speed(const SpeedArgs& a) {
  check(a.repeats >= 1, "--repeats", ">= 1", a.repeats);
  check(!a.fractions.empty() && !a.batches.empty(), "--fractions / --batches",
        "at least one value each", "none");
  for (std::int64_t b : a.batches) check(b >= 1, "--batches", "values >= 1", b);
  for (double f : a.fractions) check(f >= 0 && f < 1, "--fractions", "values in [0, 1)", f);
  // An STS-B file (.tsv) gives both sentences of every pair, as `bench --suite encoder` embeds
  // them; anything else is one sentence per line.
  std::vector<std::string> texts;
  if (a.sentences.size() > 4 && a.sentences.ends_with(".tsv")) {
    const std::vector<StsPair> pairs = read_sts(a.sentences);
    for (const StsPair& p : pairs) texts.push_back(p.sentence1);
    for (const StsPair& p : pairs) texts.push_back(p.sentence2);
  } else {
    texts = read_sentences(a.sentences);
  }
  if (a.max_sentences > 0 && static_cast<std::int64_t>(texts.size()) > a.max_sentences)
    texts.resize(static_cast<std::size_t>(a.max_sentences));
  const std::string model_dir = resolve_model_dir(a.model);
  const EncoderWeights weights = read_encoder_weights(model_dir);
  const EncoderConfig& c = weights.config;
  check_unpruned(c);
  const std::vector<std::size_t> order = removal_order(a, c);
  Context ctx({.threads = resolve_threads(a.threads)});
  std::fprintf(stderr, "prune-speed: %zu sentences, %d threads, median of %d rounds\n",
               texts.size(), ctx.threads(), a.repeats);
  std::fprintf(stderr, "%8s %7s %6s %12s %10s %12s %9s\n", "removed", "heads", "batch",
               "sentences/s", "x full", "GMAC/pass", "MAC ratio");
  const json rows = compress::prune_speed(
      ctx, weights, texts, order,
      {.fractions = a.fractions,
       .batches = a.batches,
       .repeats = a.repeats,
       .row = [](const json& r) {
         std::fprintf(stderr, "%7.0f%% %7lld %6lld %12.1f %9.3fx %12.3f %8.3fx\n",
                      100 * r["fraction"].get<double>(),
                      static_cast<long long>(r["heads_left"].get<std::int64_t>()),
                      static_cast<long long>(r["batch"].get<std::int64_t>()),
                      r["sentences_per_second"].get<double>(), r["speedup_vs_first"].get<double>(),
                      static_cast<double>(r["macs_per_pass"].get<std::int64_t>()) * 1e-9,
                      r["mac_ratio_vs_first"].get<double>());
       }});
  if (!a.json_out.empty()) {
    const json r = {{"command", "prune-speed"},   {"model", model_dir},
                    {"sentences", texts.size()},  {"sentences_file", a.sentences},
                    {"threads", ctx.threads()},   {"repeats", a.repeats},
                    {"order_from", a.order_from}, {"rows", rows}};
    io::write_file_atomically(a.json_out, r.dump(2) + "\n");
  }
}

}  // namespace

void register_prune_speed(CLI::App& app) {
  auto a = std::make_shared<SpeedArgs>();
  CLI::App* cmd = app.add_subcommand(
      "prune-speed", "Sentences/s of physically pruned models vs fraction removed and batch size");
  cmd->add_option("--model", a->model, model_option_help());
  cmd->add_option(
      "--order-from", a->order_from,
      "A prune-curve JSON whose ablation order says which heads go (default: round robin)");
  cmd->add_option("--fractions", a->fractions,
                  "Fractions of heads removed (the first is the baseline of the ratios)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--batches", a->batches, "Batch sizes")->delimiter(',')->capture_default_str();
  cmd->add_option("--sentences", a->sentences,
                  "One sentence per line, or an STS-B .tsv file (both sentences of every pair)")
      ->capture_default_str();
  cmd->add_option("--max-sentences", a->max_sentences, "Use the first N sentences (0: all)")
      ->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "Timed rounds (median)")->capture_default_str();
  cmd->add_option("--json-out", a->json_out, "Write the rows as JSON here");
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->callback([a] { run_speed(*a); });
}

}  // namespace headcount::cli
