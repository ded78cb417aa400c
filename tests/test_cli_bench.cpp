// `headcount bench`: the quick seq suite runs and its JSON carries what issue 3 asks of
// every row; a bad option is one line on stderr and exit code 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"

namespace headcount {
namespace {

using nlohmann::json;

TEST(CliBench, QuickSeqSuiteJsonHasEveryFieldAndConsistentRates) {
  const CliResult r = run_cli("bench --suite seq --quick --json --threads 2 --repeats 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;

  const json& header = j.at("header");
  EXPECT_EQ(header.at("suite"), "seq");
  EXPECT_EQ(header.at("threads"), 2);
  EXPECT_FALSE(header.at("cpu_model").get<std::string>().empty());
  EXPECT_FALSE(header.at("date").get<std::string>().empty());
  EXPECT_FALSE(header.at("corename").get<std::string>().empty());
  EXPECT_GT(header.at("sgemm_as_configured").at("gflops").get<double>(), 0.0);
  const double sgemm = header.at("sgemm_gflops").get<double>();
  EXPECT_GT(sgemm, 0.0);
  const std::string basis = header.at("pct_of_sgemm_basis");
  EXPECT_TRUE(basis == "best" || basis == "as_configured") << basis;
  if (basis == "best") EXPECT_DOUBLE_EQ(header.at("sgemm_best").at("gflops").get<double>(), sgemm);

  const json& rows = j.at("rows");
  ASSERT_FALSE(rows.empty());
  int ok_rows = 0, bf16_rows = 0;
  for (const json& row : rows) {
    for (const char* key :
         {"suite", "kernel", "dtype", "batch", "heads", "kv_heads", "head_dim", "q_len", "kv_len",
          "causal", "threads", "seconds", "gflops", "pct_of_sgemm", "peak_bytes", "status"})
      EXPECT_TRUE(row.contains(key)) << "missing " << key << " in " << row.dump();
    EXPECT_EQ(row.at("suite"), "seq");
    EXPECT_EQ(row.at("threads"), 2);
    EXPECT_EQ(row.at("heads"), 8);
    EXPECT_EQ(row.at("head_dim"), 64);
    if (row.at("dtype") == "bf16") ++bf16_rows;
    if (row.at("status") != "ok") {
      // A kernel that refuses an input says why, and the suite goes on.
      EXPECT_EQ(row.at("status"), "unsupported") << row.dump();
      EXPECT_FALSE(row.at("error").get<std::string>().empty());
      continue;
    }
    ++ok_rows;
    const double seconds = row.at("seconds"), gflops = row.at("gflops");
    const double flops = row.at("flops").get<double>();
    EXPECT_GT(seconds, 0.0);
    EXPECT_GT(flops, 0.0);
    EXPECT_NEAR(gflops, flops / seconds / 1e9, 1e-9 * gflops);
    EXPECT_NEAR(row.at("pct_of_sgemm").get<double>(), 100.0 * gflops / sgemm, 1e-9 * gflops);
    if (!row.at("peak_bytes").is_null()) EXPECT_GE(row.at("peak_bytes").get<std::int64_t>(), 0);
    // Non-causal rows count every score: 4 * batch * heads * q_len * kv_len * head_dim.
    if (row.at("causal") == false) {
      const double expected = 4.0 * row.at("batch").get<double>() * row.at("heads").get<double>() *
                              row.at("q_len").get<double>() * row.at("kv_len").get<double>() *
                              row.at("head_dim").get<double>();
      EXPECT_DOUBLE_EQ(flops, expected) << row.dump();
    }
  }
  EXPECT_GT(ok_rows, 0);
  EXPECT_GT(bf16_rows, 0);
}

TEST(CliBench, BadSuiteIsOneLineAndExitTwo) {
  const CliResult r = run_cli("bench --suite nope");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--suite"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
}

TEST(CliBench, BadRepeatsIsOneLineAndExitTwo) {
  const CliResult r = run_cli("bench --suite seq --quick --repeats 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--repeats"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace headcount
