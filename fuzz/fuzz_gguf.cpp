// Fuzz target: GgufFile::open on arbitrary bytes (header, metadata of every value type, tensor
// infos, alignment, data region), then every accessor on what it accepted: each metadata value
// through the typed getters, each tensor's view (inside the file) and, for the types it reads,
// its dequantization; then the BPE tokenizer from the metadata. open() and the tokenizer must
// either throw headcount::Error or hand out views that lie inside the file.
#include <cstdint>
#include <string_view>

#include "fuzz_input.h"
#include "headcount/bpe.h"
#include "headcount/error.h"
#include "headcount/gguf.h"

using headcount::fuzz::MemoryFile;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const MemoryFile file(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const headcount::GgufFile f = headcount::GgufFile::open(file.path());
    FUZZ_ASSERT(f.data_offset() % f.alignment() == 0);
    for (const headcount::GgufKeyValue& kv : f.metadata()) {
      FUZZ_ASSERT(f.find(kv.key) != nullptr);
      // Each getter either returns or refuses the type; none may crash.
      try {
        (void)f.get_string(kv.key);
      } catch (const headcount::Error&) {
      }
      try {
        (void)f.get_uint(kv.key);
      } catch (const headcount::Error&) {
      }
      try {
        (void)f.get_float(kv.key);
      } catch (const headcount::Error&) {
      }
      try {
        (void)f.get_bool(kv.key);
      } catch (const headcount::Error&) {
      }
      try {
        (void)f.get_string_array(kv.key);
      } catch (const headcount::Error&) {
      }
      try {
        FUZZ_ASSERT(f.get_int_array(kv.key).size() == kv.value.count);
      } catch (const headcount::Error&) {
      }
      try {
        FUZZ_ASSERT(f.get_float_array(kv.key).size() == kv.value.count);
      } catch (const headcount::Error&) {
      }
    }
    for (const headcount::GgufTensorInfo& t : f.tensors()) {
      FUZZ_ASSERT(f.find_tensor(t.name) != nullptr);
      const headcount::GgufTensorView v = f.view(t);
      FUZZ_ASSERT(v.bytes.size() == t.bytes);
      FUZZ_ASSERT(f.data_offset() + t.offset + t.bytes <= size);
      if (headcount::ggml_type_traits(t.type).dequantizable) {
        const headcount::Tensor x = f.load_f32(t.name, t.shape());
        FUZZ_ASSERT(x.numel() == t.numel);
      }
    }
    try {
      const headcount::BpeTokenizer tok = headcount::BpeTokenizer::from_gguf(f);
      const auto ids = tok.encode("Hello <|im_start|> world 123 \xff");
      for (std::int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < tok.vocab_size());
      (void)tok.decode(ids);
    } catch (const headcount::Error&) {
    }
  } catch (const headcount::Error&) {
    // A refused file: the one outcome besides success.
  }
  return 0;
}
