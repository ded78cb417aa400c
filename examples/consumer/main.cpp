// A program built against the installed headcount package: one attention call (GQA, causal)
// checked against a plain double-precision computation written here, and the seeds' cost
// figure (the four projections of d_model 512 over 1,000 tokens). Exit 0 when both hold.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/cost.h"
#include "headcount/tensor.h"
#include "headcount/version.h"

using namespace headcount;

int main() {
  const std::int64_t batch = 1, n = 5, heads = 4, kv_heads = 2, dim = 8;
  Tensor q(DType::f32, {batch, n, heads, dim}), k(DType::f32, {batch, n, kv_heads, dim}),
      v(DType::f32, {batch, n, kv_heads, dim}), out(DType::f32, {batch, n, heads, dim});
  for (Tensor* t : {&q, &k, &v})
    for (std::int64_t i = 0; i < t->numel(); ++i)
      t->data<float>()[i] = std::sin(0.37f * i + t->size(2));

  Context ctx({.threads = 2});
  attention_streaming(
      ctx, {.q = q.view(), .k = k.view(), .v = v.view(), .out = out.view(), .causal = true});

  // The same attention in double, by its definition: query i sees keys j <= i.
  double worst = 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t g = h / (heads / kv_heads);
    for (std::int64_t i = 0; i < n; ++i) {
      std::vector<double> p(static_cast<std::size_t>(i + 1));
      double max = -INFINITY, sum = 0;
      for (std::int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (std::int64_t d = 0; d < dim; ++d)
          s += double(q.data<float>()[((i * heads) + h) * dim + d]) *
               k.data<float>()[((j * kv_heads) + g) * dim + d];
        p[static_cast<std::size_t>(j)] = s * scale;
        max = std::fmax(max, s * scale);
      }
      for (double& x : p) sum += (x = std::exp(x - max));
      for (std::int64_t d = 0; d < dim; ++d) {
        double o = 0;
        for (std::int64_t j = 0; j <= i; ++j)
          o += p[static_cast<std::size_t>(j)] / sum *
               v.data<float>()[((j * kv_heads) + g) * dim + d];
        worst = std::fmax(worst, std::fabs(o - out.data<float>()[((i * heads) + h) * dim + d]));
      }
    }
  }

  const CostReport cost = estimate_cost({.d_model = 512, .heads = 8, .seq_len = 1000});
  std::printf("headcount %s: causal GQA attention, max |error| vs double %.2e\n", version(), worst);
  std::printf(
      "four projections, d_model 512, 1,000 tokens: %lld multiply-adds (4 x 1000 x 512 x 512)\n",
      static_cast<long long>(cost.projections.macs));
  // fp32 inputs and outputs of magnitude <= 1: a few ulps; 1e-5 is ~80 ulps of 1.
  const bool ok = worst < 1e-5 && cost.projections.macs == 4LL * 1000 * 512 * 512;
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
