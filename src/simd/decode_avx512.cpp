// The decode micro-kernel for avx512 (compile flags: see CMakeLists.txt).
#define HC_ISA_NS avx512
#define HC_ISA Isa::avx512
#define HC_VEC_FLOATS 16

#include "simd/decode_impl.h"
