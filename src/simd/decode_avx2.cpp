// The decode micro-kernel for avx2 (compile flags: see CMakeLists.txt).
#define HC_ISA_NS avx2
#define HC_ISA Isa::avx2
#define HC_VEC_FLOATS 8

#include "simd/decode_impl.h"
