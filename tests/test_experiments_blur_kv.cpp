// blur and kv-heads end to end at --quick size (one seed, so the suite stays fast): the JSON is
// whole (every cell, every run, the probes and conversions the verdicts read), each verdict is
// one of the three names and carries the numbers it came from. Not a check of the claims.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
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
  ASSERT_EQ(r.at("cells").size(), 4u * 4 + 2u * 3 * 2);
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
  for (const char* variant : {"control", "pair", "three", "content"})
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

namespace headcount::testing {
namespace {

// A result made by hand: every cell's seeds at mean(id) -1e-3, 0, +1e-3 (std 1e-3), as accuracy and
// loss alike, each run's measures from `measures`. The judges only read these.
struct FakeResult {
  ex::Experiment experiment;
  ex::ExperimentResult result;
};

// Held by pointer: result.experiment points into it.
std::unique_ptr<FakeResult> fake(ex::Experiment (*make)(const ex::ExperimentOptions&),
                                 const std::function<double(const std::string&)>& mean,
                                 const std::function<json(const ex::Cell&)>& measures) {
  auto owned = std::make_unique<FakeResult>();
  FakeResult& f = *owned;
  f.experiment = make({.seeds = 3, .quick = true});
  f.result.experiment = &f.experiment;
  for (std::size_t i = 0; i < f.experiment.cells.size(); ++i) {
    const ex::Cell& c = f.experiment.cells[i];
    std::vector<double> values;
    for (int s = 0; s < 3; ++s) {
      ex::RunRecord run{.cell = i, .seed = static_cast<std::uint64_t>(s + 1)};
      const double v = mean(c.id) + 1e-3 * (s - 1);
      run.final = {.loss = v, .accuracy = v, .scored = 1};
      run.validation = {{.step = 10 * (s + 1), .metrics = run.final}};
      run.cost.kv_cache_bytes_per_token = 2 * 2 * c.config.model.kv_heads * 8 * 4;
      run.measures = measures(c);
      values.push_back(ex::final_metric(run, f.experiment.metric));
      f.result.runs.push_back(run);
    }
    f.result.cells.push_back(ex::cell_stats(c.id, values));
  }
  return owned;
}

// A blur probe in which head h puts looks[h][r] on relation r.
json probe(const std::vector<std::vector<double>>& looks, std::size_t relations) {
  json heads = json::array();
  for (const auto& f : looks) {
    std::vector<double> row(relations, 0.05);
    for (std::size_t r = 0; r < f.size() && r < relations; ++r) row[r] = f[r];
    heads.push_back({{"entropy", 1.0}, {"fractions", row}});
  }
  std::vector<std::string> names;
  for (std::size_t r = 0; r < relations; ++r) names.push_back("r" + std::to_string(r));
  return {{"final", {{"probe", {{"relations", names}, {"heads", heads}, {"queries", 1}}}}}};
}

json uniform_probe(const ex::Cell& c) {
  return probe(
      std::vector<std::vector<double>>(static_cast<std::size_t>(c.config.model.heads), {0.1, 0.1}),
      3);
}

bool starts(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string verdict_of(const std::unique_ptr<FakeResult>& f, std::size_t i) {
  return ex::verdict_name(f->experiment.judge(f->result).at(i).verdict);
}

TEST(ExperimentBlur, JudgeOnHandMadeNumbers) {
  // three: h = 4 at 0.9 beats h = 1 at 0.5; its heads 0 and 1 each put >= 40% on relations 0 and 1.
  const auto acc = [](const std::string& id) {
    if (starts(id, "three")) return id == "three h=4" ? 0.9 : 0.5;
    if (starts(id, "esp cyclic")) return id.ends_with("h=2") ? 0.99 : 0.80;
    return 0.5;
  };
  const auto split = [](const ex::Cell& c) {
    if (c.id == "three h=4") return probe({{0.6, 0.1}, {0.1, 0.45}, {0.2, 0.2}, {0.2, 0.2}}, 3);
    return uniform_probe(c);
  };
  EXPECT_EQ(verdict_of(fake(ex::make_blur, acc, split), 0), "confirmed");
  EXPECT_EQ(verdict_of(fake(ex::make_blur, acc, split), 1),
            "confirmed");  // acyclic: both 0.5, no gap
  // The same accuracies with no head split: not shown.
  EXPECT_EQ(verdict_of(fake(ex::make_blur, acc, uniform_probe), 0), "not shown");
  // One head on the same relation twice is not two relations.
  const auto same = [](const ex::Cell& c) {
    if (c.id == "three h=4") return probe({{0.6, 0.1}, {0.5, 0.1}, {0.2, 0.2}, {0.2, 0.2}}, 3);
    return uniform_probe(c);
  };
  EXPECT_EQ(verdict_of(fake(ex::make_blur, acc, same), 0), "not shown");
  // h = 1 ties every h at >= 0.99 on both non-control variants: refuted (the control does not
  // matter).
  const auto tie = [](const std::string& id) { return starts(id, "control") ? 0.3 : 0.995; };
  EXPECT_EQ(verdict_of(fake(ex::make_blur, tie, uniform_probe), 0), "refuted");
  // ... but at 0.9 it is not refuted.
  EXPECT_EQ(verdict_of(fake(
                           ex::make_blur, [](const std::string&) { return 0.9; }, uniform_probe),
                       0),
            "not shown");
  // ESP: everything equal -> 1 head matches 2 heads on cyclic graphs at every d: refuted.
  EXPECT_EQ(verdict_of(fake(ex::make_blur, tie, uniform_probe), 1), "refuted");
  // ESP: the acyclic gap larger than the cyclic one at one width: not shown.
  const auto acyclic_gap = [](const std::string& id) {
    if (starts(id, "esp cyclic")) return id.ends_with("h=2") ? 0.99 : 0.80;
    if (id == "esp acyclic d=64 h=1") return 0.5;
    if (starts(id, "esp acyclic")) return 0.99;
    return 0.5;
  };
  EXPECT_EQ(verdict_of(fake(ex::make_blur, acyclic_gap, uniform_probe), 1), "not shown");
  // ESP: 2 heads beat 1 on cyclic graphs at two widths only: not shown.
  const auto two_widths = [](const std::string& id) {
    if (starts(id, "esp cyclic d=256")) return 0.9;
    if (starts(id, "esp cyclic")) return id.ends_with("h=2") ? 0.99 : 0.80;
    return 0.5;
  };
  EXPECT_EQ(verdict_of(fake(ex::make_blur, two_widths, uniform_probe), 1), "not shown");
}

json conversion(const ex::Cell& c, double converted, double uptrained) {
  if (c.config.model.kv_heads != 8) return json::object();
  json entries = json::array();
  for (const int g : {4, 2, 1})
    entries.push_back(
        {{"kv_heads", g},
         {"converted", {{"validation_loss", converted}, {"validation_accuracy", converted}}},
         {"uptrained", {{"validation_loss", uptrained}, {"validation_accuracy", uptrained}}}});
  return {{"final", {{"conversion", entries}}}};
}

TEST(ExperimentKvHeads, JudgeOnHandMadeNumbers) {
  // char-lm losses 2.0 (kv 8) .. 2.3 (kv 1): kv = h beats kv = 1, no kv < h beats kv = h.
  const auto worse = [](const std::string& id) {
    if (starts(id, "char-lm")) return id == "char-lm kv=8" ? 2.0 : id == "char-lm kv=1" ? 2.3 : 2.1;
    return 0.5;  // mqar accuracies all equal
  };
  // Conversion: the same constant for every seed (std 0) so the rule decides on the gap alone;
  // for the loss metric a lower uptrained value is the better one.
  const auto recovers = [](const ex::Cell& c) { return conversion(c, 2.5, 2.2); };
  const auto a = fake(ex::make_kv_heads, worse, recovers);
  const auto verdicts = a->experiment.judge(a->result);
  ASSERT_EQ(verdicts.size(), 7u);
  EXPECT_EQ(std::string(ex::verdict_name(verdicts[0].verdict)), "confirmed");
  for (std::size_t i = 4; i < 7; ++i)  // char-lm G = 4, 2, 1: 2.2 < 2.5 by more than the floor
    EXPECT_EQ(std::string(ex::verdict_name(verdicts[i].verdict)), "confirmed") << verdicts[i].id;
  for (std::size_t i = 1; i < 4; ++i)  // mqar: accuracy 2.2 < 2.5 means the converted one is better
    EXPECT_EQ(std::string(ex::verdict_name(verdicts[i].verdict)), "refuted") << verdicts[i].id;
  EXPECT_EQ(verdicts[0].numbers.at("tables").size(), 2u);
  // kv = 1 beats kv = h on mqar: refuted.
  const auto mqar_one = [](const std::string& id) {
    return id == "mqar kv=1" ? 0.9 : starts(id, "mqar") ? 0.5 : 2.0;
  };
  EXPECT_EQ(verdict_of(fake(ex::make_kv_heads, mqar_one, recovers), 0), "refuted");
  // kv = h beats kv = 1 but kv = 4 beats kv = h: not shown.
  const auto middle = [](const std::string& id) {
    if (starts(id, "char-lm")) return id == "char-lm kv=4" ? 1.8 : id == "char-lm kv=1" ? 2.3 : 2.0;
    return 0.5;
  };
  EXPECT_EQ(verdict_of(fake(ex::make_kv_heads, middle, recovers), 0), "not shown");
  // Everything equal: not shown.
  EXPECT_EQ(verdict_of(fake(
                           ex::make_kv_heads, [](const std::string&) { return 1.0; }, recovers),
                       0),
            "not shown");
}

}  // namespace
}  // namespace headcount::testing
