// AdamW, the learning-rate schedule and gradient clipping against values computed by hand
// (literals, with the arithmetic in the comments) and against the formulas evaluated in float64
// here. The fp32 update rounds each of its ~8 operations once: |Δp| ≤ 8·u·(|p| + lr·|m̂/denom|)
// per step, summed over the steps.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "headcount/train/optimizer.h"

namespace headcount::testing {
namespace {

constexpr double kU = 1.0 / (1 << 24);

std::vector<train::Parameter> two_parameters() {
  std::vector<train::Parameter> params;
  params.push_back({.name = "w",
                    .value = Tensor(DType::f32, {2, 2}),
                    .grad = Tensor(DType::f32, {2, 2}),
                    .decay = true});
  params.push_back({.name = "b",
                    .value = Tensor(DType::f32, {3}),
                    .grad = Tensor(DType::f32, {3}),
                    .decay = false});
  return params;
}

TEST(TrainAdamW, FirstStepByHand) {
  // Step 1 from m = v = 0: m̂ = g, v̂ = g², so p1 = p0·(1 − lr·wd) − lr·g / (|g| + eps).
  // p0 = 1, g = 0.5, lr = 0.1, wd = 0.1: p1 = 0.99 − 0.1·0.5/(0.5 + 1e-8) = 0.8900000020 (decayed)
  // and, without decay, 1 − 0.0999999980 = 0.9000000020.
  Context ctx;
  auto params = two_parameters();
  for (auto& p : params)
    for (std::int64_t i = 0; i < p.value.numel(); ++i) {
      p.value.data<float>()[i] = 1.0f;
      p.grad.data<float>()[i] = 0.5f;
    }
  const train::OptimConfig config = train::resolve({.lr = 0.1,
                                                    .min_lr = 0,
                                                    .warmup_steps = 0,
                                                    .beta1 = 0.9,
                                                    .beta2 = 0.99,
                                                    .eps = 1e-8,
                                                    .weight_decay = 0.1},
                                                   10);
  train::AdamW adam(params, config);
  adam.step(ctx, params, 0.1);
  EXPECT_EQ(adam.steps_taken(), 1);
  for (std::int64_t i = 0; i < 4; ++i)
    EXPECT_NEAR(params[0].value.data<float>()[i], 0.8900000020, 4 * kU);
  for (std::int64_t i = 0; i < 3; ++i)
    EXPECT_NEAR(params[1].value.data<float>()[i], 0.9000000020, 4 * kU);
  // Moments: m = 0.1·g = 0.05, v = 0.01·g² = 0.0025.
  EXPECT_NEAR(adam.first_moments()[0].data<float>()[0], 0.05, 2 * kU * 0.05);
  EXPECT_NEAR(adam.second_moments()[0].data<float>()[0], 0.0025, 2 * kU * 0.0025);
}

TEST(TrainAdamW, StepsMatchFloat64Formula) {
  Context ctx({.threads = 2});
  auto params = two_parameters();
  const double p0[7] = {0.3, -1.2, 2.0, 0.0, 0.7, -0.05, 1.5};
  const double grads[3][7] = {{0.1, -0.2, 0.3, 1e-4, -2.0, 0.5, 0.0},
                              {-0.3, 0.1, 0.2, -1e-4, 1.0, 0.4, 1e-3},
                              {0.2, 0.2, -0.1, 5e-5, 0.5, -0.6, -1e-3}};
  const double lrs[3] = {1e-3, 5e-3, 2e-3};
  const train::OptimConfig config = train::resolve({.lr = 1e-2,
                                                    .min_lr = 0,
                                                    .warmup_steps = 0,
                                                    .beta1 = 0.9,
                                                    .beta2 = 0.95,
                                                    .eps = 1e-6,
                                                    .weight_decay = 0.3},
                                                   3);
  auto flat = [&](int i) -> float& {
    return i < 4 ? params[0].value.data<float>()[i] : params[1].value.data<float>()[i - 4];
  };
  auto flat_grad = [&](int i) -> float& {
    return i < 4 ? params[0].grad.data<float>()[i] : params[1].grad.data<float>()[i - 4];
  };
  for (int i = 0; i < 7; ++i) flat(i) = static_cast<float>(p0[i]);
  train::AdamW adam(params, config);
  double p[7], m[7] = {}, v[7] = {}, bound[7] = {};
  for (int i = 0; i < 7; ++i) p[i] = static_cast<float>(p0[i]);
  for (int t = 1; t <= 3; ++t) {
    for (int i = 0; i < 7; ++i) flat_grad(i) = static_cast<float>(grads[t - 1][i]);
    adam.step(ctx, params, lrs[t - 1]);
    for (int i = 0; i < 7; ++i) {
      const double g = static_cast<float>(grads[t - 1][i]);
      if (i < 4) p[i] *= 1 - lrs[t - 1] * 0.3;
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.95 * v[i] + 0.05 * g * g;
      const double mhat = m[i] / (1 - std::pow(0.9, t)), vhat = v[i] / (1 - std::pow(0.95, t));
      const double update = lrs[t - 1] * mhat / (std::sqrt(vhat) + 1e-6);
      p[i] -= update;
      bound[i] += 8 * kU * (std::abs(p[i]) + std::abs(update));
    }
  }
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(flat(i), p[i], bound[i]) << i;
}

TEST(TrainSchedule, WarmupCosineMinByHand) {
  const train::OptimConfig c =
      train::resolve({.lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 100}, 2000);
  EXPECT_EQ(c.decay_steps, 2000);
  EXPECT_DOUBLE_EQ(train::learning_rate(c, 0), 1e-3 / 101);  // (0 + 1) / (100 + 1)
  EXPECT_DOUBLE_EQ(train::learning_rate(c, 99), 1e-3 * 100 / 101);
  EXPECT_DOUBLE_EQ(train::learning_rate(c, 100), 1e-3);       // cos(0) = 1
  EXPECT_NEAR(train::learning_rate(c, 1050), 5.5e-4, 1e-15);  // ratio 0.5: 1e-4 + 0.5·9e-4
  EXPECT_NEAR(train::learning_rate(c, 2000), 1e-4, 1e-15);    // cos(π) = −1
  EXPECT_DOUBLE_EQ(train::learning_rate(c, 2001), 1e-4);
  // A quarter of the way: 1e-4 + 0.5·(1 + cos(π/4))·9e-4 = 1e-4 + 0.853553·9e-4.
  EXPECT_NEAR(train::learning_rate(c, 575), 1e-4 + 0.5 * (1 + std::sqrt(0.5)) * 9e-4, 1e-15);
}

TEST(TrainClip, GlobalNormAsPyTorch) {
  auto params = two_parameters();
  // Gradients (3, 4, 0, 0 | 0, 0, 12): total norm 13.
  const float g[7] = {3, 4, 0, 0, 0, 0, 12};
  auto set = [&] {
    for (int i = 0; i < 4; ++i) params[0].grad.data<float>()[i] = g[i];
    for (int i = 0; i < 3; ++i) params[1].grad.data<float>()[i] = g[4 + i];
  };
  set();
  EXPECT_DOUBLE_EQ(train::clip_grad_norm(params, 1.0), 13.0);
  const float coef = static_cast<float>(1.0 / (13.0 + 1e-6));
  EXPECT_EQ(params[0].grad.data<float>()[0], 3 * coef);
  EXPECT_EQ(params[0].grad.data<float>()[1], 4 * coef);
  EXPECT_EQ(params[1].grad.data<float>()[2], 12 * coef);
  // Below the threshold (coef = 20 / 13 > 1): untouched, bitwise.
  set();
  EXPECT_DOUBLE_EQ(train::clip_grad_norm(params, 20.0), 13.0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(params[0].grad.data<float>()[i], g[i]);
  // A NaN gradient is an error, not a NaN step.
  params[1].grad.data<float>()[0] = NAN;
  expect_error([&] { train::clip_grad_norm(params, 1.0); }, {"gradient norm"});
}

TEST(TrainOptimConfig, BadValuesNameTheField) {
  expect_error([] { train::resolve({.lr = 0}, 10); }, {"optim.lr"});
  expect_error([] { train::resolve({.lr = 1e-3, .min_lr = 1e-2}, 10); }, {"optim.min_lr"});
  expect_error([] { train::resolve({.warmup_steps = 10, .decay_steps = 5}, 10); },
               {"optim.decay_steps"});
  expect_error([] { train::resolve({.beta2 = 1.0}, 10); }, {"optim.beta2"});
  expect_error(
      [] {
        train::optim_config_from_json(nlohmann::json{{"learning_rate", 1}});
      },
      {"optim", "learning_rate"});
  expect_error([] { train::optim_config_from_json(nlohmann::json{{"lr", "fast"}}); }, {"optim.lr"});
  const train::OptimConfig c =
      train::optim_config_from_json(nlohmann::json{{"lr", 3e-4}, {"warmup_steps", 7}});
  EXPECT_EQ(c.lr, 3e-4);
  EXPECT_EQ(c.warmup_steps, 7);
}

}  // namespace
}  // namespace headcount::testing
