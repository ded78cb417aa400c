// small-heads: the claims protocol's E-G (bench/prereg/small-heads-v1.md). Do the heads of the
// small models headcount trains specialise, and can many be pruned? The models are E-C's test
// models at h = 1, 4, 8 (2 layers, d_model 64, 2,400 steps, E-C's pilot lr 1e-2, seeds 1-5),
// retrained here rather than saved: training is deterministic, so they are E-C's models bit
// for bit (--compare-with E-C's test JSON checks their test losses). After training, per model:
//   - per head, on the test windows: the previous-token fraction (offset 1) and the first-token
//     (sink) fraction (train/head_probe.h);
//   - on 256 sequences of 32 distinct random characters repeated twice (context 64): the
//     prefix-matching score of each head (Olsson et al. 2022: attention from a second-copy token
//     to the token after its first occurrence) and the repeat-loss drop (mean loss on the first
//     copy minus on the second);
//   - at h = 8 (16 heads): importance |dL/d gate| per head summed over the dev windows (Michel et
//     al. 2019), then the test loss with the least important 25 / 50 / 75 % of heads masked, and
//     with 5 random orders masked (the baseline).
// Gate: the h = 8 models' mean repeat-loss drop >= 0.5 nats, else "induction not learned".
// Rules: specialisation (h = 8, >= 4 of 5 seeds with a layer-0 previous-token head >= 0.5, a
// layer-1 prefix-matching head >= 0.3 and another layer-1 head < 0.1); pruning (h = 8, 50 %
// masked: the paired increase's 95 % interval below 0.056 nats and the importance order beating
// the random orders' mean).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "experiments/experiments.h"
#include "experiments/result.h"
#include "experiments/runner.h"
#include "experiments/stages.h"
#include "headcount/error.h"
#include "headcount/train/head_probe.h"

namespace headcount::experiments {
namespace {

using detail::concat;
using nlohmann::json;

constexpr std::int64_t kHeads[] = {1, 4, 8};
constexpr std::int64_t kDModel = 64, kPrunedHeads = 8;
constexpr double kLr = 1e-2;  // E-C's pilot pick for h = 1, 4, 8 (its pilot JSON)
constexpr std::int64_t kCopyLength = 32, kRepeatSequences = 256, kRepeatBatch = 32;
// (--quick's context of 32 takes copies of 16.)
constexpr double kGateDrop = 0.5, kPrevToken = 0.5, kInduction = 0.3, kOther = 0.1;
constexpr double kMargin = 0.056;  // ln(5.29 / 5.00): Vaswani's h = 1 -> 4 gain
constexpr double kFractions[] = {0.25, 0.5, 0.75};
constexpr int kRandomOrders = 5;

// The 256 repeated sequences (a fixed stream, the same for every model): tokens, and targets
// on the first copy (first = true: positions 0..30 predict 1..31) or the second (32..62).
train::Batch repeated_batch(std::int64_t vocab, std::int64_t copy, std::int64_t first_row,
                            std::int64_t rows, bool first) {
  train::Batch b{.batch = rows, .seq_len = 2 * copy, .tokens = {}, .targets = {}};
  for (std::int64_t r = first_row; r < first_row + rows; ++r) {
    std::vector<std::int32_t> symbols(static_cast<std::size_t>(vocab));
    std::iota(symbols.begin(), symbols.end(), 0);
    std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(r));
    std::shuffle(symbols.begin(), symbols.end(), rng);
    symbols.resize(static_cast<std::size_t>(copy));
    for (int which = 0; which < 2; ++which)
      for (std::int64_t i = 0; i < copy; ++i) {
        b.tokens.push_back(symbols[static_cast<std::size_t>(i)]);
        const bool scored = (which == 0) == first && i + 1 < copy;
        b.targets.push_back(scored ? symbols[static_cast<std::size_t>(i + 1)]
                                   : train::Batch::kIgnore);
      }
  }
  return b;
}

std::int64_t scored(const train::Batch& b) {
  return std::count_if(b.targets.begin(), b.targets.end(), [](std::int32_t t) { return t >= 0; });
}

// Mean test loss over every test window with the given head gates (empty: all ones).
double test_loss(Context& ctx, train::Model& model, const train::Task& task, std::int64_t batch,
                 const std::vector<std::vector<float>>& gates) {
  double sum = 0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < task.validation_batches(batch); ++i) {
    const train::Batch b = task.validation_batch(i, batch);
    const std::int64_t n = scored(b);
    sum += model.forward(ctx, b, nullptr, {.head_gates = gates}) * static_cast<double>(n);
    count += n;
  }
  return sum / static_cast<double>(count);
}

// Gates [layers][heads] with the heads in `order`'s first `masked` entries (flat l * H + h) at 0.
std::vector<std::vector<float>> masked_gates(std::int64_t layers, std::int64_t heads,
                                             const std::vector<std::int64_t>& order,
                                             std::int64_t masked) {
  std::vector<std::vector<float>> g(static_cast<std::size_t>(layers),
                                    std::vector<float>(static_cast<std::size_t>(heads), 1.0f));
  for (std::int64_t i = 0; i < masked; ++i)
    g[static_cast<std::size_t>(order[static_cast<std::size_t>(i)] / heads)]
     [static_cast<std::size_t>(order[static_cast<std::size_t>(i)] % heads)] = 0.0f;
  return g;
}

json measure(RunView& run) {
  train::Model& model = run.trainer.model();
  const train::TrainConfig& c = run.trainer.config();
  const train::Task& task = run.trainer.task();
  const std::int64_t L = c.model.layers, H = c.model.heads, vocab = c.model.vocab;
  json out;
  // Where each head looks on the test windows.
  const train::Relation sink{
      .name = "first token", .positions = [](const train::Batch&, std::int64_t, std::int64_t t) {
        return t > 0 ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{};
      }};
  const train::HeadProbeResult look = train::probe_heads(
      run.ctx, model, task, {train::offset_relation(1), sink}, c.batch, /*max_batches=*/8);
  // Prefix matching and the repeat-loss drop on the repeated sequences.
  std::vector<double> sums;
  std::vector<std::int64_t> counts;
  std::int64_t queries = 0;
  const std::vector<train::Relation> after = {train::previous_occurrence_relation(1)};
  double first_loss = 0, second_loss = 0;
  std::int64_t first_n = 0, second_n = 0;
  std::vector<std::vector<double>> layer_sums(static_cast<std::size_t>(L));
  std::vector<std::vector<std::int64_t>> layer_counts(static_cast<std::size_t>(L));
  const std::int64_t copy = std::min(kCopyLength, c.model.context / 2);
  HEADCOUNT_CHECK(vocab >= copy, "vocab", concat(">= ", copy, " (distinct symbols per copy)"),
                  vocab);
  for (std::int64_t r = 0; r < kRepeatSequences; r += kRepeatBatch) {
    const train::Batch one = repeated_batch(vocab, copy, r, kRepeatBatch, true);
    const train::Batch two = repeated_batch(vocab, copy, r, kRepeatBatch, false);
    first_loss += model.forward(run.ctx, one, nullptr) * static_cast<double>(scored(one));
    first_n += scored(one);
    second_loss += model.forward(run.ctx, two, nullptr, {.keep_probs = true}) *
                   static_cast<double>(scored(two));
    second_n += scored(two);
    for (std::int64_t l = 0; l < L; ++l)
      train::accumulate_head_probe(model.probs(l), two, after,
                                   layer_sums[static_cast<std::size_t>(l)],
                                   layer_counts[static_cast<std::size_t>(l)], queries);
  }
  json heads = json::array();
  for (std::int64_t l = 0; l < L; ++l) {
    // accumulate_head_probe's layout: per head, entropy sum then per relation (sum, count).
    const auto& s = layer_sums[static_cast<std::size_t>(l)];
    const auto& n = layer_counts[static_cast<std::size_t>(l)];
    const std::size_t per_head = s.size() / static_cast<std::size_t>(H);
    for (std::int64_t h = 0; h < H; ++h) {
      const std::size_t at = static_cast<std::size_t>(h) * per_head;
      const train::HeadLook& hl = look.heads[static_cast<std::size_t>(l * H + h)];
      const double prefix = n[at + 1] > 0 ? s[at + 1] / static_cast<double>(n[at + 1]) : 0.0;
      heads.push_back({{"layer", l},
                       {"head", h},
                       {"previous_token", hl.fractions[0]},
                       {"first_token", hl.fractions[1]},
                       {"entropy", hl.entropy},
                       {"prefix_matching", prefix}});
    }
  }
  out["heads"] = heads;
  out["repeat_loss"] = {{"first_copy", first_loss / static_cast<double>(first_n)},
                        {"second_copy", second_loss / static_cast<double>(second_n)},
                        {"drop", (first_loss / static_cast<double>(first_n)) -
                                     (second_loss / static_cast<double>(second_n))}};
  if (H != kPrunedHeads) return out;

  // Importance on dev (Michel et al.): per head, the sum over dev windows of |dL/d gate|.
  json dev_config = c.task;
  dev_config["split"] = "dev";
  const auto dev = train::make_task(dev_config);
  std::vector<double> importance(static_cast<std::size_t>(L * H), 0.0);
  for (std::int64_t i = 0; i < dev->validation_batches(c.batch); ++i) {
    model.forward_backward(run.ctx, dev->validation_batch(i, c.batch));
    for (const auto& sequence : model.sequence_gate_grads())
      for (std::int64_t l = 0; l < L; ++l)
        for (std::int64_t h = 0; h < H; ++h)
          importance[static_cast<std::size_t>(l * H + h)] +=
              std::fabs(sequence[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)]);
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(L * H));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return importance[static_cast<std::size_t>(a)] < importance[static_cast<std::size_t>(b)];
  });
  const double full = test_loss(run.ctx, model, task, c.batch, {});
  json by_importance = json::object(), random_mean = json::object();
  for (const double f : kFractions) {
    const auto masked = static_cast<std::int64_t>(std::llround(f * static_cast<double>(L * H)));
    by_importance[concat(f)] =
        test_loss(run.ctx, model, task, c.batch, masked_gates(L, H, order, masked));
    double sum = 0;
    for (int k = 0; k < kRandomOrders; ++k) {
      std::vector<std::int64_t> shuffled(order);
      std::mt19937_64 rng(7000 + static_cast<std::uint64_t>(k));
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      sum += test_loss(run.ctx, model, task, c.batch, masked_gates(L, H, shuffled, masked));
    }
    random_mean[concat(f)] = sum / kRandomOrders;
  }
  out["pruning"] = {{"importance", importance},
                    {"order", order},
                    {"full", full},
                    {"by_importance", by_importance},
                    {"random_mean", random_mean}};
  return out;
}

ClaimVerdict verdict_from(std::string id, std::string claim, std::string rule) {
  return {.id = std::move(id), .claim = std::move(claim), .rule = std::move(rule)};
}

std::vector<ClaimVerdict> judge(const ExperimentResult& r) {
  ClaimVerdict spec = verdict_from(
      "small-heads.specialise", "heads specialise: a previous-token head and an induction head",
      "h = 8: confirmed iff in >= 4 of 5 seeds a layer-0 head has previous-token fraction >= 0.5, "
      "a layer-1 head prefix-matching >= 0.3 and another layer-1 head prefix-matching < 0.1; "
      "refuted iff no seed has the first two; else not shown");
  ClaimVerdict prune = verdict_from(
      "small-heads.prune", "many heads can be pruned (Michel et al. 2019)",
      "h = 8, 50 % of the 16 heads masked by importance: confirmed iff the paired test-loss "
      "increase's 95 % interval lies below 0.056 nats and the importance order beats the random "
      "orders' mean; refuted iff its lower end is above 0.056; else not shown");
  const std::string h8 = concat("h=", kPrunedHeads);
  if (!r.has_cell(h8)) {
    for (ClaimVerdict* v : {&spec, &prune}) {
      v->verdict = Verdict::not_shown;
      v->reason = "--quick: no h = 8 models";
    }
    return {spec, prune};
  }
  const std::vector<const RunRecord*> runs = r.runs_of(r.cell_index(h8));
  double drop = 0;
  int with_both = 0, with_all = 0;
  std::vector<double> full, masked, random;
  json per_seed = json::array();
  for (const RunRecord* run : runs) {
    const json& m = run->measures.at("final");
    drop += m.at("repeat_loss").at("drop").get<double>() / static_cast<double>(runs.size());
    double best_prev = 0, best_prefix = 0;
    std::int64_t best_head = -1;
    for (const json& h : m.at("heads")) {
      if (h.at("layer") == 0) best_prev = std::max(best_prev, h.at("previous_token").get<double>());
      if (h.at("layer") == 1 && h.at("prefix_matching").get<double>() > best_prefix) {
        best_prefix = h.at("prefix_matching").get<double>();
        best_head = h.at("head").get<std::int64_t>();
      }
    }
    bool other = false;
    for (const json& h : m.at("heads"))
      if (h.at("layer") == 1 && h.at("head") != best_head &&
          h.at("prefix_matching").get<double>() < kOther)
        other = true;
    const bool both = best_prev >= kPrevToken && best_prefix >= kInduction;
    with_both += both;
    with_all += both && other;
    per_seed.push_back({{"seed", run->seed},
                        {"best_previous_token_layer0", best_prev},
                        {"best_prefix_matching_layer1", best_prefix},
                        {"another_layer1_head_below_0.1", other}});
    const json& p = m.at("pruning");
    full.push_back(p.at("full").get<double>());
    masked.push_back(p.at("by_importance").at("0.5").get<double>());
    random.push_back(p.at("random_mean").at("0.5").get<double>());
  }
  const Gate g = gate(concat("h = 8 mean repeat-loss drop >= ", kGateDrop), MetricKind::accuracy,
                      kGateDrop, drop);
  spec.numbers = {{"gate", to_json(g)}, {"per_seed", per_seed}};
  prune.numbers = {{"gate", to_json(g)}};
  // The models are E-C's: their test losses equal its JSON's, seed by seed (--compare-with).
  const json& ec = r.options.compare_with;
  if (ec.is_object()) {
    int same = 0, compared = 0;
    for (const json& run : ec.at("runs"))
      for (const RunRecord& mine : r.runs)
        if (run.at("seed").get<std::uint64_t>() == mine.seed &&
            run.at("cell").get<std::string>() == r.experiment->cells[mine.cell].id) {
          ++compared;
          same += run.at("final").at("validation_loss").get<double>() == mine.final.loss;
        }
    spec.numbers["e_c_models"] = {{"compared", compared}, {"bitwise_equal_test_loss", same}};
  }

  if (!g.passed) {
    for (ClaimVerdict* v : {&spec, &prune}) {
      v->verdict = Verdict::not_learned;
      v->reason = concat("induction not learned at this budget: mean repeat-loss drop ", drop,
                         " < ", kGateDrop);
    }
    return {spec, prune};
  }
  const int n = static_cast<int>(runs.size());
  spec.verdict = with_all >= 4 && n >= 5 ? Verdict::confirmed
                 : with_both == 0        ? Verdict::refuted
                                         : Verdict::not_shown;
  spec.reason = concat(with_all, " of ", n, " seeds have all three heads; ", with_both,
                       " have a previous-token and an induction head; repeat-loss drop ", drop);
  if (n < 2) {
    prune.verdict = Verdict::not_shown;
    prune.reason = "one seed: no interval";
    return {spec, prune};
  }
  const PairedComparison increase =
      paired_compare(cell_stats("masked 50%", masked), cell_stats("full", full), MetricKind::loss);
  const PairedComparison vs_random =
      paired_compare(cell_stats("importance order", masked), cell_stats("random orders", random),
                     MetricKind::loss);
  prune.numbers["primary"] = to_json(increase);
  prune.numbers["importance_vs_random"] = to_json(vs_random);
  const bool beats_random = vs_random.winner == "importance order";
  prune.verdict = increase.high < kMargin && beats_random ? Verdict::confirmed
                  : increase.low > kMargin                ? Verdict::refuted
                                                          : Verdict::not_shown;
  prune.reason =
      concat("50 % masked - full = ", increase.mean, " nats/char [", increase.low, ", ",
             increase.high, "] (margin ", kMargin, "); importance - random = ", vs_random.mean,
             " [", vs_random.low, ", ", vs_random.high, "]");
  return {spec, prune};
}

}  // namespace

Experiment make_small_heads(const ExperimentOptions& o) {
  const std::int64_t steps = o.steps > 0 ? o.steps : head_sweep_tuned_steps(o.quick);
  Experiment e{.name = "small-heads",
               .summary =
                   "E-G: E-C's char-LM models at h = 1, 4, 8 (retrained, deterministic): "
                   "previous-token, induction and sink heads; pruning by importance",
               .claim =
                   "the heads of a small trained model specialise (a previous-token and an "
                   "induction head), and many of them can be pruned"};
  e.metric_kind = MetricKind::loss;
  e.metric = "validation_loss";
  e.sweep_label = "heads";
  e.series_label = "series";
  e.eval_points = 1;
  e.prereg = "bench/prereg/small-heads-v1.md";
  for (const std::int64_t h : kHeads) {
    if (o.quick && h != kPrunedHeads) continue;
    train::TrainConfig c = head_sweep_tuned_cell(h, kDModel / h, steps, "test", o.quick);
    c.optim.lr = kLr;
    c.optim.min_lr = kLr / 10;
    e.cells.push_back({.id = concat("h=", h),
                       .labels = {{"series", "E-C main"}, {"heads", h}, {"head_dim", kDModel / h}},
                       .config = c});
  }
  // --compare-with: E-C's test result, checked before any training (the judge reads its runs'
  // cell, seed and final test loss).
  if (o.compare_with.is_object()) {
    const json& ec = o.compare_with;
    bool whole = ec.value("format", "") == kResultFormat && ec.contains("runs") &&
                 ec.at("runs").is_array() && !ec.at("runs").empty();
    if (whole)
      for (const json& run : ec.at("runs"))
        whole = whole && run.contains("cell") && run.at("cell").is_string() &&
                run.contains("seed") && run.at("seed").is_number_unsigned() &&
                run.contains("final") && run.at("final").contains("validation_loss") &&
                run.at("final").at("validation_loss").is_number();
    HEADCOUNT_CHECK(whole, "--compare-with",
                    "a head-sweep-tuned result JSON with runs (cell, seed, final.validation_loss)",
                    "another document");
  }
  e.at_final = measure;
  e.budget = concat(
      "E-C's test models retrained (2,400 steps at lr 1e-2, seeds as given; "
      "deterministic, so E-C's own), then forward passes only: head probes on the "
      "test windows, 256 repeated random sequences, importance on dev and masked "
      "test losses at h = 8. ",
      o.quick ? "--quick: h = 8, one layer, 60 steps, not evidence." : "");
  e.judge = judge;
  return e;
}

Experiment make_small_heads_v2(const ExperimentOptions& o) {
  ExperimentOptions longer = o;
  if (longer.steps == 0 && !o.quick) longer.steps = 4 * head_sweep_tuned_steps(false);
  Experiment e = make_small_heads(longer);
  e.name = "small-heads-v2";
  e.summary =
      "E-G v2, the ladder step after v1's gate failed: E-C's char-LM cells at 4N = 9,600 steps "
      "(lr 1e-2, no pilot at 4N), the same measures, gate and rules";
  e.prereg = "bench/prereg/small-heads-v2.md";
  return e;
}

// v3, the ladder's next rung after v2 (bench/prereg/small-heads-v3.md): a task that rewards
// copying from context. E-C's cells and N, on the char LM with half the windows repeated (half a
// window of the novel written twice), fresh seeds; the measures, gate and rules unchanged.
constexpr double kRepeatFraction = 0.5;

Experiment make_small_heads_v3(const ExperimentOptions& o) {
  Experiment e = make_small_heads(o);
  e.name = "small-heads-v3";
  e.summary =
      "E-G v3, the ladder's next rung: E-C's char-LM cells with half the windows repeated "
      "(copying from context pays), the same measures, gate and rules";
  e.prereg = "bench/prereg/small-heads-v3.md";
  for (Cell& cell : e.cells) cell.config.task["repeat_fraction"] = kRepeatFraction;
  e.budget = concat(e.budget, " v3: half of every split's windows repeated (repeat_fraction ",
                    kRepeatFraction, ").");
  return e;
}

// v4 (bench/prereg/small-heads-v4.md, registered after v3): v3 with rotary positions instead of
// the learned position table, the change that let E-D's narrow heads learn recall (v4 there).
Experiment make_small_heads_v4(const ExperimentOptions& o) {
  Experiment e = make_small_heads_v3(o);
  e.name = "small-heads-v4";
  e.summary =
      "E-G v4: small-heads-v3 (half the windows repeated) with rotary positions instead of the "
      "learned position table";
  e.prereg = "bench/prereg/small-heads-v4.md";
  for (Cell& cell : e.cells) cell.config.model.rope_base = 10000.0f;
  e.budget = concat(e.budget, " v4: rotary positions (rope_base 10,000), no position table.");
  return e;
}

}  // namespace headcount::experiments
