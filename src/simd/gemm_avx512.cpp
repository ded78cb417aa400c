// The packed GEMM's micro-kernels for avx512 (compile flags: see CMakeLists.txt).
#define HC_ISA_NS avx512
#define HC_ISA Isa::avx512
#define HC_VEC_FLOATS 16
#define HC_TILE_ACC 24
#define HC_TILE_VECS 4

#include "simd/gemm_impl.h"
