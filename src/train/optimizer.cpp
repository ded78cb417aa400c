// AdamW, the schedule and gradient clipping (formulas in include/headcount/train/optimizer.h).
// The update is elementwise in fp32 like PyTorch's, with the bias corrections computed in double
// (as Python floats are) and rounded once; chunks over the workers do not change any value.
#include "headcount/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <set>

#include "headcount/error.h"

namespace headcount::train {

using detail::concat;
using nlohmann::json;

OptimConfig resolve(const OptimConfig& config, std::int64_t steps) {
  OptimConfig c = config;
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  HEADCOUNT_CHECK(std::isfinite(c.lr) && c.lr > 0, "optim.lr", "a finite value > 0", c.lr);
  HEADCOUNT_CHECK(finite_nonneg(c.min_lr) && c.min_lr <= c.lr, "optim.min_lr",
                  concat("in [0, lr = ", c.lr, "]"), c.min_lr);
  HEADCOUNT_CHECK(c.warmup_steps >= 0, "optim.warmup_steps", ">= 0", c.warmup_steps);
  if (c.decay_steps == 0) c.decay_steps = std::max<std::int64_t>(steps, c.warmup_steps + 1);
  HEADCOUNT_CHECK(c.decay_steps > c.warmup_steps, "optim.decay_steps",
                  concat("> warmup_steps = ", c.warmup_steps), c.decay_steps);
  HEADCOUNT_CHECK(c.beta1 >= 0 && c.beta1 < 1, "optim.beta1", "in [0, 1)", c.beta1);
  HEADCOUNT_CHECK(c.beta2 >= 0 && c.beta2 < 1, "optim.beta2", "in [0, 1)", c.beta2);
  HEADCOUNT_CHECK(std::isfinite(c.eps) && c.eps > 0, "optim.eps", "a finite value > 0", c.eps);
  HEADCOUNT_CHECK(finite_nonneg(c.weight_decay), "optim.weight_decay", "a finite value >= 0",
                  c.weight_decay);
  HEADCOUNT_CHECK(finite_nonneg(c.grad_clip), "optim.grad_clip", "a finite value >= 0 (0: off)",
                  c.grad_clip);
  return c;
}

json to_json(const OptimConfig& c) {
  return {{"lr", c.lr},
          {"min_lr", c.min_lr},
          {"warmup_steps", c.warmup_steps},
          {"decay_steps", c.decay_steps},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps},
          {"weight_decay", c.weight_decay},
          {"grad_clip", c.grad_clip}};
}

OptimConfig optim_config_from_json(const json& j) {
  HEADCOUNT_CHECK(j.is_object(), "optim", "a JSON object", j.dump());
  OptimConfig c;
  const std::set<std::string> integers = {"warmup_steps", "decay_steps"};
  const std::vector<std::pair<const char*, double*>> reals = {{"lr", &c.lr},
                                                              {"min_lr", &c.min_lr},
                                                              {"beta1", &c.beta1},
                                                              {"beta2", &c.beta2},
                                                              {"eps", &c.eps},
                                                              {"weight_decay", &c.weight_decay},
                                                              {"grad_clip", &c.grad_clip}};
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const json& v = item.value();
    if (integers.count(key) == 1) {
      HEADCOUNT_CHECK(v.is_number_integer(), concat("optim.", key), "an integer", v.dump());
      (key == "warmup_steps" ? c.warmup_steps : c.decay_steps) = v.get<std::int64_t>();
      continue;
    }
    auto real =
        std::find_if(reals.begin(), reals.end(), [&](const auto& r) { return key == r.first; });
    HEADCOUNT_CHECK(real != reals.end(), "optim",
                    "known fields (lr, min_lr, warmup_steps, decay_steps, beta1, beta2, eps, "
                    "weight_decay, grad_clip)",
                    concat("\"", key, "\""));
    HEADCOUNT_CHECK(v.is_number(), concat("optim.", key), "a number", v.dump());
    *real->second = v.get<double>();
  }
  return c;
}

double learning_rate(const OptimConfig& c, std::int64_t step) {
  if (step < c.warmup_steps)
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps + 1);
  if (step > c.decay_steps) return c.min_lr;
  const double ratio = static_cast<double>(step - c.warmup_steps) /
                       static_cast<double>(c.decay_steps - c.warmup_steps);
  return c.min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (c.lr - c.min_lr);
}

namespace {

// Four interleaved double sums (a fixed order, so the same on every run), added in a fixed
// order: the independent chains let the loop run at the FMA rate.
double grad_squares(const Parameter& p) {
  const float* g = p.grad.data<const float>();
  const std::int64_t n = p.grad.numel();
  double part[4] = {0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) part[k] += static_cast<double>(g[i + k]) * g[i + k];
  for (; i < n; ++i) part[0] += static_cast<double>(g[i]) * g[i];
  return (part[0] + part[1]) + (part[2] + part[3]);
}

}  // namespace

double clip_grad_norm(std::vector<Parameter>& params, double max_norm, const ShardedNorm* sharded) {
  double squares = 0;
  if (sharded == nullptr) {
    for (const Parameter& p : params) squares += grad_squares(p);
  } else {
    HEADCOUNT_CHECK(sharded->sharded.size() == params.size(), "sharded",
                    concat(params.size(), " entries (one per parameter)"), sharded->sharded.size());
    double parts = 0, replicated = 0;
    for (std::size_t i = 0; i < params.size(); ++i)
      (sharded->sharded[i] ? parts : replicated) += grad_squares(params[i]);
    squares = sharded->sum_over_ranks(parts) + replicated;
  }
  const double total = std::sqrt(squares);
  HEADCOUNT_CHECK(std::isfinite(total), "gradient norm", "a finite value (the loss diverged)",
                  total);
  if (max_norm > 0) {
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1.0) {
      const float f = static_cast<float>(coef);
      for (Parameter& p : params) {
        float* g = p.grad.data<float>();
        for (std::int64_t i = 0; i < p.grad.numel(); ++i) g[i] *= f;
      }
    }
  }
  return total;
}

AdamW::AdamW(const std::vector<Parameter>& params, const OptimConfig& config) : config_(config) {
  for (const Parameter& p : params) {
    m_.emplace_back(DType::f32, p.value.shape());
    v_.emplace_back(DType::f32, p.value.shape());
  }
}

void AdamW::step(Context& ctx, std::vector<Parameter>& params, double lr) {
  HEADCOUNT_CHECK(params.size() == m_.size(), "parameters",
                  concat(m_.size(), " tensors (as at construction)"), params.size());
  ++t_;
  const double t = static_cast<double>(t_);
  const float beta2 = static_cast<float>(config_.beta2);
  const float one_minus_beta1 = static_cast<float>(1.0 - config_.beta1);
  const float one_minus_beta2 = static_cast<float>(1.0 - config_.beta2);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(config_.beta1, t)));
  const float correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(config_.beta2, t)));
  const float eps = static_cast<float>(config_.eps);
  const float decay = static_cast<float>(1.0 - lr * config_.weight_decay);
  constexpr std::int64_t kChunk = 16384;
  for (std::size_t i = 0; i < params.size(); ++i) {
    float* p = params[i].value.data<float>();
    const float* g = params[i].grad.data<const float>();
    float* m = m_[i].data<float>();
    float* v = v_[i].data<float>();
    const std::int64_t n = params[i].value.numel();
    // p · 1 is exact, so parameters without decay take the same loop (PyTorch skips it).
    const float factor = params[i].decay ? decay : 1.0f;
    ctx.parallel_for((n + kChunk - 1) / kChunk, [&, p, g, m, v, n](std::int64_t task, int) {
      // Locals, not captured references: the loop then vectorises (no aliasing through them).
      const float b2 = beta2, c1 = one_minus_beta1, c2 = one_minus_beta2, sq = correction2_sqrt,
                  e_ = eps, step = step_size, f = factor;
      const std::int64_t end = std::min(n, (task + 1) * kChunk);
      for (std::int64_t e = task * kChunk; e < end; ++e) {
        const float pe = p[e] * f;
        const float me = m[e] + c1 * (g[e] - m[e]);
        const float ve = b2 * v[e] + c2 * (g[e] * g[e]);
        m[e] = me;
        v[e] = ve;
        p[e] = pe - step * (me / (std::sqrt(ve) / sq + e_));
      }
    });
  }
}

}  // namespace headcount::train
