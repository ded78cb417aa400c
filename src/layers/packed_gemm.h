// The encoder's projections: y[m, n] = epilogue(x[m, k] · W[k, n] + bias), with W packed once
// (when the model loads) into panels of gemm_panel_columns() = 64 columns x k rows, contiguous
// and zero-padded past n (tuning.h), and multiplied by headcount's own micro-kernels
// (simd/gemm.h) on the Context's pool: one task per (block of at most gemm_task_rows() rows,
// panel); with as many blocks as workers, the rows in one contiguous group per worker
// (packed_gemm.cpp's TaskGrid).
//
// Determinism by construction: every output element is one fp32 accumulator over d = 0..k-1
// in order (never split over threads; depth blocks of gemm_depth_block() run one after the
// other through fp32 partial sums, which is exact), then + bias, then the epilogue, with the
// same instructions whatever m, the row's place in its tile and the thread count. A sentence's
// projections are therefore bitwise the same alone or in any batch, on 1 or N threads
// (tests/test_packed_gemm.cpp). Training keeps layers::gemm (OpenBLAS, transposes).
//
// bf16 (`--dtype bf16`): pack_weights(..., DType::bf16) rounds W to bf16 once, in the pair
// layout of simd/gemm.h; packed_gemm then rounds x to bf16 (into a Context workspace, rows
// split over the pool) and accumulates in fp32 with bias and epilogue in fp32, as above. The
// same invariance holds (a row's rounding and sum depend on that row only);
// tests/test_packed_gemm_bf16.cpp checks every ISA against float64 on the rounded inputs.
//
// AMX (Isa::amx_bf16, the default where the CPU and the OS allow the tiles): bf16 runs on
// TDPBF16PS and int8 on TDPBUSD (simd/gemm.h's panel_bf16_amx, panel_i8_amx), the panels read
// as tiles where they lie, so packing does not change. bf16 takes the tiles for every m when k
// is a multiple of 32 (a matrix's rows all get one kernel, so the invariance holds); int8 from
// tuning.h's gemm_i8_amx_min_rows() when k is a multiple of 64, bitwise vpdpbusd's result.
#pragma once

#include <cstdint>
#include <string>

#include "headcount/context.h"
#include "headcount/tensor.h"
#include "simd/gemm.h"

namespace headcount::layers {

using simd::GemmEpilogue;

struct BlockWeights;  // block_weights.h

// W [k, n] row-major (row stride ldw) → f32 [panels, k, 64], panels = ceil(n / 64); with
// dtype bf16 (k even): bf16 [panels, k, 64] holding each panel's k/2 pair rows (gemm.h).
Tensor pack_weights(const float* w, std::int64_t k, std::int64_t n, std::int64_t ldw,
                    DType dtype = DType::f32);

struct PackedGemmArgs {
  std::int64_t m = 0;
  const float* x = nullptr;  // [m, k], row stride ldx
  std::int64_t ldx = 0;
  const Tensor* w = nullptr;  // pack_weights(...) of a [k, n] matrix, f32, bf16 or i8
  // Instead of w: a GGUF file's Q4_1 / Q8_0 blocks (block_weights.h; n = blocks->n, the
  // epilogue none).
  const BlockWeights* blocks = nullptr;
  std::int64_t n = 0;
  const float* bias = nullptr;  // [n] or null
  float* y = nullptr;           // [m, n], row stride ldy; must not overlap x
  std::int64_t ldy = 0;
  GemmEpilogue epilogue = GemmEpilogue::none;
};

void packed_gemm(Context& ctx, const PackedGemmArgs& args);

// The micro-kernel packed_gemm runs for weights of `dtype` (f32, bf16, i8) at depth k and m rows
// on `isa` (resolved as a Context resolves it), in words for benchmark output, e.g. "bf16 AMX
// tiles (TDPBF16PS)" or "fp32 FMA (avx512)".
std::string packed_gemm_kernel(Isa isa, DType dtype, std::int64_t k, std::int64_t m);

}  // namespace headcount::layers
