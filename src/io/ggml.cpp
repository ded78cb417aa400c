// ggml's type table and the dequantization of F32, F16, Q8_0 and Q4_1 blocks to fp32, block by
// block in file order (the layouts are in include/headcount/ggml.h). Plain scalar loops: this
// runs once per tensor at load (the fp32 reference path), not per token.
#include "headcount/ggml.h"

#include <cstring>

#include "headcount/error.h"

namespace headcount {

using detail::concat;

namespace {

struct TypeRow {
  std::uint32_t type;
  GgmlTypeTraits traits;
};

// Block sizes and bytes as ggml defines them (ggml.c type_traits; the same table as the `gguf`
// package's GGML_QUANT_SIZES).
constexpr TypeRow kTypes[] = {
    {0, {"F32", 1, 4, true}},          {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", 32, 18, false}},      {3, {"Q4_1", 32, 20, true}},
    {6, {"Q5_0", 32, 22, false}},      {7, {"Q5_1", 32, 24, false}},
    {8, {"Q8_0", 32, 34, true}},       {9, {"Q8_1", 32, 40, false}},
    {10, {"Q2_K", 256, 84, false}},    {11, {"Q3_K", 256, 110, false}},
    {12, {"Q4_K", 256, 144, false}},   {13, {"Q5_K", 256, 176, false}},
    {14, {"Q6_K", 256, 210, false}},   {15, {"Q8_K", 256, 292, false}},
    {16, {"IQ2_XXS", 256, 66, false}}, {17, {"IQ2_XS", 256, 74, false}},
    {18, {"IQ3_XXS", 256, 98, false}}, {19, {"IQ1_S", 256, 50, false}},
    {20, {"IQ4_NL", 32, 18, false}},   {21, {"IQ3_S", 256, 110, false}},
    {22, {"IQ2_S", 256, 82, false}},   {23, {"IQ4_XS", 256, 136, false}},
    {24, {"I8", 1, 1, false}},         {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},        {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},        {29, {"IQ1_M", 256, 56, false}},
    {30, {"BF16", 1, 2, false}},       {34, {"TQ1_0", 256, 54, false}},
    {35, {"TQ2_0", 256, 66, false}},   {39, {"MXFP4", 32, 17, false}},
    {40, {"NVFP4", 64, 36, false}},    {41, {"Q1_0", 128, 18, false}},
};

std::uint16_t load_u16(const std::byte* p) {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) |
                                    (std::to_integer<unsigned>(p[1]) << 8));
}

void dequantize_q8_0(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 34, out += 32) {
    const float d = fp16_to_float(load_u16(in));
    for (int i = 0; i < 32; ++i)
      out[i] = d * static_cast<float>(static_cast<std::int8_t>(in[2 + i]));
  }
}

void dequantize_q4_1(const std::byte* in, std::int64_t blocks, float* out) {
  for (std::int64_t b = 0; b < blocks; ++b, in += 20, out += 32) {
    const float d = fp16_to_float(load_u16(in));
    const float m = fp16_to_float(load_u16(in + 2));
    for (int j = 0; j < 16; ++j) {
      const unsigned byte = std::to_integer<unsigned>(in[4 + j]);
      out[j] = d * static_cast<float>(byte & 0x0Fu) + m;
      out[j + 16] = d * static_cast<float>(byte >> 4) + m;
    }
  }
}

}  // namespace

GgmlTypeTraits ggml_type_traits(std::uint32_t type) {
  for (const TypeRow& row : kTypes)
    if (row.type == type) return row.traits;
  return {};
}

std::string ggml_type_name(std::uint32_t type) {
  const GgmlTypeTraits t = ggml_type_traits(type);
  return t.name != nullptr ? std::string(t.name) : concat("unknown type ", type);
}

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t word;
  if (exponent == 0x1f) {
    word = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    word = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    word = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    word = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float out;
  std::memcpy(&out, &word, sizeof out);
  return out;
}

void dequantize(GgmlType type, std::span<const std::byte> blocks, std::int64_t count, float* out) {
  const GgmlTypeTraits t = ggml_type_traits(type);
  check(t.dequantizable, "dequantize type", "F32, F16, Q8_0 or Q4_1", ggml_type_name(type));
  check(count >= 0 && count % t.block_size == 0, concat("dequantize ", t.name, " count"),
        concat("a multiple of ", t.block_size, " (the block size)"), count);
  const std::int64_t n_blocks = count / t.block_size;
  check(blocks.size() ==
            static_cast<std::uint64_t>(n_blocks) * static_cast<std::uint64_t>(t.block_bytes),
        concat("dequantize ", t.name, " bytes"),
        concat(n_blocks * t.block_bytes, " (", n_blocks, " blocks of ", t.block_bytes, ")"),
        blocks.size());
  const std::byte* in = blocks.data();
  switch (type) {
    case GgmlType::f32:
      if (count > 0) std::memcpy(out, in, static_cast<std::size_t>(count) * sizeof(float));
      break;
    case GgmlType::f16:
      for (std::int64_t i = 0; i < count; ++i) out[i] = fp16_to_float(load_u16(in + 2 * i));
      break;
    case GgmlType::q8_0:
      dequantize_q8_0(in, n_blocks, out);
      break;
    case GgmlType::q4_1:
      dequantize_q4_1(in, n_blocks, out);
      break;
    default:
      break;  // not dequantizable: refused above
  }
}

}  // namespace headcount
