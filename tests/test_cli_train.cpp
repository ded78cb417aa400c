// `headcount train` from the outside: every bad input is one line on stderr and exit code 2
// (and leaves no file behind), a run writes its checkpoint and JSON, --resume continues it,
// --steps 0 writes the initial checkpoint, --dump-batches writes the batches the PyTorch peers
// replay.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "headcount/npy.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("headcount_cli_train_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

void expect_one_line_error(const std::string& args, const std::string& part) {
  const CliResult r = run_cli("train " + args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << args << "\n" << r.err;
  EXPECT_TRUE(r.out.empty()) << args;
}

TEST(CliTrain, BadInputIsOneLineAndExitTwo) {
  const fs::path dir = fresh_dir("bad");
  fs::create_directories(dir);
  expect_one_line_error("", "exactly one");
  expect_one_line_error("--preset copy --config x.json", "exactly one");
  expect_one_line_error("--preset no-such", "nanogpt-cpu");
  expect_one_line_error("--config '" + (dir / "missing.json").string() + "'", "--config");
  write_file(dir / "broken.json", "{\"task\": ");
  expect_one_line_error("--config '" + (dir / "broken.json").string() + "'", "syntax error");
  write_file(dir / "unknown.json", R"({"task": {"name": "copy"}, "model": {"layer": 2}})");
  expect_one_line_error("--config '" + (dir / "unknown.json").string() + "'", "\"layer\"");
  write_file(dir / "heads.json",
             R"({"task": {"name": "copy"}, "model": {"d_model": 32, "heads": 3}})");
  expect_one_line_error("--config '" + (dir / "heads.json").string() + "'", "model.heads");
  write_file(dir / "task.json", R"({"task": {"name": "copy", "seq_len": 15}})");
  expect_one_line_error("--config '" + (dir / "task.json").string() + "'", "seq_len");
  expect_one_line_error("--preset copy --threads 0", "--threads");
  expect_one_line_error("--preset copy --steps -3", "--steps");
  expect_one_line_error("--preset copy --steps -1", "--steps");  // not "the default"
  expect_one_line_error("--preset copy --seed -1", "--seed");
  expect_one_line_error("--resume '" + (dir / "nothing").string() + "'", "checkpoint");
  expect_one_line_error("--resume '" + dir.string() + "' --seed 3", "--seed");
  expect_one_line_error("--preset copy --steps 0 --dump-batches '" + (dir / "b").string() + "'",
                        "--dump-batches");
  // --out under a regular file: the run cannot write; no checkpoint appears anywhere.
  write_file(dir / "file", "x");
  expect_one_line_error(
      "--preset copy --steps 1 --quiet --out '" + (dir / "file" / "ckpt").string() + "'", "file");
  EXPECT_FALSE(fs::exists(dir / "b"));
  fs::remove_all(dir);
}

TEST(CliTrain, RunResumeInitialCheckpointAndBatches) {
  const fs::path dir = fresh_dir("run");
  const std::string out = (dir / "ckpt").string();
  CliResult r =
      run_cli("train --preset copy --steps 20 --threads 2 --json --quiet --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["final"]["step"], 20);
  EXPECT_EQ(j["curve"]["loss"].size(), 20u);
  EXPECT_EQ(j["preset"], "copy");
  EXPECT_TRUE(fs::exists(dir / "ckpt" / "checkpoint.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "ckpt" / "checkpoint.json"));

  // Resume to 30 steps: the first 20 losses are the stored ones, 10 more follow.
  r = run_cli("train --resume '" + out + "' --steps 30 --threads 2 --json --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json resumed = nlohmann::json::parse(r.out);
  EXPECT_EQ(resumed["final"]["step"], 30);
  ASSERT_EQ(resumed["curve"]["loss"].size(), 30u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(resumed["curve"]["loss"][i], j["curve"]["loss"][i]);
  // ... and equal to an uninterrupted 30-step run, bitwise.
  r = run_cli("train --preset copy --steps 30 --threads 2 --json --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["curve"], resumed["curve"]);

  // --steps 0: the initial checkpoint; --dump-batches: [steps, batch, seq_len] float32.
  r = run_cli("train --preset copy --steps 0 --quiet --out '" + (dir / "init").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir / "init" / "checkpoint.safetensors"));
  r = run_cli("train --preset copy --steps 3 --quiet --dump-batches '" +
              (dir / "batches").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Tensor tokens = read_npy((dir / "batches" / "tokens.npy").string());
  const Tensor targets = read_npy((dir / "batches" / "targets.npy").string());
  EXPECT_EQ(tokens.shape(), (std::vector<std::int64_t>{3, 16, 16}));
  EXPECT_EQ(targets.shape(), tokens.shape());
  EXPECT_EQ(tokens.dtype(), DType::f32);
  const float* t = targets.data<const float>();
  EXPECT_TRUE(
      std::any_of(t, t + targets.numel(), [](float v) { return v == -1.0f; }));  // prompt positions
  EXPECT_TRUE(std::any_of(t, t + targets.numel(), [](float v) { return v >= 0.0f; }));
  fs::remove_all(dir);
}

TEST(CliTrain, HelpListsPresetsAndConfigFields) {
  const CliResult r = run_cli("train --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* part : {"nanogpt-cpu", "llama-char", "copy", "assoc-recall", "multi-relation",
                           "warmup_steps", "attention_only"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part;
}

// llama-char: a Llama-style model (RMSNorm, SwiGLU, rotary, GQA, no biases, tied head) trained
// here runs on the inference executor: generate with a KV cache, the family named.
TEST(CliTrain, LlamaCharPresetTrainsAModelGenerateRuns) {
  const fs::path dir = fresh_dir("llama-char");
  CliResult r = run_cli("train --preset llama-char --steps 20 --quiet --threads 2 --out '" +
                        dir.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json config =
      nlohmann::json::parse(std::ifstream(dir / "checkpoint.json"))["config"]["model"];
  EXPECT_EQ(config["kv_heads"], 2);
  EXPECT_EQ(config["swiglu"], true);
  EXPECT_EQ(config["rms_norm"], true);
  r = run_cli("generate --model '" + dir.string() +
              "' --prompt 'It is a truth' --max-tokens 8 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out.at("model"), "headcount checkpoint (llama family, step 20)");
  EXPECT_EQ(out.at("tokens").size(), 8u);
  fs::remove_all(dir);
}

// The train benchmark runs and reports a consistent split (timing itself is not tested).
TEST(CliTrain, BenchTrainSuiteReportsTheStep) {
  const CliResult r = run_cli("bench --suite train --threads 2 --quick --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens_per_step"], 12 * 64);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0);
  EXPECT_GT(j["median_forward_seconds"].get<double>(), 0);
  EXPECT_GT(j["median_optimizer_seconds"].get<double>(), 0);
  EXPECT_NEAR(j["tokens_per_second"].get<double>() * j["median_step_seconds"].get<double>(), 768.0,
              1e-6 * 768);
}

}  // namespace
}  // namespace headcount::testing
