// The experiments `headcount experiment` knows, in --list order. A new experiment adds its
// factory to experiments.h and one row here.
#include "experiments/experiments.h"
#include "headcount/error.h"

namespace headcount::experiments {

std::vector<ExperimentSpec> experiment_specs() {
  return {
      {.name = "head-sweep",
       .summary = "char LM, 4 layers, d_model 128: h = 1..64 at equal cost (head_dim 128..2), plus "
                  "head_dim fixed at 16",
       .make = make_head_sweep},
      {.name = "scale",
       .summary =
           "head-sweep's model at h = 8 and 32: score scale 1/sqrt(head_dim) vs 1/sqrt(d_model)",
       .make = make_scale},
      {.name = "blur",
       .summary = "one softmax blurs: multi-relation variants at h = 1..8 (1 layer) and ESP, 1 vs "
                  "2 heads, cyclic vs acyclic",
       .make = make_blur},
      {.name = "kv-heads",
       .summary = "MQAR and the char LM with kv_heads h, h/2, h/4, 1; MHA mean-pooled to GQA, then "
                  "uptrained 5%",
       .make = make_kv_heads},
      {.name = "esp-paper",
       .summary = "E-A: the published Endpoint Selection Problem, 1 head vs 2, against the "
                  "one-head ceiling 1 - MFAS/(2m) (stages: probe, pilot, test)",
       .make = make_esp_paper},
      {.name = "esp-paper-v2",
       .summary = "E-A v2: esp-paper with every bias frozen at zero in every cell (the "
                  "theorem's model class; registered after v1's pilot)",
       .make = make_esp_paper_v2},
      {.name = "retrieval-learnability",
       .summary = "E-B: multi-retrieval key-value (a content relation and an offset), h = 1..8, "
                  "attention + MLP and attention-only, success counts on test; pair control",
       .make = make_retrieval_learnability},
      {.name = "retrieval-learnability-long",
       .summary = "E-B, the long budget: key-value at h = 1 and 2 (attention + MLP) and the pair "
                  "control at 3 x the steps, own pilot, fresh seeds 201-208",
       .make = make_retrieval_learnability_long},
      {.name = "mqar-headdim",
       .summary = "E-D: MQAR (8 pairs, 64 keys), 2 layers, h = 1..32 heads of 64/h plus h = 32 "
                  "at head_dim 16; lr per cell from a pilot on dev, 5 paired seeds on test",
       .make = make_mqar_headdim},
      {.name = "mqar-headdim-v2",
       .summary = "E-D v2: mqar-headdim on the ladder's next rung, 4 pairs and 4 queries in rows "
                  "of 16 (registered after v1's pilot failed the gate)",
       .make = make_mqar_headdim_v2},
      {.name = "mqar-headdim-v3",
       .summary = "E-D v3: v2 with the pilot's lr grid a third lower (3e-4 / 1e-3 / 3e-3), "
                  "registered after v2's test, where only the cell piloted at 3e-4 learned",
       .make = make_mqar_headdim_v3},
      {.name = "mqar-headdim-v4",
       .summary = "E-D v4: v3 with rotary positions instead of the learned position table "
                  "(registered after v3's test; fresh seeds 201-205)",
       .make = make_mqar_headdim_v4},
      {.name = "mqar-headdim-v4-long",
       .summary = "E-D, the long budget: mqar-headdim-v4 on MQAR's rung 2 (256 keys) at 7,700 "
                  "steps, own pilot, fresh seeds 801-805",
       .make = make_mqar_headdim_v4_long},
      {.name = "mqar-headdim-nopos",
       .summary = "E-D without the position confound: MQAR (4 pairs) at 16 / 64 / 256 keys, h = "
                  "4, 16, 32 of 64/h, learned positions; R-pilot3, success counts on seeds "
                  "1301-1308",
       .make = make_mqar_headdim_nopos},
      {.name = "head-sweep-tuned",
       .summary = "E-C: char LM, h = 1..32 heads of 64/h at fixed d_model, lr per cell from a "
                  "pilot on dev, 5 paired seeds on test, plus head_dim 16 at h = 32",
       .make = make_head_sweep_tuned},
      {.name = "head-sweep-budget",
       .summary = "E-C (d): head-sweep-tuned's main series at N/4 steps with its own pilot; the "
                  "gap h=4 - h=1 against the budget (--compare-with the N test)",
       .make = make_head_sweep_budget},
      {.name = "head-sweep-budget-long",
       .summary = "E-C (d), the long budget: h = 1, 4, 8 at 4N = 9,600 steps with their own "
                  "pilot; the gap h=4 - h=1 against the N test on the same seeds (--compare-with)",
       .make = make_head_sweep_budget_long},
      {.name = "head-sweep-tuned-b",
       .summary = "E-C (b) re-registered: h = 4 against h = 32 on the char LM at N = 2,400 steps, "
                  "R-pilot3, 15 fresh seeds (1001-1015), the t-rule on test loss",
       .make = make_head_sweep_tuned_b},
      {.name = "scale-envelope",
       .summary = "E-E: E-C's char LM at h = 1 and 16, score scale none / 1/sqrt(d_k) / "
                  "1/sqrt(d), W_Q/W_K init 0.02 or 0.125 (10 cells), lr per cell from a pilot",
       .make = make_scale_envelope},
      {.name = "scale-envelope-long",
       .summary = "E-E, the long budget: the ten cells at 4N = 9,600 steps with their own pilot "
                  "at 4N, fresh seeds 601-605",
       .make = make_scale_envelope_long},
      {.name = "small-heads",
       .summary = "E-G: E-C's char-LM models at h = 1, 4, 8 (retrained, deterministic): "
                  "previous-token, induction and sink heads; pruning by importance (--seeds 5)",
       .make = make_small_heads},
      {.name = "small-heads-v2",
       .summary = "E-G v2: small-heads at 4N = 9,600 steps (the ladder step after v1's "
                  "induction gate failed)",
       .make = make_small_heads_v2},
      {.name = "small-heads-v3",
       .summary = "E-G v3: E-C's char-LM cells with half the windows repeated, so copying from "
                  "context pays (the ladder step after v2's induction gate failed)",
       .make = make_small_heads_v3},
      {.name = "small-heads-v4",
       .summary = "E-G v4: small-heads-v3 with rotary positions instead of the learned position "
                  "table (the change that let E-D's narrow heads learn recall)",
       .make = make_small_heads_v4},
      {.name = "kv-capacity",
       .summary = "E-F: MQAR with 8 query heads over 8 / 2 / 1 K/V heads and an equal-KV-bytes "
                  "arm; MHA mean-pooled to 2 and 1, uptrained, against controls",
       .make = make_kv_capacity},
      {.name = "kv-capacity-long",
       .summary = "E-F, the long budget: kv-capacity on MQAR's rung 2 (256 keys) at 14,000 "
                  "steps, own pilot, fresh seeds 701-705",
       .make = make_kv_capacity_long},
      {.name = "kv-capacity-charlm-long",
       .summary = "E-F's char-LM arm (long budget): E-C's char LM, 8 query heads of 8 over kv 8 / "
                  "2 / 1 at 4N = 9,600 steps, mean-pooling and uptraining with controls A and B",
       .make = make_kv_capacity_charlm_long},
      {.name = "kv-capacity-matched",
       .summary = "E-F with weight-matched twins: MQAR at 256 keys, kv 8 / 2 / 1, kv 2 and 1 "
                  "with d_ff raised to MHA's weights, kv 1 of head_dim 64; R-pilot3, success "
                  "counts on seeds 1401-1408",
       .make = make_kv_capacity_matched},
  };
}

const ExperimentSpec& find_experiment(const std::vector<ExperimentSpec>& specs,
                                      const std::string& name) {
  std::string names;
  for (const ExperimentSpec& s : specs) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  fail("experiment", detail::concat("expected one of ", names, ", got \"", name, "\""));
}

}  // namespace headcount::experiments
