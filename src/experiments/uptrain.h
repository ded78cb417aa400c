// Uptraining (Ainslie et al. 2023): a model converted after training (here: MHA mean-pooled to
// fewer K/V heads) trained on for a few more steps under the run's optimiser, its schedule
// compressed to those steps. kv-heads (issue 11) and kv-capacity (the claims protocol's E-F)
// both uptrain; E-F also continues the unconverted model on the same schedule (its control A).
#pragma once

#include <cstdint>

#include "headcount/context.h"
#include "headcount/model.h"
#include "headcount/train/trainer.h"
#include "nlohmann/json.hpp"

namespace headcount::experiments {

// Where an uptraining run's batches come from: another seed's data order (run seed + this), so
// its few steps are not a replay of the run's first batches.
inline constexpr std::uint64_t kUptrainSeedOffset = 1000003;

struct UptrainSchedule {
  std::int64_t steps = 0;
  double peak_lr = 0;  // after a warm-up of steps / 10; cosine to min_lr over the steps
  double min_lr = 0;
};

// `base`'s run continued from `start` with `kv_heads` K/V heads (start's own count, or the count
// it was converted to): its task, batch and optimiser but `schedule`, its seed + the offset;
// returns the task's metrics on its validation split (every batch) after the last step.
train::TaskMetrics uptrain_and_evaluate(Context& ctx, const train::TrainConfig& base,
                                        const model::Weights& start, std::int64_t kv_heads,
                                        const UptrainSchedule& schedule);

// A converted or uptrained model's metrics under final_metric's keys (validation_loss, ...).
nlohmann::json metrics_json(const train::TaskMetrics& metrics);

}  // namespace headcount::experiments
