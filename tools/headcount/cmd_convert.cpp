// `headcount convert`: MHA -> GQA (K/V heads pooled: mean, aligned, clustered) written as a model
// directory that headcount runs in its GQA path; --repeat-kv writes the same model with every
// K/V head repeated for its group (plain MHA, which transformers' BertModel loads);
// --uptrain-minutes / --uptrain-steps then train the converted model by distillation from the
// MHA model (its final hidden states on sentences of --uptrain-corpus; encoder_training.h).
// `headcount convert-sweep`: STS-B test Spearman and KV-cache bytes per token for each K/V
// head count and method, as a table and JSON (the sweep: src/compress/sweeps.h); for a GGUF
// decoder, perplexity and the largest logit change per K/V head count instead.
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
#include "headcount/decoder_training.h"
#include "headcount/encoder_training.h"
#include "headcount/error.h"
#include "headcount/gguf.h"
#include "headcount/sts.h"
#include "io/atomic_file.h"
#include "prune_cli.h"

namespace headcount::cli {
namespace {

using detail::concat;
using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("--uptrain-corpus", concat("expected a readable text file, got ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct ConvertArgs {
  std::string model, method = "mean", out;
  std::int64_t kv_heads = 0;
  bool repeat_kv = false;
  double uptrain_minutes = 0, lr = 1e-4;
  std::int64_t uptrain_steps = 0, batch = 16, seed = 0;
  std::string corpus = HEADCOUNT_SOURCE_DIR "/data/pride-and-prejudice.txt";
  int threads = 0;
};

void run_convert(const ConvertArgs& a) {
  // headcount writes no GGUF: a decoder's conversions are built and measured in memory.
  check(!names_a_decoder(a.model, "convert"), "--model",
        "an encoder directory (a GGUF decoder is converted, uptrained and measured in memory by "
        "`headcount convert-sweep --model FILE.gguf`; no decoder file is written)",
        a.model);
  const KvConvertMethod method = parse_kv_convert_method(a.method);
  check(!std::filesystem::exists(a.out) || std::filesystem::is_empty(a.out), "--out",
        "a directory that does not exist yet (or is empty)", a.out);
  check(a.uptrain_minutes >= 0 && std::isfinite(a.uptrain_minutes), "--uptrain-minutes",
        "a number >= 0", a.uptrain_minutes);
  check(a.uptrain_steps >= 0, "--uptrain-steps", ">= 0", a.uptrain_steps);
  check(!(a.uptrain_minutes > 0 && a.uptrain_steps > 0), "--uptrain-minutes / --uptrain-steps",
        "at most one of them", "both");
  const std::string model_dir = resolve_model_dir(a.model);
  const EncoderWeights weights = read_encoder_weights(model_dir);
  EncoderWeights converted = convert_kv_heads(weights, a.kv_heads, method);
  if (a.uptrain_minutes > 0 || a.uptrain_steps > 0) {
    const std::vector<std::string> sentences = split_sentences(read_text(a.corpus));
    const BertEncoder teacher = encoder_from_weights(weights);  // the file is read once
    Context ctx({.threads = resolve_threads(a.threads)});
    DistillOptions options{.steps = a.uptrain_steps,
                           .seconds = 60 * a.uptrain_minutes,
                           .batch_size = a.batch,
                           .seed = static_cast<std::uint64_t>(a.seed)};
    options.optim.lr = options.optim.min_lr = a.lr;
    options.progress = [](std::int64_t step, double loss) {
      if (step % 25 == 0)
        std::fprintf(stderr, "uptrain: step %lld, loss %.6f\n", static_cast<long long>(step), loss);
    };
    DistillResult r = distill_encoder(ctx, teacher, converted, sentences, options);
    std::fprintf(stderr,
                 "uptrain: %lld steps on %lld sentences (%lld batches) in %.1f s wall, %.1f s CPU "
                 "(%d threads); "
                 "loss %.6f -> %.6f\n",
                 static_cast<long long>(r.steps), static_cast<long long>(r.sentences),
                 static_cast<long long>(r.batches_available), r.wall_seconds, r.cpu_seconds,
                 ctx.threads(), r.first_loss, r.last_loss);
    converted = std::move(r.student);
  }
  if (a.repeat_kv) converted = repeat_kv_heads(converted);
  write_encoder_dir(converted, a.out);
  std::fprintf(
      stderr, "convert: %lld K/V heads per layer (%s%s), KV cache %lld bytes/token; wrote %s\n",
      static_cast<long long>(a.kv_heads), a.method.c_str(), a.repeat_kv ? ", repeated to MHA" : "",
      static_cast<long long>(kv_cache_bytes_per_token(converted.config)), a.out.c_str());
}

struct SweepArgs {
  std::string model, test = default_sts_file("sts-test.tsv"), json_out;
  std::vector<std::int64_t> kv_heads;  // default: {12, 6, 4, 3, 2, 1}; a decoder: every divisor
  std::vector<std::string> methods;  // default: mean, aligned, clustered; a decoder: mean, aligned
  std::int64_t max_pairs = 0, batch = 32;
  // A GGUF decoder: perplexity on --text, the first --max-tokens tokens, windows of --context.
  std::string text = HEADCOUNT_SOURCE_DIR "/data/pride-and-prejudice.txt", weights = "fp32";
  std::int64_t context = 512, max_tokens = 16384;
  // A decoder's uptraining: on the tokens of --text after the first --max-tokens.
  std::int64_t uptrain_steps = 0, uptrain_seq_len = 512, uptrain_tokens = 0;
  std::string uptrain_loss = "distill";
  double uptrain_lr = 1e-4;
  int threads = 0;
};

// The decoder's sweep: the price of sharing K/V as perplexity, for a GGUF model.
void run_decoder_sweep(const SweepArgs& a) {
  check(a.context >= 4, "--context", ">= 4", a.context);
  check(a.max_tokens == 0 || a.max_tokens >= a.context, "--max-tokens",
        concat("0 (all) or at least --context = ", a.context), a.max_tokens);
  check(a.uptrain_steps >= 0, "--uptrain-steps", ">= 0", a.uptrain_steps);
  check(a.uptrain_seq_len >= 2, "--uptrain-seq-len", ">= 2", a.uptrain_seq_len);
  check(std::isfinite(a.uptrain_lr) && a.uptrain_lr > 0, "--uptrain-lr", "a finite value > 0",
        a.uptrain_lr);
  check(a.uptrain_tokens >= 0, "--uptrain-tokens", ">= 0 (0: all after --max-tokens)",
        a.uptrain_tokens);
  const UptrainLoss uptrain_loss = parse_uptrain_loss(a.uptrain_loss);
  std::vector<KvConvertMethod> methods;
  for (const std::string& m : a.methods) methods.push_back(parse_kv_convert_method(m));
  if (methods.empty()) methods = {KvConvertMethod::mean, KvConvertMethod::aligned};
  const DType weights_dtype = parse_dtype_option(a.weights, "--weights");
  const GgufFile file = GgufFile::open(a.model);
  const model::Weights weights = llama_definition(file);
  const BpeTokenizer tokenizer = BpeTokenizer::from_gguf(file);
  std::ifstream in(a.text, std::ios::binary);
  check(static_cast<bool>(in), "--text", "a readable file", a.text);
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<std::int32_t> ids = tokenizer.encode(text.str(), {.parse_special = false});
  std::vector<std::int32_t> uptrain_ids;  // what follows the evaluated span
  if (a.max_tokens > 0 && static_cast<std::int64_t>(ids.size()) > a.max_tokens) {
    uptrain_ids.assign(ids.begin() + a.max_tokens, ids.end());
    ids.resize(static_cast<std::size_t>(a.max_tokens));
  }
  if (a.uptrain_tokens > 0 && static_cast<std::int64_t>(uptrain_ids.size()) > a.uptrain_tokens)
    uptrain_ids.resize(static_cast<std::size_t>(a.uptrain_tokens));
  if (a.uptrain_steps > 0)
    check(static_cast<std::int64_t>(uptrain_ids.size()) > a.uptrain_seq_len, "--uptrain-steps",
          concat("more than --uptrain-seq-len = ", a.uptrain_seq_len,
                 " tokens of --text after the first --max-tokens = ", a.max_tokens,
                 " (uptraining never sees the evaluated text)"),
          concat(uptrain_ids.size(), " tokens"));
  Context ctx({.threads = resolve_threads(a.threads)});
  std::fprintf(stderr, "convert-sweep: %s, %zu tokens of %s, windows of %lld, weights %s\n",
               a.model.c_str(), ids.size(), path_as_recorded(a.text).c_str(),
               static_cast<long long>(a.context), a.weights.c_str());
  std::fprintf(stderr, "%9s %10s %11s %14s %12s %12s\n", "kv heads", "method", "perplexity",
               "max |dlogit|", "KV B/token", "int8 B/token");
  DecoderUptrainOptions uptrain{.steps = a.uptrain_steps,
                                .seq_len = a.uptrain_seq_len,
                                .loss = uptrain_loss,
                                .progress = [](std::int64_t step, double loss) {
                                  if (step % 10 == 0)
                                    std::fprintf(stderr, "  uptraining step %lld: loss %.4f\n",
                                                 static_cast<long long>(step), loss);
                                }};
  uptrain.optim.lr = uptrain.optim.min_lr = a.uptrain_lr;
  if (a.uptrain_steps > 0)
    std::fprintf(stderr,
                 "uptraining: %lld steps of %lld tokens (%s loss, lr %g) on %zu tokens after the "
                 "evaluated ones\n",
                 static_cast<long long>(a.uptrain_steps), static_cast<long long>(a.uptrain_seq_len),
                 a.uptrain_loss.c_str(), a.uptrain_lr, uptrain_ids.size());
  const json rows = compress::decoder_kv_sweep(
      ctx, weights, tokenizer, ids,
      {.kv_heads = a.kv_heads,
       .methods = methods,
       .context = a.context,
       .weights = weights_dtype,
       .uptrain = uptrain,
       .uptrain_ids = uptrain_ids,
       .row = [](const json& r) {
         std::fprintf(
             stderr, "%9lld %10s %11.4f %14.3g %12lld %12lld\n",
             static_cast<long long>(r["kv_heads"].get<std::int64_t>()),
             r["method"].get<std::string>().c_str(), r["perplexity"].get<double>(),
             r["max_abs_logit_diff_vs_loaded"].get<double>(),
             static_cast<long long>(r["kv_cache_bytes_per_token"]["f32"].get<std::int64_t>()),
             static_cast<long long>(r["kv_cache_bytes_per_token"]["int8"].get<std::int64_t>()));
         if (r.contains("uptrained"))
           std::fprintf(stderr, "%9s %10s %11.4f   after %lld steps (%s loss %.4f -> %.4f)\n", "",
                        "uptrained", r["uptrained"]["perplexity"].get<double>(),
                        static_cast<long long>(r["uptrained"]["steps"].get<std::int64_t>()),
                        r["uptrained"]["loss"].get<std::string>().c_str(),
                        r["uptrained"]["first_loss"].get<double>(),
                        r["uptrained"]["last_loss"].get<double>());
       }});
  if (!a.json_out.empty()) {
    json r = {
        {"command", "convert-sweep"}, {"model", a.model},     {"text", path_as_recorded(a.text)},
        {"tokens", ids.size()},       {"context", a.context}, {"weights", a.weights},
        {"threads", ctx.threads()},   {"rows", rows}};
    if (a.uptrain_steps > 0)
      r["uptrain"] = {{"steps", a.uptrain_steps},    {"seq_len", a.uptrain_seq_len},
                      {"loss", a.uptrain_loss},      {"lr", a.uptrain_lr},
                      {"first_token", a.max_tokens}, {"tokens_available", uptrain_ids.size()}};
    io::write_file_atomically(a.json_out, r.dump(2) + "\n");
  }
}

void run_sweep(SweepArgs a) {
  if (names_a_decoder(a.model, "convert-sweep")) return run_decoder_sweep(a);
  if (a.kv_heads.empty()) a.kv_heads = {12, 6, 4, 3, 2, 1};
  std::vector<KvConvertMethod> methods;
  for (const std::string& m : a.methods) methods.push_back(parse_kv_convert_method(m));
  if (methods.empty())
    methods = {KvConvertMethod::mean, KvConvertMethod::aligned, KvConvertMethod::clustered};
  std::vector<StsPair> test = read_sts(a.test);
  if (a.max_pairs > 0 && static_cast<std::int64_t>(test.size()) > a.max_pairs)
    test.resize(static_cast<std::size_t>(a.max_pairs));
  const std::string model_dir = resolve_model_dir(a.model);
  const EncoderWeights weights = read_encoder_weights(model_dir);
  for (std::int64_t g : a.kv_heads)  // every value checked before the first evaluation
    for (std::int64_t l = 0; l < weights.config.layers; ++l)
      check(g >= 1 && weights.config.layer_heads(l) % g == 0, "--kv-heads",
            "divisors of every layer's head count", g);
  Context ctx({.threads = resolve_threads(a.threads)});
  std::fprintf(stderr, "%9s %10s %10s %12s\n", "kv heads", "method", "Spearman", "KV B/token");
  const json rows = compress::convert_sweep(
      ctx, weights, test,
      {.kv_heads = a.kv_heads, .methods = methods, .batch = a.batch, .row = [](const json& r) {
         std::fprintf(stderr, "%9lld %10s %10.2f %12lld\n",
                      static_cast<long long>(r["kv_heads"].get<std::int64_t>()),
                      r["method"].get<std::string>().c_str(), r["spearman"].get<double>(),
                      static_cast<long long>(r["kv_cache_bytes_per_token"].get<std::int64_t>()));
       }});
  if (!a.json_out.empty()) {
    const json r = {{"command", "convert-sweep"}, {"model", model_dir},       {"test_file", a.test},
                    {"test_pairs", test.size()},  {"threads", ctx.threads()}, {"rows", rows}};
    io::write_file_atomically(a.json_out, r.dump(2) + "\n");
  }
}

}  // namespace

void register_convert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert", "MHA -> GQA: pool each layer's K/V heads and write the model directory");
  cmd->add_option("--model", a->model, model_option_help());
  cmd->add_option("--kv-heads", a->kv_heads, "K/V heads per layer (a divisor of the heads)")
      ->required();
  cmd->add_option(
         "--method", a->method,
         "mean | aligned (Procrustes-rotated, then mean) | clustered (groups by key similarity)")
      ->capture_default_str();
  cmd->add_flag("--repeat-kv", a->repeat_kv,
                "Write the GQA model as MHA with each K/V head repeated (for transformers)");
  cmd->add_option("--out", a->out, "The converted model directory (must not exist yet)")
      ->required();
  cmd->add_option("--uptrain-minutes", a->uptrain_minutes,
                  "Then train it this long (wall clock) to match the MHA model's hidden states (0: "
                  "no uptraining)")
      ->capture_default_str();
  cmd->add_option("--uptrain-steps", a->uptrain_steps,
                  "Or exactly this many uptraining steps (reproducible)")
      ->capture_default_str();
  cmd->add_option("--uptrain-corpus", a->corpus, "Text whose sentences the uptraining uses")
      ->capture_default_str();
  cmd->add_option("--uptrain-lr", a->lr, "AdamW learning rate (constant after 20 warm-up steps)")
      ->capture_default_str();
  cmd->add_option("--uptrain-batch", a->batch,
                  "Sentences per step (neighbouring token counts, padded)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the uptraining's batch order")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->callback([a] { run_convert(*a); });

  auto s = std::make_shared<SweepArgs>();
  CLI::App* sweep = app.add_subcommand(
      "convert-sweep",
      "STS-B test (an encoder) or perplexity (a GGUF decoder) and KV-cache bytes per token for "
      "each K/V head count");
  sweep->add_option("--model", s->model,
                    model_option_help() + "; or a Llama-family GGUF decoder (FILE.gguf)");
  sweep->add_option("--test", s->test, "STS file")->capture_default_str();
  sweep
      ->add_option("--kv-heads", s->kv_heads,
                   "K/V head counts (default 12,6,4,3,2,1; a decoder: every divisor of its "
                   "query heads)")
      ->delimiter(',');
  sweep->add_option("--text", s->text, "A decoder (--model FILE.gguf): the perplexity text")
      ->capture_default_str();
  sweep->add_option("--context", s->context, "A decoder: tokens per perplexity window")
      ->capture_default_str();
  sweep
      ->add_option("--max-tokens", s->max_tokens,
                   "A decoder: the first N tokens of --text (0: all)")
      ->capture_default_str();
  sweep->add_option("--weights", s->weights, "A decoder: fp32, bf16 or int8 (as for generate)")
      ->capture_default_str();
  sweep
      ->add_option("--uptrain-steps", s->uptrain_steps,
                   "A decoder: train each pooled variant this many steps on the text after "
                   "--max-tokens (0: none), then measure it again")
      ->capture_default_str();
  sweep
      ->add_option("--uptrain-loss", s->uptrain_loss,
                   "A decoder: distill (KL to the loaded model) or text (next tokens; the loaded "
                   "model is trained the same way as a control)")
      ->capture_default_str();
  sweep->add_option("--uptrain-seq-len", s->uptrain_seq_len, "A decoder: tokens per training step")
      ->capture_default_str();
  sweep->add_option("--uptrain-lr", s->uptrain_lr, "A decoder: AdamW learning rate (constant)")
      ->capture_default_str();
  sweep
      ->add_option("--uptrain-tokens", s->uptrain_tokens,
                   "A decoder: the training text's length in tokens (0: all after --max-tokens)")
      ->capture_default_str();
  sweep
      ->add_option("--methods", s->methods,
                   "How fewer K/V heads are made: mean, aligned, clustered (default all three; a "
                   "decoder: mean,aligned)")
      ->delimiter(',');
  sweep->add_option("--max-pairs", s->max_pairs, "Use the first N pairs (0: all)")
      ->capture_default_str();
  sweep->add_option("--json-out", s->json_out, "Write the rows as JSON here");
  sweep->add_option("--batch", s->batch, "Sentences per forward pass")->capture_default_str();
  sweep->add_option("--threads", s->threads, "Worker threads (0: all cores)")
      ->capture_default_str();
  sweep->callback([s] { run_sweep(*s); });
}

}  // namespace headcount::cli
