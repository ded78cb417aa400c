// The packed GEMM's bf16 micro-kernels for avx512_bf16, on vdpbf16ps (compile flags: see
// CMakeLists.txt). Its fp32 kernels are never used: gemm.cpp takes avx512's for fp32, so fp32
// results do not depend on whether the CPU has AVX512_BF16.
#define HC_ISA_NS avx512_bf16
#define HC_ISA Isa::avx512_bf16
#define HC_VEC_FLOATS 16
#define HC_TILE_ACC 24
#define HC_TILE_VECS 4
#define HC_WITH_BF16 1
#define HC_WITH_VNNI 1

#include "simd/gemm_impl.h"
