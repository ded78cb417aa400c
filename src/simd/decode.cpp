// The one dispatch point of the decode micro-kernel: an Isa to its table.
#include "simd/decode.h"

#include "headcount/error.h"

namespace headcount::simd {

#define HC_DECLARE(ns)                 \
  namespace ns {                       \
  const DecodeKernels& decode_table(); \
  }
HC_DECLARE(generic)
HC_DECLARE(avx2)
HC_DECLARE(avx512)
HC_DECLARE(avx512_bf16)
#undef HC_DECLARE

const DecodeKernels& decode_kernels(Isa isa) {
  check(isa != Isa::best && isa_supported(isa), "isa",
        "a resolved instruction set this CPU supports", isa_name(isa));
  switch (isa) {
    case Isa::amx_bf16:  // AMX serves only the streaming kernel's bf16 tiles
    case Isa::avx512_bf16:
      return avx512_bf16::decode_table();
    case Isa::avx512:
      return avx512::decode_table();
    case Isa::avx2:
      return avx2::decode_table();
    default:
      return generic::decode_table();
  }
}

}  // namespace headcount::simd
