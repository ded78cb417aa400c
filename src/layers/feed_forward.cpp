// Linear and FeedForward on the packed GEMM: weights packed once in Linear::make (f32 or
// bf16), bias and GELU in the GEMM epilogue (see feed_forward.h).
#include "layers/feed_forward.h"

#include <algorithm>

#include "headcount/error.h"

namespace headcount::layers {

using detail::concat;

Linear Linear::make(Tensor weight, Tensor bias, DType dtype) {
  HEADCOUNT_CHECK(weight.dtype() == DType::f32 && weight.rank() == 2, "linear weight",
                  "an f32 [in, out] matrix", shape_string(weight.shape()));
  HEADCOUNT_CHECK(bias.empty() || (bias.dtype() == DType::f32 && bias.rank() == 1 &&
                                   bias.size(0) == weight.size(1)),
                  "linear bias", concat("an f32 [", weight.size(1), "] vector or none"),
                  shape_string(bias.shape()));
  Tensor packed = pack_weights(weight.data<const float>(), weight.size(0), weight.size(1),
                               weight.size(1), dtype);
  return Linear{.weight = std::move(weight), .bias = std::move(bias), .packed = std::move(packed)};
}

Linear Linear::from_blocks(std::shared_ptr<const BlockWeights> blocks) {
  HEADCOUNT_CHECK(blocks != nullptr, "linear blocks", "block weights", "none");
  Linear linear;
  linear.blocks = std::move(blocks);
  return linear;
}

void Linear::forward(Context& ctx, const float* x, std::int64_t rows, float* y,
                     GemmEpilogue epilogue) const {
  packed_gemm(ctx, {.m = rows,
                    .x = x,
                    .ldx = in(),
                    .w = blocks ? nullptr : &packed,
                    .blocks = blocks.get(),
                    .n = out(),
                    .bias = bias.empty() ? nullptr : bias.data<const float>(),
                    .y = y,
                    .ldy = out(),
                    .epilogue = epilogue});
}

void FeedForward::forward(Context& ctx, const float* x, std::int64_t rows, float* hidden,
                          float* y) const {
  up.forward(ctx, x, rows, hidden, GemmEpilogue::gelu_erf);  // bias + GELU fused into the GEMM
  down.forward(ctx, hidden, rows, y);
}

GatedFeedForward GatedFeedForward::make(const Tensor& gate, const Tensor& up, Tensor down,
                                        DType dtype) {
  HEADCOUNT_CHECK(gate.dtype() == DType::f32 && gate.rank() == 2 && up.dtype() == DType::f32 &&
                      up.shape() == gate.shape(),
                  "gated FFN gate/up", "two f32 [d_model, d_ff] matrices of one shape",
                  concat(shape_string(gate.shape()), " and ", shape_string(up.shape())));
  const std::int64_t d = gate.size(0), ff = gate.size(1);
  HEADCOUNT_CHECK(down.rank() == 2 && down.size(0) == ff && down.size(1) == d, "gated FFN down",
                  concat("[", ff, ", ", d, "]"), shape_string(down.shape()));
  Tensor both(DType::f32, {d, 2 * ff});
  for (std::int64_t r = 0; r < d; ++r) {
    std::copy_n(gate.data<const float>() + r * ff, ff, both.data<float>() + r * 2 * ff);
    std::copy_n(up.data<const float>() + r * ff, ff, both.data<float>() + r * 2 * ff + ff);
  }
  return GatedFeedForward{.gate_up = Linear::make(std::move(both), Tensor(), dtype),
                          .down = Linear::make(std::move(down), Tensor(), dtype)};
}

void GatedFeedForward::forward(Context& ctx, const float* x, std::int64_t rows, float* hidden,
                               float* y) const {
  const std::int64_t ff = d_ff();
  float* both = hidden;                   // [rows, 2 * ff]
  float* gated = hidden + rows * 2 * ff;  // [rows, ff]
  gate_up.forward(ctx, x, rows, both);
  constexpr std::int64_t kRowsPerTask = 4;
  const std::int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  ctx.parallel_for_ranges(tasks, [&](std::int64_t task, int) {
    const std::int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (std::int64_t r = task * kRowsPerTask; r < end; ++r) {
      const float* g = both + r * 2 * ff;
      swiglu_gate(g, g + ff, gated + r * ff, ff);
    }
  });
  down.forward(ctx, gated, rows, y);
}

GatedFeedForward GatedFeedForward::from_blocks(std::shared_ptr<const BlockWeights> gate_up,
                                               std::shared_ptr<const BlockWeights> down) {
  HEADCOUNT_CHECK(
      gate_up && down && gate_up->n % 2 == 0 && down->k == gate_up->n / 2 && down->n == gate_up->k,
      "gated FFN blocks", "gate_up [2 d_ff rows of d_model], down [d_model rows of d_ff]",
      gate_up && down ? concat("gate_up ", gate_up->n, " rows of ", gate_up->k, ", down ", down->n,
                               " rows of ", down->k)
                      : std::string("none"));
  return GatedFeedForward{.gate_up = Linear::from_blocks(std::move(gate_up)),
                          .down = Linear::from_blocks(std::move(down))};
}

}  // namespace headcount::layers
