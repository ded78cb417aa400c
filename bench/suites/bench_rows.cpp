#include "bench_rows.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <new>

#include "headcount/attention_backward.h"
#include "headcount/context.h"
#include "headcount/cost.h"
#include "headcount/error.h"
#include "headcount/multi_head_attention.h"

namespace headcount::cli::bench {
namespace {

// The reference kernel holds batch·heads·n·m doubles: 1 GiB at heads 8, n 4096, and
// 4 GiB at n 8192 (16 GiB at 16384), besides running scalar double arithmetic.
constexpr std::int64_t kReferenceMaxSeqLen = 4096;

// Values in [-2, 2) from a fixed xorshift stream: cheap for 16M-element inputs, and the
// same for every run.
void fill(Tensor& t, std::uint64_t seed) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 24) * 4.0 -
                              2.0);
  };
  if (t.dtype() == DType::bf16) {
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<headcount::bf16>()[i] = to_bf16(next());
  } else {
    for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = next();
  }
}

std::int64_t reference_score_bytes(const RowSpec& s) {
  const CostReport cost = estimate_cost({.d_model = s.d_model(),
                                         .heads = s.heads,
                                         .kv_heads = s.kv_heads,
                                         .head_dim = s.head_dim,
                                         .seq_len = s.seq_len,
                                         .batch = s.batch});
  return cost.stage("scores").reference_score_entries * static_cast<std::int64_t>(sizeof(double));
}

std::int64_t attention_flops(const AttentionStats& stats) {
  return 2 * (stats.score_macs + stats.weighted_sum_macs);
}

}  // namespace

const char* op_name(Op op) {
  return op == Op::attention ? "attention" : op == Op::layer ? "layer" : "backward";
}

std::vector<SuitePlan> plan_suites(const std::string& suite, bool quick) {
  std::vector<SuitePlan> plans;
  const auto wants = [&](const char* name) { return suite == "all" || suite == name; };

  if (wants("heads")) {
    SuitePlan plan{.name = "heads"};
    const std::int64_t d_model = 512, n = quick ? 64 : 1000;
    for (Op op : {Op::attention, Op::layer})
      for (Kernel kernel : {Kernel::reference, Kernel::streaming})
        for (std::int64_t heads : {1, 2, 4, 8, 16, 32, 64})
          plan.rows.push_back({.suite = "heads",
                               .op = op,
                               .kernel = kernel,
                               .batch = 1,
                               .heads = heads,
                               .kv_heads = heads,
                               .head_dim = d_model / heads,
                               .seq_len = n});
    plan.notes.push_back(detail::concat("d_model 512, n ", n,
                                        ", batch 1, fp32, not causal; head_dim = 512 / heads"));
    plans.push_back(plan);
  }

  if (wants("seq")) {
    SuitePlan plan{.name = "seq"};
    const std::vector<std::int64_t> lengths =
        quick ? std::vector<std::int64_t>{64, 128}
              : std::vector<std::int64_t>{256, 512, 1024, 2048, 4096, 8192, 16384};
    for (std::int64_t n : lengths)
      for (bool causal : {false, true}) {
        const RowSpec base{.suite = "seq",
                           .batch = 1,
                           .heads = 8,
                           .kv_heads = 8,
                           .head_dim = 64,
                           .seq_len = n,
                           .causal = causal};
        if (n <= kReferenceMaxSeqLen) {
          RowSpec r = base;
          r.kernel = Kernel::reference;
          plan.rows.push_back(r);
        }
        for (DType dtype : {DType::f32, DType::bf16}) {
          RowSpec r = base;
          r.dtype = dtype;
          plan.rows.push_back(r);
        }
      }
    plan.notes.push_back(
        "heads 8, head_dim 64, batch 1; bf16 rows: q, k, v converted to bf16, "
        "output fp32");
    plan.notes.push_back(
        detail::concat("reference kernel: fp32 only and n <= ", kReferenceMaxSeqLen,
                       " (it holds heads*n^2 doubles: 4 GiB at n 8192, 16 GiB at 16384)"));
    plans.push_back(plan);
  }

  if (wants("gqa")) {
    SuitePlan plan{.name = "gqa"};
    const std::int64_t n = quick ? 128 : 4096;
    for (std::int64_t kv_heads : {32, 8, 4, 1})
      for (DType dtype : {DType::f32, DType::bf16})
        plan.rows.push_back({.suite = "gqa",
                             .dtype = dtype,
                             .batch = 1,
                             .heads = 32,
                             .kv_heads = kv_heads,
                             .head_dim = 64,
                             .seq_len = n});
    plan.notes.push_back(detail::concat("heads 32, head_dim 64, n ", n,
                                        ", batch 1, not causal; streaming only (the reference "
                                        "would hold 32*n^2 doubles: 4 GiB at n 4096)"));
    plans.push_back(plan);
  }

  if (wants("layer")) {
    SuitePlan plan{.name = "layer"};
    const std::int64_t n = quick ? 64 : 512;
    for (std::int64_t d_model : {384, 512, 768, 1024})
      for (std::int64_t batch : {1, 8})
        plan.rows.push_back({.suite = "layer",
                             .op = Op::layer,
                             .batch = batch,
                             .heads = d_model / 64,
                             .kv_heads = d_model / 64,
                             .head_dim = 64,
                             .seq_len = n});
    plan.notes.push_back(
        detail::concat("whole layer (QKV GEMM + streaming attention + W_O GEMM, with biases), n ",
                       n, ", heads = d_model / 64, fp32, not causal"));
    plans.push_back(plan);
  }
  if (suite == "backward") {  // not in "all": its own target and peer
    SuitePlan plan{.name = "backward"};
    const std::vector<std::int64_t> lengths =
        quick ? std::vector<std::int64_t>{64, 128}
              : std::vector<std::int64_t>{1024, 4096, 8192, 16384};
    for (std::int64_t n : lengths)
      for (bool causal : {false, true})
        plan.rows.push_back({.suite = "backward",
                             .op = Op::backward,
                             .batch = 1,
                             .heads = 8,
                             .kv_heads = 8,
                             .head_dim = 64,
                             .seq_len = n,
                             .causal = causal});
    plan.notes.push_back(
        "the streaming backward (dq, dk, dv from the forward's out and lse, computed once "
        "before timing), heads 8, head_dim 64, batch 1, fp32; n 16384 for the memory target");
    plan.notes.push_back(
        "FLOPs = 2 x the kernel's counted multiply-adds of its five products = 2.5 x the "
        "forward's FLOPs on the same shape");
    plans.push_back(plan);
  }
  return plans;
}

RowResult run_row(const RowSpec& spec, int threads, int repeats, double budget_seconds,
                  double sgemm_gflops) {
  RowResult row{.spec = spec, .threads = threads};
  row.model_reference_score_bytes = reference_score_bytes(spec);
  const std::int64_t b = spec.batch, n = spec.seq_len, h = spec.heads, hkv = spec.kv_heads,
                     d = spec.head_dim;

  // Everything the timed calls touch is allocated (and faulted in) here, once per row. A
  // fresh Context per row, so the cold call's peak includes the scratch it grows.
  Context ctx({.threads = threads});
  std::function<void()> call;
  std::function<std::int64_t()> flops;
  Tensor q, k, v, out, x, lse, d_out, d_q, d_k, d_v;
  AttentionGrads grads;
  AttentionBackwardStats backward_stats;
  AttentionParams params;
  AttentionStats attention_stats;
  LayerStats layer_stats;
  std::optional<MultiHeadAttention> layer;

  if (spec.op == Op::attention) {
    q = Tensor(spec.dtype, {b, n, h, d});
    k = Tensor(spec.dtype, {b, n, hkv, d});
    v = Tensor(spec.dtype, {b, n, hkv, d});
    out = Tensor(DType::f32, {b, n, h, d});
    fill(q, 1);
    fill(k, 2);
    fill(v, 3);
    params.q = q.view();
    params.k = k.view();
    params.v = v.view();
    params.out = out.view();
    params.causal = spec.causal;
    row.io_bytes = static_cast<std::int64_t>(q.bytes() + k.bytes() + v.bytes() + out.bytes());
    call = [&] { attention_stats = attention(ctx, spec.kernel, params); };
    flops = [&] { return attention_flops(attention_stats); };
  } else if (spec.op == Op::backward) {
    q = Tensor(spec.dtype, {b, n, h, d});
    k = Tensor(spec.dtype, {b, n, hkv, d});
    v = Tensor(spec.dtype, {b, n, hkv, d});
    out = Tensor(DType::f32, {b, n, h, d});
    lse = Tensor(DType::f32, {b, h, n});
    d_out = Tensor(DType::f32, {b, n, h, d});
    d_q = Tensor(DType::f32, {b, n, h, d});
    d_k = Tensor(DType::f32, {b, n, hkv, d});
    d_v = Tensor(DType::f32, {b, n, hkv, d});
    fill(q, 1);
    fill(k, 2);
    fill(v, 3);
    fill(d_out, 5);
    std::fill_n(d_q.data<float>(), d_q.numel(), 0.0f);  // fault the gradients' pages in
    std::fill_n(d_k.data<float>(), d_k.numel(), 0.0f);
    std::fill_n(d_v.data<float>(), d_v.numel(), 0.0f);
    params = {.q = q.view(),
              .k = k.view(),
              .v = v.view(),
              .out = out.view(),
              .lse = lse.view(),
              .causal = spec.causal};
    grads = {.d_out = d_out.view(), .d_q = d_q.view(), .d_k = d_k.view(), .d_v = d_v.view()};
    {
      Context forward_ctx({.threads = threads});  // its scratch is gone before the timed calls
      attention(forward_ctx, Kernel::streaming, params);
    }
    row.io_bytes =
        static_cast<std::int64_t>(q.bytes() + k.bytes() + v.bytes() + out.bytes() + lse.bytes() +
                                  d_out.bytes() + d_q.bytes() + d_k.bytes() + d_v.bytes());
    call = [&] { backward_stats = attention_backward(ctx, spec.kernel, params, grads); };
    flops = [&] { return 2 * backward_stats.macs; };
  } else {
    const MultiHeadAttentionConfig config{.d_model = spec.d_model(), .heads = h, .kv_heads = hkv};
    layer.emplace(config, MultiHeadAttentionWeights::random(config, 1));
    x = Tensor(DType::f32, {b, n, spec.d_model()});
    out = Tensor(DType::f32, {b, n, spec.d_model()});
    fill(x, 4);
    row.io_bytes = static_cast<std::int64_t>(x.bytes() + out.bytes());
    call = [&] {
      layer_stats =
          layer->forward(ctx, x.view(), out.view(), {.kernel = spec.kernel, .causal = spec.causal});
    };
    flops = [&] {
      const LayerStats& s = layer_stats;
      return 2 * (s.q_macs + s.k_macs + s.v_macs + s.o_macs) + attention_flops(s.attention);
    };
  }

  try {
    row.timing = time_calls(call, repeats, budget_seconds);
  } catch (const Error& e) {
    row.status = "unsupported";
    row.error = e.what();
    return row;
  } catch (const std::bad_alloc&) {
    row.status = "failed";
    row.error = "out of memory";
    return row;
  }
  row.flops = flops();
  row.gflops = static_cast<double>(row.flops) / row.timing.median / 1e9;
  row.pct_of_sgemm = sgemm_gflops > 0 ? 100.0 * row.gflops / sgemm_gflops : 0.0;
  return row;
}

}  // namespace headcount::cli::bench
