// `headcount similarity "a" "b"`: the cosine similarity of two sentence embeddings.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "encoder_cli.h"
#include "headcount/error.h"

namespace headcount::cli {
namespace {

struct SimilarityArgs {
  std::string model, a, b;
  bool json = false;
  int threads = 0;
};

void run_similarity(const SimilarityArgs& s) {
  const BertEncoder encoder = load_encoder(s.model);
  Context ctx({.threads = resolve_threads(s.threads)});
  const Tensor e = encoder.embed(ctx, {s.a, s.b});
  const double cosine = cosine_similarity(e.data<const float>(),
                                          e.data<const float>() + encoder.dim(), encoder.dim());
  if (s.json)
    std::printf("{\"cosine\": %.9g}\n", cosine);
  else
    std::printf("%.6f\n", cosine);
}

}  // namespace

void register_similarity(CLI::App& app) {
  auto s = std::make_shared<SimilarityArgs>();
  CLI::App* cmd =
      app.add_subcommand("similarity", "Cosine similarity of two sentences' embeddings");
  cmd->add_option("a", s->a, "First sentence")->required();
  cmd->add_option("b", s->b, "Second sentence")->required();
  cmd->add_option("--model", s->model, model_option_help());
  cmd->add_flag("--json", s->json, "Print {\"cosine\": ...}");
  cmd->add_option("--threads", s->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->callback([s] { run_similarity(*s); });
}

}  // namespace headcount::cli
