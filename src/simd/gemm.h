// The packed-weight GEMM's micro-kernels, one table per instruction set (gemm_<isa>.cpp), the
// only code of layers/packed_gemm.cpp that is compiled per ISA.
//
//   y[r, c] = epilogue(sum_d x[r, d] * panel[d, c] + bias[c])   for r < rows, c < cols <= 64
//
// `panel` is one packed panel of the weight matrix: k rows of gemm_panel_columns() = 64
// floats (columns past the matrix's width are zero), contiguous, so a step along d reads 256
// consecutive bytes. Every output element is one accumulator, started at 0 and updated by one
// multiply-add per d in increasing d (a fused FMA where the ISA has one; depth blocks pass the
// fp32 accumulator on through y, exactly), whatever `rows`, the
// row's position in its register tile and the tile's shape; then the bias is added (one
// rounding) and the epilogue applied. So a row's result depends only on that row of x, the
// weights and the ISA: not on how many rows are multiplied with it, nor on the thread that
// runs it. (The register tiles differ only in how many independent accumulators they hold.)
//
// bf16 (`panel_bf16`): x and the panel hold bf16 values (the raw 16 bits), k even. The panel
// is k/2 pair rows of 64 32-bit lanes, lane c of pair row p holding W[2p, c] in its low half
// and W[2p+1, c] in its high half (the operand order of vdpbf16ps); x's rows are plain bf16
// rows, so its pair p is one 32-bit word. Products of two bf16 values are exact in fp32, and
// each is added once to its column's fp32 accumulator, pairs in increasing p (within a pair:
// vdpbf16ps's own order where the ISA has it, even then odd depth otherwise), then bias and
// epilogue in fp32: the same invariance as fp32, and on every ISA the same error bound
// (test_packed_gemm_bf16.cpp derives it) though not bitwise the same result across ISAs.
//
// int8 (`panel_i8`): x rows quantised by `quantize_u8` (one scale per row: s = max|x| / 127,
// q = round(x / s) in [-127, 127], stored as q + 128 in a byte), weights per column (s_w =
// max|W[:, c]| / 127, q_w = round(W / s_w) in [-127, 127]). A panel is k/4 quad rows of 64
// 32-bit lanes, lane c of quad row q holding q_w[4q + j, c] in byte j (vpdpbusd's operand
// order), then 64 floats s_w and 64 int32 offsets 128·Σ_d q_w[d, c] (the +128 of x, taken out
// again): k·64 + 512 bytes. The sums Σ_d (q_x + 128)·q_w are exact in int32 (|sum| <= k·255·127
// < 2^31 for k <= 66,000), whatever the order, so every ISA (vpdpbusd on avx512_bf16, which
// all CPUs with AVX512_BF16 pair with AVX512_VNNI; widened int32 multiplies elsewhere) gets the
// same integers from the same bytes; then y = float(sum - offset)·(s_x·s_w) + bias and the
// epilogue, in fp32. The bytes of x can differ across ISAs on a near-tie: `quantize_u8` rounds
// x·(127/max) with a fused multiply-add where the ISA has one, in two roundings on generic.
#pragma once

#include <cstdint>

#include "headcount/isa.h"

namespace headcount::simd {

enum class GemmEpilogue { none, gelu_erf };

// One panel's product with its operands where they lie, for layers::gemm (training, where
// the operands change every step and are not worth packing):
//   y[r, c] (+)= Σ_d x[r·x_row_stride + d·x_depth_stride] · panel[d·panel_row_stride + c] (+
//   bias[c])
// for r < rows, c < cols <= 64. x_depth_stride != 1 reads a transposed operand in place
// (dW = Xᵀ·dY); panel_row_stride is the row stride of an unpacked matrix whose 64 columns
// from `panel` are all readable (a ragged last panel is packed by the caller). The arithmetic
// per element is `panel`'s (one fp32 accumulator, depths in order, then the bias), starting
// from y's value with `accumulate`.
struct StridedPanel {
  const float* x = nullptr;
  std::int64_t x_row_stride = 0, x_depth_stride = 1, rows = 0;
  const float* panel = nullptr;
  std::int64_t panel_row_stride = 0, k = 0;
  const float* bias = nullptr;
  float* y = nullptr;
  std::int64_t ldy = 0, cols = 0;
  bool accumulate = false;
};

struct GemmKernels {
  Isa isa = Isa::generic;
  int vector_floats = 4;
  // One panel times `rows` rows of x (row r at x + r*ldx, k floats), bias [cols] (may be
  // null: 0), into y (row r at y + r*ldy, cols floats written; the rest untouched).
  void (*panel)(const float* x, std::int64_t ldx, std::int64_t rows, const float* panel,
                std::int64_t k, const float* bias, float* y, std::int64_t ldy, std::int64_t cols,
                GemmEpilogue epilogue) = nullptr;
  // As `panel` on operands in place (layers/gemm.cpp, the training GEMM): see StridedPanel.
  void (*panel_strided)(const StridedPanel& args) = nullptr;
  // The vectorised GELU of the epilogue on n floats in place (n any), and the erf it is built
  // from (y = erf(x), n a multiple of vector_floats): exposed for their accuracy tests.
  void (*gelu_erf)(float* x, std::int64_t n) = nullptr;
  void (*erf)(const float* x, float* y, std::int64_t n) = nullptr;
  // The training executor's GELU (train/gelu.h) on the same erf: y = gelu(u) (y may be u), and
  // du = dy · gelu'(u) with gelu'(u) = Φ(u) + u·φ(u), φ from vec_math.h's exp_v; n any.
  void (*gelu_erf_from)(const float* u, float* y, std::int64_t n) = nullptr;
  void (*gelu_erf_grad)(const float* u, const float* dy, float* du, std::int64_t n) = nullptr;
  // As `panel` on bf16 x rows (row r at x + r*ldx bf16 values, ldx even) and one bf16 panel
  // (layout above); k even.
  void (*panel_bf16)(const std::uint16_t* x, std::int64_t ldx, std::int64_t rows,
                     const std::uint32_t* panel, std::int64_t k, const float* bias, float* y,
                     std::int64_t ldy, std::int64_t cols, GemmEpilogue epilogue) = nullptr;
  // n floats rounded to bf16, to nearest even (NaN stays NaN): the GEMM's bf16 input, the
  // same bits on every ISA (as headcount::to_bf16).
  void (*to_bf16)(const float* x, std::uint16_t* y, std::int64_t n) = nullptr;
  // As `panel` on quantised x rows (row r at x + r*ldx bytes, its scale row_scale[r]) and one
  // int8 panel (layout above); k a multiple of 4.
  void (*panel_i8)(const std::uint8_t* x, std::int64_t ldx, const float* row_scale,
                   std::int64_t rows, const std::uint8_t* panel, std::int64_t k, const float* bias,
                   float* y, std::int64_t ldy, std::int64_t cols, GemmEpilogue epilogue) = nullptr;
  // AMX tiles (Isa::amx_bf16's table only; null in every other): as panel_bf16 and panel_i8, on
  // TDPBF16PS and TDPBUSD, the panel layouts above read as tiles where they lie (a bf16 pair row
  // or an int8 quad row of 16 lanes is one tile row), except that `cols` may pass 64: the
  // columns of ceil(cols / 64) consecutive panels (bias and y advance with them). k a multiple of
  // 32 (bf16) or 64 (int8), and x readable for whole tiles of 16 rows: up to 15 rows past `rows`
  // (any values; their products are dropped), which packed_gemm.cpp pads. int8: the int32 sums are
  // exact, so the bits are panel_i8's. bf16: each output is still one fp32 accumulator over the
  // depth in increasing steps of 32, whatever the row's tile or its neighbours (the tile unit's
  // order inside a step is its own), so the invariance above holds, within the bound of
  // test_packed_gemm_bf16.cpp but not bitwise vdpbf16ps's result.
  void (*panel_bf16_amx)(const std::uint16_t* x, std::int64_t ldx, std::int64_t rows,
                         const std::uint32_t* panel, std::int64_t k, const float* bias, float* y,
                         std::int64_t ldy, std::int64_t cols, GemmEpilogue epilogue) = nullptr;
  void (*panel_i8_amx)(const std::uint8_t* x, std::int64_t ldx, const float* row_scale,
                       std::int64_t rows, const std::uint8_t* panel, std::int64_t k,
                       const float* bias, float* y, std::int64_t ldy, std::int64_t cols,
                       GemmEpilogue epilogue) = nullptr;
  // One row of n floats to n bytes q + 128 and its scale (above): 0 for an all-zero row (every
  // byte 128; also a row whose max |x| is so small that 127 / max overflows, below ~3.7e-37), NaN
  // when the row holds a NaN or an infinity (so the row's outputs are NaN).
  void (*quantize_u8)(const float* x, std::int64_t n, std::uint8_t* q, float* scale) = nullptr;
  // One row of the encoder's residual + LayerNorm (layers/layer_norm.h): row += residual (if
  // not null), then (row - mean) / sqrt(var + eps) · gamma + beta, mean and variance summed in
  // double in an order that depends only on width.
  void (*layer_norm_row)(float* row, const float* residual, std::int64_t width, const float* gamma,
                         const float* beta, float eps) = nullptr;
  // The training executor's LayerNorm (train/layer_norm.h), per row: the forward writes
  // y = (x - mean)·rstd·γ + β and the row's float mean and rstd (statistics summed as in
  // layer_norm_row); the backward's dx from those statistics (dx += with accumulate).
  void (*layer_norm_train_row)(const float* x, std::int64_t width, const float* gamma,
                               const float* beta, float eps, float* y, float* mean,
                               float* rstd) = nullptr;
  void (*layer_norm_grad_row)(const float* x, const float* dy, const float* gamma, float mean,
                              float rstd, std::int64_t width, float* dx, bool accumulate) = nullptr;
  // panel_i8 runs on vpdpbusd (else on widened 32-bit multiplies): for the benchmark's
  // report of which micro-kernel ran (layers::packed_gemm_kernel).
  bool i8_dot = false;
};

const GemmKernels& gemm_kernels(Isa isa);

}  // namespace headcount::simd
