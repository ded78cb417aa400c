// Fuzz target: SafetensorsFile::open on arbitrary bytes (the 8-byte length, the JSON header,
// every entry and the data region), then every accessor on what it accepted. open() must either
// throw headcount::Error or hand out entries whose byte ranges lie inside the file.
#include <cstdint>
#include <string_view>

#include "fuzz_input.h"
#include "headcount/error.h"
#include "headcount/safetensors.h"

using headcount::fuzz::MemoryFile;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const MemoryFile file(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const headcount::SafetensorsFile st = headcount::SafetensorsFile::open(file.path());
    std::uint64_t total = 0;
    for (const headcount::SafetensorsEntry& e : st.entries()) {
      FUZZ_ASSERT(e.begin <= e.end && e.end <= size);
      FUZZ_ASSERT(st.find(e.name) == &e);
      const auto bytes = st.bytes(e);
      FUZZ_ASSERT(bytes.size() == e.end - e.begin);
      total += bytes.size();
      if (e.dtype == "F32" || e.dtype == "F16" || e.dtype == "BF16") {
        const headcount::Tensor t = st.load_f32(e.name);
        FUZZ_ASSERT(static_cast<std::uint64_t>(t.numel()) *
                        headcount::safetensors_dtype_size(e.dtype) ==
                    bytes.size());
        (void)st.load_f32(e.name, e.shape);
      } else {
        try {
          (void)st.load_f32(e.name);
          FUZZ_ASSERT(false);  // only F32, F16 and BF16 load as f32
        } catch (const headcount::Error&) {
        }
      }
    }
    FUZZ_ASSERT(total + 8 <= size);
  } catch (const headcount::Error&) {
    // A refused file: the one outcome besides success.
  }
  return 0;
}
