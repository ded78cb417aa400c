#include "headcount/isa.h"

#include "headcount/error.h"
#include "simd/amx.h"

namespace headcount {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::best: return "best";
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::amx_bf16: return "amx_bf16";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : {Isa::best, Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx_bf16})
    if (name == isa_name(isa)) return isa;
  fail("isa", "expected best, generic, avx2, avx512, avx512_bf16 or amx_bf16, got " + name);
}

bool isa_supported(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (isa) {
    case Isa::best:
    case Isa::generic: return true;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
    case Isa::avx512_bf16:
      return isa_supported(Isa::avx512) && __builtin_cpu_supports("avx512bf16");
    case Isa::amx_bf16: return isa_supported(Isa::avx512_bf16) && simd::amx::available();
  }
  return false;
#else
  return isa == Isa::best || isa == Isa::generic;
#endif
}

Isa best_isa() {
  for (Isa isa : {Isa::amx_bf16, Isa::avx512_bf16, Isa::avx512, Isa::avx2})
    if (isa_supported(isa)) return isa;
  return Isa::generic;
}

}  // namespace headcount
