// The block-quantized GEMM's micro-kernels: weights kept in the blocks a GGUF file stores them
// in (Q4_1 and Q8_0, ggml.h), inputs quantized to int8 in blocks of 32 as llama.cpp does for
// these formats (its Q8_1 / Q8_0 activations). One table per instruction set; the integer sums
// are exact, and the float steps after them are the same operations in the same order on every
// ISA, so every ISA gives the same bits (tests/test_qblock_gemm.cpp compares them).
//
// The arithmetic, per output row c of W and input row x, over the k / 32 blocks b in order:
//
//   x's block b:  dx = max|x_i| / 127,  qx_i = round_even(x_i · (127 / max|x_i|)) in [-127, 127],
//                 S  = Σ qx_i (int), sx = dx · S (one fp32 rounding)           (quantize_blocks)
//   Q4_1 block:   w_i = d · q_i + m, q_i in [0, 15]:
//                 acc = fma(float(Σ q_i · qx_i), d · dx, acc);  acc = fma(m, sx, acc)
//   Q8_0 block:   w_i = d · q_i, q_i in [-127, 127], held as u_i = q_i + 128:
//                 acc = fma(float(Σ u_i · qx_i − 128 · S), d · dx, acc)
//
// starting from acc = 0, then y = acc (+ bias[c], one rounding). d and m are the file's fp16
// values widened exactly. The integer sums are below 2^24 in magnitude (32 · 255 · 127), so
// float() is exact; d · dx is one rounding, each fma one. Every ISA computes exactly these
// operations (vpdpbusd's u8 × s8 products are the u_i or q_i times qx_i), so the result of a row
// depends only on that row of x and on W: not on the rows beside it, the tile, nor the thread.
//
// x's quantization is shared by every ISA (quantize_blocks below, scalar: it is k work per row
// against the GEMM's k · n). A block holding a NaN or an infinity gets dx = NaN (the row's
// outputs are NaN, never a finite guess); an all-zero block dx = 0, every qx 0.
//
// The packed layout (layers/block_weights.h packs it): the n output rows in panels of 64 (the
// packed GEMM's panel width; rows past n are zero), each panel 4 groups of 16 rows, each group
// its k / 32 blocks in order, each block:
//   Q4_1: 4 × 64 bytes of nibbles, then 16 fp16 d, then 16 fp16 m            (320 bytes)
//   Q8_0: 8 × 64 bytes u = q + 128, then 16 fp16 d                           (544 bytes)
// Chunk t (64 bytes) holds, for row j of the group, 4 bytes at 4j: Q4_1: the row's block bytes
// 4t .. 4t + 3 as the file stores them (low nibble element 4t + e, high nibble element
// 16 + 4t + e); Q8_0: u of elements 4t .. 4t + 3. So one vpdpbusd multiplies 16 rows by the
// same 4 inputs, broadcast.
#pragma once

#include <cstdint>

#include "headcount/isa.h"

namespace headcount::simd {

enum class QBlockFormat : std::uint8_t { q4_1, q8_0 };

inline constexpr std::int64_t kQBlock = 32;      // elements per block
inline constexpr std::int64_t kQGroupRows = 16;  // output rows per group (one vector of lanes)
inline constexpr std::int64_t kQPanelRows = 64;  // output rows per panel
inline constexpr std::int64_t qblock_bytes(QBlockFormat f) {  // one block of one group
  return f == QBlockFormat::q4_1 ? 4 * 64 + 2 * 16 * 2 : 8 * 64 + 16 * 2;
}

// x's rows quantized by blocks: q [rows, k] int8, and per block dx, sx (float) and S (int32),
// [rows, k / 32] each; row r of each at r · k and r · k / 32.
struct QuantizedRows {
  const std::int8_t* q = nullptr;
  const float* dx = nullptr;
  const float* sx = nullptr;
  const std::int32_t* sum = nullptr;
  std::int64_t k = 0;
};

// One row of k floats (k a multiple of 32) into q[k], dx, sx, sum [k / 32] (rule above).
void quantize_blocks(const float* x, std::int64_t k, std::int8_t* q, float* dx, float* sx,
                     std::int32_t* sum);

struct QBlockKernels {
  Isa isa = Isa::generic;
  // One packed panel times `rows` quantized rows of x (row r of `x` at offsets r · k): y[r, c]
  // for c < cols <= 64 (row r of y at y + r · ldy), + bias[c] when bias is not null.
  void (*panel)(QBlockFormat format, const QuantizedRows& x, std::int64_t rows,
                const std::uint8_t* panel, const float* bias, float* y, std::int64_t ldy,
                std::int64_t cols) = nullptr;
};

// vpdpbusd on CPUs with AVX512_VNNI (every avx512_bf16 host, and avx512 ones that have it);
// vpmaddubsw on avx2 hosts and avx512 ones without VNNI (qblock_avx2.cpp: why it never
// saturates); the scalar kernel for generic (all three give the same bits).
const QBlockKernels& qblock_kernels(Isa isa);

}  // namespace headcount::simd
