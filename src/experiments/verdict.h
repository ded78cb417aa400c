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

// not_learned: the positive-control gate failed, so no comparison is judged (rule R6 of the
// claims protocol, docs/what-the-split-buys.md).
enum class Verdict { confirmed, refuted, not_shown, not_learned };
// "confirmed" | "refuted" | "not shown" | "task not learned"
const char* verdict_name(Verdict verdict);

// R-words (claims protocol, third edition, §5): the words a verdict is reported in. "Refuted" is
// reserved for an effect of the wrong sign, or one whose interval excludes the predicted size; an
// effect of the predicted sign that misses a threshold is "not shown at this size". A registered
// rule's own branch (ClaimVerdict::verdict, as its JSON carries it) is not changed by this: the
// registrations made before the third edition keep reproducing their JSON, and their verdicts
// are reworded where they are reported (README, docs/what-the-split-buys.md).
enum class EffectReading {
  wrong_sign,           // the interval lies wholly on the side opposite to the prediction
  excludes_prediction,  // the interval lies wholly short of the predicted size
  consistent            // the interval reaches the predicted side and size (or straddles them)
};
// The claim predicts predicted_sign * (a - b) >= predicted_size (predicted_sign +1 or -1;
// predicted_size 0 when only the sign is predicted, negative for a non-inferiority margin, e.g.
// -0.056 for "an increase of at most 0.056"). [low, high] is the interval of a - b. Throws
// Error on a sign other than +-1 or low > high.
EffectReading read_effect(double low, double high, int predicted_sign, double predicted_size);
// The registered verdict in R-words: refuted stays refuted only for wrong_sign or
// excludes_prediction; otherwise it reads not_shown. Other verdicts are unchanged.
Verdict r_words(Verdict registered, EffectReading effect);
// "<verdict> at <size, budget>", e.g. "not shown at 2,400 steps, 2 layers, d_model 64". A
// not_shown verdict says "not shown at this size (<at>)". Throws Error on an empty `at`.
std::string worded_verdict(Verdict verdict, const std::string& at);

// Rule R7 for continuous metrics, paired by seed: d_s = a_s - b_s (the two cells ran the same
// seeds, in the same order), their mean, sample sd, t = mean / (sd / sqrt(n)) and the two-sided
// `confidence` t-interval with n - 1 degrees of freedom. A beats B iff the interval excludes 0
// on A's better side (lower loss, higher accuracy) and |mean| > floor; the two are equivalent
// iff the interval lies inside (-floor, +floor); otherwise not distinguishable.
struct PairedComparison {
  std::string a, b;
  std::vector<double> differences;  // d_s, seed order
  std::int64_t n = 0;
  double confidence = 0.95;
  double mean = 0, sd = 0, t = 0, t_critical = 0, low = 0, high = 0;
  double floor = 0;
  std::string winner;  // a or b when one beats the other, else ""
  bool equivalent = false;
};
// Throws Error unless both cells have the same number (>= 2) of values.
PairedComparison paired_compare(const CellStats& a, const CellStats& b, MetricKind kind,
                                double confidence = 0.95);

// Rule R7 for success rates: one-sided Fisher exact test that A succeeds more often than B
// (statistics.h), A beats B iff p < alpha.
struct FisherComparison {
  std::string a, b;
  std::int64_t successes_a = 0, runs_a = 0, successes_b = 0, runs_b = 0;
  double p = 1, alpha = 0.05;
  bool a_beats_b = false;
};
FisherComparison fisher_compare(std::string a, std::int64_t successes_a, std::int64_t runs_a,
                                std::string b, std::int64_t successes_b, std::int64_t runs_b,
                                double alpha = 0.05);

// R-counts (claims protocol, third edition, §5): success-count rules on Fisher comparisons.
// "A succeeds more often than B": confirmed iff Fisher says A beats B (a_over_b.a_beats_b);
// refuted iff B succeeds in at least `refute_at` runs and no less often than A; else not shown.
Verdict more_successes_verdict(const FisherComparison& a_over_b, std::int64_t refute_at);
// "An arm succeeds less often as the task grows" (a ladder): confirmed iff the arm's count at
// the small rung beats its count at the large one (small_over_large.a_beats_b) while
// `control_holds` (the reference arm keeps learning at the large rung); refuted iff the count at
// the large rung beats the small one's (large_over_small.a_beats_b, the wrong sign); else not
// shown.
Verdict fewer_at_larger_verdict(const FisherComparison& small_over_large,
                                const FisherComparison& large_over_small, bool control_holds);

// Rule R6: a positive-control gate, "the reference arm reaches `level`" (a loss at or below it,
// an accuracy at or above it). A failed gate makes the experiment's verdict not_learned.
struct Gate {
  std::string name;  // what must be reached, in words
  MetricKind kind = MetricKind::loss;
  double level = 0, measured = 0;
  bool passed = false;
};
Gate gate(std::string name, MetricKind kind, double level, double measured);

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
nlohmann::json to_json(const PairedComparison& c);
nlohmann::json to_json(const FisherComparison& c);
nlohmann::json to_json(const Gate& g);

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
