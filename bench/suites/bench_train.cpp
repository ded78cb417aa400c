// The train suite (see bench_train.h). Each timed step runs on a batch generated beforehand
// (the peer times its step on ready batches too): forward_backward, clip_grad_norm, AdamW. The
// split: a forward-only call on the same batch (forward + loss, no gradient), then
// backward = step's forward_backward − forward, optimizer = clip + AdamW; medians of each.
#include "bench_train.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "headcount/error.h"
#include "headcount/train/presets.h"
#include "headcount/train/trainer.h"

namespace headcount::cli::bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void run_train_suite(const TrainSuiteOptions& o) {
  check(o.steps >= 1, "--repeats", ">= 1 (timed training steps)", o.steps);
  train::TrainConfig config = train::preset_config("nanogpt-cpu");
  check(o.heads >= 1 && config.model.d_model % o.heads == 0, "--train-heads",
        detail::concat("a divisor of d_model ", config.model.d_model), o.heads);
  config.model.heads = config.model.kv_heads = o.heads;
  config.model.head_dim = config.model.d_model / o.heads;
  config.log_every = 0;
  Context ctx({.threads = o.threads});
  train::Trainer trainer(ctx, config);
  train::Model& model = trainer.model();
  const std::int64_t tokens = trainer.tokens_per_step();
  constexpr int kWarmup = 3;
  std::vector<double> step_s, forward_s, fb_s, optim_s;
  for (int i = 0; i < kWarmup + o.steps; ++i) {
    const train::Batch batch = trainer.task().train_batch(config.seed, i, config.batch);
    auto t0 = std::chrono::steady_clock::now();
    model.forward(ctx, batch, nullptr, {.kernel = config.kernel});
    const double forward = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    model.forward_backward(ctx, batch, {.kernel = config.kernel});
    const double fb = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    train::clip_grad_norm(model.parameters(), trainer.config().optim.grad_clip);
    trainer.optimizer().step(ctx, model.parameters(),
                             train::learning_rate(trainer.config().optim, i));
    const double optim = seconds_since(t1);
    if (i < kWarmup) continue;
    forward_s.push_back(forward);
    fb_s.push_back(fb);
    optim_s.push_back(optim);
    step_s.push_back(fb + optim);
  }
  const double step = median(step_s), forward = median(forward_s), fb = median(fb_s),
               optim = median(optim_s);
  const train::ModelConfig& m = model.config();
  // Multiply-adds of the GEMMs per token (forward): QKV, W_O, FFN up and down per layer, head.
  const std::int64_t qkv = m.d_model * (m.heads + 2 * m.kv_heads) * m.head_dim,
                     wo = m.heads * m.head_dim * m.d_model;
  const std::int64_t ffn = m.attention_only ? 0 : 2 * m.d_model * m.d_ff;
  const double gemm_macs = static_cast<double>(tokens) *
                           static_cast<double>(m.layers * (qkv + wo + ffn) + m.d_model * m.vocab);
  // Training = forward + 2x for the backward (dX and dW products): 3 x 2 FLOPs per multiply-add.
  const double gemm_gflop = 6.0 * gemm_macs / 1e9;
  if (o.json) {
    const nlohmann::json j{
        {"suite", "train"},
        {"config", detail::concat("nanogpt-cpu: 4 layers, ", m.heads, " heads of ", m.head_dim,
                                  ", d_model 128, context 64, batch 12, char-lm")},
        {"heads", m.heads},
        {"threads", o.threads},
        {"timed_steps", o.steps},
        {"tokens_per_step", tokens},
        {"median_step_seconds", step},
        {"tokens_per_second", static_cast<double>(tokens) / step},
        {"median_forward_seconds", forward},
        {"median_backward_seconds", fb - forward},
        {"median_optimizer_seconds", optim},
        {"gemm_gflop_per_step", gemm_gflop},
        {"gemm_gflops", gemm_gflop / step},
        {"method",
         "median over timed steps after 3 warm-up steps; step = forward_backward + "
         "clip_grad_norm + AdamW on a ready batch; backward = forward_backward - a "
         "forward-only call on the same batch"}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "train step, nanogpt-cpu (4 layers x %lld heads of %lld, d_model 128, context 64, batch "
      "12), %d thread%s, median of %d\n",
      static_cast<long long>(m.heads), static_cast<long long>(m.head_dim), o.threads,
      o.threads == 1 ? "" : "s", o.steps);
  std::printf("  step       %8.2f ms   %8.0f tokens/s   (GEMMs %.2f GFLOP: %.1f GFLOP/s)\n",
              step * 1e3, static_cast<double>(tokens) / step, gemm_gflop, gemm_gflop / step);
  std::printf("  forward    %8.2f ms\n  backward   %8.2f ms\n  optimizer  %8.2f ms\n",
              forward * 1e3, (fb - forward) * 1e3, optim * 1e3);
  std::printf(
      "peer: bench/peers/.venv/bin/python bench/peers/train_peer.py --threads %d --heads %lld\n",
      o.threads, static_cast<long long>(m.heads));
}

}  // namespace headcount::cli::bench
