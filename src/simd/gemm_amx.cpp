// The packed GEMM's AMX tile kernels (panel_bf16_amx, panel_i8_amx: gemm.h), compiled with
// avx512_bf16's flags plus -mamx-tile -mamx-bf16 -mamx-int8 (CMakeLists.txt). Only those two
// entries are taken from this table (gemm.cpp); the rest of it repeats avx512_bf16's kernels
// and is unused. The int8 epilogue (finish_i8) is the same source line as the register tiles',
// compiled with the same vector flags, so AMX-INT8 gives panel_i8's bits
// (test_packed_gemm_i8.cpp compares them).
#define HC_ISA_NS amx_tiles
#define HC_ISA Isa::amx_bf16
#define HC_VEC_FLOATS 16
#define HC_TILE_ACC 24
#define HC_TILE_VECS 4
#define HC_WITH_BF16 1
#define HC_WITH_VNNI 1
#define HC_WITH_AMX 1

#include "simd/gemm_impl.h"
