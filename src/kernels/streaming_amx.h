// The streaming kernel's bf16 path on AMX tiles (Isa::amx_bf16); see streaming_amx.cpp.
#pragma once

#include "headcount/attention.h"

namespace headcount::kernels {

AttentionStats streaming_amx(Context& ctx, const AttentionParams& params,
                             const AttentionShape& shape);

}  // namespace headcount::kernels
