// Fuzz target: read_npy / read_npy_f32 on arbitrary bytes (magic, version, header length, the
// header dict, the data). Either an Error, or a tensor whose bytes are exactly what the file
// held after its header.
#include <cstdint>
#include <string_view>

#include "fuzz_input.h"
#include "headcount/error.h"
#include "headcount/npy.h"

using headcount::fuzz::MemoryFile;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const MemoryFile file(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const headcount::Tensor t = headcount::read_npy(file.path());
    FUZZ_ASSERT(t.bytes() <= size);
    FUZZ_ASSERT(t.rank() >= 1);
    const headcount::Tensor f = headcount::read_npy_f32(file.path());
    FUZZ_ASSERT(f.dtype() == headcount::DType::f32 && f.shape() == t.shape());
  } catch (const headcount::Error&) {
  }
  return 0;
}
