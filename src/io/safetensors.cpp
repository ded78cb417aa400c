// safetensors: map the file, validate the whole header against the file size, then hand out
// tensors. Nothing is trusted before it is checked: the header length, each entry's fields,
// and the byte ranges, which must tile the data region exactly.
#include "headcount/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "headcount/error.h"
#include "headcount/ggml.h"  // fp16_to_float, shared with the GGUF reader

namespace headcount {

using detail::concat;
using nlohmann::json;

// The file's bytes, unmapped when the last SafetensorsFile copy goes away.
struct SafetensorsFile::Mapping {
  void* address = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, size);
  }
};

std::size_t safetensors_dtype_size(std::string_view dtype) {
  static const std::pair<std::string_view, std::size_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto& [name, size] : kSizes)
    if (name == dtype) return size;
  return 0;
}

namespace {

std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | std::to_integer<std::uint64_t>(p[i]);
  return value;
}

SafetensorsEntry parse_entry(const std::string& where, const std::string& name, const json& value) {
  check(value.is_object(), where, "an object {dtype, shape, data_offsets}", value.dump());
  SafetensorsEntry e;
  e.name = name;
  const auto dtype = value.find("dtype");
  check(dtype != value.end() && dtype->is_string(), where + " dtype", "a string", value.dump());
  e.dtype = dtype->get<std::string>();
  check(safetensors_dtype_size(e.dtype) != 0, where + " dtype",
        "one of BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, F8_E5M2, F8_E4M3",
        e.dtype);

  const auto shape = value.find("shape");
  check(shape != value.end() && shape->is_array(), where + " shape", "an array of sizes",
        shape == value.end() ? "nothing" : shape->dump());
  std::uint64_t numel = 1;
  for (const json& size : *shape) {
    check(size.is_number_unsigned() && size.get<std::uint64_t>() <= (1ull << 40), where + " shape",
          "non-negative integer sizes", shape->dump());
    e.shape.push_back(size.get<std::int64_t>());
    const std::uint64_t s = size.get<std::uint64_t>();
    check(s == 0 || numel <= std::numeric_limits<std::uint64_t>::max() / 16 / s, where + " shape",
          "a size that fits in 64 bits", shape->dump());
    numel *= s;
  }

  const auto offsets = value.find("data_offsets");
  check(offsets != value.end() && offsets->is_array() && offsets->size() == 2 &&
            (*offsets)[0].is_number_unsigned() && (*offsets)[1].is_number_unsigned(),
        where + " data_offsets", "[begin, end] (two non-negative integers)",
        offsets == value.end() ? "nothing" : offsets->dump());
  e.begin = (*offsets)[0].get<std::uint64_t>();
  e.end = (*offsets)[1].get<std::uint64_t>();
  check(e.begin <= e.end, where + " data_offsets", "begin <= end", offsets->dump());
  const std::uint64_t bytes = numel * safetensors_dtype_size(e.dtype);
  check(e.end - e.begin == bytes, where + " data_offsets",
        concat(bytes, " bytes (", shape_string(e.shape), " x ", e.dtype, ")"),
        concat(e.end - e.begin, " bytes ", offsets->dump()));
  return e;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;

  // 1. Map the whole file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, concat("cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "expected a regular file");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(path, concat("truncated: expected at least 8 bytes (the header length), got ", size));
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping->address == MAP_FAILED) {
    mapping->address = nullptr;
    fail(path, concat("cannot map: ", std::strerror(errno)));
  }
  mapping->size = size;
  const auto* base = static_cast<const std::byte*>(mapping->address);

  // 2. The header length, then the header, both inside the file.
  const std::uint64_t header_length = read_u64_le(base);
  check(header_length <= size - 8, path + ": header length",
        concat("at most ", size - 8, " (the file has ", size, " bytes)"), header_length);
  const char* header = reinterpret_cast<const char*>(base + 8);
  const json root =
      json::parse(header, header + header_length, nullptr, /*allow_exceptions=*/false);
  check(!root.is_discarded() && root.is_object(), path + ": header",
        concat("a JSON object of ", header_length, " bytes"), "malformed JSON");

  // 3. Every entry, then the ranges together.
  const std::uint64_t data_size = size - 8 - header_length;
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      check(value.is_object(), path + ": __metadata__", "an object of strings", value.dump());
      for (const auto& [key, text] : value.items()) {
        check(text.is_string(), path + ": __metadata__." + key, "a string", text.dump());
        file.metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    SafetensorsEntry e = parse_entry(concat(path, ": tensor '", name, "'"), name, value);
    check(e.end <= data_size, concat(path, ": tensor '", name, "' data_offsets"),
          concat("inside the data region of ", data_size, " bytes"),
          concat("[", e.begin, ", ", e.end, "]"));
    file.entries_.push_back(std::move(e));
  }
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : file.entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin < covered)
      fail(path,
           concat("tensor '", e->name, "' bytes [", e->begin, ", ", e->end, ") overlap tensor '",
                  previous->name, "' bytes [", previous->begin, ", ", previous->end, ")"));
    if (e->begin > covered)
      fail(path, concat("data region has a hole: bytes [", covered, ", ", e->begin,
                        ") belong to no tensor (before tensor '", e->name, "')"));
    covered = e->end;
    previous = e;
  }
  check(covered == data_size, path + ": data region",
        concat(data_size, " bytes, all covered by tensors"), concat(covered, " bytes covered"));

  std::sort(file.entries_.begin(), file.entries_.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  file.data_ = base + 8 + header_length;
  file.mapping_ = std::move(mapping);
  return file;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto it =
      std::lower_bound(entries_.begin(), entries_.end(), name,
                       [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

std::span<const std::byte> SafetensorsFile::bytes(const SafetensorsEntry& entry) const {
  return {data_ + entry.begin, static_cast<std::size_t>(entry.end - entry.begin)};
}

Tensor SafetensorsFile::load_f32(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) fail(path_, concat("tensor '", name, "': missing"));
  check(e->dtype == "F32" || e->dtype == "F16" || e->dtype == "BF16",
        concat(path_, ": tensor '", name, "' dtype"), "F32, F16 or BF16", e->dtype);
  // A scalar (shape []) becomes a one-element vector: Tensor has rank >= 1.
  Tensor t(DType::f32, e->shape.empty() ? std::vector<std::int64_t>{1} : e->shape);
  float* out = t.data<float>();
  const std::byte* in = data_ + e->begin;
  const auto n = static_cast<std::size_t>(t.numel());
  if (e->dtype == "F32") {
    std::memcpy(out, in, n * sizeof(float));  // safetensors is little-endian, as is the host
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, in + 2 * i, 2);
      out[i] = e->dtype == "F16" ? fp16_to_float(bits) : to_float(bf16{bits});
    }
  }
  return t;
}

Tensor SafetensorsFile::load_f32(std::string_view name,
                                 const std::vector<std::int64_t>& expected_shape) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr)
    fail(path_, concat("tensor '", name, "': missing (expected shape ",
                       shape_string(expected_shape), ")"));
  check(e->shape == expected_shape, concat(path_, ": tensor '", name, "' shape"),
        shape_string(expected_shape), shape_string(e->shape));
  return load_f32(name);
}

}  // namespace headcount
