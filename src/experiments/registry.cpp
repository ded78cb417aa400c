// The experiments `headcount experiment` knows, in --list order. A new experiment adds its
// factory to experiments.h and one row here.
#include "experiments/experiments.h"
#include "headcount/error.h"

namespace headcount::experiments {

std::vector<ExperimentSpec> experiment_specs() {
  return {
      {.name = "head-sweep",
       .summary = "char LM, 4 layers, d_model 128: h = 1..64 at equal cost (head_dim 128..2), plus head_dim fixed at 16",
       .make = make_head_sweep},
      {.name = "scale",
       .summary = "head-sweep's model at h = 8 and 32: score scale 1/sqrt(head_dim) vs 1/sqrt(d_model)",
       .make = make_scale},
  };
}

const ExperimentSpec& find_experiment(const std::vector<ExperimentSpec>& specs, const std::string& name) {
  std::string names;
  for (const ExperimentSpec& s : specs) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  fail("experiment", detail::concat("expected one of ", names, ", got \"", name, "\""));
}

}  // namespace headcount::experiments
