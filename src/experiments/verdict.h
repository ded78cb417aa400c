// The rules of evidence of issue 11 (written in the session notes of that issue, not kept in the
// repository; fixed before any run): per-cell statistics over seeds, when a difference between two
// cells counts, and the three verdicts. Every experiment's verdicts are computed here from the
// numbers, so the JSON and the page only ever show what these functions returned.
//
//   cell stats:  n seeds' final metrics -> mean, sample std (n - 1; 0 when n = 1)
//   "A beats B": |mean_A - mean_B| > 2 max(std_A, std_B)  AND  |mean_A - mean_B| > floor
//                (floor 0.02 for accuracies, 0.01 nats for losses), and A is on the better side
//                (higher accuracy, lower loss). Otherwise the two are "not distinguishable".
//   verdicts:    confirmed / refuted / not shown, as each claim defines them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace headcount::experiments {

// Which way is better, and the practical floor of a difference.
enum class MetricKind { loss, accuracy };
inline constexpr double kLossFloor = 0.01;      // nats
inline constexpr double kAccuracyFloor = 0.02;  // fraction
double practical_floor(MetricKind kind);
const char* metric_kind_name(MetricKind kind);  // "loss" | "accuracy"

struct CellStats {
  std::string cell;            // the cell's id
  std::vector<double> values;  // one final metric per seed, in seed order
  double mean = 0, std = 0;    // sample standard deviation (n - 1); 0 for one value
  std::int64_t n = 0;
};
// Throws Error on no values or a non-finite one (a diverged run must not become a number).
CellStats cell_stats(const std::string& cell, const std::vector<double>& values);

// One application of the comparison rule, with every number it used.
struct Comparison {
  std::string a, b;  // cell ids
  double mean_a = 0, std_a = 0, mean_b = 0, std_b = 0;
  double gap = 0;       // |mean_a - mean_b|
  double noise = 0;     // 2 max(std_a, std_b)
  double floor = 0;     // the practical floor of the metric kind
  bool counts = false;  // gap > noise && gap > floor
  std::string winner;   // a or b (the better side) when counts; "" = not distinguishable
};
Comparison compare(const CellStats& a, const CellStats& b, MetricKind kind);
// a beats b: the difference counts and a is on the better side.
bool beats(const CellStats& a, const CellStats& b, MetricKind kind);

// The cell with the best mean (lowest loss / highest accuracy); ties keep the first. Throws on
// an empty list.
const CellStats& best_of(const std::vector<CellStats>& cells, MetricKind kind);

enum class Verdict { confirmed, refuted, not_shown };
const char* verdict_name(Verdict verdict);  // "confirmed" | "refuted" | "not shown"

// A claim's verdict as the JSON and the page carry it.
struct ClaimVerdict {
  std::string id;     // e.g. "head-sweep.split-helps"
  std::string claim;  // what is claimed
  std::string rule;   // the rule as written in experiments-rules.md
  Verdict verdict = Verdict::not_shown;
  std::string reason;  // which branch of the rule fired, in words built from the numbers
  std::vector<Comparison> comparisons;
  nlohmann::json numbers = nlohmann::json::object();  // any other figure the rule used
};

nlohmann::json to_json(const Comparison& c);
nlohmann::json to_json(const CellStats& s);
nlohmann::json to_json(const ClaimVerdict& v);

// "confirmed if A beats B; refuted if B beats A; else not shown" for one pair.
ClaimVerdict pair_verdict(std::string id, std::string claim, std::string rule, const CellStats& a,
                          const CellStats& b, MetricKind kind);

// "confirmed if a_i beats b_i for every i; refuted if b_i beats a_i for every i; else not shown"
// (the scale claim: 1/sqrt(head_dim) vs 1/sqrt(d_model) at each h). `labels` names each pair.
ClaimVerdict all_pairs_verdict(std::string id, std::string claim, std::string rule,
                               const std::vector<CellStats>& a, const std::vector<CellStats>& b,
                               const std::vector<std::string>& labels, MetricKind kind);

// "confirmed if every value is exactly equal; else refuted" (the cost claim: multiply-adds
// per step identical across cells).
ClaimVerdict equality_verdict(std::string id, std::string claim, std::string rule,
                              const std::vector<std::string>& cells,
                              const std::vector<std::int64_t>& values);

}  // namespace headcount::experiments
