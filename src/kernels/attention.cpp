// Kernel choice by name: the single entry the CLI and the layer call.
#include "headcount/attention.h"

#include <string>

#include "headcount/error.h"

namespace headcount {

Kernel parse_kernel(const std::string& name) {
  if (name == "reference") return Kernel::reference;
  if (name == "streaming") return Kernel::streaming;
  fail("kernel", "expected reference or streaming, got " + name);
}

const char* kernel_name(Kernel kernel) {
  return kernel == Kernel::reference ? "reference" : "streaming";
}

AttentionStats attention(Context& ctx, Kernel kernel, const AttentionParams& params) {
  return kernel == Kernel::reference ? attention_reference(ctx, params)
                                     : attention_streaming(ctx, params);
}

}  // namespace headcount
