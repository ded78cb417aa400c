// Instruction sets the kernels are built for. The context picks the best one this CPU
// runs (Isa::best) unless told otherwise, which is how tests force every target.
#pragma once

#include <string>

namespace headcount {

enum class Isa {
  best,         // resolve to the best this CPU supports
  generic,      // portable vector code (SSE2 on x86-64)
  avx2,         // AVX2 + FMA
  avx512,       // AVX-512 F/BW/VL/DQ + FMA
  avx512_bf16,  // avx512 + AVX512_BF16 (vdpbf16ps for bf16 inputs)
  amx_bf16,     // avx512_bf16 + AMX-BF16 tiles for bf16 inputs (fp32 inputs as avx512_bf16)
};

const char* isa_name(Isa isa);
Isa parse_isa(const std::string& name);  // "best", "generic", "avx2", "avx512", "avx512_bf16", "amx_bf16"
bool isa_supported(Isa isa);             // by this CPU
Isa best_isa();                          // the fastest supported target

}  // namespace headcount
