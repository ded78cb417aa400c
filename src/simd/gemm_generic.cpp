// The packed GEMM's micro-kernels for generic (compile flags: see CMakeLists.txt).
#define HC_ISA_NS generic
#define HC_ISA Isa::generic
#define HC_VEC_FLOATS 4
#define HC_TILE_ACC 12
#define HC_TILE_VECS 2

#include "simd/gemm_impl.h"
