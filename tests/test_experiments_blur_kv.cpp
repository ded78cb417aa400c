// blur and kv-heads end to end at --quick size (one seed, so the suite stays fast): the JSON is
// whole (every cell, every run, the probes and conversions the verdicts read), each verdict is
// one of the three names and carries the numbers it came from. Not a check of the claims.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "experiments/experiments.h"
#include "experiments/result.h"
#include "experiments/runner.h"
#include "headcount/context.h"
#include "nlohmann/json.hpp"

namespace headcount::testing {
namespace {

using nlohmann::json;
namespace ex = headcount::experiments;

json quick_result(ex::Experiment (*make)(const ex::ExperimentOptions&)) {
  const ex::ExperimentOptions options{.seeds = 1, .quick = true, .threads = 1};
  const ex::Experiment e = make(options);
  Context ctx;
  return ex::result_json(ex::run_experiment(ctx, e, options, false));
}

void expect_verdict(const json& v) {
  static const std::set<std::string> names = {"confirmed", "refuted", "not shown"};
  EXPECT_TRUE(names.count(v.at("verdict").get<std::string>())) << v.dump();
  EXPECT_FALSE(v.at("reason").get<std::string>().empty());
  EXPECT_FALSE(v.at("rule").get<std::string>().empty());
}

TEST(ExperimentBlur, QuickRunIsWhole) {
  const json r = quick_result(ex::make_blur);
  EXPECT_EQ(r.at("experiment").at("name"), "blur");
  ASSERT_EQ(r.at("cells").size(), 3u * 4 + 2u * 3 * 2);
  ASSERT_EQ(r.at("runs").size(), r.at("cells").size());
  for (const json& run : r.at("runs")) {
    const json& probe = run.at("measures").at("final").at("probe");
    const std::int64_t heads = run.at("config").at("model").at("heads");
    ASSERT_EQ(probe.at("heads").size(), static_cast<std::size_t>(heads)) << run.at("cell");
    for (const json& h : probe.at("heads")) {
      EXPECT_GE(h.at("entropy").get<double>(), 0.0);
      for (const json& f : h.at("fractions"))
        EXPECT_TRUE(f.get<double>() >= 0 && f.get<double>() <= 1 + 1e-6);
    }
    EXPECT_GT(probe.at("queries").get<std::int64_t>(), 0);
  }
  ASSERT_EQ(r.at("verdicts").size(), 2u);
  EXPECT_EQ(r.at("verdicts")[0].at("id"), "blur.heads-split-relations");
  EXPECT_EQ(r.at("verdicts")[1].at("id"), "blur.esp");
  for (const json& v : r.at("verdicts")) expect_verdict(v);
  const json& numbers = r.at("verdicts")[0].at("numbers");
  EXPECT_EQ(numbers.at("steps_to_99").size(), r.at("cells").size());
  for (const char* variant : {"control", "three", "content"})
    EXPECT_TRUE(numbers.contains(variant)) << variant;
  EXPECT_EQ(r.at("verdicts")[1].at("comparisons").size(), 6u);  // 3 widths x (cyclic, acyclic)
}

TEST(ExperimentKvHeads, QuickRunIsWhole) {
  const json r = quick_result(ex::make_kv_heads);
  EXPECT_EQ(r.at("experiment").at("name"), "kv-heads");
  ASSERT_EQ(r.at("cells").size(), 8u);
  // The cost model's KV bytes per token halve with kv_heads: 2 layers x 2 (K, V) x kv x 8 x 4
  // bytes.
  for (const json& c : r.at("cells")) {
    const std::int64_t kv = c.at("labels").at("kv_heads");
    EXPECT_EQ(c.at("cost").at("kv_cache_bytes_per_token").get<std::int64_t>(), 2 * 2 * kv * 8 * 4)
        << c.at("id");
  }
  std::int64_t converted = 0;
  for (const json& run : r.at("runs")) {
    const json& m = run.at("measures").at("final");
    if (run.at("config").at("model").at("kv_heads") != 8) continue;
    ASSERT_EQ(m.at("conversion").size(), 3u);
    for (const json& entry : m.at("conversion")) {
      EXPECT_EQ(entry.at("uptrain_steps"), 1);  // 5% of 12 steps, rounded, at least 1
      EXPECT_GT(entry.at("converted").at("scored").get<std::int64_t>(), 0);
      ++converted;
    }
  }
  EXPECT_EQ(converted, 2 * 3);
  ASSERT_EQ(r.at("verdicts").size(), 1u + 2 * 3);
  EXPECT_EQ(r.at("verdicts")[0].at("id"), "kv-heads.sharing-costs-quality");
  for (const json& v : r.at("verdicts")) expect_verdict(v);
}

}  // namespace
}  // namespace headcount::testing
