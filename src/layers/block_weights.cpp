// Packing a GGUF file's Q4_1 / Q8_0 blocks into simd/qblock.h's panels (block_weights.h).
#include "layers/block_weights.h"

#include <algorithm>
#include <cstring>

#include "headcount/error.h"

namespace headcount::layers {

using detail::concat;
using i64 = std::int64_t;

namespace {

// Byte offsets in ggml's blocks (ggml.h): Q4_1 = d, m (fp16), 16 bytes of nibbles; Q8_0 = d
// (fp16), 32 int8.
constexpr i64 kQ41Bytes = 20, kQ80Bytes = 34;

void pack_block(simd::QBlockFormat format, const std::byte* src, i64 lane, std::uint8_t* dst) {
  const auto* in = reinterpret_cast<const std::uint8_t*>(src);
  if (format == simd::QBlockFormat::q4_1) {
    for (i64 t = 0; t < 4; ++t) std::memcpy(dst + t * 64 + lane * 4, in + 4 + 4 * t, 4);
    std::memcpy(dst + 256 + 2 * lane, in, 2);      // d
    std::memcpy(dst + 288 + 2 * lane, in + 2, 2);  // m
  } else {
    for (i64 t = 0; t < 8; ++t)
      for (i64 e = 0; e < 4; ++e)  // q + 128 as a byte: flip the sign bit
        dst[t * 64 + lane * 4 + e] = static_cast<std::uint8_t>(in[2 + 4 * t + e] ^ 0x80u);
    std::memcpy(dst + 512 + 2 * lane, in, 2);  // d
  }
}

}  // namespace

BlockWeights BlockWeights::pack(std::span<const BlockSource> parts) {
  check(!parts.empty(), "block weights", "at least one source matrix", "none");
  const GgmlType type = parts[0].type;
  check(type == GgmlType::q4_1 || type == GgmlType::q8_0, "block weights part 0 type",
        "Q4_1 or Q8_0 (the formats --weights quantized multiplies directly)", ggml_type_name(type));
  const i64 k = parts[0].cols;
  check(k >= simd::kQBlock && k % simd::kQBlock == 0, "block weights part 0 cols",
        "a positive multiple of 32", k);
  const i64 src_block = type == GgmlType::q4_1 ? kQ41Bytes : kQ80Bytes;
  i64 n = 0;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const BlockSource& s = parts[p];
    check(s.type == type, concat("block weights part ", p, " type"),
          concat(ggml_type_name(type), " (as part 0)"), ggml_type_name(s.type));
    check(s.cols == k, concat("block weights part ", p, " cols"), concat(k, " (as part 0)"),
          s.cols);
    check(s.rows >= 1, concat("block weights part ", p, " rows"), ">= 1", s.rows);
    check(static_cast<i64>(s.bytes.size()) == s.rows * (k / simd::kQBlock) * src_block,
          concat("block weights part ", p, " bytes"),
          concat(s.rows * (k / simd::kQBlock) * src_block, " (", s.rows, " rows of ", k, ")"),
          s.bytes.size());
    check(s.row_order.empty() || static_cast<i64>(s.row_order.size()) == s.rows,
          concat("block weights part ", p, " row_order"), concat(s.rows, " entries or none"),
          s.row_order.size());
    std::vector<bool> seen(static_cast<std::size_t>(s.row_order.empty() ? 0 : s.rows));
    for (std::size_t i = 0; i < s.row_order.size(); ++i) {
      const i64 r = s.row_order[i];
      check(r >= 0 && r < s.rows && !seen[static_cast<std::size_t>(r)],
            concat("block weights part ", p, " row_order[", i, "]"),
            concat("a row in [0, ", s.rows, ") not taken before"), r);
      seen[static_cast<std::size_t>(r)] = true;
    }
    n += s.rows;
  }
  BlockWeights w;
  w.format = type == GgmlType::q4_1 ? simd::QBlockFormat::q4_1 : simd::QBlockFormat::q8_0;
  w.n = n;
  w.k = k;
  const i64 blocks = k / simd::kQBlock, block_bytes = simd::qblock_bytes(w.format);
  const i64 groups =
      (n + simd::kQPanelRows - 1) / simd::kQPanelRows * (simd::kQPanelRows / simd::kQGroupRows);
  w.packed = Tensor(DType::i8, {groups * blocks * block_bytes});
  auto* dst = w.packed.data<std::uint8_t>();
  std::fill_n(dst, w.packed.numel(), std::uint8_t{0});  // rows past n: zero weights, zero scales
  i64 row = 0;
  for (const BlockSource& s : parts)
    for (i64 i = 0; i < s.rows; ++i, ++row) {
      const i64 source_row = s.row_order.empty() ? i : s.row_order[static_cast<std::size_t>(i)];
      const std::byte* src = s.bytes.data() + source_row * blocks * src_block;
      std::uint8_t* group = dst + (row / simd::kQGroupRows) * blocks * block_bytes;
      for (i64 b = 0; b < blocks; ++b)
        pack_block(w.format, src + b * src_block, row % simd::kQGroupRows, group + b * block_bytes);
    }
  return w;
}

}  // namespace headcount::layers
