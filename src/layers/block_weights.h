// Weights kept in a GGUF file's own quantized blocks (Q4_1, Q8_0): the decoder's
// `--weights quantized`. Packed once, at load, into simd/qblock.h's panels (the file's block
// bytes regrouped 16 output rows to a vector, nothing requantized: the weights are exactly the
// file's), then multiplied by packed_gemm when PackedGemmArgs::blocks points here: x quantized
// to int8 in blocks of 32 (as llama.cpp quantizes activations for these formats), exact int32
// block sums, fp32 after (qblock.h has the arithmetic). A row's result depends on that row of
// x only: the same bits alone or in a batch, on 1 or N threads, on every ISA.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "headcount/ggml.h"
#include "headcount/tensor.h"
#include "simd/qblock.h"

namespace headcount::layers {

// One source matrix in ggml's layout: `rows` rows (output features) of `cols` elements (input
// features) as blocks of `type`, row after row. `row_order`, when not empty, has `rows` entries:
// packed row i is source row row_order[i] (the decoder's Q/K un-permutation).
struct BlockSource {
  GgmlType type = GgmlType::q4_1;
  std::span<const std::byte> bytes;
  std::int64_t rows = 0, cols = 0;
  std::span<const std::int64_t> row_order;
};

struct BlockWeights {
  simd::QBlockFormat format = simd::QBlockFormat::q4_1;
  std::int64_t n = 0;  // output rows (the GEMM's y width)
  std::int64_t k = 0;  // input width, a multiple of 32
  Tensor packed;       // i8 bytes: ceil(n / 64) panels of qblock.h's layout

  // The parts' rows stacked (parts[0]'s first): one type (Q4_1 or Q8_0) and one width in all.
  // Error names the part and what is wrong (another type, width, too few bytes, a bad
  // row_order).
  static BlockWeights pack(std::span<const BlockSource> parts);
  std::int64_t bytes() const { return packed.bytes(); }
};

}  // namespace headcount::layers
