// Writes GGUF files byte by byte for the reader's tests: a valid small file to start from, and
// the raw pieces (counts, strings, types) to build the malformed ones the reader must refuse.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace headcount::testing {

class GgufBuilder {
 public:
  GgufBuilder& u8(std::uint8_t v) { return raw(&v, 1); }
  GgufBuilder& u16(std::uint16_t v) { return raw(&v, 2); }
  GgufBuilder& u32(std::uint32_t v) { return raw(&v, 4); }  // the host is little-endian, as GGUF
  GgufBuilder& u64(std::uint64_t v) { return raw(&v, 8); }
  GgufBuilder& f32(float v) { return raw(&v, 4); }
  GgufBuilder& str(std::string_view s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  GgufBuilder& raw(const void* p, std::size_t n) {
    bytes.append(static_cast<const char*>(p), n);
    return *this;
  }
  GgufBuilder& header(std::uint64_t tensors, std::uint64_t kvs, std::uint32_t version = 3) {
    bytes.append("GGUF", 4);
    u32(version);
    u64(tensors);
    return u64(kvs);
  }
  // A key/value of type uint32 (4), float32 (6), string (8).
  GgufBuilder& kv_u32(std::string_view key, std::uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBuilder& kv_f32(std::string_view key, float v) { return str(key).u32(6).f32(v); }
  GgufBuilder& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  GgufBuilder& tensor(std::string_view name, std::vector<std::uint64_t> ne, std::uint32_t type,
                      std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(ne.size()));
    for (std::uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }
  GgufBuilder& pad(std::size_t alignment = 32) {
    while (bytes.size() % alignment != 0) bytes.push_back('\0');
    return *this;
  }

  void write(const std::string& path) const {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  std::string bytes;
};

// A one-layer Llama header (d_model 256, 4 heads of 64, d_ff 256, vocab 8) with an F32 embedding
// and the layer's Q and K projections in the ggml types given (their bytes zero): enough for the
// decoder's loader to reach the tensors' types (tests of files it must refuse). 256 columns: one
// block of the K-quants (256 elements).
inline GgufBuilder small_llama_gguf(std::uint32_t q_type, std::uint32_t k_type,
                                    std::uint64_t q_bytes, std::uint64_t k_bytes) {
  GgufBuilder b;
  const std::uint64_t embedding_bytes = 256 * 8 * 4;
  b.header(3, 7)
      .kv_str("general.architecture", "llama")
      .kv_u32("llama.block_count", 1)
      .kv_u32("llama.embedding_length", 256)
      .kv_u32("llama.feed_forward_length", 256)
      .kv_u32("llama.context_length", 64)
      .kv_u32("llama.attention.head_count", 4)
      .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .tensor("token_embd.weight", {256, 8}, 0, 0)
      .tensor("blk.0.attn_q.weight", {256, 256}, q_type, embedding_bytes)
      .tensor("blk.0.attn_k.weight", {256, 256}, k_type, embedding_bytes + q_bytes)
      .pad();
  b.bytes.append(embedding_bytes + q_bytes + k_bytes, '\0');
  return b;
}

}  // namespace headcount::testing
