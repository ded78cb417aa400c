// The block-quantized GEMM (qblock.h): x's quantization by blocks, the scalar kernel (the
// reference every ISA's kernel matches bit for bit) and the one dispatch point.
#include "simd/qblock.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "headcount/error.h"

namespace headcount::simd {

using i64 = std::int64_t;

namespace avx2 {
const QBlockKernels& qblock_table();
}
namespace avx512_vnni {
const QBlockKernels& qblock_table();
}

void quantize_blocks(const float* x, i64 k, std::int8_t* q, float* dx, float* sx,
                     std::int32_t* sum) {
  for (i64 b = 0; b < k / kQBlock; ++b) {
    const float* v = x + b * kQBlock;
    std::int8_t* out = q + b * kQBlock;
    float amax = 0;
    bool finite = true;
    for (i64 i = 0; i < kQBlock; ++i) {
      finite = finite && std::isfinite(v[i]);
      amax = std::max(amax, std::fabs(v[i]));
    }
    const float inv = 127.0f / amax;
    // 127 / max overflows for max below ~3.7e-37: such a block is flushed to zero like an
    // all-zero one (its products are below fp32's resolution of anything but an exact zero).
    if (!finite || amax == 0.0f || !std::isfinite(inv)) {
      std::fill_n(out, kQBlock, std::int8_t{0});
      dx[b] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      sx[b] = dx[b];
      sum[b] = 0;
      continue;
    }
    std::int32_t s = 0;
    for (i64 i = 0; i < kQBlock; ++i) {
      // The product rounds once (no FMA here), then to the nearest integer, ties to even.
      const float scaled = v[i] * inv;
      const float r = std::clamp(std::nearbyint(scaled), -127.0f, 127.0f);
      out[i] = static_cast<std::int8_t>(r);
      s += out[i];
    }
    dx[b] = amax / 127.0f;
    sx[b] = dx[b] * static_cast<float>(s);
    sum[b] = s;
  }
}

namespace {

// IEEE binary16 -> binary32, exact (the packed d and m; subnormals included).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    // Zero or subnormal: mantissa · 2^-24, exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0x1.0p-24f;
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::uint16_t load_half(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// The scalar kernel: qblock.h's operations one output at a time.
void panel_scalar(QBlockFormat format, const QuantizedRows& x, i64 rows, const std::uint8_t* panel,
                  const float* bias, float* y, i64 ldy, i64 cols) {
  const i64 blocks = x.k / kQBlock, block_bytes = qblock_bytes(format);
  const bool q4 = format == QBlockFormat::q4_1;
  for (i64 r = 0; r < rows; ++r) {
    const std::int8_t* xq = x.q + r * x.k;
    for (i64 c = 0; c < cols; ++c) {
      const i64 group = c / kQGroupRows, lane = c % kQGroupRows;
      const std::uint8_t* stream = panel + group * blocks * block_bytes;
      float acc = 0;
      for (i64 b = 0; b < blocks; ++b) {
        const std::uint8_t* block = stream + b * block_bytes;
        const std::int8_t* xb = xq + b * kQBlock;
        std::int32_t isum = 0;
        const i64 bx = r * blocks + b;
        if (q4) {
          for (i64 t = 0; t < 4; ++t)
            for (i64 e = 0; e < 4; ++e) {
              const std::uint8_t byte = block[t * 64 + lane * 4 + e];
              isum += (byte & 0x0f) * xb[4 * t + e] + (byte >> 4) * xb[16 + 4 * t + e];
            }
          const float d = half_to_float(load_half(block + 256 + 2 * lane));
          const float m = half_to_float(load_half(block + 288 + 2 * lane));
          acc = std::fma(static_cast<float>(isum), d * x.dx[bx], acc);
          acc = std::fma(m, x.sx[bx], acc);
        } else {
          for (i64 t = 0; t < 8; ++t)
            for (i64 e = 0; e < 4; ++e) isum += block[t * 64 + lane * 4 + e] * xb[4 * t + e];
          const float d = half_to_float(load_half(block + 512 + 2 * lane));
          acc = std::fma(static_cast<float>(isum - 128 * x.sum[bx]), d * x.dx[bx], acc);
        }
      }
      y[r * ldy + c] = bias == nullptr ? acc : acc + bias[c];
    }
  }
}

}  // namespace

namespace {
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c" (the
// sanitizer trees build with it), so the bit is read directly.
bool cpu_has_f16c() {
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
#else
  return false;
#endif
}
}  // namespace

const QBlockKernels& qblock_kernels(Isa isa) {
  check(isa != Isa::best && isa_supported(isa), "isa",
        "a resolved instruction set this CPU supports", isa_name(isa));
  static const QBlockKernels scalar{.isa = Isa::generic, .panel = &panel_scalar};
  if ((isa == Isa::avx512 || isa == Isa::avx512_bf16 || isa == Isa::amx_bf16) &&
      __builtin_cpu_supports("avx512vnni"))
    return avx512_vnni::qblock_table();
  // AVX2, and AVX-512 hosts without VNNI (every AVX-512 CPU has AVX2): vpmaddubsw, with F16C's
  // vcvtph2ps for the scales (every AVX2 CPU has it; checked, as VNNI is above).
  if (isa != Isa::generic && isa_supported(Isa::avx2) && cpu_has_f16c())
    return avx2::qblock_table();
  return scalar;
}

}  // namespace headcount::simd
