// AMX-BF16 tiles for the streaming kernel's bf16 path (Isa::amx_bf16); the packed GEMM's tiles
// are in gemm_amx.cpp (simd/gemm.h). One TDPBF16PS
// multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16 fp32: 8192 multiply-adds per
// instruction, where vdpbf16ps does 32. Layouts (row-major; leading dimensions in elements):
//   q   bf16 [rows, depth]        rows a multiple of 16, depth a multiple of 32
//   kt  uint32 pairs [depth/2, keys]: kt[p][c] = bf16 k[c][2p] | bf16 k[c][2p+1] << 16
//   p   bf16 [rows, keys]         keys a multiple of 32
//   v   uint32 pairs [keys/2, width]: v[c2][e] = bf16 v[2c2][e] | bf16 v[2c2+1][e] << 16,
//       width a multiple of 16
#pragma once

#include <cstdint>

namespace headcount::simd::amx {

// The CPU has AMX-TILE and AMX-BF16 and Linux granted this process the tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool available();
// ... and AMX-INT8 too (TDPBUSD: the packed GEMM's int8 path on tiles, simd/gemm.h).
bool int8_available();

// s[r, c] = sum_d q[r, d] * k[c, d]
void scores(const std::uint16_t* q, std::int64_t ldq, const std::uint32_t* kt, std::int64_t ldk,
            std::int64_t depth, float* s, std::int64_t lds, std::int64_t rows, std::int64_t keys);

// acc[r, e] += sum_c p[r, c] * v[c, e]
void weighted_sum(const std::uint16_t* p, std::int64_t ldp, const std::uint32_t* v,
                  std::int64_t ldv, std::int64_t keys, float* acc, std::int64_t ldacc,
                  std::int64_t rows, std::int64_t width);

// One online-softmax step along each row r < rows of s [rows, cols] (cols a multiple of 16):
// x = scale * s for columns in [lo[r], hi[r]), -inf elsewhere; m' = max(max[r], max x);
// alpha[r] = exp(max[r] - m'); p[r, c] = bf16(exp(x - m')); sum[r] = alpha·sum[r] + sum of
// exp(x - m') in fp32; acc[r, :width] *= alpha[r]. A row with no finite x keeps alpha 1.
void softmax_rows(const float* s, std::int64_t lds, std::int64_t rows, std::int64_t cols,
                  float scale, const std::int32_t* lo, const std::int32_t* hi, float* max,
                  float* sum, std::uint16_t* p, std::int64_t ldp, float* acc, std::int64_t ldacc,
                  std::int64_t width);

}  // namespace headcount::simd::amx
