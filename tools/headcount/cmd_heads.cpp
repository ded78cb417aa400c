// `headcount heads`: what each head of the encoder does. Statistics over a corpus (Clark et al.
// 2019's measures, via the streaming second pass), a role per head, optionally the STS-B
// ablation of every head, one sentence's attention maps; written as a self-contained HTML
// report (--out) and/or JSON on stdout (--json). With --model FILE.gguf, the same for a
// Llama-family decoder (decoder_heads.h): corpus statistics, the induction measures of Olsson
// et al. 2022 on repeated random tokens, roles by the rule of docs/decoder-heads.md.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "encoder_cli.h"
#include "headcount/cost.h"
#include "headcount/decoder.h"
#include "headcount/decoder_heads.h"
#include "headcount/error.h"
#include "headcount/gguf.h"
#include "headcount/head_analysis.h"
#include "headcount/sts.h"
#include "io/atomic_file.h"
#include "report/compress_report.h"
#include "report/decoder_heads_report.h"
#include "report/heads_report.h"

namespace headcount::cli {
namespace {

using detail::concat;

const std::string kDataDir =
    std::filesystem::path(HEADCOUNT_SOURCE_DIR "/../shared/data").lexically_normal().string();
constexpr std::int64_t kMaxHeatmapTokens = 64;

struct HeadsArgs {
  std::string model, out,
      text =
          "It is a truth universally acknowledged, that a single man in possession of a good "
          "fortune must be in want of a wife.";
  std::vector<std::string> corpus;
  std::string sts = kDataDir + "/stsb/sts-dev.tsv";
  std::string prune_sts = kDataDir + "/stsb/sts-test.tsv";
  std::string stats_kernel = "streaming";
  std::string dtype = "fp32";
  std::string prune_curve, convert_sweep;  // saved results drawn into the report
  std::int64_t max_sentences = 0, max_pairs = 0, batch = 32;
  bool ablate = false, json = false;
  int threads = 0;
  // A GGUF decoder (--model FILE.gguf): corpus windows and the induction sequences.
  std::int64_t context = 256, max_windows = 32, sequences = 16, length = 64;
  std::uint64_t seed = 0;
};

// Options of one model kind only: given with the other kind, an error (exit 2) that says so.
const std::vector<std::string> kEncoderOnly = {
    "--ablate", "--sts",   "--prune-sts",    "--max-pairs",   "--max-sentences", "--text",
    "--batch",  "--dtype", "--stats-kernel", "--prune-curve", "--convert-sweep"};
const std::vector<std::string> kDecoderOnly = {"--context", "--max-windows", "--sequences",
                                               "--length", "--seed"};

void check_options_for(const CLI::App& cmd, const std::string& model, bool decoder) {
  for (const std::string& option : decoder ? kEncoderOnly : kDecoderOnly)
    if (cmd.count(option) > 0)
      fail(option, decoder ? concat("an encoder option; ", model,
                                    " is a GGUF decoder (its options: --corpus, --context, "
                                    "--max-windows, --sequences, --length, --seed)")
                           : concat("a decoder option (--model FILE.gguf); ",
                                    model.empty() ? std::string("the default model") : model,
                                    " is an encoder"));
}

// The default corpus: the two plain-English files and the sentences of STS-B dev and test from
// ../shared/data when it is there; on a clone without it, the repository's own public-domain text
// (data/pride-and-prejudice.txt, the same sentences as the shared file), so the command runs
// anywhere.
std::vector<std::string> default_corpus() {
  const std::vector<std::string> shared = {kDataDir + "/corpus/pride-and-prejudice.sentences.txt",
                                           kDataDir + "/corpus/wordnet-examples.txt",
                                           kDataDir + "/stsb/sts-dev.tsv",
                                           kDataDir + "/stsb/sts-test.tsv"};
  for (const std::string& path : shared)
    if (!std::filesystem::exists(path))
      return {HEADCOUNT_SOURCE_DIR "/data/pride-and-prejudice.txt"};
  return shared;
}

// Sentences of one file: STS files (.tsv) give both sides of each pair, others one per line.
// Repeated sentences are kept once.
void add_sentences(const std::string& path, std::vector<std::string>& out,
                   std::set<std::string>& seen) {
  auto add = [&](const std::string& s) {
    if (!s.empty() && seen.insert(s).second) out.push_back(s);
  };
  if (path.size() > 4 && path.substr(path.size() - 4) == ".tsv") {
    for (const StsPair& p : read_sts(path)) {
      add(p.sentence1);
      add(p.sentence2);
    }
  } else {
    for (const std::string& line : read_sentences(path)) add(line);
  }
}

// The report goes through io::AtomicFile, opened before any work (a bad path fails in the first
// second) and committed when complete: no half-written report under the final name, even after
// a kill.
class PendingOutput {
 public:
  explicit PendingOutput(std::string path) : file_(std::move(path)) {}
  void commit(const std::string& content) {
    file_.write(content.data(), content.size());
    file_.commit();
  }

 private:
  io::AtomicFile file_;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `heads --model FILE.gguf`: the decoder's heads (decoder_heads.h), its page and JSON.
void run_decoder_heads(const HeadsArgs& a) {
  // 1. Options, the output file and the text, before the model.
  check(!a.out.empty() || a.json, "--out", "a file for the HTML report (or --json for the numbers)",
        "neither");
  check(a.context >= 2, "--context", ">= 2 tokens per window", a.context);
  check(a.max_windows >= 0, "--max-windows", ">= 0 (0: all)", a.max_windows);
  check(a.sequences >= 1, "--sequences", ">= 1", a.sequences);
  // The page draws (2L + 1)^2 cells per heatmap: 128 keeps it a few MB.
  check(a.length >= 2 && a.length <= 128, "--length", "2 to 128 random tokens per copy", a.length);
  std::unique_ptr<PendingOutput> output;
  if (!a.out.empty()) output = std::make_unique<PendingOutput>(a.out);
  report::DecoderHeadsReport report;
  report.model = a.model;
  report.corpus = a.corpus.empty() ? std::vector<std::string>{HEADCOUNT_SOURCE_DIR
                                                              "/data/pride-and-prejudice.txt"}
                                   : a.corpus;
  std::string text;
  for (const std::string& path : report.corpus) {
    std::ifstream in(path, std::ios::binary);
    check(static_cast<bool>(in), "--corpus", "a readable text file", path);
    std::ostringstream content;
    content << in.rdbuf();
    text += content.str();
  }

  // 2. The model, its weights (the OV circuit reads W_O and W_U) and the text's tokens.
  const auto start = std::chrono::steady_clock::now();
  const GgufFile file = GgufFile::open(a.model);
  const model::Weights weights = llama_definition(file);
  const LlamaDecoder decoder(weights, BpeTokenizer::from_gguf(file));
  const model::Config& c = decoder.config();
  check(a.context <= c.context, "--context", concat("at most the model's context ", c.context),
        a.context);
  const std::int64_t bos = decoder.tokenizer().bos_id() >= 0 ? 1 : 0;
  check(2 * a.length + bos <= c.context, "--length",
        concat("at most ", (c.context - bos) / 2, " (2 copies", bos ? " and BOS" : "",
               " within the model's context ", c.context, ")"),
        a.length);
  // The text as text: a special token's spelling in it is not that token.
  const std::vector<std::int32_t> ids = decoder.tokenizer().encode(text, {.parse_special = false});
  report.corpus_tokens = static_cast<std::int64_t>(ids.size());
  check(report.corpus_tokens >= a.context, "--corpus",
        concat("at least --context = ", a.context, " tokens (one window)"),
        concat(ids.size(), " tokens"));
  Context ctx({.threads = resolve_threads(a.threads)});
  report.threads = ctx.threads();

  // 3. The OV circuit, then the corpus statistics and the induction scores, then the maps.
  auto t0 = std::chrono::steady_clock::now();
  const OvCopyingCircuit circuit(ctx, weights);
  report.circuit_seconds = seconds_since(t0);
  const InductionOptions induction{.sequences = a.sequences,
                                   .length = a.length,
                                   .seed = a.seed,
                                   .progress = progress_reporter("induction sequences")};
  report.analysis = analyze_decoder_heads(ctx, decoder, circuit, ids,
                                          {.context = a.context,
                                           .max_windows = a.max_windows,
                                           .progress = progress_reporter("windows")},
                                          induction);
  report.maps = decoder_attention_maps(
      ctx, decoder, repeated_random_sequences(decoder.tokenizer(), induction).front());
  report.heatmap_heads = report::decoder_heatmap_heads(report.analysis);
  report.total_seconds = seconds_since(start);

  const DecoderHeadAnalysis& an = report.analysis;
  std::string found;
  for (const DecoderHeadScores& h : an.per_head)
    if (h.role == DecoderHeadRole::induction)
      found += concat(found.empty() ? "" : ", ", "L", h.layer, " H", h.head);
  std::fprintf(stderr,
               "heads: %lld windows of %lld tokens, %lld sequences of 2 x %lld; loss %.3f -> %.3f "
               "nats (drop %.3f); induction heads: %s; %.1f s\n",
               static_cast<long long>(an.corpus.windows), static_cast<long long>(a.context),
               static_cast<long long>(a.sequences), static_cast<long long>(a.length),
               an.induction.loss_first_copy, an.induction.loss_second_copy,
               an.induction.loss_drop(), found.empty() ? "none" : found.c_str(),
               report.total_seconds);
  if (output) output->commit(report::render_decoder_heads_html(report));
  if (a.json) std::cout << report::decoder_heads_json(report).dump(2) << '\n';
  if (!a.out.empty()) std::fprintf(stderr, "heads: wrote %s\n", a.out.c_str());
}

void run_heads(const HeadsArgs& a) {
  // 1. Options, the output file and the inputs, before any long computation.
  check(!a.out.empty() || a.json, "--out", "a file for the HTML report (or --json for the numbers)",
        "neither");
  check(a.batch >= 1, "--batch", ">= 1", a.batch);
  check(a.max_sentences >= 0, "--max-sentences", ">= 0 (0: all)", a.max_sentences);
  check(a.max_pairs >= 0, "--max-pairs", ">= 0 (0: all)", a.max_pairs);
  check(a.stats_kernel == "streaming" || a.stats_kernel == "reference", "--stats-kernel",
        "streaming or reference", a.stats_kernel);
  const Kernel stats_kernel = parse_kernel(a.stats_kernel);
  const DType dtype = parse_dtype_option(a.dtype);
  std::unique_ptr<PendingOutput> output;
  if (!a.out.empty()) output = std::make_unique<PendingOutput>(a.out);

  report::HeadsReport report;
  report.corpus = a.corpus.empty() ? default_corpus() : a.corpus;
  std::vector<std::string> sentences;
  std::set<std::string> seen;
  for (const std::string& path : report.corpus) add_sentences(path, sentences, seen);
  if (a.max_sentences > 0 && static_cast<std::int64_t>(sentences.size()) > a.max_sentences)
    sentences.resize(static_cast<std::size_t>(a.max_sentences));
  std::vector<StsPair> pairs, prune_pairs;
  if (a.ablate) {
    if (!a.prune_sts.empty()) {
      prune_pairs = read_sts(a.prune_sts);
      if (a.max_pairs > 0 && static_cast<std::int64_t>(prune_pairs.size()) > a.max_pairs)
        prune_pairs.resize(static_cast<std::size_t>(a.max_pairs));
      report.prune_file = a.prune_sts;
    }
    pairs = read_sts(a.sts);
    if (a.max_pairs > 0 && static_cast<std::int64_t>(pairs.size()) > a.max_pairs)
      pairs.resize(static_cast<std::size_t>(a.max_pairs));
    report.sts_file = a.sts;
  }
  if (!a.prune_curve.empty()) report.prune_curve = report::read_json_file(a.prune_curve);
  if (!a.convert_sweep.empty()) report.convert_sweep = report::read_json_file(a.convert_sweep);
  report.model_dir = resolve_model_dir(a.model);
  const BertEncoder encoder = BertEncoder::load(report.model_dir, {.dtype = dtype});
  check(!a.text.empty(), "--text", "a sentence", "an empty string");
  const std::int64_t text_tokens =
      static_cast<std::int64_t>(encoder.tokenizer().encode(a.text).size());
  check(text_tokens <= kMaxHeatmapTokens, "--text",
        concat("at most ", kMaxHeatmapTokens,
               " tokens with [CLS] and [SEP] (the heatmaps show n x n cells)"),
        concat(text_tokens, " tokens"));
  Context ctx({.threads = resolve_threads(a.threads)});

  // 2. Statistics and roles.
  auto start = std::chrono::steady_clock::now();
  report.analysis = analyze_heads(ctx, encoder, sentences,
                                  {.batch_size = a.batch,
                                   .stats_kernel = stats_kernel,
                                   .progress = progress_reporter("heads")});
  report.stats_seconds = seconds_since(start);
  report.stats_kernel = stats_kernel;
  std::fprintf(stderr, "heads: statistics of %lld sentences (%lld tokens) in %.1f s\n",
               static_cast<long long>(report.analysis.sentences),
               static_cast<long long>(report.analysis.tokens), report.stats_seconds);

  // 3. Ablation: one STS evaluation per head.
  if (a.ablate) {
    start = std::chrono::steady_clock::now();
    report.ablation = ablate_heads(
        ctx, encoder, pairs,
        {.batch_size = a.batch, .progress = [&](std::int64_t done, std::int64_t total) {
           std::fprintf(stderr, "ablate: %lld/%lld STS evaluations (%.0f s)\n",
                        static_cast<long long>(done), static_cast<long long>(total),
                        seconds_since(start));
         }});
    report.ablation_seconds = seconds_since(start);
    if (!prune_pairs.empty()) {
      const std::int64_t total = encoder.config().layers * encoder.config().heads;
      std::vector<std::int64_t> counts;
      for (std::int64_t k : {0, 6, 12, 18, 24, 36, 48, 60})
        if (k <= total) counts.push_back(k);
      report.pruning = prune_least_important(
          ctx, encoder, *report.ablation, prune_pairs, counts,
          {.batch_size = a.batch, .progress = [&](std::int64_t done, std::int64_t all) {
             std::fprintf(stderr, "prune: %lld/%lld STS evaluations\n",
                          static_cast<long long>(done), static_cast<long long>(all));
           }});
    }
  }

  // 4. The sentence's maps, the cost table, and the outputs.
  report.text = a.text;
  report.maps = attention_maps(ctx, encoder, a.text);
  const EncoderConfig& c = encoder.config();
  report.cost_table = format_cost_table(estimate_cost({.d_model = c.hidden_size,
                                                       .heads = c.heads,
                                                       .seq_len = report.maps.n,
                                                       .d_ff = c.intermediate_size}));
  if (output) output->commit(report::render_heads_html(report));
  if (a.json) std::cout << report::heads_json(report).dump(2) << '\n';
  if (!a.out.empty()) std::fprintf(stderr, "heads: wrote %s\n", a.out.c_str());
}

}  // namespace

void register_heads(CLI::App& app) {
  auto a = std::make_shared<HeadsArgs>();
  CLI::App* cmd =
      app.add_subcommand("heads", "What each head does: statistics, roles, ablation, HTML report");
  cmd->add_option("--model", a->model,
                  model_option_help() + "; or a Llama-family GGUF decoder (FILE.gguf): " +
                      "corpus statistics, induction scores and roles of its heads");
  cmd->add_option(
      "--corpus", a->corpus,
      "Sentence file(s): one sentence per line, or an STS .tsv (both sides). Repeatable. Default: "
      "../shared/data/corpus/*.txt and STS-B dev + test, or data/pride-and-prejudice.txt "
      "where ../shared is absent. A GGUF decoder: text file(s), concatenated (default "
      "data/pride-and-prejudice.txt)");
  cmd->add_option("--text", a->text, "The sentence whose attention maps are drawn (<= 64 tokens)")
      ->capture_default_str();
  cmd->add_flag("--ablate", a->ablate,
                "Remove each head in turn and measure STS Spearman on --sts (1 + 72 evaluations, "
                "~6 min for STS-B dev on 2 "
                "cores), then prune the least "
                "important heads together on --prune-sts (8 evaluations)");
  cmd->add_option("--sts", a->sts, "STS file for --ablate")->capture_default_str();
  cmd->add_option("--prune-sts", a->prune_sts,
                  "With --ablate: STS file on which the least important heads are removed together "
                  "(0, 6, ... 60 "
                  "heads); held-out from --sts. Empty: skip")
      ->capture_default_str();
  cmd->add_option("--max-pairs", a->max_pairs, "Use the first N pairs of each STS file (0: all)")
      ->capture_default_str();
  cmd->add_option("--max-sentences", a->max_sentences, "Use the first N corpus sentences (0: all)")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Write the HTML report here");
  cmd->add_flag("--json", a->json,
                "Print the numbers as JSON: one object per head (layer, head, role, statistics)");
  cmd->add_option("--stats-kernel", a->stats_kernel,
                  "streaming (second pass over the lse, O(n) memory) or reference (reduce the n^2 "
                  "probabilities)")
      ->capture_default_str();
  cmd->add_option("--batch", a->batch, "Sentences per forward pass")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, kDtypeHelp)->capture_default_str();
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->add_option("--prune-curve", a->prune_curve,
                  "Draw a saved `headcount prune-curve --json-out` result in the report");
  cmd->add_option("--convert-sweep", a->convert_sweep,
                  "Draw a saved `headcount convert-sweep --json-out` result in the report");
  cmd->add_option("--context", a->context,
                  "A GGUF decoder: tokens per corpus window (windows back to back, no BOS)")
      ->capture_default_str();
  cmd->add_option("--max-windows", a->max_windows,
                  "A GGUF decoder: use the first N corpus windows (0: all)")
      ->capture_default_str();
  cmd->add_option("--sequences", a->sequences,
                  "A GGUF decoder: repeated random sequences for the induction scores")
      ->capture_default_str();
  cmd->add_option(
         "--length", a->length,
         "A GGUF decoder: random tokens per copy (each sequence: BOS, L tokens, the same L)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "A GGUF decoder: the random sequences' seed")
      ->capture_default_str();
  cmd->callback([a, cmd] {
    const bool decoder = names_a_decoder(a->model, "heads");
    check_options_for(*cmd, a->model, decoder);
    if (decoder)
      run_decoder_heads(*a);
    else
      run_heads(*a);
  });
}

}  // namespace headcount::cli
