// The decode micro-kernel for generic (compile flags: see CMakeLists.txt).
#define HC_ISA_NS generic
#define HC_ISA Isa::generic
#define HC_VEC_FLOATS 4

#include "simd/decode_impl.h"
