// Writes small safetensors files for tests, including deliberately broken ones: the header is
// given as raw JSON text, and the length field can lie.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace headcount::testing {

// [8-byte little-endian header length][header][data]. `declared_length` overrides the length field.
inline void write_raw_safetensors(const std::string& path, const std::string& header,
                                  const std::vector<char>& data,
                                  std::optional<std::uint64_t> declared_length = std::nullopt) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::uint64_t length = declared_length.value_or(header.size());
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  out.write(bytes, 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

struct F32Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;  // numel(shape) values
};

// A well-formed F32 safetensors file holding `tensors` back to back.
inline void write_f32_safetensors(const std::string& path, const std::vector<F32Tensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<char> data;
  for (const F32Tensor& t : tensors) {
    const std::size_t begin = data.size();
    data.resize(begin + t.values.size() * sizeof(float));
    std::memcpy(data.data() + begin, t.values.data(), t.values.size() * sizeof(float));
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  write_raw_safetensors(path, header.dump(), data);
}

}  // namespace headcount::testing
