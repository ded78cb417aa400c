// `headcount train`: trains the model of include/headcount/train/model.h on a task, from a
// preset, a JSON config or a checkpoint. Progress goes to stderr; the result (a summary, or the
// run's JSON with --json) to stdout; checkpoints to --out (each file written atomically). Bad
// input is one line on stderr and exit code 2 (main.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "commands.h"
#include "distributed_cli.h"
#include "headcount/error.h"
#include "headcount/npy.h"
#include "headcount/train/presets.h"
#include "headcount/train/trainer.h"

namespace headcount::cli {
namespace {

using detail::concat;
using nlohmann::json;

struct TrainArgs {
  std::string preset, config, resume, out, dump_batches;
  // Not given: the config's. A sentinel no user types, so that --steps -1 or --seed -1 is an
  // error rather than "the default".
  static constexpr std::int64_t kUnset = std::numeric_limits<std::int64_t>::min();
  std::int64_t steps = kUnset;
  std::int64_t seed = kUnset;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool json = false;
  bool quiet = false;
  std::string parallel;    // under mpirun: "data"
  double timeout = 600;    // --timeout (with --parallel)
  double bucket_mib = 25;  // --bucket-mib (with --parallel data)
};

train::TrainConfig read_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("--config", concat("expected a readable JSON file, got \"", path, "\" (cannot open)"));
  std::ostringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::parse_error& e) {
    fail("--config", concat("expected JSON in ", path, ", got a syntax error at byte ", e.byte));
  }
  return train::train_config_from_json(j);
}

// tokens.npy and targets.npy, float32 [steps, batch, seq_len] (-1 = ignored target), of the
// training batches of steps [0, steps): what the PyTorch peer scripts replay.
void dump_batches(const train::Trainer& trainer, const std::string& dir) {
  const train::TrainConfig& c = trainer.config();
  HEADCOUNT_CHECK(c.steps >= 1, "--dump-batches", "a run of >= 1 steps (--steps)", c.steps);
  const std::int64_t T = trainer.task().seq_len();
  Tensor tokens(DType::f32, {c.steps, c.batch, T}), targets(DType::f32, {c.steps, c.batch, T});
  for (std::int64_t s = 0; s < c.steps; ++s) {
    const train::Batch b = trainer.task().train_batch(c.seed, s, c.batch);
    HEADCOUNT_CHECK(b.seq_len == T && b.batch == c.batch, "task batch",
                    concat("[", c.batch, ", ", T, "]"), concat("[", b.batch, ", ", b.seq_len, "]"));
    for (std::int64_t i = 0; i < c.batch * T; ++i) {
      tokens.data<float>()[s * c.batch * T + i] =
          static_cast<float>(b.tokens[static_cast<std::size_t>(i)]);
      targets.data<float>()[s * c.batch * T + i] =
          static_cast<float>(b.targets[static_cast<std::size_t>(i)]);
    }
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    fail("--dump-batches",
         concat("expected a directory we can create, got \"", dir, "\" (", error.message(), ")"));
  write_npy(dir + "/tokens.npy", tokens.view());
  write_npy(dir + "/targets.npy", targets.view());
}

// The run of the arguments (a preset, a config or a checkpoint), on ctx.
std::unique_ptr<train::Trainer> make_trainer(const TrainArgs& a, Context& ctx) {
  const int sources = !a.preset.empty() + !a.config.empty() + !a.resume.empty();
  HEADCOUNT_CHECK(sources == 1, "--preset/--config/--resume", "exactly one of them",
                  concat(sources, " given"));
  HEADCOUNT_CHECK(a.steps == TrainArgs::kUnset || a.steps >= 0, "--steps", ">= 0", a.steps);
  HEADCOUNT_CHECK(a.seed == TrainArgs::kUnset || a.seed >= 0, "--seed", ">= 0", a.seed);
  HEADCOUNT_CHECK(a.resume.empty() || a.seed == TrainArgs::kUnset, "--seed",
                  "no seed with --resume (the checkpoint's run has one)", a.seed);
  std::unique_ptr<train::Trainer> trainer;
  try {
    if (!a.resume.empty()) {
      trainer = train::Trainer::resume(ctx, a.resume, std::max<std::int64_t>(a.steps, 0));
    } else {
      train::TrainConfig config =
          a.preset.empty() ? read_config_file(a.config) : train::preset_config(a.preset);
      if (a.steps >= 0) config.steps = a.steps;
      if (a.seed >= 0) config.seed = static_cast<std::uint64_t>(a.seed);
      if (a.quiet) config.log_every = 0;
      trainer = std::make_unique<train::Trainer>(ctx, config);
    }
  } catch (const json::exception& e) {
    // A checkpoint whose state lacks a field: the file is not one of ours.
    fail(a.resume.empty() ? "--config" : "--resume",
         concat("expected a headcount training state, got ", e.what()));
  }
  return trainer;
}

// Runs the trainer to its end and reports (the one-process command, and rank 0 under mpirun).
void run_and_report(const TrainArgs& a, train::Trainer& trainer) {
  if (!a.dump_batches.empty()) dump_batches(trainer, a.dump_batches);
  const train::TrainConfig& c = trainer.config();
  if (!a.quiet)
    std::fprintf(
        stderr,
        "train: %s, %lld parameters, %lld layers x %lld heads (kv %lld, head_dim %lld), d_model "
        "%lld, "
        "batch %lld x %lld tokens, steps %lld -> %lld, %d thread%s\n",
        trainer.task().name().c_str(), static_cast<long long>(trainer.parameter_count()),
        static_cast<long long>(c.model.layers), static_cast<long long>(c.model.heads),
        static_cast<long long>(c.model.kv_heads), static_cast<long long>(c.model.head_dim),
        static_cast<long long>(c.model.d_model), static_cast<long long>(c.batch),
        static_cast<long long>(trainer.task().seq_len()), static_cast<long long>(trainer.step()),
        static_cast<long long>(c.steps), a.threads, a.threads == 1 ? "" : "s");
  const std::int64_t first = trainer.step();
  const auto start = std::chrono::steady_clock::now();
  trainer.run(a.out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::int64_t steps_run = trainer.step() - first;
  const double tokens_per_s =
      steps_run > 0 && seconds > 0
          ? static_cast<double>(steps_run * trainer.tokens_per_step()) / seconds
          : 0.0;
  const train::TaskMetrics& v = trainer.validation().back().metrics;
  if (a.json) {
    json out = trainer.state();
    out["final"] = {
        {"step", trainer.step()},
        {"train_loss", trainer.losses().empty() ? json(nullptr) : json(trainer.losses().back())},
        {"validation_loss", v.loss},
        {"validation_accuracy", v.accuracy},
        {"validation_sequence_accuracy", v.sequence_accuracy}};
    out["timing"] = {{"seconds", seconds},
                     {"steps", steps_run},
                     {"tokens_per_s", tokens_per_s},
                     {"threads", a.threads}};
    if (!a.out.empty())
      out["checkpoint"] = train::checkpoint_tensors_path(a.out, train::kCheckpointStem);
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf(
      "step %lld: train loss %s, validation loss %.4f, accuracy %.4f, sequence accuracy %.4f\n",
      static_cast<long long>(trainer.step()),
      trainer.losses().empty() ? "-" : concat(trainer.losses().back()).c_str(), v.loss, v.accuracy,
      v.sequence_accuracy);
  std::printf("%lld steps in %.1f s (%.0f tokens/s, %d thread%s)\n",
              static_cast<long long>(steps_run), seconds, tokens_per_s, a.threads,
              a.threads == 1 ? "" : "s");
  if (!a.out.empty())
    std::printf("checkpoint: %s\n",
                train::checkpoint_tensors_path(a.out, train::kCheckpointStem).c_str());
}

void run_train(const TrainArgs& a) {
  HEADCOUNT_CHECK(a.threads >= 1 && a.threads <= 1024, "--threads", "in [1, 1024]", a.threads);
  HEADCOUNT_CHECK(a.timeout >= 0, "--timeout", ">= 0 seconds", a.timeout);
  HEADCOUNT_CHECK(a.bucket_mib > 0, "--bucket-mib", "> 0", a.bucket_mib);
  if (!a.parallel.empty()) {
    run_distributed_train(
        {.parallel = a.parallel,
         .make = [&](Context& ctx) { return make_trainer(a, ctx); },
         .threads = a.threads,
         .timeout_seconds = a.timeout,
         .bucket_bytes =
             std::max<std::int64_t>(4, static_cast<std::int64_t>(a.bucket_mib * 1048576.0)),
         .run_writer = [&](train::Trainer& trainer) { run_and_report(a, trainer); },
         .out = a.out});
    return;
  }
  Context ctx({.threads = a.threads});
  std::unique_ptr<train::Trainer> trainer = make_trainer(a, ctx);
  run_and_report(a, *trainer);
}

std::string presets_help() {
  std::string text = "presets:";
  for (const train::PresetInfo& p : train::presets())
    text += "\n  " + p.name + ": " + p.description;
  return text;
}

}  // namespace

#ifndef HEADCOUNT_HAVE_MPI
void run_distributed_train(const DistributedTrainJob& job) {
  fail("--parallel",
       detail::concat("this build has no MPI (configure with -DHEADCOUNT_MPI=ON); got --parallel ",
                      job.parallel));
}
#endif

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a small transformer on a task (char LM, copy, recall, ...) on the CPU");
  auto args = std::make_shared<TrainArgs>();
  cmd->add_option("--preset", args->preset, "a named run (see below)");
  cmd->add_option(
      "--config", args->config,
      "a JSON run: {\"task\": {\"name\": copy|char-lm|assoc-recall|multi-relation, task "
      "fields...}, "
      "\"model\": {vocab, context (0: the task's), layers, d_model, heads, kv_heads, head_dim, "
      "d_ff, "
      "scale, norm: pre|post, causal, attention_only, init_std; the Llama pieces: rms_norm, "
      "rope_base, swiglu, biases, tied_head}, \"optim\": {lr, min_lr, "
      "warmup_steps, "
      "decay_steps, beta1, beta2, eps, weight_decay, grad_clip}, \"train\": {steps, batch, seed, "
      "eval_every, eval_batches, checkpoint_every, log_every, kernel: streaming|reference}}; "
      "every object but task is optional");
  cmd->add_option("--resume", args->resume,
                  "continue the run checkpointed in DIR (its config; bitwise as if never stopped)");
  cmd->add_option("--steps", args->steps,
                  "total steps of the run (0: write the initial checkpoint and evaluate)");
  cmd->add_option("--seed", args->seed, "seed of the initial weights and of the data order");
  cmd->add_option("--threads", args->threads, "worker threads")->capture_default_str();
  cmd->add_option("--out", args->out,
                  "directory for checkpoints (checkpoint.safetensors + checkpoint.json)");
  cmd->add_option("--dump-batches", args->dump_batches,
                  "also write DIR/tokens.npy and DIR/targets.npy, float32 [steps, batch, seq_len] "
                  "(-1: ignored)");
  cmd->add_flag("--json", args->json,
                "print the run's JSON (config, curve, validation, final metrics, timing)");
  cmd->add_flag("--quiet", args->quiet, "no progress on stderr");
  cmd->add_option("--parallel", args->parallel,
                  "under mpirun: data (each rank trains on its rows of every batch, gradients "
                  "all-reduced; rank 0 evaluates and writes) or heads (each rank holds kv_heads "
                  "/ P K/V heads with their query heads and d_ff / P of the FFN, partial outputs "
                  "all-reduced; rank 0 writes the whole model); equal to one process within the "
                  "bounds of docs/distributed.md");
  cmd->add_option("--timeout", args->timeout,
                  "with --parallel: seconds a rank waits for the others before the job is ended, "
                  "naming the rank that did not arrive (0: forever)")
      ->capture_default_str();
  cmd->add_option("--bucket-mib", args->bucket_mib,
                  "with --parallel data: the gradients are all-reduced in buckets of this size")
      ->capture_default_str();
  cmd->footer(presets_help());
  cmd->callback([args] { run_train(*args); });
}

}  // namespace headcount::cli
