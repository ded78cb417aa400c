// The tile micro-kernels of the streaming attention kernel, one table per instruction set.
// This is the only interface through which algorithm code reaches SIMD: the streaming
// kernel packs tiles and calls these; it never names an instruction set.
//
// The streaming kernel computes scores transposed, S^T = K · Q^T, so that K and V are read
// straight from the caller's tensors (no transpose) and the softmax runs down columns,
// vectorised across queries. Layouts (row-major, leading dimensions in elements; W =
// vector_floats; pointers need no alignment):
//   f32 scores:   a [rows, depth] (lda: K rows), b [depth, cols] (ldb: Q^T), s [rows, cols]
//   bf16 scores:  a pairs [rows, depth/2] (uint32 = bf16 of a[r][2p] | a[r][2p+1] << 16),
//                 b pairs [depth/2, cols] (uint32 = bf16 of b[2p][c] | b[2p+1][c] << 16)
//   f32 sum:      p(r, c) = p[r*p_row + c*p_key], v [keys, width] (ldv), acc [rows, width]
//   bf16 sum:     p pairs(r, c2) = p[r*p_row + c2*p_key] (keys 2c2 and 2c2+1), v pairs
//                 [keys/2, width] (uint32 = bf16 of v[2c2][e] | v[2c2+1][e] << 16)
// cols and width must be multiples of W.
#pragma once

#include <cstdint>

#include "headcount/isa.h"

namespace headcount::simd {

struct TileKernels {
  Isa isa = Isa::generic;
  int vector_floats = 4;

  // s[r, c] = scale * sum_d a[r, d] * b[d, c]; and where col_max is not null, col_max[c] =
  // max_r s[r, c] for c < cols (NaN scores are never taken; -inf when all are NaN): the
  // streaming kernel's softmax then skips its own pass over the tile to find the maximum.
  void (*scores_f32)(const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                     std::int64_t depth, float* s, std::int64_t lds, std::int64_t rows,
                     std::int64_t cols, float scale, float* col_max) = nullptr;
  // The same on bf16 pairs with fp32 accumulation; null where the ISA has no bf16 dot.
  void (*scores_bf16)(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b,
                      std::int64_t ldb, std::int64_t depth_pairs, float* s, std::int64_t lds,
                      std::int64_t rows, std::int64_t cols, float scale) = nullptr;
  // acc[r, :] = alpha[r] * acc[r, :] + sum_c p(r, c) * v[c, :]
  void (*weighted_sum_f32)(const float* p, std::int64_t p_row, std::int64_t p_key, const float* v,
                           std::int64_t ldv, std::int64_t keys, float* acc, std::int64_t ldacc,
                           std::int64_t rows, std::int64_t width, const float* alpha) = nullptr;
  void (*weighted_sum_bf16)(const std::uint32_t* p, std::int64_t p_row, std::int64_t p_key,
                            const std::uint32_t* v, std::int64_t ldv, std::int64_t key_pairs,
                            float* acc, std::int64_t ldacc, std::int64_t rows, std::int64_t width,
                            const float* alpha) = nullptr;
  // Masks a transposed score tile s [keys, cols] (lds) to each column's visible keys: s[k, c]
  // = -inf unless lo[c] <= k < hi[c] (key indices relative to the tile's first key). Every
  // row is written whole, a vector at a time: the per-query loop it replaced wrote one float
  // per row at a stride of lds (128 x 96 scalar stores on a causal diagonal tile). On its own
  // it changed a causal call's time within the noise; exp's underflow was the cost there.
  void (*mask_columns)(float* s, std::int64_t lds, std::int64_t keys, std::int64_t cols,
                       const std::int32_t* lo, const std::int32_t* hi) = nullptr;
  // True if any of x[0, n) is inf or NaN (n any): the attention's input check
  // (kernels/validate.h), vectorised per ISA.
  bool (*any_non_finite_f32)(const float* x, std::int64_t n) = nullptr;
  // out[d * ldout + j] = rows[j][d] for j < m (m <= 16), d < depth: up to 16 rows (each
  // contiguous) into 16 columns, the streaming kernel's Q^T packing. AVX-512 transposes 16 x 16
  // blocks in registers when m is 16 (other ISAs and m < 16: the scalar loop it replaced).
  // Copies values, so every ISA writes the same bits. perf, n 1000, head_dim 256: ~1.6% of a
  // call as a scalar gather, 1.3% now: reading q from memory is most of it.
  void (*transpose_rows_f32)(const float* const* rows, std::int64_t m, std::int64_t depth,
                             float* out, std::int64_t ldout) = nullptr;
  // y[i] = x[i] * s for i < n (n any; the same product on every ISA): the attention's
  // O = acc / l write-out, an SSE2 loop before; ~2% of a call at head_dim 256 either way,
  // since writing out to memory is the cost.
  void (*scale_f32)(const float* x, float s, float* y, std::int64_t n) = nullptr;
  // One step of the online softmax down the columns of s [keys, cols] (lds), for every
  // column c at once: m' = max(max[c], max_k s[k, c]); alpha[c] = exp(max[c] - m');
  // s[k, c] = exp(s[k, c] - m'); sum[c] = alpha[c]·sum[c] + sum_k s[k, c]; max[c] = m'.
  // Each exp(x - m) is taken as 2^(fl(x·log2e) - fl(m·log2e)) (vec_math.h's exp2_v).
  // -inf scores give 0; a column still without a finite score keeps alpha 1 and sum 0.
  // tile_max, where not null, holds max_k s[k, c] already (scores_f32's col_max), and the
  // step uses it instead of reading the tile for it: the same m', so the same bits.
  void (*softmax_columns)(float* s, std::int64_t lds, std::int64_t keys, std::int64_t cols,
                          float* max, float* sum, float* alpha, const float* tile_max) = nullptr;
  // The backward's elementwise step on transposed tiles s and dp [keys, cols] (ld), for
  // every column (query) c at once: p = exp(s[k, c] - lse[c]); dp[k, c] = p·(dp[k, c] -
  // delta[c]) (that is dS); s[k, c] = p. A -inf score, or lse[c] = +inf, gives p = 0.
  void (*backward_probs)(float* s, float* dp, std::int64_t ld, std::int64_t keys, std::int64_t cols,
                         const float* lse, const float* delta) = nullptr;
  // out[c2, c] = bf16(x[2c2, c]) | bf16(x[2c2+1, c]) << 16 for c2 < (keys+1)/2 (a missing
  // odd row is 0): fp32 rows to bf16 pairs, rounding to nearest even. cols a multiple of W.
  void (*pair_rows_f32)(const float* x, std::int64_t ldx, std::int64_t keys, std::int64_t cols,
                        std::uint32_t* out, std::int64_t ldout) = nullptr;
  // The same for rows already in bf16 (row r at x + r*ldx): values copied, not rounded.
  void (*pair_rows_bf16)(const std::uint16_t* x, std::int64_t ldx, std::int64_t keys,
                         std::int64_t cols, std::uint32_t* out, std::int64_t ldout) = nullptr;
};

const TileKernels& tile_kernels(Isa isa);

// The vectorised exp, exposed for its accuracy test: y[i] = exp(x[i]), n a multiple of W.
void vector_exp(Isa isa, const float* x, float* y, std::int64_t n);
// The softmax's 2^x (softmax_columns), likewise: y[i] = 2^x[i] for x[i] <= 127.
void vector_exp2(Isa isa, const float* x, float* y, std::int64_t n);

}  // namespace headcount::simd
