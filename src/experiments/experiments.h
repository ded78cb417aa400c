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
Experiment make_retrieval_learnability(
    const ExperimentOptions& options);                           // retrieval_learnability.cpp (E-B)
Experiment make_mqar_headdim(const ExperimentOptions& options);  // mqar_headdim.cpp (E-D)
Experiment make_mqar_headdim_v2(const ExperimentOptions& options);  // mqar_headdim.cpp (E-D v2)
Experiment make_mqar_headdim_v3(const ExperimentOptions& options);  // mqar_headdim.cpp (E-D v3)

}  // namespace headcount::experiments
