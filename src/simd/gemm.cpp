// The one dispatch point of the packed GEMM's micro-kernels: an Isa to its table.
#include "simd/gemm.h"

#include "headcount/error.h"
#include "simd/amx.h"

namespace headcount::simd {

#define HC_DECLARE(ns)             \
  namespace ns {                   \
  const GemmKernels& gemm_table(); \
  }
HC_DECLARE(generic)
HC_DECLARE(avx2)
HC_DECLARE(avx512)
HC_DECLARE(avx512_bf16)
HC_DECLARE(avx512_vnni)
HC_DECLARE(amx_tiles)
#undef HC_DECLARE

const GemmKernels& gemm_kernels(Isa isa) {
  check(isa != Isa::best && isa_supported(isa), "isa",
        "a resolved instruction set this CPU supports", isa_name(isa));
  switch (isa) {
    case Isa::amx_bf16: {
      // avx512_bf16's table (fp32 on the AVX-512 FMA, so fp32 does not change with AMX) plus
      // the tiles: bf16 always (the OS granted the tile state: isa.cpp), int8 where the CPU has
      // AMX-INT8. packed_gemm.cpp chooses between them and the vector kernels.
      static const GemmKernels kernels = [] {
        GemmKernels k = gemm_kernels(Isa::avx512_bf16);
        k.isa = Isa::amx_bf16;
        k.panel_bf16_amx = amx_tiles::gemm_table().panel_bf16_amx;
        if (amx::int8_available()) k.panel_i8_amx = amx_tiles::gemm_table().panel_i8_amx;
        return k;
      }();
      return kernels;
    }
    case Isa::avx512_bf16: {
      // fp32 from the AVX-512 FMA kernel (the same bits with or without AVX512_BF16), bf16 on
      // vdpbf16ps, int8 on vpdpbusd.
      static const GemmKernels kernels = [] {
        GemmKernels k = avx512::gemm_table();
        k.isa = Isa::avx512_bf16;
        k.panel_bf16 = avx512_bf16::gemm_table().panel_bf16;
        k.panel_i8 = avx512_bf16::gemm_table().panel_i8;  // vpdpbusd
        k.i8_dot = true;
        return k;
      }();
      return kernels;
    }
    case Isa::avx512: {
      // int8 on vpdpbusd where the CPU has AVX512_VNNI without AVX512_BF16: the widened
      // multiplies ran at a third of the fp32 kernel's rate there (bench --suite encoder).
      static const GemmKernels kernels = [] {
        GemmKernels k = avx512::gemm_table();
        if (__builtin_cpu_supports("avx512vnni")) {
          k.panel_i8 = avx512_vnni::gemm_table().panel_i8;
          k.i8_dot = true;
        }
        return k;
      }();
      return kernels;
    }
    case Isa::avx2:
      return avx2::gemm_table();
    default:
      return generic::gemm_table();
  }
}

}  // namespace headcount::simd
