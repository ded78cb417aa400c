// The one dispatch point: an Isa to its table of tile micro-kernels.
#include "simd/tiles.h"

#include "headcount/error.h"

namespace headcount::simd {

#define HC_DECLARE(ns)                                       \
  namespace ns {                                             \
  const TileKernels& table();                                \
  void exp_array(const float* x, float* y, std::int64_t n);  \
  void exp2_array(const float* x, float* y, std::int64_t n); \
  }
HC_DECLARE(generic)
HC_DECLARE(avx2)
HC_DECLARE(avx512)
HC_DECLARE(avx512_bf16)
#undef HC_DECLARE

const TileKernels& tile_kernels(Isa isa) {
  check(isa != Isa::best && isa_supported(isa), "isa",
        "a resolved instruction set this CPU supports", isa_name(isa));
  switch (isa) {
    case Isa::amx_bf16:  // AMX serves only the streaming kernel's bf16 tiles
    case Isa::avx512_bf16:
      return avx512_bf16::table();
    case Isa::avx512:
      return avx512::table();
    case Isa::avx2:
      return avx2::table();
    default:
      return generic::table();
  }
}

namespace {

// The ISA's copy of an elementwise function (each tiles_<isa>.cpp defines its own).
using ArrayFn = void (*)(const float*, float*, std::int64_t);
ArrayFn pick(Isa isa, ArrayFn generic_fn, ArrayFn avx2_fn, ArrayFn avx512_fn,
             ArrayFn avx512_bf16_fn) {
  check(isa != Isa::best && isa_supported(isa), "isa",
        "a resolved instruction set this CPU supports", isa_name(isa));
  switch (isa) {
    case Isa::amx_bf16:  // AMX serves only the streaming kernel's bf16 tiles
    case Isa::avx512_bf16:
      return avx512_bf16_fn;
    case Isa::avx512:
      return avx512_fn;
    case Isa::avx2:
      return avx2_fn;
    default:
      return generic_fn;
  }
}

}  // namespace

void vector_exp(Isa isa, const float* x, float* y, std::int64_t n) {
  pick(isa, &generic::exp_array, &avx2::exp_array, &avx512::exp_array, &avx512_bf16::exp_array)(
      x, y, n);
}

void vector_exp2(Isa isa, const float* x, float* y, std::int64_t n) {
  pick(isa, &generic::exp2_array, &avx2::exp2_array, &avx512::exp2_array, &avx512_bf16::exp2_array)(
      x, y, n);
}

}  // namespace headcount::simd
