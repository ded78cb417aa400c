// The packed GEMM's micro-kernels for avx2 (compile flags: see CMakeLists.txt).
#define HC_ISA_NS avx2
#define HC_ISA Isa::avx2
#define HC_VEC_FLOATS 8
#define HC_TILE_ACC 12
#define HC_TILE_VECS 2

#include "simd/gemm_impl.h"
