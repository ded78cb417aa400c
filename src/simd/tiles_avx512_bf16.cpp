// The tile micro-kernels for avx512_bf16 (compile flags: see CMakeLists.txt).
#define HC_ISA_NS avx512_bf16
#define HC_ISA Isa::avx512_bf16
#define HC_VEC_FLOATS 16
#define HC_TILE_ACC 24
#define HC_TILE_VECS 4
#define HC_WITH_BF16 1
#include "simd/tiles_impl.h"
