// The packed GEMM's int8 micro-kernels on vpdpbusd for CPUs with AVX512_VNNI but without
// AVX512_BF16 (Ice Lake and Cascade Lake servers, and hosts whose hypervisor hides BF16 and AMX:
// this project's Intel test host reports avx512_vnni alone). Only panel_i8 is taken from here
// (gemm.cpp): the integer sums are exact, so the results are the same bits as the widened
// kernel's and as avx512_bf16's.
#define HC_ISA_NS avx512_vnni
#define HC_ISA Isa::avx512
#define HC_VEC_FLOATS 16
#define HC_TILE_ACC 24
#define HC_TILE_VECS 4
#define HC_WITH_VNNI 1

#include "simd/gemm_impl.h"
