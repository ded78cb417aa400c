// The decode micro-kernel, one copy per instruction set (decode_<isa>.cpp), like the tile
// micro-kernels (tiles.h): the decode kernel (kernels/decode.cpp) plans and merges; this is
// the only code of the decode path that is compiled per ISA.
//
// One call processes one chunk of keys [key_begin, key_end) of one (sequence, kv head) for all
// its query rows (group x q_len) and leaves a partial online-softmax state per row:
//   m[r]      max over the visible keys of the chunk of s = scale * q_r . k_j  (-inf if none)
//   l[r]      sum of exp(s - m[r])                                              (0 if none)
//   acc[r, :] sum of exp(s - m[r]) * v_j                                        (0 if none)
// Row r sees keys j < row_end[r] (and j < key_end). Keys are taken in blocks of 16: each block
// of K (converted to fp32 once if it is bf16 / int8) is used by every row while it is in L1,
// then each block of V likewise. The rows never interact, so a row's result does not depend
// on which other rows share the call (grouped-query == multi-head with repeated K/V, bitwise).
//
// Scores are dots along head_dim, W keys at a time: W accumulator vectors (one per key) are
// reduced together by a transposing tree of two-input shuffles, so the horizontal sums cost
// ~3 vector operations per key instead of log2(W) per key and row.
#pragma once

#include <cstdint>

#include "headcount/isa.h"
#include "headcount/tensor.h"

namespace headcount::simd {

struct DecodeChunk {
  CacheDType dtype = CacheDType::f32;
  std::int64_t head_dim = 0, v_head_dim = 0;
  std::int64_t head_dim_pad = 0, v_head_dim_pad = 0;  // rounded up to the vector width
  // The (sequence, kv head)'s rows: K row j at k + j*head_dim elements, V likewise; int8
  // scales at k_scale[j], v_scale[j] (null otherwise).
  const void* k = nullptr;
  const void* v = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  std::int64_t key_begin = 0, key_end = 0;
  // Query rows: q [rows, head_dim_pad] fp32, zero-padded; row r sees keys j < row_end[r].
  const float* q = nullptr;
  const std::int64_t* row_end = nullptr;
  std::int64_t rows = 0;
  float scale = 1.0f;
  // Scratch (fp32): k_block [16, head_dim_pad], v_block [16, v_head_dim_pad], p [rows, 16].
  float* k_block = nullptr;
  float* v_block = nullptr;
  float* p = nullptr;
  // Outputs: m [rows], l [rows], acc [rows, v_head_dim_pad].
  float* m = nullptr;
  float* l = nullptr;
  float* acc = nullptr;
};

inline constexpr std::int64_t kDecodeKeyBlock = 16;

struct DecodeKernels {
  Isa isa = Isa::generic;
  int vector_floats = 4;
  void (*chunk)(const DecodeChunk& chunk) = nullptr;
};

const DecodeKernels& decode_kernels(Isa isa);

}  // namespace headcount::simd
