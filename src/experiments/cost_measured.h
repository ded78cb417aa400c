// The claims protocol's E-H (`headcount experiment cost-measured`): claim 1, "h heads of d/h
// cost what one head of d costs", from measured quantities (cost_measured.cpp says which). It
// trains nothing, so it is not an Experiment grid: one JSON document ("format":
// kCostMeasuredFormat) with the measured series, the gate and the verdicts.
#pragma once

#include "experiments/experiment.h"
#include "experiments/model_cost.h"
#include "experiments/verdict.h"
#include "nlohmann/json.hpp"

namespace headcount::experiments {

inline constexpr const char* kCostMeasuredFormat = "headcount.cost-measured.v1";

// --quick: the layer at n 250 for h in {1, 8} and two E-C steps (< 20 s); otherwise the whole
// protocol (< 2 min on one idle core).
nlohmann::json run_cost_measured(const ExperimentOptions& options, bool progress);

}  // namespace headcount::experiments
