// The cost model against the figures of the seed essay (width 512, 8 heads of 64, 1,000
// positions), the GQA/MQA and dtype variations, validation, and `headcount cost` itself.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "headcount/cost.h"
#include "headcount/error.h"
#include "simd/tuning.h"

namespace headcount {
namespace {

const char* const kAttentionStages[] = {"Q projection", "K projection", "V projection",
                                        "scores",       "weighted sum", "O projection"};
const char* const kAllStages[] = {"Q projection",    "K projection", "V projection",
                                  "scores",          "weighted sum", "O projection",
                                  "attention block", "feed-forward", "layer"};

CostReport base(std::int64_t heads = 8) {
  return estimate_cost({.d_model = 512, .heads = heads, .seq_len = 1000});
}

TEST(Cost, ResolvesDefaults) {
  const CostConfig c = resolve({.d_model = 512, .heads = 8, .seq_len = 1000});
  EXPECT_EQ(c.kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 64);
  EXPECT_EQ(c.kv_len, 1000);
  EXPECT_EQ(c.batch, 1);
  EXPECT_EQ(c.d_ff, 2048);
  EXPECT_EQ(c.dtype, DType::f32);
  EXPECT_EQ(c.threads, 1);
}

TEST(Cost, StagesInOrder) {
  const CostReport r = base();
  ASSERT_EQ(r.stages.size(), std::size(kAllStages));
  for (std::size_t i = 0; i < r.stages.size(); ++i) EXPECT_EQ(r.stages[i].stage, kAllStages[i]);
  EXPECT_THROW(r.stage("no such stage"), Error);
}

TEST(Cost, WeightsMatchTheSeedTable) {
  const CostReport r = base();
  for (const char* name : {"Q projection", "K projection", "V projection", "O projection"}) {
    EXPECT_EQ(r.stage(name).weights, 262'144) << name;
  }
  EXPECT_EQ(r.stage("scores").weights, 0);
  EXPECT_EQ(r.stage("weighted sum").weights, 0);
  EXPECT_EQ(r.stage("attention block").weights, 1'048'576);
  EXPECT_EQ(r.stage("feed-forward").weights, 2'097'152);
  EXPECT_EQ(r.stage("layer").weights, 3'145'728);
  EXPECT_EQ(r.total_parameters, 3'145'728);
}

TEST(Cost, MultiplyAddsDoNotDependOnHeadCount) {
  for (std::int64_t heads : {1, 8}) {
    const CostReport r = base(heads);
    EXPECT_EQ(r.stage("scores").macs, 512'000'000) << heads;
    EXPECT_EQ(r.stage("weighted sum").macs, 512'000'000) << heads;
    const std::int64_t projections = r.stage("Q projection").macs + r.stage("K projection").macs +
                                     r.stage("V projection").macs + r.stage("O projection").macs;
    EXPECT_EQ(projections, 1'048'576'000) << heads;
    EXPECT_EQ(r.stage("Q projection").macs, 262'144'000) << heads;
    EXPECT_EQ(r.stage("attention block").macs, 2'072'576'000) << heads;
    EXPECT_EQ(r.stage("feed-forward").macs, 2'097'152'000) << heads;
    EXPECT_EQ(r.stage("layer").macs, 4'169'728'000) << heads;
    EXPECT_EQ(r.stage("attention block").weights, 1'048'576) << heads;
  }
}

TEST(Cost, ScoreEntriesAtOnce) {
  const std::int64_t tile = tuning::streaming_tile_entries(1, 1000);
  const CostReport eight = base(8), one = base(1);
  EXPECT_EQ(eight.stage("scores").reference_score_entries, 8'000'000);
  EXPECT_EQ(one.stage("scores").reference_score_entries, 1'000'000);
  EXPECT_EQ(eight.stage("scores").streaming_score_entries, tile);
  EXPECT_EQ(one.stage("scores").streaming_score_entries, tile);
  // Totals report the peak, which is the scores row.
  EXPECT_EQ(eight.stage("layer").reference_score_entries, 8'000'000);
  EXPECT_EQ(eight.stage("layer").streaming_score_entries, tile);
  EXPECT_EQ(eight.stage("Q projection").reference_score_entries, 0);

  const CostReport longer = estimate_cost({.d_model = 512, .heads = 8, .seq_len = 4096});
  EXPECT_EQ(longer.stage("scores").streaming_score_entries, tile);
  EXPECT_EQ(longer.stage("scores").reference_score_entries, 8 * 4096 * 4096);

  const CostReport four =
      estimate_cost({.d_model = 512, .heads = 8, .seq_len = 1000, .threads = 4});
  EXPECT_EQ(four.stage("scores").streaming_score_entries, 4 * tile);
  EXPECT_EQ(four.stage("scores").reference_score_entries, 8'000'000);
}

TEST(Cost, ActivationBytes) {
  const CostReport r = base();
  EXPECT_EQ(r.stage("Q projection").activation_bytes, 2'048'000);  // 1000 x 512 x 4
  EXPECT_EQ(r.stage("K projection").activation_bytes, 2'048'000);
  EXPECT_EQ(r.stage("V projection").activation_bytes, 2'048'000);
  EXPECT_EQ(r.stage("scores").activation_bytes, 32'000'000);  // 8 x 1000 x 1000 x 4
  EXPECT_EQ(r.stage("weighted sum").activation_bytes, 2'048'000);
  EXPECT_EQ(r.stage("O projection").activation_bytes, 2'048'000);
  EXPECT_EQ(r.stage("attention block").activation_bytes, 42'240'000);
  EXPECT_EQ(r.stage("feed-forward").activation_bytes, 8'192'000);  // 1000 x 2048 x 4
  EXPECT_EQ(r.stage("layer").activation_bytes, 50'432'000);
  EXPECT_EQ(r.kv_cache_bytes_per_token, 4096);  // (8x64 + 8x64) x 4
  EXPECT_EQ(r.kv_cache_bytes, 4'096'000);
}

TEST(Cost, Bf16HalvesBytesOnly) {
  const CostReport f32 = base();
  const CostReport bf16 =
      estimate_cost({.d_model = 512, .heads = 8, .seq_len = 1000, .dtype = DType::bf16});
  for (const char* name : kAllStages) {
    EXPECT_EQ(bf16.stage(name).activation_bytes * 2, f32.stage(name).activation_bytes) << name;
    EXPECT_EQ(bf16.stage(name).weights, f32.stage(name).weights) << name;
    EXPECT_EQ(bf16.stage(name).macs, f32.stage(name).macs) << name;
  }
  EXPECT_EQ(bf16.kv_cache_bytes_per_token, 2048);
  EXPECT_EQ(bf16.stage("scores").activation_bytes, 16'000'000);
}

// Grouped- and multi-query attention shrink K and V, and nothing else.
TEST(Cost, KvHeadsShrinkOnlyKeysAndValues) {
  const CostReport mha = base();
  struct Case {
    std::int64_t kv_heads, kv_weights, kv_macs, kv_cache_bytes_per_token;
  };
  for (const Case& want : {Case{2, 65'536, 65'536'000, 1024}, Case{1, 32'768, 32'768'000, 512}}) {
    const CostReport gqa =
        estimate_cost({.d_model = 512, .heads = 8, .kv_heads = want.kv_heads, .seq_len = 1000});
    SCOPED_TRACE(want.kv_heads);
    for (const char* name : {"K projection", "V projection"}) {
      EXPECT_EQ(gqa.stage(name).weights, want.kv_weights) << name;
      EXPECT_EQ(gqa.stage(name).macs, want.kv_macs) << name;
      EXPECT_EQ(gqa.stage(name).activation_bytes, 1000 * want.kv_heads * 64 * 4) << name;
    }
    EXPECT_EQ(gqa.kv_cache_bytes_per_token, want.kv_cache_bytes_per_token);
    for (const char* name :
         {"Q projection", "scores", "weighted sum", "O projection", "feed-forward"}) {
      const StageCost &a = gqa.stage(name), &b = mha.stage(name);
      EXPECT_EQ(a.weights, b.weights) << name;
      EXPECT_EQ(a.macs, b.macs) << name;
      EXPECT_EQ(a.activation_bytes, b.activation_bytes) << name;
      EXPECT_EQ(a.reference_score_entries, b.reference_score_entries) << name;
      EXPECT_EQ(a.streaming_score_entries, b.streaming_score_entries) << name;
    }
    const std::int64_t saved = 2 * (262'144 - want.kv_weights);
    EXPECT_EQ(gqa.stage("attention block").weights, 1'048'576 - saved);
    EXPECT_EQ(gqa.total_parameters, 3'145'728 - saved);
  }
}

TEST(Cost, ExplicitWidths) {
  // Cross-length, explicit head widths and d_ff, batch 2.
  const CostReport r = estimate_cost({.d_model = 96,
                                      .heads = 4,
                                      .kv_heads = 2,
                                      .head_dim = 16,
                                      .v_head_dim = 32,
                                      .seq_len = 10,
                                      .kv_len = 30,
                                      .batch = 2,
                                      .d_ff = 100});
  EXPECT_EQ(r.stage("Q projection").weights, 96 * 4 * 16);
  EXPECT_EQ(r.stage("K projection").macs, 2 * 30 * 96 * 2 * 16);
  EXPECT_EQ(r.stage("V projection").weights, 96 * 2 * 32);
  EXPECT_EQ(r.stage("scores").macs, 2 * 4 * 10 * 30 * 16);
  EXPECT_EQ(r.stage("weighted sum").macs, 2 * 4 * 10 * 30 * 32);
  EXPECT_EQ(r.stage("weighted sum").activation_bytes, 2 * 10 * 4 * 32 * 4);
  EXPECT_EQ(r.stage("O projection").weights, 4 * 32 * 96);
  EXPECT_EQ(r.stage("feed-forward").macs, 2 * 2 * 10 * 96 * 100);
  EXPECT_EQ(r.kv_cache_bytes_per_token, (2 * 16 + 2 * 32) * 4);
  EXPECT_EQ(r.kv_cache_bytes, (2 * 16 + 2 * 32) * 4 * 2 * 30);
}

void expect_error(const CostConfig& config, const std::string& param) {
  try {
    estimate_cost(config);
    ADD_FAILURE() << "expected an error naming " << param;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(param + ":", 0), 0u) << e.what();
  }
}

TEST(Cost, Validation) {
  expect_error({.d_model = 512, .heads = 7}, "heads");  // 7 does not divide 512
  expect_error({.d_model = 512, .heads = 8, .kv_heads = 3}, "kv_heads");
  expect_error({.d_model = 0, .heads = 8}, "d_model");
  expect_error({.d_model = 512, .heads = 0}, "heads");
  expect_error({.d_model = 512, .heads = 8, .seq_len = 0}, "seq_len");
  expect_error({.d_model = 512, .heads = 8, .batch = 0}, "batch");
  expect_error({.d_model = 512, .heads = 8, .kv_len = -1}, "kv_len");
  expect_error({.d_model = 512, .heads = 8, .head_dim = -64}, "head_dim");
  expect_error({.d_model = 512, .heads = 8, .d_ff = -1}, "d_ff");
  expect_error({.d_model = 512, .heads = 8, .threads = 0}, "threads");
  expect_error({.d_model = 512, .heads = 8, .dtype = DType::f64}, "dtype");
  expect_error({.d_model = 1 << 20, .heads = 1 << 10, .seq_len = 1 << 24},
               "Q projection");  // 2^64 multiply-adds
  // An explicit head_dim lifts the divisibility rule.
  EXPECT_EQ(
      estimate_cost({.d_model = 512, .heads = 7, .head_dim = 64}).stage("Q projection").weights,
      512 * 7 * 64);

  try {
    resolve({.d_model = 512, .heads = 8, .kv_heads = 3});
    ADD_FAILURE() << "kv_heads 3 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kv_heads: expected a divisor of heads (8), got 3");
  }
}

TEST(Cost, TableIsReadable) {
  const std::string table = format_cost_table(base());
  for (const char* text : {"d_model 512, heads 8, kv_heads 8, head_dim 64", "seq_len 1,000",
                           "1,048,576", "2,097,152", "3,145,728", "512,000,000", "8,000,000",
                           "4,096 bytes per token", "threads * tile entries"}) {
    EXPECT_NE(table.find(text), std::string::npos) << text << "\n" << table;
  }
  for (const char* name : kAttentionStages) EXPECT_NE(table.find(name), std::string::npos);
}

TEST(Cost, JsonMatchesReport) {
  const CostReport r = base();
  const nlohmann::json j = nlohmann::json::parse(cost_to_json(r));
  EXPECT_EQ(j["config"]["head_dim"], 64);
  EXPECT_EQ(j["config"]["dtype"], "f32");
  ASSERT_EQ(j["stages"].size(), r.stages.size());
  for (std::size_t i = 0; i < r.stages.size(); ++i) {
    EXPECT_EQ(j["stages"][i]["stage"], r.stages[i].stage);
    EXPECT_EQ(j["stages"][i]["weights"], r.stages[i].weights);
    EXPECT_EQ(j["stages"][i]["macs"], r.stages[i].macs);
    EXPECT_EQ(j["stages"][i]["activation_bytes"], r.stages[i].activation_bytes);
  }
  EXPECT_EQ(j["kv_cache_bytes_per_token"], 4096);
  EXPECT_EQ(j["total_parameters"], 3'145'728);
}

// ---- the command line ----

const nlohmann::json& find_stage(const nlohmann::json& doc, const std::string& name) {
  for (const nlohmann::json& row : doc.at("stages")) {
    if (row.at("stage") == name) return row;
  }
  throw std::runtime_error("no stage " + name);
}

TEST(CostCli, JsonFigures) {
  const CliResult r = run_cli("cost --d-model 512 --heads 8 --seq-len 1000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["config"]["d_model"], 512);
  EXPECT_EQ(doc["config"]["kv_len"], 1000);
  for (const char* name : {"Q projection", "K projection", "V projection", "O projection"}) {
    EXPECT_EQ(find_stage(doc, name)["weights"], 262'144) << name;
    EXPECT_EQ(find_stage(doc, name)["macs"], 262'144'000) << name;
  }
  EXPECT_EQ(find_stage(doc, "attention block")["weights"], 1'048'576);
  EXPECT_EQ(find_stage(doc, "feed-forward")["weights"], 2'097'152);
  EXPECT_EQ(find_stage(doc, "layer")["weights"], 3'145'728);
  EXPECT_EQ(find_stage(doc, "scores")["macs"], 512'000'000);
  EXPECT_EQ(find_stage(doc, "weighted sum")["macs"], 512'000'000);
  EXPECT_EQ(find_stage(doc, "scores")["reference_score_entries"], 8'000'000);
  EXPECT_EQ(find_stage(doc, "scores")["streaming_score_entries"],
            tuning::streaming_tile_entries(1, 1000));
  EXPECT_EQ(doc["kv_cache_bytes_per_token"], 4096);
  EXPECT_EQ(doc["total_parameters"], 3'145'728);
}

TEST(CostCli, TableByDefault) {
  const CliResult r = run_cli("cost --d-model 512 --heads 8 --seq-len 1000 --dtype bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1,048,576"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2,048 bytes per token"), std::string::npos) << r.out;
}

void expect_one_line_error(const std::string& args, const std::string& mention) {
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << args;
  EXPECT_EQ(r.out, "") << args;
  ASSERT_FALSE(r.err.empty()) << args;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << args << ": " << r.err;
  EXPECT_NE(r.err.find(mention), std::string::npos) << args << ": " << r.err;
}

TEST(CostCli, BadInputExitsWithTwo) {
  expect_one_line_error("cost --d-model 512 --heads 7", "heads");
  expect_one_line_error("cost --d-model 512 --heads 8 --kv-heads 3", "kv_heads");
  expect_one_line_error("cost --d-model 512 --heads 8 --dtype f16", "dtype");
  expect_one_line_error("cost --heads 8", "--d-model");
  expect_one_line_error("cost --d-model many --heads 8", "--d-model");
}

}  // namespace
}  // namespace headcount
