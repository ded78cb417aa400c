#include "headcount/isa.h"

#include <cstdlib>

#include "headcount/error.h"
#include "simd/amx.h"

namespace headcount {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::best:
      return "best";
    case Isa::generic:
      return "generic";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::avx512_bf16:
      return "avx512_bf16";
    case Isa::amx_bf16:
      return "amx_bf16";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  for (Isa isa : {Isa::best, Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx_bf16})
    if (name == isa_name(isa)) return isa;
  fail("isa", "expected best, generic, avx2, avx512, avx512_bf16 or amx_bf16, got " + name);
}

namespace {
// What this CPU runs, before the HEADCOUNT_ISA cap.
bool cpu_supports(Isa isa);
}  // namespace

Isa isa_ceiling() {
  // The environment is read once: a process's kernels must not change target mid-run.
  static const Isa ceiling = [] {
    const char* value = std::getenv("HEADCOUNT_ISA");
    if (value == nullptr || *value == '\0') return Isa::best;
    for (Isa isa :
         {Isa::best, Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx_bf16})
      if (std::string(value) == isa_name(isa)) return isa;
    fail(
        "HEADCOUNT_ISA",
        std::string("expected best, generic, avx2, avx512, avx512_bf16 or amx_bf16, got ") + value);
  }();
  return ceiling;
}

// The enum lists the targets in order, each a superset of the one before.
bool isa_supported(Isa isa) {
  const Isa ceiling = isa_ceiling();
  if (ceiling != Isa::best && isa != Isa::best && static_cast<int>(isa) > static_cast<int>(ceiling))
    return false;
  return cpu_supports(isa);
}

namespace {
bool cpu_supports(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (isa) {
    case Isa::best:
    case Isa::generic:
      return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
    case Isa::avx512_bf16:
      // AVX512_VNNI too: the int8 GEMM's vpdpbusd (every CPU with AVX512_BF16 has it).
      return cpu_supports(Isa::avx512) && __builtin_cpu_supports("avx512bf16") &&
             __builtin_cpu_supports("avx512vnni");
    case Isa::amx_bf16:
      return cpu_supports(Isa::avx512_bf16) && simd::amx::available();
  }
  return false;
#else
  return isa == Isa::best || isa == Isa::generic;
#endif
}
}  // namespace

Isa best_isa() {
  for (Isa isa : {Isa::amx_bf16, Isa::avx512_bf16, Isa::avx512, Isa::avx2})
    if (isa_supported(isa)) return isa;
  return Isa::generic;
}

}  // namespace headcount
