// char_lm_grid.h. The step count is the one tuning constant of the default runs: a default
// head-sweep (10 cells x 3 seeds) and a default scale (4 cells x 3 seeds) must each finish in
// 15 minutes on 2 cores. Measured on the 2-core EPYC (Zen 5) host on 2026-12-01 while two other
// builds shared it (load ~12): 160-330 ms per step of this shape with --threads 2 (h = 1..64),
// ~3 s of validation and setup per run; 200 steps -> ~55 s a run under that load, ~12 s idle
// (~70 ms of CPU per step).
#include "experiments/char_lm_grid.h"

#include "headcount/error.h"

namespace headcount::experiments {

using detail::concat;

namespace {
constexpr std::int64_t kCharLmSteps = 200;  // default run length (see the file comment)
constexpr std::int64_t kQuickSteps = 40;
constexpr std::int64_t kValidationSequences = 144;  // 12 batches of 12 windows of 64 characters
}  // namespace

CharLmShape char_lm_shape(const ExperimentOptions& o) {
  HEADCOUNT_CHECK(o.steps >= 0, "--steps", ">= 1", o.steps);
  CharLmShape s;
  if (o.quick)
    s = {.layers = 1,
         .d_model = 64,
         .context = 32,
         .batch = 4,
         .steps = kQuickSteps,
         .validation_sequences = 16};
  else
    s.steps = kCharLmSteps, s.validation_sequences = kValidationSequences;
  if (o.steps > 0) s.steps = o.steps;
  return s;
}

train::TrainConfig char_lm_config(const CharLmShape& s, std::int64_t heads, std::int64_t head_dim,
                                  std::optional<float> scale) {
  train::TrainConfig c;
  c.task = {{"name", "char-lm"},
            {"seq_len", s.context},
            {"validation_sequences", s.validation_sequences}};
  c.model = {.context = s.context,
             .layers = s.layers,
             .d_model = s.d_model,
             .heads = heads,
             .head_dim = head_dim,
             .scale = scale};
  c.optim = {.lr = 1e-3,
             .min_lr = 1e-4,
             .warmup_steps = std::min<std::int64_t>(100, s.steps / 10),
             .decay_steps = 0,
             .beta1 = 0.9,
             .beta2 = 0.99,
             .eps = 1e-8,
             .weight_decay = 0.1,
             .grad_clip = 1.0};
  c.steps = s.steps;
  c.batch = s.batch;
  return c;
}

std::string char_lm_budget(const CharLmShape& s, const ExperimentOptions& o, std::size_t cells) {
  return concat("char-lm on data/pride-and-prejudice.txt, ", s.layers, " layers, d_model ",
                s.d_model, ", context ", s.context, ", batch ", s.batch, ", ", s.steps,
                " steps per run (AdamW lr 1e-3 -> 1e-4 cosine), ", cells, " cells x ", o.seeds,
                " seeds = ", cells * static_cast<std::size_t>(o.seeds), " runs; validation on the ",
                s.validation_sequences, " windows of the text's held-out tail. ",
                o.quick ? "--quick: a smoke-sized shape (< 60 s), not evidence."
                        : "The step count was set so that the default grid fits 15 minutes on 2 "
                          "cores; the models are "
                          "far from converged, so every verdict is about this budget.");
}

}  // namespace headcount::experiments
