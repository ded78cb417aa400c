// Instruction sets the kernels are built for. The context picks the best one this CPU
// runs (Isa::best) unless told otherwise, which is how tests force every target.
//
// HEADCOUNT_ISA=<name> (generic, avx2, avx512, avx512_bf16, amx_bf16; unset or "best": no
// limit) caps what counts as supported, for the whole process: isa_supported() is false above
// it, so Isa::best resolves to at most that target and asking for a higher one is an Error,
// as on a CPU without it. It is how CI runs the kernel tests as on an AVX2-only or a pre-AVX2
// host (scripts/test.sh); it is read once, and an unknown name is an Error naming it.
#pragma once

#include <string>

namespace headcount {

enum class Isa {
  best,         // resolve to the best this CPU supports
  generic,      // portable vector code (SSE2 on x86-64)
  avx2,         // AVX2 + FMA
  avx512,       // AVX-512 F/BW/VL/DQ + FMA
  avx512_bf16,  // avx512 + AVX512_BF16 (vdpbf16ps for bf16 inputs)
  amx_bf16,     // avx512_bf16 + AMX tiles: bf16 attention and GEMM on AMX-BF16, the int8 GEMM
                // on AMX-INT8 where the CPU has it (fp32 inputs as avx512_bf16)
};

const char* isa_name(Isa isa);
Isa parse_isa(
    const std::string& name);  // "best", "generic", "avx2", "avx512", "avx512_bf16", "amx_bf16"
bool isa_supported(Isa isa);   // by this CPU, under the HEADCOUNT_ISA cap
Isa isa_ceiling();             // the HEADCOUNT_ISA cap (Isa::best: none)
Isa best_isa();                // the fastest supported target

}  // namespace headcount
