// The cost model's projections subtotal (the seeds' 4 x n x d^2 figure) in the report, the
// table and the JSON, and `headcount --version` = the library's version().
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "headcount/cost.h"
#include "headcount/version.h"

namespace headcount {
namespace {

TEST(CostProjections, SeedsFigureForEveryHeadCount) {
  for (std::int64_t heads : {1, 2, 8, 64}) {
    const CostReport r = estimate_cost({.d_model = 512, .heads = heads, .seq_len = 1000});
    EXPECT_EQ(r.projections.macs, 4LL * 1000 * 512 * 512) << heads;  // 1,048,576,000
    EXPECT_EQ(r.projections.weights, 4LL * 512 * 512) << heads;
    EXPECT_EQ(r.projections.reference_score_entries, 0);
  }
}

TEST(CostProjections, SumOfTheFourStages) {
  // GQA with kv_len != seq_len and batch 3: K and V are smaller, and over m keys.
  const CostReport r = estimate_cost(
      {.d_model = 256, .heads = 8, .kv_heads = 2, .seq_len = 7, .kv_len = 11, .batch = 3});
  std::int64_t weights = 0, macs = 0, bytes = 0;
  for (const char* name : {"Q projection", "K projection", "V projection", "O projection"}) {
    weights += r.stage(name).weights;
    macs += r.stage(name).macs;
    bytes += r.stage(name).activation_bytes;
  }
  EXPECT_EQ(r.projections.weights, weights);
  EXPECT_EQ(r.projections.macs, macs);
  EXPECT_EQ(r.projections.activation_bytes, bytes);
  EXPECT_EQ(r.projections.macs, 3LL * 256 * (7 * 256 + 2 * 11 * 64 + 7 * 256));
}

TEST(CostProjectionsCli, TextAndJson) {
  const CliResult text = run_cli("cost --d-model 512 --heads 8 --seq-len 1000");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find(
                "projections (Q, K, V, O together): 1,048,576 weights, 1,048,576,000 multiply-adds "
                "(~1.05e+09)"),
            std::string::npos)
      << text.out;
  const CliResult json = run_cli("cost --d-model 512 --heads 1 --seq-len 1000 --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc["projections"]["macs"], 1'048'576'000);
  EXPECT_EQ(doc["projections"]["weights"], 1'048'576);
  EXPECT_EQ(doc["projections"]["activation_bytes"], 4 * 2'048'000);
}

TEST(VersionCli, PrintsTheLibraryVersion) {
  const CliResult r = run_cli("--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("headcount ") + version() + "\n");
  EXPECT_EQ(std::string(version()).find('.') != std::string::npos, true);
}

}  // namespace
}  // namespace headcount
