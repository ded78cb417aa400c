// The optimizer side of training: AdamW exactly as PyTorch's torch.optim.AdamW computes it,
// nanoGPT's learning-rate schedule (linear warm-up, cosine decay to min_lr) and global-norm
// gradient clipping as torch.nn.utils.clip_grad_norm_.
//
// AdamW, step t = 1, 2, ... (PyTorch's single-tensor path, in this order):
//   p  = p · (1 - lr · weight_decay)               (decoupled decay; only Parameter::decay)
//   m  = m + (1 - β1) · (g - m)                    (torch's lerp_)
//   v  = β2 · v + (1 - β2) · g²
//   p -= (lr / (1 - β1^t)) · m / (sqrt(v) / sqrt(1 - β2^t) + eps)
// Schedule (nanoGPT's get_lr, s = 0-based step):
//   s < warmup:         lr · (s + 1) / (warmup + 1)
//   s > decay_steps:    min_lr
//   else: min_lr + 0.5 · (1 + cos(π · (s - warmup) / (decay_steps - warmup))) · (lr - min_lr)
// Clipping: total = sqrt(Σ_params Σ g²) (accumulated in double); coef = max_norm / (total +
// 1e-6); every gradient is multiplied by coef when coef < 1.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "headcount/context.h"
#include "headcount/tensor.h"
#include "headcount/train/model.h"
#include "nlohmann/json_fwd.hpp"

namespace headcount::train {

struct OptimConfig {
  double lr = 1e-3;
  double min_lr = 1e-4;
  std::int64_t warmup_steps = 100;
  std::int64_t decay_steps = 0;  // 0: the run's step count
  double beta1 = 0.9, beta2 = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0: no clipping
};

// Validates (every field named in its error); fills decay_steps from `steps` when 0.
OptimConfig resolve(const OptimConfig& config, std::int64_t steps);
nlohmann::json to_json(const OptimConfig& config);
OptimConfig optim_config_from_json(const nlohmann::json& json);

// The learning rate of 0-based step `step`.
double learning_rate(const OptimConfig& config, std::int64_t step);

// A model split over ranks (tensor parallel): parameter i holds a part of a wider tensor when
// sharded[i] (its squares are summed over the ranks by sum_over_ranks), else the same values
// on every rank (counted once). The norm is then the whole model's, the same on every rank.
struct ShardedNorm {
  std::vector<char> sharded;
  std::function<double(double)> sum_over_ranks;
};

// Returns the total norm before clipping (the whole model's when `sharded` is given).
double clip_grad_norm(std::vector<Parameter>& params, double max_norm,
                      const ShardedNorm* sharded = nullptr);

class AdamW {
 public:
  AdamW(const std::vector<Parameter>& params, const OptimConfig& config);
  // One update with learning rate `lr`; the step counter t advances first (t = 1 on the first).
  void step(Context& ctx, std::vector<Parameter>& params, double lr);
  std::int64_t steps_taken() const { return t_; }
  void set_steps_taken(std::int64_t t) { t_ = t; }
  // First and second moments, one per parameter, named "adamw.m.<name>" / "adamw.v.<name>".
  std::vector<Tensor>& first_moments() { return m_; }
  std::vector<Tensor>& second_moments() { return v_; }
  const std::vector<Tensor>& first_moments() const { return m_; }
  const std::vector<Tensor>& second_moments() const { return v_; }

 private:
  OptimConfig config_;
  std::int64_t t_ = 0;
  std::vector<Tensor> m_, v_;
};

}  // namespace headcount::train
