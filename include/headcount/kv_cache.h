// The KV cache of a decoder: per layer, K [batch, kv_heads, capacity, head_dim] and V
// [batch, kv_heads, capacity, v_head_dim] in f32, bf16 or int8 (+ one fp32 scale per token
// and kv head), and a length per (layer, sequence).
//
// Growth policy: explicit. The capacity is fixed at construction; reserve() is the only call
// that reallocates (and copies what is cached). append() past the capacity is an Error that
// names the layer, the sequence and the numbers, so a decode loop never reallocates or faults
// fresh pages behind the caller's back (memory is mapped once; pages are touched on first use).
//
// Why head-major ([b, h, position, d] rather than the projections' [b, position, h, d]): the
// decode kernel streams one (sequence, kv head) at a time, and a contiguous run of rows is
// what the hardware prefetcher and the int8 scales want. k_tensor()/v_tensor() still give
// the kernels' token-major [batch, capacity, kv_heads, d] shape, through strides.
//
// Quantisation (int8): per (token, kv head), scale = max|x| / 127 (0 for an all-zero row),
// x_q = round-to-nearest-even(x / scale) in [-127, 127]; dequantised x' = scale * x_q, so
// |x - x'| <= scale / 2 = max|x| / 254 per element. bf16: round to nearest even,
// |x - x'| <= 2^-8 |x| (8 significant bits).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "headcount/decode.h"
#include "headcount/tensor.h"

namespace headcount {

struct KvCacheConfig {
  std::int64_t layers = 1;
  std::int64_t batch = 1;
  std::int64_t kv_heads = 1;  // every layer's, unless layer_kv_heads says otherwise
  std::int64_t head_dim = 0;
  std::int64_t v_head_dim = 0;  // 0: = head_dim
  std::int64_t capacity = 0;    // positions per sequence; >= 1
  CacheDType dtype = CacheDType::f32;
  // Empty, or one count per layer (a model pruned by whole K/V groups keeps different numbers
  // of K/V heads in different layers); each layer is laid out with its own count.
  std::vector<std::int64_t> layer_kv_heads;

  std::int64_t kv_heads_in(std::int64_t layer) const {
    return layer_kv_heads.empty() ? kv_heads : layer_kv_heads[static_cast<std::size_t>(layer)];
  }
};

class KvCache {
 public:
  // Validates the config (Error naming the field) and maps the storage (zero pages).
  explicit KvCache(const KvCacheConfig& config);
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheConfig& config() const { return config_; }
  std::int64_t capacity() const { return config_.capacity; }
  std::int64_t length(std::int64_t layer, std::int64_t b) const;
  std::span<const std::int64_t> lengths(std::int64_t layer) const;

  // Appends new positions to one layer. k: f32 [batch, n, kv_heads, head_dim], v: f32 [batch,
  // n, kv_heads, v_head_dim] (any strides; the layer passes column ranges of its projection).
  // counts: empty (every sequence takes all n) or one entry per sequence in [0, n]: sequence b
  // takes its first counts[b] positions (ragged prompts). Past the capacity: Error, and nothing
  // is written.
  void append(std::int64_t layer, const TensorView& k, const TensorView& v,
              std::span<const std::int64_t> counts = {});

  // Drops positions >= length of sequence b in every layer (length <= the current lengths).
  void truncate(std::int64_t b, std::int64_t length);
  void reset();  // every length to 0; the memory stays mapped

  // Grows every (layer, sequence) to `capacity` positions, copying what is cached: the one
  // call that reallocates. A capacity below a current length is an Error.
  void reserve(std::int64_t capacity);

  // Bytes of storage: batch * capacity * the sum over layers of cache_token_bytes(...) with the
  // layer's K/V heads, which is exactly what `headcount cost --context capacity --layers L
  // --batch B` reports for this dtype when every layer has the same count.
  std::int64_t bytes() const;

  // What the decode kernel reads.
  KvView view(std::int64_t layer) const;
  // Token-major views [batch, capacity, kv_heads, d] of one layer for the other kernels
  // (f32 or bf16 caches; int8 is an Error: there is no int8 TensorView).
  TensorView k_tensor(std::int64_t layer) const;
  TensorView v_tensor(std::int64_t layer) const;
  // The dequantised value of one element, whatever the dtype (for tests and tools).
  float k_at(std::int64_t layer, std::int64_t b, std::int64_t h, std::int64_t j,
             std::int64_t d) const;
  float v_at(std::int64_t layer, std::int64_t b, std::int64_t h, std::int64_t j,
             std::int64_t e) const;

 private:
  struct LayerData {
    std::byte* k = nullptr;
    std::byte* v = nullptr;
    float* k_scale = nullptr;
    float* v_scale = nullptr;
  };
  void map_storage();
  void unmap_storage();
  LayerData layer_data(std::int64_t layer) const;
  // A [batch, capacity, kv_heads, dim] view of one layer's K or V storage (f32 / bf16 only).
  TensorView cache_view(void* data, std::int64_t kv_heads, std::int64_t dim,
                        const char* what) const;
  void check_layer(std::int64_t layer, const char* what) const;

  KvCacheConfig config_;
  std::byte* storage_ = nullptr;
  std::size_t storage_bytes_ = 0;
  std::vector<std::int64_t> lengths_;       // [layers, batch]
  std::vector<std::int64_t> layer_offset_;  // [layers + 1]: byte offset of each layer's part
};

}  // namespace headcount
