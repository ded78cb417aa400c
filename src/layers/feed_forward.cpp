// Linear and FeedForward on the packed GEMM: weights packed once in Linear::make (f32 or
// bf16), bias and GELU in the GEMM epilogue (see feed_forward.h).
#include "layers/feed_forward.h"

#include "headcount/error.h"

namespace headcount::layers {

using detail::concat;

Linear Linear::make(Tensor weight, Tensor bias, DType dtype) {
  HEADCOUNT_CHECK(weight.dtype() == DType::f32 && weight.rank() == 2, "linear weight",
                  "an f32 [in, out] matrix", shape_string(weight.shape()));
  HEADCOUNT_CHECK(bias.dtype() == DType::f32 && bias.rank() == 1 && bias.size(0) == weight.size(1),
                  "linear bias", concat("an f32 [", weight.size(1), "] vector"),
                  shape_string(bias.shape()));
  Tensor packed = pack_weights(weight.data<const float>(), weight.size(0), weight.size(1),
                               weight.size(1), dtype);
  return Linear{.weight = std::move(weight), .bias = std::move(bias), .packed = std::move(packed)};
}

void Linear::forward(Context& ctx, const float* x, std::int64_t rows, float* y,
                     GemmEpilogue epilogue) const {
  packed_gemm(ctx, {.m = rows,
                    .x = x,
                    .ldx = in(),
                    .w = &packed,
                    .n = out(),
                    .bias = bias.data<const float>(),
                    .y = y,
                    .ldy = out(),
                    .epilogue = epilogue});
}

void FeedForward::forward(Context& ctx, const float* x, std::int64_t rows, float* hidden,
                          float* y) const {
  up.forward(ctx, x, rows, hidden, GemmEpilogue::gelu_erf);  // bias + GELU fused into the GEMM
  down.forward(ctx, hidden, rows, y);
}

}  // namespace headcount::layers
