// The rules of evidence' statistics (src/experiments/statistics.h, verdict.h's paired and Fisher
// comparisons and gates), against independent references: closed forms of the incomplete beta,
// Student's t quantiles as printed in the standard tables (6 significant digits), Fisher p-values
// from exact integer enumeration of the 2 x 2 tables, the claims protocol's worked examples, and
// the protocol's recomputation from the committed head-sweep JSON (h=4 - h=1: +0.0565 nats,
// sd 0.0198, t = 4.9, 95% CI [+0.007, +0.106]).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "experiments/statistics.h"
#include "experiments/verdict.h"

namespace headcount::testing {
namespace {

namespace ex = headcount::experiments;

TEST(Statistics, IncompleteBetaMatchesItsClosedForms) {
  for (double x : {0.0, 1e-6, 0.1, 0.37, 0.5, 0.8, 0.999, 1.0}) {
    EXPECT_NEAR(ex::regularized_incomplete_beta(x, 1, 1), x, 1e-14) << x;
    EXPECT_NEAR(ex::regularized_incomplete_beta(x, 3, 1), x * x * x, 1e-14) << x;
    EXPECT_NEAR(ex::regularized_incomplete_beta(x, 1, 4), 1 - std::pow(1 - x, 4), 1e-14) << x;
    // I_x(a, b) = 1 - I_{1-x}(b, a)
    EXPECT_NEAR(ex::regularized_incomplete_beta(x, 2.5, 0.5),
                1 - ex::regularized_incomplete_beta(1 - x, 0.5, 2.5), 1e-14)
        << x;
  }
  expect_error([] { ex::regularized_incomplete_beta(1.5, 1, 1); }, {"incomplete beta x", "1.5"});
  expect_error([] { ex::regularized_incomplete_beta(0.5, 0, 1); }, {"incomplete beta a, b"});
}

TEST(Statistics, StudentTQuantilesMatchTheTables) {
  struct Row {
    double dof, q975;
  };
  // Two-sided 95% critical values (e.g. NIST/SEMATECH e-Handbook, Table 1.3.6.7.2).
  for (const Row r : {Row{1, 12.7062}, Row{2, 4.30265}, Row{4, 2.77645}, Row{7, 2.36462},
                      Row{10, 2.22814}, Row{29, 2.04523}, Row{100, 1.98397}}) {
    const double t = ex::student_t_quantile(0.975, r.dof);
    EXPECT_NEAR(t, r.q975, 5e-6 * r.q975) << "dof " << r.dof;
    EXPECT_NEAR(ex::student_t_cdf(t, r.dof), 0.975, 1e-12) << "dof " << r.dof;
    EXPECT_NEAR(ex::student_t_quantile(0.025, r.dof), -t, 1e-12 * t);
  }
  EXPECT_EQ(ex::student_t_cdf(0, 3), 0.5);
  // dof 1 is the Cauchy distribution: F(t) = 1/2 + atan(t)/pi.
  for (double t : {-30.0, -1.0, 0.3, 2.0, 100.0})
    EXPECT_NEAR(ex::student_t_cdf(t, 1), 0.5 + std::atan(t) / M_PI, 1e-13) << t;
}

// P(X >= a) for the hypergeometric, from exact integer binomials (every table enumerated).
double fisher_by_enumeration(std::int64_t a, std::int64_t na, std::int64_t b, std::int64_t nb) {
  auto choose = [](std::int64_t n, std::int64_t r) {
    if (r < 0 || r > n) return std::uint64_t{0};
    std::uint64_t v = 1;
    for (std::int64_t i = 1; i <= r; ++i)
      v = v * static_cast<std::uint64_t>(n - r + i) / static_cast<std::uint64_t>(i);
    return v;
  };
  const std::int64_t k = a + b, n = na + nb;
  std::uint64_t tail = 0;
  for (std::int64_t x = a; x <= std::min(k, na); ++x) tail += choose(k, x) * choose(n - k, na - x);
  return static_cast<double>(tail) / static_cast<double>(choose(n, na));
}

TEST(Statistics, FisherOneSidedMatchesEnumerationAndTheProtocol) {
  for (std::int64_t a = 0; a <= 8; ++a)
    for (std::int64_t b = 0; b <= 8; ++b)
      EXPECT_NEAR(ex::fisher_one_sided(a, 8, b, 8), fisher_by_enumeration(a, 8, b, 8), 1e-12)
          << a << "/8 vs " << b << "/8";
  EXPECT_NEAR(ex::fisher_one_sided(3, 5, 1, 12), fisher_by_enumeration(3, 5, 1, 12), 1e-12);
  // The claims protocol's examples (rule R7).
  EXPECT_NEAR(ex::fisher_compare("a", 5, 8, "b", 0, 8).p, 0.013, 5e-4);
  EXPECT_NEAR(ex::fisher_compare("a", 6, 8, "b", 1, 8).p, 0.020, 5e-4);
  EXPECT_NEAR(ex::fisher_compare("a", 4, 8, "b", 0, 8).p, 0.038, 5e-4);
  const ex::FisherComparison not_enough = ex::fisher_compare("a", 6, 8, "b", 2, 8);
  EXPECT_NEAR(not_enough.p, 0.066, 5e-4);
  EXPECT_FALSE(not_enough.a_beats_b);
  EXPECT_TRUE(ex::fisher_compare("a", 5, 8, "b", 0, 8).a_beats_b);
  EXPECT_EQ(ex::fisher_one_sided(0, 8, 8, 8), 1.0);
  expect_error([] { ex::fisher_compare("a", 9, 8, "b", 0, 8); }, {"success counts", "9/8"});
}

TEST(Statistics, PairedComparisonReproducesTheProtocolOnTheCommittedHeadSweep) {
  std::ifstream in(std::string(HEADCOUNT_TESTDATA_DIR) +
                   "/../../bench/results/2026-12-01b-experiment-head-sweep.json");
  ASSERT_TRUE(in) << "the committed head-sweep result";
  const nlohmann::json r = nlohmann::json::parse(in);
  std::map<std::string, std::vector<double>> values;
  for (const auto& c : r["cells"])
    values[c["id"]] = c["stats"]["values"].get<std::vector<double>>();
  const ex::PairedComparison c =
      ex::paired_compare(ex::cell_stats("h=4", values["h=4"]), ex::cell_stats("h=1", values["h=1"]),
                         ex::MetricKind::loss);
  EXPECT_EQ(c.n, 3);
  EXPECT_NEAR(c.mean, 0.0565, 5e-5);
  EXPECT_NEAR(c.sd, 0.0198, 5e-5);
  EXPECT_NEAR(c.t, 4.9, 0.05);
  EXPECT_NEAR(c.low, 0.007, 5e-4);
  EXPECT_NEAR(c.high, 0.106, 5e-4);
  EXPECT_EQ(c.winner, "h=1");  // one head has the lower loss at that budget
  EXPECT_FALSE(c.equivalent);
}

TEST(Statistics, PairedComparisonBranches) {
  const auto cell = [](const char* id, std::vector<double> v) { return ex::cell_stats(id, v); };
  // Accuracy: a higher by 0.125 in every seed (exact in binary, so sd = 0): a wins, t infinite.
  ex::PairedComparison c =
      ex::paired_compare(cell("a", {0.75, 0.5, 0.625, 1.0, 0.875}),
                         cell("b", {0.625, 0.375, 0.5, 0.875, 0.75}), ex::MetricKind::accuracy);
  EXPECT_EQ(c.winner, "a");
  EXPECT_TRUE(std::isinf(c.t));
  // A difference inside the floor, tightly measured: equivalent, no winner.
  c = ex::paired_compare(cell("a", {1.001, 2.002, 3.0, 4.001, 5.0}),
                         cell("b", {1.0, 2.0, 3.001, 4.0, 5.0}), ex::MetricKind::loss);
  EXPECT_EQ(c.winner, "");
  EXPECT_TRUE(c.equivalent);
  // Noisy: the interval holds 0 and reaches past the floor: neither.
  c = ex::paired_compare(cell("a", {1.0, 1.2, 0.9, 1.1, 1.0}), cell("b", {1.1, 1.0, 1.0, 1.0, 1.1}),
                         ex::MetricKind::loss);
  EXPECT_EQ(c.winner, "");
  EXPECT_FALSE(c.equivalent);
  // Beyond the interval but under the floor: no winner.
  c = ex::paired_compare(cell("a", {1.0, 2.0, 3.0}), cell("b", {1.005, 2.006, 3.005}),
                         ex::MetricKind::loss);
  EXPECT_GT(c.low, -c.floor);
  EXPECT_LT(c.high, 0.0);
  EXPECT_EQ(c.winner, "");
  expect_error(
      [&] {
        ex::paired_compare(cell("a", {1, 2}), cell("b", {1, 2, 3}), ex::MetricKind::loss);
      },
      {"paired cells a and b", "2 and 3 values"});
  const nlohmann::json j = ex::to_json(c);
  EXPECT_EQ(j["n"], 3);
  EXPECT_EQ(j["interval"].size(), 2u);
}

TEST(Statistics, GatesAndTheNotLearnedVerdict) {
  EXPECT_TRUE(ex::gate("h=4 <= bigram - 0.25", ex::MetricKind::loss, 2.10, 2.05).passed);
  EXPECT_FALSE(ex::gate("h=4 <= bigram - 0.25", ex::MetricKind::loss, 2.10, 2.11).passed);
  EXPECT_TRUE(ex::gate("MHA recall >= 0.9", ex::MetricKind::accuracy, 0.9, 0.9).passed);
  EXPECT_FALSE(ex::gate("diverged", ex::MetricKind::loss, 2.10, NAN).passed);
  EXPECT_STREQ(ex::verdict_name(ex::Verdict::not_learned), "task not learned");
  EXPECT_TRUE(ex::to_json(ex::gate("g", ex::MetricKind::loss, 1, INFINITY))["measured"].is_null());
}

}  // namespace
}  // namespace headcount::testing
