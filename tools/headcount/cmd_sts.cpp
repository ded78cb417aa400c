// `headcount sts FILE`: STS-B evaluation. Spearman and Pearson correlation (x100) of the cosine
// similarity of each pair's embeddings with the gold score, as sentence-transformers'
// EmbeddingSimilarityEvaluator and MTEB compute them.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "encoder_cli.h"
#include "headcount/error.h"
#include "headcount/sts.h"

namespace headcount::cli {
namespace {

struct StsArgs {
  std::string model, file, dtype = "fp32";
  std::int64_t batch = 32;
  bool json = false;
  int threads = 0;
};

void run_sts(const StsArgs& a) {
  check(a.batch >= 1, "--batch", ">= 1", a.batch);
  const DType dtype = parse_dtype_option(a.dtype);
  const std::vector<StsPair> pairs = read_sts(a.file);
  const std::string dir = resolve_model_dir(a.model);
  const BertEncoder encoder = BertEncoder::load(dir, {.dtype = dtype});
  Context ctx({.threads = resolve_threads(a.threads)});
  const StsResult r = evaluate_sts(ctx, encoder, pairs,
                                   {.batch_size = a.batch, .progress = progress_reporter("sts")});
  check(std::isfinite(r.spearman) && std::isfinite(r.pearson), a.file,
        "gold scores and similarities that vary (a correlation needs two distinct values)",
        "constant values");
  if (a.json) {
    std::printf("{\"spearman\": %.4f, \"pearson\": %.4f, \"pairs\": %lld}\n", r.spearman, r.pearson,
                static_cast<long long>(r.pairs));
  } else {
    std::printf("sts: %s, %lld pairs, model %s\n", a.file.c_str(), static_cast<long long>(r.pairs),
                dir.c_str());
    std::printf("  spearman x100  %8.2f\n  pearson  x100  %8.2f\n", r.spearman, r.pearson);
  }
}

}  // namespace

void register_sts(CLI::App& app) {
  auto a = std::make_shared<StsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "sts", "STS-B evaluation: Spearman/Pearson of embedding cosine vs gold score");
  cmd->add_option("file", a->file,
                  "STS-B file: TAB-separated genre, file, year, id, score, sentence1, sentence2 "
                  "(extra fields ignored)")
      ->required();
  cmd->add_option("--model", a->model, model_option_help());
  cmd->add_option("--batch", a->batch, "Sentences per forward pass")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, kDtypeHelp)->capture_default_str();
  cmd->add_flag("--json", a->json, "Print {\"spearman\", \"pearson\", \"pairs\"}");
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->callback([a] { run_sts(*a); });
}

}  // namespace headcount::cli
