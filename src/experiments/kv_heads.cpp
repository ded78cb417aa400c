// kv-heads (issue 11, claim 4): sharing K/V costs some quality. Two tasks, each trained from
// scratch with kv_heads in {h, h/2, h/4, 1} (h = 8), 3 seeds per cell:
//   mqar     assoc-recall in a hard setting: 16 key-value pairs, 16 queries, 64 keys and 64
//            values (vocab 129), seq_len 64; 2 layers, d_model 64; metric validation accuracy.
//   char-lm  the committed text, 2 layers, d_model 64, context 64; metric validation loss.
// Each cell's KV-cache bytes per token come from the cost model (model_cost.h). The MHA runs
// (kv_heads = h) are also converted by mean-pooling (compress.h's model::convert_kv_heads, on the
// trained model's definition) to every G < h, evaluated right after conversion, then uptrained for
// 5% of the run's steps and evaluated again (the at_final hook). The judge applies
// experiments-rules.md's kv-heads and conversion rules.
#include <algorithm>
#include <cmath>

#include "experiments/experiments.h"
#include "experiments/runner.h"
#include "experiments/uptrain.h"
#include "headcount/compress.h"
#include "headcount/error.h"
#include "headcount/train/definition.h"

namespace headcount::experiments {
namespace {

using detail::concat;
using nlohmann::json;

// The budget (the one place to change it), default and --quick; see make_kv_heads's text.
struct Budget {
  std::int64_t mqar_steps, lm_steps, mqar_batch, lm_batch, mqar_validation, lm_validation;
};
// Sized twice, by time only. First from single steps measured under load (~12 on 2 cores): an
// mqar step 160 ms at batch 32 (~80 ms at 16), a char-lm step 42 ms, giving 400 / 500 steps
// for a planned 11 minutes; that default grid then ran in 266 s (concurrently with blur), so
// both step counts were multiplied by 3 (266 s x 3 = 13.3 minutes). The first run's JSON is
// kept beside the final one (bench/results/2026-12-01-experiment-kv-heads-short.json).
constexpr Budget kBudget{.mqar_steps = 1200,
                         .lm_steps = 1500,
                         .mqar_batch = 16,
                         .lm_batch = 12,
                         .mqar_validation = 256,
                         .lm_validation = 240};
constexpr Budget kQuickBudget{.mqar_steps = 12,
                              .lm_steps = 12,
                              .mqar_batch = 8,
                              .lm_batch = 4,
                              .mqar_validation = 32,
                              .lm_validation = 16};
constexpr std::int64_t kHeads = 8, kDModel = 64, kLayers = 2;
constexpr double kUptrainFraction = 0.05;

struct TaskSpec {
  const char* name;
  MetricKind kind;
  const char* metric;  // final_metric's key
};
const TaskSpec kTasks[] = {{"mqar", MetricKind::accuracy, "validation_accuracy"},
                           {"char-lm", MetricKind::loss, "validation_loss"}};
const std::vector<std::int64_t> kKvHeads = {kHeads, kHeads / 2, kHeads / 4, 1};

std::string cell_id(const std::string& task, std::int64_t kv) { return concat(task, " kv=", kv); }

// The at_final hook of an MHA run: every G < h converted, evaluated, uptrained, evaluated.
json convert_and_uptrain(RunView& v) {
  const train::TrainConfig& base = v.trainer.config();
  if (base.model.kv_heads != base.model.heads) return json::object();
  json out = json::array();
  const std::int64_t up =
      std::max<std::int64_t>(1, std::llround(kUptrainFraction * static_cast<double>(base.steps)));
  for (const std::int64_t g : kKvHeads) {
    if (g == base.model.heads) continue;
    const model::Weights pooled =
        model::convert_kv_heads(train::to_weights(v.trainer.model()), g, KvConvertMethod::mean);
    train::Model converted = train::from_weights(pooled);
    const train::TaskMetrics just = evaluate(v.ctx, converted, v.trainer.task(), base.batch, 0);
    // The run's schedule compressed to the uptraining steps, at the run's own lr.
    const train::TaskMetrics after =
        uptrain_and_evaluate(v.ctx, base, pooled, g,
                             {.steps = up, .peak_lr = base.optim.lr, .min_lr = base.optim.min_lr});
    out.push_back({{"kv_heads", g},
                   {"uptrain_steps", up},
                   {"converted", metrics_json(just)},
                   {"uptrained", metrics_json(after)}});
  }
  return {{"conversion", out}};
}

std::vector<ClaimVerdict> judge_kv(const ExperimentResult& r) {
  std::vector<ClaimVerdict> out;
  ClaimVerdict kv{
      .id = "kv-heads.sharing-costs-quality",
      .claim = "sharing K/V (GQA/MQA) costs some quality for a smaller KV cache",
      .rule =
          "CONFIRMED if kv_heads = 1 is beaten by kv_heads = h (on either task) and no kv_heads < "
          "h "
          "beats kv_heads = h; REFUTED if kv_heads = 1 beats kv_heads = h; else NOT SHOWN."};
  bool h_beats_1 = false, some_beats_h = false, one_beats_h = false;
  std::string reason;
  json kv_rows = json::array(), conversion_rows = json::array();
  for (const TaskSpec& task : kTasks) {
    auto stats = [&](std::int64_t kv) {
      std::vector<double> values;
      for (const RunRecord* run : r.runs_of(r.cell_index(cell_id(task.name, kv))))
        values.push_back(final_metric(*run, task.metric));
      return cell_stats(cell_id(task.name, kv), values);
    };
    const CellStats full = stats(kHeads), one = stats(1);
    const Comparison c = compare(full, one, task.kind);
    kv.comparisons.push_back(c);
    const bool hb1 = beats(full, one, task.kind), ob = beats(one, full, task.kind);
    h_beats_1 = h_beats_1 || hb1;
    one_beats_h = one_beats_h || ob;
    json per_kv = json::array();
    for (const std::int64_t g : kKvHeads) {
      const CellStats s = stats(g);
      const RunRecord& first = *r.runs_of(r.cell_index(cell_id(task.name, g))).front();
      const bool b = g != kHeads && beats(s, full, task.kind);
      some_beats_h = some_beats_h || b;
      if (g != kHeads && g != 1) kv.comparisons.push_back(compare(full, s, task.kind));
      per_kv.push_back({{"kv_heads", g},
                        {"mean", s.mean},
                        {"std", s.std},
                        {"kv_cache_bytes_per_token", first.cost.kv_cache_bytes_per_token},
                        {"beats_mha", b}});
      kv_rows.push_back({task.name, task.metric, g, first.cost.kv_cache_bytes_per_token, s.mean,
                         s.std,
                         g == kHeads ? "-"
                         : b         ? "yes"
                                     : "no"});
    }
    kv.numbers[task.name] = {{"metric", task.metric}, {"by_kv_heads", per_kv}};
    reason += concat(task.name, " (", task.metric, "): kv=", kHeads, " ", full.mean, " vs kv=1 ",
                     one.mean,
                     hb1  ? " (kv=h beats)"
                     : ob ? " (kv=1 beats)"
                          : " (not distinguishable)",
                     "; ");
  }
  kv.verdict = one_beats_h                    ? Verdict::refuted
               : (h_beats_1 && !some_beats_h) ? Verdict::confirmed
                                              : Verdict::not_shown;
  kv.reason =
      reason + (kv.verdict == Verdict::confirmed ? "confirmed"
                : kv.verdict == Verdict::refuted ? "kv_heads = 1 beats kv_heads = h: refuted"
                : some_beats_h                   ? "a kv_heads < h beats kv_heads = h: not shown"
                               : "kv_heads = h does not beat kv_heads = 1: not shown");
  out.push_back(kv);

  // The conversion: per task and G, converted vs uptrained over the MHA cell's seeds.
  for (const TaskSpec& task : kTasks) {
    const auto runs = r.runs_of(r.cell_index(cell_id(task.name, kHeads)));
    for (const std::int64_t g : kKvHeads) {
      if (g == kHeads) continue;
      std::vector<double> converted, uptrained;
      for (const RunRecord* run : runs)
        for (const json& entry : run->measures.at("final").at("conversion"))
          if (entry.at("kv_heads") == g) {
            converted.push_back(entry.at("converted").at(task.metric).get<double>());
            uptrained.push_back(entry.at("uptrained").at(task.metric).get<double>());
          }
      const CellStats up =
          cell_stats(concat(task.name, " kv=", kHeads, "->", g, " uptrained"), uptrained);
      const CellStats just =
          cell_stats(concat(task.name, " kv=", kHeads, "->", g, " converted"), converted);
      ClaimVerdict v = pair_verdict(
          concat("kv-heads.uptraining-recovers.", task.name, ".G=", g),
          concat("a mean-pooled MHA model (", task.name, ", G = ", g,
                 ") recovers with 5% more steps of training"),
          "\"uptraining recovers\" if the uptrained model beats the just-converted one", up, just,
          task.kind);
      if (v.verdict == Verdict::confirmed) v.reason = "uptraining recovers: " + v.reason;
      const CellStats scratch = [&] {
        std::vector<double> values;
        for (const RunRecord* run : r.runs_of(r.cell_index(cell_id(task.name, g))))
          values.push_back(final_metric(*run, task.metric));
        return cell_stats(cell_id(task.name, g), values);
      }();
      v.numbers["from_scratch"] = to_json(scratch);
      v.numbers["uptrained_vs_from_scratch"] = to_json(compare(up, scratch, task.kind));
      conversion_rows.push_back({task.name, task.metric, g, just.mean, just.std, up.mean, up.std,
                                 scratch.mean, scratch.std, verdict_name(v.verdict)});
      out.push_back(v);
    }
  }
  out.front().numbers["tables"] = json::array(
      {{{"title",
         "kv-heads: final metric against the KV cache (cost model, f32, all layers, per token)"},
        {"columns",
         {"task", "metric", "kv_heads", "KV bytes / token", "mean", "std", "beats kv_heads = h"}},
        {"rows", kv_rows}},
       {{"title", "kv-heads: MHA mean-pooled to G heads, just converted and after 5% more steps"},
        {"columns",
         {"task", "metric", "G", "converted mean", "std", "uptrained mean", "std",
          "from scratch (kv = G) mean", "std", "uptraining recovers"}},
        {"rows", conversion_rows}}});
  return out;
}

}  // namespace

Experiment make_kv_heads(const ExperimentOptions& o) {
  HEADCOUNT_CHECK(o.steps >= 0, "--steps", ">= 1", o.steps);
  const Budget& b = o.quick ? kQuickBudget : kBudget;
  const std::int64_t mqar_steps = o.steps > 0 ? o.steps : b.mqar_steps;
  const std::int64_t lm_steps = o.steps > 0 ? o.steps : b.lm_steps;
  Experiment e{
      .name = "kv-heads",
      .summary =
          "MQAR and the char LM with kv_heads in {h, h/2, h/4, 1}, and MHA -> GQA by mean-pooling",
      .claim =
          "multi-query / grouped-query attention trade \"slightly less expressive matching\" for a "
          "smaller "
          "KV cache; a mean-pooled MHA model recovers with a little uptraining (Ainslie et al. "
          "2023)"};
  e.metric_kind = MetricKind::loss;  // the page's shared metric; the verdicts use each task's own
  e.metric = "validation_loss";
  e.sweep_label = "kv_heads";
  e.series_label = "task";
  e.eval_points = o.quick ? 2 : 4;
  e.eval_batches = o.quick ? 1 : 8;
  for (const TaskSpec& task : kTasks)
    for (const std::int64_t g : kKvHeads) {
      train::TrainConfig c;
      const bool mqar = std::string(task.name) == "mqar";
      if (mqar) {
        c.task = {{"name", "assoc-recall"},
                  {"num_pairs", 16},
                  {"num_queries", 16},
                  {"keys", 64},
                  {"values", 64},
                  {"seq_len", 64},
                  {"validation_sequences", b.mqar_validation}};
        c.optim = {.lr = 3e-3,
                   .min_lr = 3e-4,
                   .warmup_steps = std::min<std::int64_t>(100, mqar_steps / 10),
                   .decay_steps = mqar_steps,
                   .weight_decay = 0.01};
        c.steps = mqar_steps;
        c.batch = b.mqar_batch;
      } else {
        c.task = {{"name", "char-lm"}, {"seq_len", 64}, {"validation_sequences", b.lm_validation}};
        c.optim = {.lr = 1e-3,
                   .min_lr = 1e-4,
                   .warmup_steps = std::min<std::int64_t>(100, lm_steps / 10),
                   .decay_steps = lm_steps,
                   .weight_decay = 0.1};
        c.steps = lm_steps;
        c.batch = b.lm_batch;
      }
      c.model = {.layers = kLayers, .d_model = kDModel, .heads = kHeads, .kv_heads = g};
      e.cells.push_back({.id = cell_id(task.name, g),
                         .labels = {{"task", task.name}, {"kv_heads", g}},
                         .config = c});
    }
  e.budget = concat(
      "mqar: assoc-recall 16 pairs, 16 queries, 64 keys, 64 values, seq_len 64, batch ",
      b.mqar_batch, ", ", mqar_steps, " steps (AdamW 3e-3 -> 3e-4); char-lm: seq_len 64, batch ",
      b.lm_batch, ", ", lm_steps, " steps (AdamW 1e-3 -> 1e-4); both ", kLayers,
      " layers, d_model ", kDModel, ", ", kHeads, " heads; ", e.cells.size(), " cells x ", o.seeds,
      " seeds; the MHA runs are mean-pooled to every G < ", kHeads, " and uptrained for ",
      kUptrainFraction * 100, "% of their steps. ",
      o.quick ? "--quick: a smoke-sized run (< 60 s), not evidence."
              : "Steps were sized from measured step times so the default grid fits 15 minutes on "
                "2 cores "
                "(--threads 2); every verdict is about this budget.");
  e.at_final = convert_and_uptrain;
  e.judge = judge_kv;
  return e;
}

}  // namespace headcount::experiments
