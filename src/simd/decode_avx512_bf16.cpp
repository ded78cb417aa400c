// The decode micro-kernel for avx512_bf16 (compile flags: see CMakeLists.txt).
#define HC_ISA_NS avx512_bf16
#define HC_ISA Isa::avx512_bf16
#define HC_VEC_FLOATS 16

#include "simd/decode_impl.h"
