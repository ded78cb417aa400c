// `headcount generate`, `headcount perplexity` and `headcount heads --model FILE.gguf`: bad
// options and bad files are one line and exit 2 (checked before the model loads, so no model is
// needed); with SmolLM2's file (skipped, naming it, when scripts/setup.sh has not fetched it) the
// --json output carries transformers' greedy tokens (tests/testdata/decoder,
// scripts/make_decoder_fixtures.sh), the perplexity runs and heads finds its induction head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "gguf_builder.h"
#include "headcount/context.h"
#include "headcount/train/trainer.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kModel =
    fs::path(HEADCOUNT_TESTDATA_DIR) / ".." / ".." / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";

std::size_t lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

void expect_one_line_error(const CliResult& r, const std::string& expected) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("headcount: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(expected), std::string::npos)
      << "expected '" << expected << "' in " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliDecoder, BadOptionsAndFilesAreOneLineAndExit2) {
  const fs::path dir =
      fs::temp_directory_path() / ("headcount_cli_decoder_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bert = (dir / "bert.gguf").string();
  GgufBuilder b;
  b.header(0, 1).kv_str("general.architecture", "bert").pad();
  b.write(bert);
  const std::string m = "--model '" + bert + "' ";
  struct Case {
    std::string args, expected;
  };
  for (const Case& c : {
           Case{m + "--max-tokens 0 --prompt hi", "--max-tokens"},
           Case{m + "--temperature -1 --prompt hi", "--temperature"},
           Case{m + "--top-p 0 --prompt hi", "--top-p"},
           Case{m + "--top-p 1.5 --prompt hi", "--top-p"},
           Case{m + "--kv-dtype fp16 --prompt hi", "--kv-dtype"},
           Case{m + "--weights q4 --prompt hi", "--weights"},
           Case{m + "--threads -1 --prompt hi", "--threads"},
           Case{m, "--prompt"},
           Case{m + "--prompt hi", "general.architecture"},
           Case{"--model '" + (dir / "absent.gguf").string() + "' --prompt hi",
                "model: expected a GGUF file or a headcount checkpoint directory, got " +
                    (dir / "absent.gguf").string() + " (no such file) (from --model)"},
       }) {
    const std::string args =
        c.args.rfind("generate", 0) == 0 ? c.args : std::string("generate ") + c.args;
    expect_one_line_error(run_cli(args), c.expected);
  }
  const std::string text = (dir / "text.txt").string();
  std::ofstream(text) << "Some text.\n";
  expect_one_line_error(run_cli("perplexity " + m + "--context 2 '" + text + "'"), "--context");
  expect_one_line_error(run_cli("perplexity " + m + "--weights int4 '" + text + "'"), "--weights");
  expect_one_line_error(run_cli("perplexity " + m + "'" + (dir / "none.txt").string() + "'"),
                        "TEXT_FILE");
  expect_one_line_error(run_cli("perplexity " + m + "'" + text + "'"), "general.architecture");
  // heads --model FILE.gguf: its options before the model, the other kind's options refused.
  for (const Case& c : {
           Case{m + "--json --ablate", "--ablate: an encoder option"},
           Case{m + "--json --text hi", "--text: an encoder option"},
           Case{m, "--out"},
           Case{m + "--json --context 1", "--context"},
           Case{m + "--json --max-windows -1", "--max-windows"},
           Case{m + "--json --sequences 0", "--sequences"},
           Case{m + "--json --length 1", "--length"},
           Case{m + "--json --length 129", "--length"},
           Case{m + "--json --corpus '" + (dir / "none.txt").string() + "'", "--corpus"},
           Case{m + "--json", "general.architecture"},
           Case{"--json --seed 3", "--seed: a decoder option"},
       })
    expect_one_line_error(run_cli("heads " + c.args), c.expected);
  // prune-curve --model FILE.gguf: its options checked before the model loads.
  const std::string pc = "prune-curve " + m + "--json-out '" + (dir / "pc.json").string() + "' ";
  for (const Case& c : {
           Case{"prune-curve " + m, "--json-out / --out"},
           Case{pc + "--context 2", "--context"},
           Case{pc + "--dev-tokens 100", "--dev-tokens"},
           Case{pc + "--test-tokens 511", "--test-tokens"},
           Case{pc + "--weights q4", "--weights"},
           Case{pc + "--random-orders 101", "--random-orders"},
           Case{pc + "--text '" + (dir / "none.txt").string() + "'", "--text"},
           Case{pc, "general.architecture"},
       })
    expect_one_line_error(run_cli(c.args), c.expected);
  EXPECT_FALSE(fs::exists(dir / "pc.json"));
  expect_one_line_error(
      run_cli("convert " + m + "--kv-heads 1 --out '" + (dir / "c").string() + "'"),
      "convert-sweep --model FILE.gguf");
  EXPECT_FALSE(fs::exists(dir / "c"));
  // convert-sweep --model FILE.gguf: the methods and uptraining options checked before the model.
  const std::string cs = "convert-sweep " + m;
  for (const Case& c : {
           Case{cs + "--methods mean,rotated", "--method"},
           Case{cs + "--uptrain-steps -1", "--uptrain-steps"},
           Case{cs + "--uptrain-steps 2 --uptrain-loss kl", "--uptrain-loss"},
           Case{cs + "--uptrain-steps 2 --uptrain-seq-len 1", "--uptrain-seq-len"},
           Case{cs + "--uptrain-steps 2 --uptrain-lr 0", "--uptrain-lr"},
           Case{cs + "--uptrain-steps 2 --uptrain-tokens -5", "--uptrain-tokens"},
           Case{cs + "--uptrain-steps 2", "general.architecture"},
       })
    expect_one_line_error(run_cli(c.args), c.expected);
  // The decoder benchmark suite reads the same file through the same loader.
  expect_one_line_error(run_cli("bench --suite decoder --quick --repeats 1 " + m),
                        "general.architecture");
  expect_one_line_error(run_cli("bench --suite decoder-kv --quick --repeats 1 " + m),
                        "general.architecture");
  fs::remove_all(dir);
}

// Without --model, generate and perplexity read $HEADCOUNT_DECODER_MODEL, else the file
// scripts/setup.sh puts in models/ (as embed finds its directory); a path that is not a file is
// one line naming it and where it came from. The variable is set in this process, which the
// command inherits.
TEST(CliDecoder, ModelComesFromTheFlagThenTheEnvironmentThenTheDefault) {
  const fs::path dir =
      fs::temp_directory_path() / ("headcount_cli_decoder_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bert = (dir / "bert.gguf").string(), absent = (dir / "absent.gguf").string(),
                    text = (dir / "text.txt").string();
  GgufBuilder b;
  b.header(0, 1).kv_str("general.architecture", "bert").pad();
  b.write(bert);
  std::ofstream(text) << "Some text.\n";
  const char* variable = "HEADCOUNT_DECODER_MODEL";
  ::setenv(variable, absent.c_str(), 1);
  const std::string from_env =
      ", got " + absent + " (no such file) (from $HEADCOUNT_DECODER_MODEL)";
  expect_one_line_error(
      run_cli("generate --prompt hi"),
      "model: expected a GGUF file or a headcount checkpoint directory" + from_env);
  expect_one_line_error(run_cli("perplexity '" + text + "'"),
                        "model: expected a GGUF file" + from_env);
  // --model first; the variable's file is the one loaded (a bert file: the loader's error).
  expect_one_line_error(run_cli("generate --model '" + bert + "' --prompt hi"),
                        "general.architecture");
  ::setenv(variable, bert.c_str(), 1);
  expect_one_line_error(run_cli("generate --prompt hi"), "general.architecture");
  expect_one_line_error(run_cli("perplexity '" + text + "'"), "general.architecture");
  ::setenv(variable, dir.string().c_str(), 1);
  expect_one_line_error(run_cli("generate --prompt hi"),
                        "got " + dir.string() + " (not a file) (from $HEADCOUNT_DECODER_MODEL)");
  ::unsetenv(variable);
  fs::remove_all(dir);
  // The default: the README's tour command, shorter. Its tokens are those of the same file
  // named by --model; without the file, the error names it and scripts/setup.sh.
  const std::string tour =
      "--prompt 'It is a truth universally acknowledged' --max-tokens 3 "
      "--threads 1 --json";
  const CliResult d = run_cli("generate " + tour);
  if (!fs::exists(kModel)) {
    expect_one_line_error(d,
                          "SmolLM2-135M-Instruct.Q4_1.gguf (no such file) (from the default; "
                          "run scripts/setup.sh, or pass --model or set "
                          "$HEADCOUNT_DECODER_MODEL)");
    GTEST_SKIP() << kModel.lexically_normal().string()
                 << " not present (scripts/setup.sh fetches it): the default's run not checked";
  }
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const CliResult named = run_cli("generate --model '" + kModel.string() + "' " + tour);
  ASSERT_EQ(named.exit_code, 0) << named.err;
  const nlohmann::json dj = nlohmann::json::parse(d.out), nj = nlohmann::json::parse(named.out);
  EXPECT_EQ(dj.at("prompt_tokens"), nj.at("prompt_tokens"));
  EXPECT_EQ(dj.at("tokens"), nj.at("tokens"));
  EXPECT_EQ(dj.at("tokens").size(), 3u);
}

// A file quantized to K-quants (Q4_K and Q6_K here) is refused as it loads, before any tensor
// is read, by every command and weights option: one line naming the first such tensor, the
// types headcount reads and the types met.
TEST(CliDecoder, KQuantFileIsRefusedWithOneLineNamingTheSupportedTypes) {
  const fs::path dir =
      fs::temp_directory_path() / ("headcount_cli_kquant_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "k.gguf").string(), text = (dir / "text.txt").string();
  small_llama_gguf(12, 14, 256 * 144, 256 * 210).write(file);
  std::ofstream(text) << "Some text.\n";
  const std::string expected =
      file +
      ": tensor 'blk.0.attn_q.weight' type: expected F32, F16, Q8_0 or Q4_1 (headcount reads no "
      "other ggml type; K-quants are not supported), got Q4_K (2 of the model's 3 tensors are "
      "Q4_K, Q6_K)";
  for (const std::string& args : {"generate --model '" + file + "' --prompt hi",
                                  "generate --model '" + file + "' --prompt hi --weights quantized",
                                  "perplexity --model '" + file + "' '" + text + "'"})
    expect_one_line_error(run_cli(args), expected);
  fs::remove_all(dir);
}

TEST(CliDecoder, GenerateJsonHasTransformersGreedyTokensAndPerplexityRuns) {
  if (!fs::exists(kModel))
    GTEST_SKIP() << kModel.lexically_normal().string()
                 << " not present (scripts/setup.sh fetches it)";
  std::ifstream in(std::string(HEADCOUNT_TESTDATA_DIR) + "/decoder/decoder.json");
  const nlohmann::json fixture = nlohmann::json::parse(in).at("cases")[0];
  const std::string prompt = fixture.at("text").get<std::string>();  // plain text, no quotes
  const CliResult r = run_cli("generate --model '" + kModel.string() + "' --prompt '" + prompt +
                              "' --max-tokens 8 --threads 2 --weights fp32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out.at("prompt_tokens"), fixture.at("ids"));
  const auto greedy = fixture.at("greedy").get<std::vector<int>>();
  EXPECT_EQ(out.at("tokens").get<std::vector<int>>(),
            std::vector<int>(greedy.begin(), greedy.begin() + 8));
  EXPECT_GT(out.at("prefill_tokens_per_second").get<double>(), 0);
  EXPECT_GT(out.at("decode_tokens_per_second").get<double>(), 0);
  EXPECT_EQ(out.at("text").get<std::string>().rfind(" Paris", 0), 0u) << out.at("text");

  // By default a Q4_1 file runs on its own blocks: the JSON says so, the tokens are those of
  // --weights quantized, and the first is transformers' (fp32) first token.
  const CliResult q = run_cli("generate --model '" + kModel.string() + "' --prompt '" + prompt +
                              "' --max-tokens 4 --threads 2 --json");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const nlohmann::json qj = nlohmann::json::parse(q.out);
  EXPECT_EQ(qj.at("weights"), "quantized");
  EXPECT_EQ(qj.at("tokens")[0].get<int>(), greedy[0]);
  const CliResult explicit_q =
      run_cli("generate --model '" + kModel.string() + "' --prompt '" + prompt +
              "' --max-tokens 4 --threads 1 --weights quantized --json");
  ASSERT_EQ(explicit_q.exit_code, 0) << explicit_q.err;
  EXPECT_EQ(nlohmann::json::parse(explicit_q.out).at("tokens"), qj.at("tokens"));

  // Perplexity on a short text: two windows of 32 tokens, 15 scored in each.
  const fs::path text = fs::temp_directory_path() /
                        ("headcount_cli_perplexity_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(text) << "It is a truth universally acknowledged, that a single man in possession "
                         "of a good fortune, must be in want of a wife. However little known the "
                         "feelings or views of such a man may be on his first entering a "
                         "neighbourhood, this truth is so well fixed in the minds of the "
                         "surrounding families.\n";
  const CliResult p = run_cli("perplexity --model '" + kModel.string() + "' '" + text.string() +
                              "' --context 32 --threads 2 --json");
  fs::remove(text);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const nlohmann::json pj = nlohmann::json::parse(p.out);
  EXPECT_EQ(pj.at("windows").get<int>(), pj.at("tokens").get<int>() / 32);
  EXPECT_EQ(pj.at("scored").get<int>(), pj.at("windows").get<int>() * 15);
  const double ppl = pj.at("perplexity").get<double>();
  EXPECT_TRUE(std::isfinite(ppl) && ppl > 1 && ppl < 1000) << ppl;
}

// heads on SmolLM2 with one window and two sequences: every head once, roles that add up, the
// second copy predicted far better than the first (docs/decoder-heads.md: a drop of ~11 nats),
// and L18 H6, the strongest induction head of the full run, an induction head here too.
TEST(CliDecoder, HeadsJsonHasEveryHeadAndFindsTheInductionHead) {
  if (!fs::exists(kModel))
    GTEST_SKIP() << kModel.lexically_normal().string()
                 << " not present (scripts/setup.sh fetches it)";
  const CliResult r = run_cli("heads --model '" + kModel.string() +
                              "' --max-windows 1 --sequences 2 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out.at("heads").size(), 270u);
  int roles = 0;
  for (const auto& [role, count] : out.at("role_counts").items()) roles += count.get<int>();
  EXPECT_EQ(roles, 270);
  EXPECT_GT(out.at("induction").at("loss_drop").get<double>(), 5.0);
  const nlohmann::json& h = out.at("heads").at(18 * 9 + 6);
  EXPECT_EQ(h.at("layer"), 18);
  EXPECT_EQ(h.at("head"), 6);
  EXPECT_EQ(h.at("role"), "induction");
  EXPECT_GT(h.at("prefix_matching").get<double>(), 0.5);
}

// The decoder-kv benchmark suite at its quick contexts (64, 128): three variants per context (9
// repeated, 3 as loaded, 1 mean-pooled K/V heads), each cache's own byte count equal to the cost
// model's (3x the loaded model's for the MHA export, 1/3 for MQA), and decoding that ran.
TEST(CliDecoder, DecoderKvSuiteCacheBytesAreTheCostModels) {
  if (!fs::exists(kModel))
    GTEST_SKIP() << kModel.lexically_normal().string()
                 << " not present (scripts/setup.sh fetches it)";
  const CliResult r = run_cli("bench --suite decoder-kv --quick --repeats 1 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json rows = nlohmann::json::parse(r.out).at("rows");
  ASSERT_EQ(rows.size(), 6u);
  for (const nlohmann::json& row : rows) {
    const std::int64_t kv = row.at("kv_heads").get<std::int64_t>();
    // 30 layers x (K + V) x kv heads x 64 x 4 bytes.
    EXPECT_EQ(row.at("cost_model_cache_bytes_per_token").get<std::int64_t>(), 30 * 2 * kv * 64 * 4);
    EXPECT_EQ(row.at("cache_bytes_per_token"), row.at("cost_model_cache_bytes_per_token"));
    EXPECT_EQ(row.at("cache_bytes").get<std::int64_t>(),
              row.at("context").get<std::int64_t>() * 30 * 2 * kv * 64 * 4);
    EXPECT_GT(row.at("decode_tokens_per_second").get<double>(), 0);
    EXPECT_EQ(
        row.at("prefill_tokens").get<std::int64_t>() + row.at("decoded_tokens").get<std::int64_t>(),
        row.at("context").get<std::int64_t>());
  }
  EXPECT_EQ(rows[0].at("kv_heads"), 9);
  EXPECT_EQ(rows[1].at("kv_heads"), 3);
  EXPECT_EQ(rows[2].at("kv_heads"), 1);
  EXPECT_EQ(rows[1].at("decode_vs_as_loaded").get<double>(), 1.0);
}

}  // namespace
}  // namespace headcount::testing

namespace headcount {
namespace {

// A model headcount trained runs through `generate` as a GGUF does (the one inference executor,
// KV-cache decoding): on the committed Llama-style char-lm checkpoint, generate's greedy tokens
// are the training executor's argmax continuation, recomputed over the whole sequence each step.
TEST(CliDecoder, GenerateOnATrainedCheckpointContinuesAsTheTrainingExecutor) {
  const std::string dir =
      std::string(HEADCOUNT_TESTDATA_DIR) + "/checkpoints/llama-char-2026-12-07";
  const std::string prompt = "It is a truth";
  const CliResult r = run_cli("generate --model '" + dir + "' --prompt '" + prompt +
                              "' --max-tokens 12 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out.at("model"), "headcount checkpoint (llama family, step 300)");
  const auto ids = out.at("prompt_tokens").get<std::vector<std::int32_t>>();
  ASSERT_EQ(ids.size(), prompt.size());

  Context ctx({.threads = 2});
  const std::unique_ptr<train::Trainer> trainer = train::Trainer::resume(ctx, dir);
  const std::int64_t vocab = trainer->task().vocab_size();
  std::vector<std::int32_t> sequence = ids;
  std::vector<float> logits(static_cast<std::size_t>(64 * vocab));
  for (int s = 0; s < 12; ++s) {
    const auto n = static_cast<std::int64_t>(sequence.size());
    train::Batch batch{.batch = 1,
                       .seq_len = n,
                       .tokens = sequence,
                       .targets = std::vector<std::int32_t>(static_cast<std::size_t>(n), 0)};
    trainer->model().forward(ctx, batch, logits.data());
    const float* last = logits.data() + (n - 1) * vocab;
    sequence.push_back(static_cast<std::int32_t>(std::max_element(last, last + vocab) - last));
  }
  EXPECT_EQ(
      out.at("tokens").get<std::vector<std::int32_t>>(),
      std::vector<std::int32_t>(sequence.begin() + static_cast<long>(ids.size()), sequence.end()));

  // Options a checkpoint cannot take, and characters outside its vocabulary: one line, exit 2.
  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--prompt 'It' --chat", "--chat"},
           {"--prompt 'It' --weights quantized", "--weights"},
           {"--prompt 'It is \xce\xa9'", "vocabulary"}}) {
    const CliResult bad = run_cli("generate --model '" + dir + "' " + args);
    EXPECT_EQ(bad.exit_code, 2) << args;
    EXPECT_NE(bad.err.find(expected), std::string::npos) << bad.err;
  }
}

}  // namespace
}  // namespace headcount
