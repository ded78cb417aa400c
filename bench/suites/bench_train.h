// `headcount bench --suite train`: tokens/s of one full training step (forward, backward,
// clipping, AdamW) of the nanogpt-cpu preset (4 layers, 4 heads, d_model 128, context 64,
// batch 12) on its real char-lm batches, median over timed steps, with the split into forward,
// backward and optimizer. The PyTorch eager peer of the same step is
// bench/peers/train_peer.py (same model, data shape, threads; its optimizer is timed too).
#pragma once

#include <cstdint>

namespace headcount::cli::bench {

struct TrainSuiteOptions {
  int threads = 2;
  int steps = 30;  // timed steps after 3 warm-up steps
  bool json = false;
  // Heads at d_model 128 (head_dim 128 / heads): the head-sweep experiment's series; 4 is the
  // preset's own.
  std::int64_t heads = 4;
};

void run_train_suite(const TrainSuiteOptions& options);

}  // namespace headcount::cli::bench
