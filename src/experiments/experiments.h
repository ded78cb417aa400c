// The factories of the experiments `headcount experiment` runs, one file each
// (src/experiments/<name>.cpp), listed in registry.cpp.
#pragma once

#include "experiments/experiment.h"

namespace headcount::experiments {

Experiment make_head_sweep(const ExperimentOptions& options);        // head_sweep.cpp
Experiment make_scale(const ExperimentOptions& options);             // scale.cpp
Experiment make_blur(const ExperimentOptions& options);              // blur.cpp
Experiment make_kv_heads(const ExperimentOptions& options);          // kv_heads.cpp
Experiment make_esp_paper(const ExperimentOptions& options);         // esp_paper.cpp (E-A, v1)
Experiment make_esp_paper_v2(const ExperimentOptions& options);      // esp_paper.cpp (E-A, v2)
Experiment make_head_sweep_tuned(const ExperimentOptions& options);  // head_sweep_tuned.cpp (E-C)
Experiment make_head_sweep_budget(
    const ExperimentOptions& options);  // head_sweep_tuned.cpp (E-C d)
Experiment make_head_sweep_budget_long(
    const ExperimentOptions& options);  // head_sweep_tuned.cpp (E-C d at 4N)
Experiment make_retrieval_learnability(
    const ExperimentOptions& options);  // retrieval_learnability.cpp (E-B)
Experiment make_retrieval_learnability_long(
    const ExperimentOptions& options);  // retrieval_learnability.cpp (E-B, 3 x the steps)
Experiment make_mqar_headdim(const ExperimentOptions& options);     // mqar_headdim.cpp (E-D)
Experiment make_mqar_headdim_v2(const ExperimentOptions& options);  // mqar_headdim.cpp (E-D v2)
Experiment make_mqar_headdim_v3(const ExperimentOptions& options);  // mqar_headdim.cpp (E-D v3)
Experiment make_mqar_headdim_v4(const ExperimentOptions& options);  // mqar_headdim.cpp (E-D v4)
Experiment make_mqar_headdim_v4_long(
    const ExperimentOptions& options);  // mqar_headdim.cpp (E-D v4 at rung 2, 256 keys)
Experiment make_mqar_headdim_nopos(
    const ExperimentOptions& options);  // mqar_headdim_nopos.cpp (E-D, learned positions, keys)
Experiment make_kv_capacity_matched(
    const ExperimentOptions& options);  // kv_capacity_matched.cpp (E-F, weight-matched twins)
Experiment make_head_sweep_tuned_b(
    const ExperimentOptions& options);  // head_sweep_tuned.cpp (E-C (b), third edition, at N)
Experiment make_scale_envelope(const ExperimentOptions& options);  // scale_envelope.cpp (E-E)
Experiment make_scale_envelope_long(
    const ExperimentOptions& options);                             // scale_envelope.cpp (E-E at 4N)
Experiment make_small_heads(const ExperimentOptions& options);     // small_heads.cpp (E-G)
Experiment make_small_heads_v2(const ExperimentOptions& options);  // small_heads.cpp (E-G v2)
Experiment make_small_heads_v3(const ExperimentOptions& options);  // small_heads.cpp (E-G v3)
Experiment make_small_heads_v4(const ExperimentOptions& options);  // small_heads.cpp (E-G v4)
Experiment make_kv_capacity(const ExperimentOptions& options);     // kv_capacity.cpp (E-F)
Experiment make_kv_capacity_long(
    const ExperimentOptions& options);  // kv_capacity.cpp (E-F rung 2, 256 keys)
Experiment make_kv_capacity_charlm_long(
    const ExperimentOptions& options);  // kv_capacity.cpp (E-F's char-LM arm at 4N)

// E-C's char-LM cell (head_sweep_tuned.cpp), which E-E reuses: h heads of head_dim over d_model
// 64, 2 layers, d_ff 256, context 64, batch 16 (--quick: 1 layer, context 32, batch 8), the
// protocol's optimiser at lr 3e-3 (the pilot sets each cell's), scored on `split`.
train::TrainConfig head_sweep_tuned_cell(std::int64_t heads, std::int64_t head_dim,
                                         std::int64_t steps, const std::string& split, bool quick);
// E-C's step count N (from its probe), or its --quick count.
std::int64_t head_sweep_tuned_steps(bool quick);

}  // namespace headcount::experiments
