// The char-LM setting head-sweep and scale share (issue 11): nanoGPT's CPU recipe shape
// (4 layers, d_model 128, context 64, batch 12, AdamW cosine schedule, warm-up, weight decay
// 0.1, clipping 1.0) at a higher learning rate (3e-3 -> 3e-4, from a pilot) on the committed text,
// with a step count chosen so the default grid fits its time budget (kCharLmSteps; the measurement
// behind it is in char_lm_grid.cpp), and a
// --quick shape small enough for CI.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "experiments/experiment.h"

namespace headcount::experiments {

struct CharLmShape {
  std::int64_t layers = 4, d_model = 128, context = 64, batch = 12, steps = 0;
  std::int64_t validation_sequences = 0;  // the validation set's size (the text's tail, in windows)
};

// The default or --quick shape; options.steps (> 0) overrides the step count.
CharLmShape char_lm_shape(const ExperimentOptions& options);
// One cell's config: `heads` heads of head_dim (0: d_model / heads), scale (none:
// 1/sqrt(head_dim)).
train::TrainConfig char_lm_config(const CharLmShape& shape, std::int64_t heads,
                                  std::int64_t head_dim, std::optional<float> scale);
// The shape and the budget in words, for the page.
std::string char_lm_budget(const CharLmShape& shape, const ExperimentOptions& options,
                           std::size_t cells);

}  // namespace headcount::experiments
