// `headcount layer`: runs the multi-head attention layer on random input with random
// weights, times each kernel, and checks the streaming result against the reference.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "headcount/error.h"
#include "headcount/multi_head_attention.h"

namespace headcount::cli {
namespace {

struct LayerArgs {
  std::int64_t d_model = 512, heads = 8, kv_heads = 0, seq_len = 1000, batch = 1;
  bool causal = false;
  int threads = 1, repeats = 3;
  std::uint64_t seed = 1;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void run_layer(const LayerArgs& a) {
  check(a.repeats >= 1, "--repeats", ">= 1", a.repeats);
  check(a.batch >= 1, "--batch", ">= 1", a.batch);
  check(a.seq_len >= 1, "--seq-len", ">= 1", a.seq_len);
  const MultiHeadAttentionConfig config =
      resolve({.d_model = a.d_model, .heads = a.heads, .kv_heads = a.kv_heads});
  MultiHeadAttention layer(config, MultiHeadAttentionWeights::random(config, a.seed));
  Context ctx({.threads = a.threads});

  Tensor x(DType::f32, {a.batch, a.seq_len, a.d_model});
  std::mt19937_64 rng(a.seed + 1);
  std::normal_distribution<float> normal;
  std::generate_n(x.data<float>(), x.numel(), [&] { return normal(rng); });

  std::printf(
      "layer: d_model %lld, heads %lld, kv_heads %lld, head_dim %lld, batch %lld, seq_len %lld%s, "
      "%d thread%s\n",
      static_cast<long long>(config.d_model), static_cast<long long>(config.heads),
      static_cast<long long>(config.kv_heads), static_cast<long long>(config.head_dim),
      static_cast<long long>(a.batch), static_cast<long long>(a.seq_len),
      a.causal ? " (causal)" : "", a.threads, a.threads == 1 ? "" : "s");
  std::printf("%-10s %12s %14s %18s\n", "kernel", "median ms", "attention MACs",
              "scores held at once");

  Tensor outputs[2] = {Tensor(DType::f32, {a.batch, a.seq_len, a.d_model}),
                       Tensor(DType::f32, {a.batch, a.seq_len, a.d_model})};
  const Kernel kernels[2] = {Kernel::reference, Kernel::streaming};
  for (int which = 0; which < 2; ++which) {
    std::vector<double> times;
    LayerStats stats;
    for (int r = 0; r < a.repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      stats = layer.forward(ctx, x.view(), outputs[which].view(),
                            {.kernel = kernels[which], .causal = a.causal});
      times.push_back(seconds_since(start));
    }
    std::sort(times.begin(), times.end());
    std::printf(
        "%-10s %12.2f %14lld %18lld\n", kernel_name(kernels[which]), times[times.size() / 2] * 1e3,
        static_cast<long long>(stats.attention.score_macs + stats.attention.weighted_sum_macs),
        static_cast<long long>(stats.attention.peak_score_entries));
  }

  double max_diff = 0.0, max_ref = 0.0;
  for (std::int64_t i = 0; i < outputs[0].numel(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(outputs[0].data<float>()[i]) -
                                            outputs[1].data<float>()[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(outputs[0].data<float>()[i])));
  }
  std::printf("streaming vs reference: max |diff| %.3g (max |out| %.3g)\n", max_diff, max_ref);
}

}  // namespace

void register_layer(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "layer", "Time the multi-head attention layer on random input, reference vs streaming");
  auto args = std::make_shared<LayerArgs>();
  cmd->add_option("--d-model", args->d_model, "model width")->capture_default_str();
  cmd->add_option("--heads", args->heads, "query heads")->capture_default_str();
  cmd->add_option("--kv-heads", args->kv_heads, "key/value heads (default: heads)");
  cmd->add_option("--seq-len", args->seq_len, "tokens")->capture_default_str();
  cmd->add_option("--batch", args->batch, "batch size")->capture_default_str();
  cmd->add_flag("--causal", args->causal, "causal mask");
  cmd->add_option("--threads", args->threads, "worker threads")->capture_default_str();
  cmd->add_option("--repeats", args->repeats, "timed runs per kernel (the median is printed)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "random seed")->capture_default_str();
  cmd->callback([args] { run_layer(*args); });
}

}  // namespace headcount::cli
