// GGUF files (llama.cpp's model format, versions 2 and 3), memory-mapped and checked before
// anything is read:
//
//   "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x  { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to `alignment` | data region (each tensor at data start + offset)
//
// A string is a u64 byte length and that many bytes (no terminator); an array value is a u32
// element type, a u64 count and the elements. All little-endian. `alignment` is the u32 value of
// the key general.alignment when present (a power of two), else 32. Version 3 only added
// big-endian files, which carry no marker; this reader takes little-endian files of version 2 or
// 3 (version 1 had 32-bit counts and is refused).
//
// open() checks, before using each: that every count fits in the bytes left (so no count makes it
// allocate more than the file can back), every string length, every value type (arrays of
// arrays are refused), keys and tensor names unique, general.alignment's type and value, each
// tensor's rank (1..4), dimensions (>= 0, row length a multiple of the type's block, element
// count within 2^62), type (a ggml type), offset (a multiple of the alignment) and byte range
// (inside the data region, not overlapping another tensor). Any failure is an Error naming the
// file, the field (key, tensor) and the values.
//
// Shapes. GGUF stores dimensions innermost first, as ggml does: ne[0] is the length of a row
// (the contiguous one), ne[1] the number of rows, ne[2], ne[3] outer batches. A weight matrix a
// PyTorch checkpoint holds as [out_features, in_features] (row-major) is stored with
// ne = {in_features, out_features}. GgufTensorInfo::shape() is that row-major order
// (ne reversed), which is what Tensor and TensorView use; rows() x cols() is the 2-D view
// (cols = ne[0], rows = the product of the others). Quantized types quantize along rows, so a
// row is always a whole number of blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "headcount/ggml.h"
#include "headcount/tensor.h"

namespace headcount {

// gguf_type: the types of metadata values.
enum class GgufValueType : std::uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};
// "uint32", "array"...; "unknown value type N" for a number outside the enum.
std::string gguf_value_type_name(std::uint32_t type);

// One metadata value. Scalars: `type` and the value in the field for its kind (integers and
// bool in `integer`, sign-extended for the signed types; floats in `real`; strings in `text`).
// Arrays: type == array, element_type and count; strings in `strings`, numbers as raw
// little-endian elements in `raw` (a window onto the mapping, valid while the file lives),
// read with GgufFile::get_int_array / get_float_array.
struct GgufValue {
  GgufValueType type = GgufValueType::uint8;
  std::int64_t integer = 0;  // a uint64 above INT64_MAX keeps its bits (get_uint reads them back)
  double real = 0;
  std::string text;
  GgufValueType element_type = GgufValueType::uint8;
  std::uint64_t count = 0;
  std::vector<std::string> strings;
  std::span<const std::byte> raw;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::f32;
  std::vector<std::int64_t> ne;  // as stored: ne[0] innermost (the row length)
  std::uint64_t offset = 0;      // from the start of the data region
  std::uint64_t bytes = 0;       // numel / block_size * block_bytes
  std::int64_t numel = 0;

  // Row-major: ne reversed ({out_features, in_features} for a weight matrix).
  std::vector<std::int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
  std::int64_t cols() const { return ne[0]; }
  std::int64_t rows() const { return ne[0] == 0 ? 0 : numel / ne[0]; }
};

// A tensor's bytes in the mapping, still in its ggml type.
struct GgufTensorView {
  const GgufTensorInfo* info = nullptr;
  std::span<const std::byte> bytes;
};

class GgufFile {
 public:
  // Maps and validates `path`; throws Error on any inconsistency.
  static GgufFile open(const std::string& path);

  const std::string& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }  // from the start of the file
  std::uint64_t file_size() const { return file_size_; }

  // Metadata in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;  // nullptr if absent

  // Typed access: throws Error naming the key when it is missing or of another type.
  std::string get_string(std::string_view key) const;
  // Any integer type holding a value >= 0 (an int32 -1 is refused).
  std::uint64_t get_uint(std::string_view key) const;
  // float32 or float64.
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;
  // An array of any integer type (bool included), as int64 (uint64 elements must be < 2^63).
  std::vector<std::int64_t> get_int_array(std::string_view key) const;
  // An array of float32 or float64.
  std::vector<double> get_float_array(std::string_view key) const;

  // Tensor infos in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;  // nullptr if absent
  GgufTensorView view(const GgufTensorInfo& info) const;
  // Throws Error naming the tensor when it is missing.
  GgufTensorView view(std::string_view name) const;

  // The tensor as an owning row-major f32 Tensor of shape info.shape(), dequantized (F32, F16,
  // Q8_0, Q4_1). Throws Error if it is missing, of another type, or (when given) of another
  // row-major shape.
  Tensor load_f32(std::string_view name) const;
  Tensor load_f32(std::string_view name, const std::vector<std::int64_t>& expected_shape) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<const Mapping> mapping_;
  const std::byte* data_ = nullptr;  // start of the data region
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32, data_offset_ = 0, file_size_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace headcount
