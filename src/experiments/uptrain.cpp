#include "experiments/uptrain.h"

#include "experiments/runner.h"
#include "headcount/train/definition.h"

namespace headcount::experiments {

train::TaskMetrics uptrain_and_evaluate(Context& ctx, const train::TrainConfig& base,
                                        const model::Weights& start, std::int64_t kv_heads,
                                        const UptrainSchedule& schedule) {
  train::TrainConfig c = base;
  c.model.kv_heads = kv_heads;
  c.steps = schedule.steps;
  c.seed = base.seed + kUptrainSeedOffset;
  c.optim.lr = schedule.peak_lr;
  c.optim.min_lr = schedule.min_lr;
  c.optim.warmup_steps = schedule.steps / 10;  // the run's warm-up share, compressed
  c.optim.decay_steps = schedule.steps;
  c.log_every = 0;
  c.eval_every = 0;
  c.checkpoint_every = 0;
  train::Trainer t(ctx, c);
  train::read_weights(t.model(), start);
  for (std::int64_t s = 0; s < schedule.steps; ++s) t.train_step();
  return evaluate(ctx, t.model(), t.task(), base.batch, 0);
}

nlohmann::json metrics_json(const train::TaskMetrics& m) {
  return {{"validation_loss", m.loss},
          {"validation_accuracy", m.accuracy},
          {"validation_sequence_accuracy", m.sequence_accuracy},
          {"scored", m.scored}};
}

}  // namespace headcount::experiments
