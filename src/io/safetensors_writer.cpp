// safetensors writer: validate every entry, build the JSON header with byte offsets, pad it to
// a multiple of 8, then stream the header and each view's bytes into an AtomicFile, which
// renames the finished file into place. Nothing is copied into an intermediate buffer: a
// checkpoint of N bytes costs N bytes of writes and no extra memory.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

#include "headcount/error.h"
#include "headcount/safetensors.h"
#include "io/atomic_file.h"

namespace headcount {

using detail::concat;

namespace {
const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::bf16:
      return "BF16";
    case DType::i8:
      return "I8";
  }
  return "?";
}
}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // 1. Check the entries and lay out the data region.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    const std::string where = concat(path, ": tensor '", t.name, "'");
    check(!t.name.empty() && t.name != "__metadata__", path + ": tensor name",
          "a non-empty name other than __metadata__", concat("'", t.name, "'"));
    check(names.insert(t.name).second, where, "a unique name", "a duplicate");
    check(!t.view.empty() && t.view.rank >= 1 && t.view.is_contiguous(), where,
          "a non-empty contiguous view",
          t.view.empty() ? "an empty view" : "strides " + t.view.strides_string());
    const std::uint64_t bytes =
        static_cast<std::uint64_t>(t.view.numel()) * dtype_size(t.view.dtype);
    std::vector<std::int64_t> shape(t.view.shape.begin(), t.view.shape.begin() + t.view.rank);
    header[t.name] = {{"dtype", safetensors_dtype(t.view.dtype)},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }

  // 2. The header, padded with spaces (valid JSON whitespace) so the data starts 8-aligned.
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xffu);

  // 3. Stream everything out; the file appears under `path` only on commit().
  io::AtomicFile file(path);
  file.write(length, sizeof length);
  file.write(text.data(), text.size());
  for (const SafetensorsTensor& t : tensors)
    file.write(t.view.data, static_cast<std::size_t>(t.view.numel()) * dtype_size(t.view.dtype));
  file.commit();
}

}  // namespace headcount
