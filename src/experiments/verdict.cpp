// The comparison rule and the verdicts of verdict.h, computed from the numbers alone.
#include "experiments/verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "experiments/statistics.h"
#include "headcount/error.h"

namespace headcount::experiments {

using detail::concat;
using nlohmann::json;

namespace {

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", v);
  return text;
}

std::string describe(const Comparison& c) {
  const std::string pair =
      concat(c.a, " ", number(c.mean_a), " ± ", number(c.std_a), " vs ", c.b, " ", number(c.mean_b),
             " ± ", number(c.std_b), ": gap ", number(c.gap));
  if (c.counts)
    return concat(pair, " > 2·max std ", number(c.noise), " and > floor ", number(c.floor), " -> ",
                  c.winner, " beats ", c.winner == c.a ? c.b : c.a);
  return concat(pair,
                c.gap <= c.noise ? concat(" <= 2·max std ", number(c.noise))
                                 : concat(" <= floor ", number(c.floor)),
                " -> not distinguishable");
}

}  // namespace

double practical_floor(MetricKind kind) {
  return kind == MetricKind::loss ? kLossFloor : kAccuracyFloor;
}
const char* metric_kind_name(MetricKind kind) {
  return kind == MetricKind::loss ? "loss" : "accuracy";
}

CellStats cell_stats(const std::string& cell, const std::vector<double>& values) {
  HEADCOUNT_CHECK(!values.empty(), concat("cell ", cell), "at least one seed's metric", "none");
  CellStats s{.cell = cell, .values = values, .n = static_cast<std::int64_t>(values.size())};
  double sum = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    HEADCOUNT_CHECK(std::isfinite(values[i]), concat("cell ", cell, " seed ", i), "a finite metric",
                    values[i]);
    sum += values[i];
  }
  s.mean = sum / static_cast<double>(s.n);
  if (s.n > 1) {
    double squares = 0;
    for (const double v : values) squares += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(squares / static_cast<double>(s.n - 1));
  }
  return s;
}

Comparison compare(const CellStats& a, const CellStats& b, MetricKind kind) {
  Comparison c{
      .a = a.cell, .b = b.cell, .mean_a = a.mean, .std_a = a.std, .mean_b = b.mean, .std_b = b.std};
  c.gap = std::fabs(a.mean - b.mean);
  c.noise = 2 * std::max(a.std, b.std);
  c.floor = practical_floor(kind);
  c.counts = c.gap > c.noise && c.gap > c.floor;
  if (c.counts) {
    const bool a_better = kind == MetricKind::loss ? a.mean < b.mean : a.mean > b.mean;
    c.winner = a_better ? a.cell : b.cell;
  }
  return c;
}

bool beats(const CellStats& a, const CellStats& b, MetricKind kind) {
  const Comparison c = compare(a, b, kind);
  return c.counts && c.winner == a.cell;
}

const CellStats& best_of(const std::vector<CellStats>& cells, MetricKind kind) {
  HEADCOUNT_CHECK(!cells.empty(), "best_of", "at least one cell", "none");
  const CellStats* best = &cells.front();
  for (const CellStats& c : cells)
    if (kind == MetricKind::loss ? c.mean < best->mean : c.mean > best->mean) best = &c;
  return *best;
}

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::confirmed:
      return "confirmed";
    case Verdict::refuted:
      return "refuted";
    case Verdict::not_shown:
      return "not shown";
    case Verdict::not_learned:
      return "task not learned";
  }
  return "not shown";
}

EffectReading read_effect(double low, double high, int predicted_sign, double predicted_size) {
  HEADCOUNT_CHECK(predicted_sign == 1 || predicted_sign == -1, "read_effect", "a sign of +1 or -1",
                  predicted_sign);
  HEADCOUNT_CHECK(low <= high, "read_effect", "an interval with low <= high",
                  concat("[", low, ", ", high, "]"));
  // The interval's upper end in the predicted direction: the most favourable reading.
  const double best = predicted_sign > 0 ? high : -low;
  if (best < 0 && predicted_size >= 0) return EffectReading::wrong_sign;
  if (best < predicted_size) return EffectReading::excludes_prediction;
  return EffectReading::consistent;
}

Verdict r_words(Verdict registered, EffectReading effect) {
  if (registered == Verdict::refuted && effect == EffectReading::consistent)
    return Verdict::not_shown;
  return registered;
}

std::string worded_verdict(Verdict verdict, const std::string& at) {
  HEADCOUNT_CHECK(!at.empty(), "worded_verdict", "the size and budget a verdict is at", "none");
  if (verdict == Verdict::not_shown) return concat("not shown at this size (", at, ")");
  return concat(verdict_name(verdict), " at ", at);
}

json to_json(const Comparison& c) {
  return {{"a", c.a},           {"b", c.b},           {"mean_a", c.mean_a}, {"std_a", c.std_a},
          {"mean_b", c.mean_b}, {"std_b", c.std_b},   {"gap", c.gap},       {"noise", c.noise},
          {"floor", c.floor},   {"counts", c.counts}, {"winner", c.winner}, {"text", describe(c)}};
}

json to_json(const CellStats& s) {
  return {{"cell", s.cell}, {"n", s.n}, {"mean", s.mean}, {"std", s.std}, {"values", s.values}};
}

json to_json(const ClaimVerdict& v) {
  json comparisons = json::array();
  for (const Comparison& c : v.comparisons) comparisons.push_back(to_json(c));
  return {{"id", v.id},          {"claim", v.claim},
          {"rule", v.rule},      {"verdict", verdict_name(v.verdict)},
          {"reason", v.reason},  {"comparisons", comparisons},
          {"numbers", v.numbers}};
}

ClaimVerdict pair_verdict(std::string id, std::string claim, std::string rule, const CellStats& a,
                          const CellStats& b, MetricKind kind) {
  ClaimVerdict v{.id = std::move(id), .claim = std::move(claim), .rule = std::move(rule)};
  const Comparison c = compare(a, b, kind);
  v.comparisons.push_back(c);
  if (c.counts && c.winner == a.cell)
    v.verdict = Verdict::confirmed;
  else if (c.counts)
    v.verdict = Verdict::refuted;
  v.reason = describe(c);
  return v;
}

ClaimVerdict all_pairs_verdict(std::string id, std::string claim, std::string rule,
                               const std::vector<CellStats>& a, const std::vector<CellStats>& b,
                               const std::vector<std::string>& labels, MetricKind kind) {
  HEADCOUNT_CHECK(!a.empty() && a.size() == b.size() && a.size() == labels.size(),
                  "all_pairs_verdict", "as many cells on each side as labels, at least one",
                  concat(a.size(), ", ", b.size(), ", ", labels.size()));
  ClaimVerdict v{.id = std::move(id), .claim = std::move(claim), .rule = std::move(rule)};
  std::size_t a_wins = 0, b_wins = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Comparison c = compare(a[i], b[i], kind);
    v.comparisons.push_back(c);
    a_wins += c.counts && c.winner == a[i].cell;
    b_wins += c.counts && c.winner == b[i].cell;
    v.reason += concat(v.reason.empty() ? "" : "; ", labels[i], ": ", describe(c));
  }
  if (a_wins == a.size())
    v.verdict = Verdict::confirmed;
  else if (b_wins == a.size())
    v.verdict = Verdict::refuted;
  v.numbers = {{"pairs", a.size()}, {"first_side_wins", a_wins}, {"second_side_wins", b_wins}};
  return v;
}

ClaimVerdict equality_verdict(std::string id, std::string claim, std::string rule,
                              const std::vector<std::string>& cells,
                              const std::vector<std::int64_t>& values) {
  HEADCOUNT_CHECK(!values.empty() && cells.size() == values.size(), "equality_verdict",
                  "one value per cell, at least one",
                  concat(cells.size(), " cells, ", values.size(), " values"));
  ClaimVerdict v{.id = std::move(id), .claim = std::move(claim), .rule = std::move(rule)};
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  v.verdict = *lo == *hi ? Verdict::confirmed : Verdict::refuted;
  json per_cell = json::object();
  for (std::size_t i = 0; i < cells.size(); ++i) per_cell[cells[i]] = values[i];
  v.numbers = {{"values", per_cell}, {"min", *lo}, {"max", *hi}};
  v.reason = *lo == *hi
                 ? concat("every cell: ", *lo, " (exactly equal)")
                 : concat("min ", *lo, " (", cells[static_cast<std::size_t>(lo - values.begin())],
                          ") != max ", *hi, " (",
                          cells[static_cast<std::size_t>(hi - values.begin())], ")");
  return v;
}

PairedComparison paired_compare(const CellStats& a, const CellStats& b, MetricKind kind,
                                double confidence) {
  HEADCOUNT_CHECK(a.n == b.n && a.n >= 2, concat("paired cells ", a.cell, " and ", b.cell),
                  "the same seeds, at least 2", concat(a.n, " and ", b.n, " values"));
  HEADCOUNT_CHECK(confidence > 0 && confidence < 1, "confidence", "in (0, 1)", confidence);
  PairedComparison c{
      .a = a.cell, .b = b.cell, .n = a.n, .confidence = confidence, .floor = practical_floor(kind)};
  for (std::size_t i = 0; i < a.values.size(); ++i)
    c.differences.push_back(a.values[i] - b.values[i]);
  const CellStats d = cell_stats(concat(a.cell, " - ", b.cell), c.differences);
  c.mean = d.mean;
  c.sd = d.std;
  const double se = c.sd / std::sqrt(static_cast<double>(c.n));
  c.t_critical = student_t_quantile(0.5 + confidence / 2, static_cast<double>(c.n - 1));
  // sd = 0 (every seed the same difference): the interval is that difference, t is ±inf or 0.
  c.t = se > 0
            ? c.mean / se
            : (c.mean == 0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), c.mean));
  c.low = c.mean - c.t_critical * se;
  c.high = c.mean + c.t_critical * se;
  const bool excludes_zero = c.low > 0 || c.high < 0;
  if (excludes_zero && std::fabs(c.mean) > c.floor) {
    // a - b below zero: a has the lower value, the better side of a loss.
    const bool a_lower = c.high < 0;
    c.winner = (kind == MetricKind::loss) == a_lower ? c.a : c.b;
  }
  c.equivalent = c.low > -c.floor && c.high < c.floor;
  return c;
}

FisherComparison fisher_compare(std::string a, std::int64_t successes_a, std::int64_t runs_a,
                                std::string b, std::int64_t successes_b, std::int64_t runs_b,
                                double alpha) {
  HEADCOUNT_CHECK(alpha > 0 && alpha < 1, "alpha", "in (0, 1)", alpha);
  FisherComparison c{.a = std::move(a),
                     .b = std::move(b),
                     .successes_a = successes_a,
                     .runs_a = runs_a,
                     .successes_b = successes_b,
                     .runs_b = runs_b,
                     .alpha = alpha};
  c.p = fisher_one_sided(successes_a, runs_a, successes_b, runs_b);
  c.a_beats_b = c.p < alpha;
  return c;
}

Verdict more_successes_verdict(const FisherComparison& a_over_b, std::int64_t refute_at) {
  if (a_over_b.a_beats_b) return Verdict::confirmed;
  if (a_over_b.successes_b >= refute_at && a_over_b.successes_b >= a_over_b.successes_a)
    return Verdict::refuted;
  return Verdict::not_shown;
}

Verdict fewer_at_larger_verdict(const FisherComparison& small_over_large,
                                const FisherComparison& large_over_small, bool control_holds) {
  if (small_over_large.a_beats_b && control_holds) return Verdict::confirmed;
  if (large_over_small.a_beats_b) return Verdict::refuted;
  return Verdict::not_shown;
}

Gate gate(std::string name, MetricKind kind, double level, double measured) {
  HEADCOUNT_CHECK(std::isfinite(level), concat("gate ", name, " level"), "a finite value", level);
  // A diverged reference run (NaN, inf) fails its gate rather than passing as a number.
  const bool passed =
      std::isfinite(measured) && (kind == MetricKind::loss ? measured <= level : measured >= level);
  return {.name = std::move(name),
          .kind = kind,
          .level = level,
          .measured = measured,
          .passed = passed};
}

json to_json(const PairedComparison& c) {
  return {{"a", c.a},
          {"b", c.b},
          {"rule", "paired t-interval of the per-seed differences a - b"},
          {"n", c.n},
          {"differences", c.differences},
          {"confidence", c.confidence},
          {"mean", c.mean},
          {"sd", c.sd},
          {"t", std::isfinite(c.t) ? json(c.t) : json(c.t > 0 ? "inf" : "-inf")},
          {"t_critical", c.t_critical},
          {"interval", {c.low, c.high}},
          {"floor", c.floor},
          {"winner", c.winner},
          {"equivalent", c.equivalent}};
}

json to_json(const FisherComparison& c) {
  return {{"a", c.a},
          {"b", c.b},
          {"rule", "one-sided Fisher exact test, a succeeds more often than b"},
          {"successes_a", c.successes_a},
          {"runs_a", c.runs_a},
          {"successes_b", c.successes_b},
          {"runs_b", c.runs_b},
          {"p", c.p},
          {"alpha", c.alpha},
          {"a_beats_b", c.a_beats_b}};
}

json to_json(const Gate& g) {
  return {{"name", g.name},
          {"kind", metric_kind_name(g.kind)},
          {"level", g.level},
          {"measured", std::isfinite(g.measured) ? json(g.measured) : json(nullptr)},
          {"passed", g.passed}};
}

}  // namespace headcount::experiments
