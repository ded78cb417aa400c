// safetensors files (https://github.com/huggingface/safetensors), memory-mapped and checked
// before anything is read:
//
//   [8 bytes: header length N, little-endian u64][N bytes: JSON header][data region]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
// relative to the data region; "__metadata__" (string -> string) is optional. open() checks that
// N fits in the file, that the header is a JSON object of well-formed entries, that every dtype is
// known, that end - begin = numel * dtype size, and that the byte ranges lie inside the data
// region, do not overlap and cover it without holes (as the format requires). Any failure is an
// Error naming the file and the tensor.
//
// Tensors are read as f32: F32 is copied, F16 and BF16 are widened exactly. Other dtypes (the
// I64 position_ids some BERT checkpoints carry, say) are validated but not loadable as f32.
//
// write_safetensors() is the writer beside this reader: the header padded with spaces to a
// multiple of 8 bytes (so every tensor starts 8-byte aligned, as the format recommends), the
// tensors back to back in the order given, the whole file written atomically (a temporary file,
// fsync, rename: a reader never sees a partial file under the final name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "headcount/tensor.h"

namespace headcount {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;                 // as written: "F32", "F16", "BF16", "I64", ...
  std::vector<std::int64_t> shape;   // [] for a scalar
  std::uint64_t begin = 0, end = 0;  // byte range inside the data region
};

// The size in bytes of one element of a safetensors dtype, or 0 if the name is unknown.
std::size_t safetensors_dtype_size(std::string_view dtype);

// One tensor to write: a contiguous f32, f64 or bf16 view, stored as F32, F64 or BF16.
struct SafetensorsTensor {
  std::string name;
  TensorView view;
};

// Writes `tensors` in order, with `metadata` as "__metadata__" (omitted when empty). Throws Error
// naming the tensor for a duplicate or reserved name or a non-contiguous view, and naming the file
// when it cannot be written (nothing is left under `path` then).
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws Error on any inconsistency.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // Entries sorted by name.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr if there is no tensor of that name.
  const SafetensorsEntry* find(std::string_view name) const;
  // The raw little-endian bytes of an entry (valid while this object lives).
  std::span<const std::byte> bytes(const SafetensorsEntry& entry) const;

  // The tensor `name` as an owning f32 tensor. Throws Error if it is missing, has a dtype other
  // than F32/F16/BF16, or (when `expected_shape` is given) another shape.
  Tensor load_f32(std::string_view name) const;
  Tensor load_f32(std::string_view name, const std::vector<std::int64_t>& expected_shape) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<const Mapping> mapping_;
  const std::byte* data_ = nullptr;  // start of the data region
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace headcount
