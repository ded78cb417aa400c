// ggml's tensor element types, as GGUF files name them, and the dequantization of the block
// formats headcount reads (F32, F16, Q8_0, Q4_1) to fp32.
//
// A ggml row of n elements is n / block_size blocks of block_bytes bytes each, back to back,
// little-endian. The layouts this file dequantizes (ggml-common.h):
//
//   F32   4 bytes per element (IEEE binary32).
//   F16   2 bytes per element (IEEE binary16), widened exactly.
//   Q8_0  32 elements in 34 bytes: fp16 scale d, then 32 int8 q.   x[i] = d * q[i]
//   Q4_1  32 elements in 20 bytes: fp16 scale d, fp16 minimum m, then 16 bytes of nibbles;
//         byte j holds element j in its low nibble and element j + 16 in its high nibble.
//                                                                  x[i] = d * q[i] + m
//
// Every product d * q is exact in fp32 (an fp16 significand of 11 bits times an integer of at
// most 8 bits needs at most 19 bits), so Q8_0 is exact, and Q4_1's d * q + m has exactly one
// rounding, the addition, whether or not the compiler fuses it into an FMA. ggml's
// dequantize_row_q4_1 and the `gguf` package's numpy code compute the same expression, so the
// result is bit-identical to both (the tests compare bits).
//
// Every other type GGUF defines is known by name and size (so a reader can validate and skip
// such tensors) but not dequantized: dequantize() says so in an Error naming the type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace headcount {

// The numbering of ggml.h's enum ggml_type (gaps are types ggml removed).
enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
  nvfp4 = 40,
  q1_0 = 41,
};

struct GgmlTypeTraits {
  const char* name = nullptr;    // "Q4_1"; nullptr for a number ggml does not define
  std::int64_t block_size = 0;   // elements per block
  std::int64_t block_bytes = 0;  // bytes per block
  bool dequantizable = false;    // dequantize() supports it
};

// The traits of a type number as read from a file; name == nullptr if it is not a ggml type.
GgmlTypeTraits ggml_type_traits(std::uint32_t type);
inline GgmlTypeTraits ggml_type_traits(GgmlType type) {
  return ggml_type_traits(static_cast<std::uint32_t>(type));
}
// "Q4_1", or "unknown type 31".
std::string ggml_type_name(std::uint32_t type);
inline std::string ggml_type_name(GgmlType type) {
  return ggml_type_name(static_cast<std::uint32_t>(type));
}

// IEEE binary16 bits -> binary32, exact (subnormals, infinities and NaN included).
float fp16_to_float(std::uint16_t bits);

// Dequantizes `count` elements of `type` from `blocks` into out[0..count). Throws Error unless
// the type is dequantizable, count is a multiple of its block size, and blocks holds exactly
// count / block_size blocks.
void dequantize(GgmlType type, std::span<const std::byte> blocks, std::int64_t count, float* out);

}  // namespace headcount
