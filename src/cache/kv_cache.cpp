// KvCache: storage, append (with bf16 / int8 quantisation), truncate, reserve, views.
//
// Storage is one anonymous mapping (zero pages, faulted on first use; transparent huge pages
// requested, since a long cache is gigabytes and 4 KiB faults cost ~11 us each). Per layer:
//   K [batch, kv_heads, capacity, head_dim] | V [.., v_head_dim] | k_scale, v_scale
//   [batch, kv_heads, capacity] (int8 only), each part 64-byte aligned.
#include "headcount/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <utility>

#include "headcount/error.h"

namespace headcount {

using detail::concat;
using i64 = std::int64_t;

namespace {

i64 round_up(i64 x, i64 multiple) { return (x + multiple - 1) / multiple * multiple; }

struct Layout {
  i64 k_bytes = 0, v_bytes = 0, scale_bytes = 0, layer_bytes = 0;
};

Layout layout_of(const KvCacheConfig& c, i64 layer) {
  Layout l;
  const i64 rows = c.batch * c.kv_heads_in(layer) * c.capacity;
  const i64 element = cache_element_bytes(c.dtype);
  l.k_bytes = round_up(rows * c.head_dim * element, 64);
  l.v_bytes = round_up(rows * c.v_head_dim * element, 64);
  l.scale_bytes = c.dtype == CacheDType::int8 ? round_up(rows * 4, 64) : 0;
  l.layer_bytes = l.k_bytes + l.v_bytes + 2 * l.scale_bytes;
  return l;
}

// One row of `n` values from a strided f32 view into the cache's element type.
void store_row(CacheDType dtype, const float* src, i64 src_stride, i64 n, std::byte* dst,
               float* scale) {
  switch (dtype) {
    case CacheDType::f32: {
      auto* out = reinterpret_cast<float*>(dst);
      for (i64 i = 0; i < n; ++i) out[i] = src[i * src_stride];
      return;
    }
    case CacheDType::bf16: {
      auto* out = reinterpret_cast<bf16*>(dst);
      for (i64 i = 0; i < n; ++i) out[i] = to_bf16(src[i * src_stride]);
      return;
    }
    case CacheDType::int8: {
      float max_abs = 0.0f;
      for (i64 i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(src[i * src_stride]));
      const float s = max_abs / 127.0f;
      *scale = s;
      auto* out = reinterpret_cast<std::int8_t*>(dst);
      // x / s rather than x * (1/s): the quotient is correctly rounded, so |x/s| <= 127
      // exactly for the largest element and the clamp below never changes a value.
      for (i64 i = 0; i < n; ++i) {
        const float x = src[i * src_stride];
        const float r = s > 0.0f ? std::nearbyint(x / s) : 0.0f;
        out[i] = static_cast<std::int8_t>(std::clamp(r, -127.0f, 127.0f));
      }
      return;
    }
  }
}

void check_source(const TensorView& t, const char* name, i64 batch, i64 kv_heads, i64 dim) {
  HEADCOUNT_CHECK(!t.empty(), name, "a tensor [batch, n, kv_heads, dim]", "no data");
  HEADCOUNT_CHECK(t.rank == 4 && t.dtype == DType::f32, name,
                  "an f32 tensor [batch, n, kv_heads, dim]",
                  concat(dtype_name(t.dtype), ' ', t.shape_string()));
  HEADCOUNT_CHECK(
      t.shape[0] == batch && t.shape[1] >= 1 && t.shape[2] == kv_heads && t.shape[3] == dim,
      concat(name, " shape"),
      concat("[", batch, ", n >= 1, ", kv_heads, ", ", dim, "] (the cache's batch, kv_heads, dim)"),
      t.shape_string());
  for (int d = 0; d < 4; ++d)
    HEADCOUNT_CHECK(t.strides[d] >= 0, concat(name, " strides"), "non-negative strides",
                    t.strides_string());
}

}  // namespace

const char* cache_dtype_name(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::f32:
      return "f32";
    case CacheDType::bf16:
      return "bf16";
    case CacheDType::int8:
      return "int8";
  }
  return "?";
}

CacheDType parse_cache_dtype(const std::string& name) {
  for (CacheDType d : {CacheDType::f32, CacheDType::bf16, CacheDType::int8})
    if (name == cache_dtype_name(d)) return d;
  fail("cache dtype", "expected f32, bf16 or int8, got " + name);
}

i64 cache_element_bytes(CacheDType dtype) {
  return dtype == CacheDType::f32 ? 4 : dtype == CacheDType::bf16 ? 2 : 1;
}

i64 cache_token_bytes(CacheDType dtype, i64 kv_heads, i64 head_dim, i64 v_head_dim) {
  const i64 scales = dtype == CacheDType::int8 ? 2 * 4 : 0;
  return kv_heads * ((head_dim + v_head_dim) * cache_element_bytes(dtype) + scales);
}

KvCache::KvCache(const KvCacheConfig& config) : config_(config) {
  KvCacheConfig& c = config_;
  HEADCOUNT_CHECK(c.layers >= 1, "kv cache layers", ">= 1", c.layers);
  HEADCOUNT_CHECK(c.batch >= 1, "kv cache batch", ">= 1", c.batch);
  HEADCOUNT_CHECK(c.kv_heads >= 1, "kv cache kv_heads", ">= 1", c.kv_heads);
  HEADCOUNT_CHECK(c.layer_kv_heads.empty() || static_cast<i64>(c.layer_kv_heads.size()) == c.layers,
                  "kv cache layer_kv_heads",
                  concat("empty or one count per layer (", c.layers, ")"), c.layer_kv_heads.size());
  for (std::size_t l = 0; l < c.layer_kv_heads.size(); ++l)
    HEADCOUNT_CHECK(c.layer_kv_heads[l] >= 1, concat("kv cache layer_kv_heads[", l, "]"), ">= 1",
                    c.layer_kv_heads[l]);
  HEADCOUNT_CHECK(c.head_dim >= 1, "kv cache head_dim", ">= 1", c.head_dim);
  if (c.v_head_dim == 0) c.v_head_dim = c.head_dim;
  HEADCOUNT_CHECK(c.v_head_dim >= 1, "kv cache v_head_dim", ">= 1 (or 0 for head_dim)",
                  c.v_head_dim);
  HEADCOUNT_CHECK(c.capacity >= 1, "kv cache capacity", ">= 1 position", c.capacity);
  HEADCOUNT_CHECK(
      c.dtype == CacheDType::f32 || c.dtype == CacheDType::bf16 || c.dtype == CacheDType::int8,
      "kv cache dtype", "f32, bf16 or int8", static_cast<int>(c.dtype));
  lengths_.assign(static_cast<std::size_t>(c.layers * c.batch), 0);
  map_storage();
}

KvCache::~KvCache() { unmap_storage(); }

KvCache::KvCache(KvCache&& other) noexcept
    : config_(other.config_),
      storage_(std::exchange(other.storage_, nullptr)),
      storage_bytes_(std::exchange(other.storage_bytes_, 0)),
      lengths_(std::move(other.lengths_)),
      layer_offset_(std::move(other.layer_offset_)) {}

KvCache& KvCache::operator=(KvCache&& other) noexcept {
  if (this != &other) {
    unmap_storage();
    config_ = other.config_;
    storage_ = std::exchange(other.storage_, nullptr);
    storage_bytes_ = std::exchange(other.storage_bytes_, 0);
    lengths_ = std::move(other.lengths_);
    layer_offset_ = std::move(other.layer_offset_);
  }
  return *this;
}

void KvCache::map_storage() {
  layer_offset_.assign(1, 0);
  for (i64 layer = 0; layer < config_.layers; ++layer)
    layer_offset_.push_back(layer_offset_.back() + layout_of(config_, layer).layer_bytes);
  storage_bytes_ = static_cast<std::size_t>(layer_offset_.back());
  void* p =
      mmap(nullptr, storage_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    storage_bytes_ = 0;
    throw std::bad_alloc();
  }
#ifdef MADV_HUGEPAGE
  madvise(p, storage_bytes_, MADV_HUGEPAGE);  // advisory: fewer faults where THP is available
#endif
  storage_ = static_cast<std::byte*>(p);
}

void KvCache::unmap_storage() {
  if (storage_) munmap(storage_, storage_bytes_);
  storage_ = nullptr;
  storage_bytes_ = 0;
}

KvCache::LayerData KvCache::layer_data(i64 layer) const {
  const Layout l = layout_of(config_, layer);
  std::byte* base = storage_ + layer_offset_[static_cast<std::size_t>(layer)];
  LayerData d;
  d.k = base;
  d.v = base + l.k_bytes;
  if (config_.dtype == CacheDType::int8) {
    d.k_scale = reinterpret_cast<float*>(base + l.k_bytes + l.v_bytes);
    d.v_scale = reinterpret_cast<float*>(base + l.k_bytes + l.v_bytes + l.scale_bytes);
  }
  return d;
}

void KvCache::check_layer(i64 layer, const char* what) const {
  HEADCOUNT_CHECK(layer >= 0 && layer < config_.layers, concat(what, " layer"),
                  concat("0 to ", config_.layers - 1), layer);
}

i64 KvCache::length(i64 layer, i64 b) const {
  check_layer(layer, "kv cache length");
  HEADCOUNT_CHECK(b >= 0 && b < config_.batch, "kv cache length batch",
                  concat("0 to ", config_.batch - 1), b);
  return lengths_[static_cast<std::size_t>(layer * config_.batch + b)];
}

std::span<const i64> KvCache::lengths(i64 layer) const {
  check_layer(layer, "kv cache lengths");
  return std::span<const i64>(lengths_).subspan(static_cast<std::size_t>(layer * config_.batch),
                                                static_cast<std::size_t>(config_.batch));
}

void KvCache::append(i64 layer, const TensorView& k, const TensorView& v,
                     std::span<const i64> counts) {
  const KvCacheConfig& c = config_;
  check_layer(layer, "kv cache append");
  const i64 kv_heads = c.kv_heads_in(layer);
  check_source(k, "kv cache append k", c.batch, kv_heads, c.head_dim);
  check_source(v, "kv cache append v", c.batch, kv_heads, c.v_head_dim);
  const i64 n = k.shape[1];
  HEADCOUNT_CHECK(v.shape[1] == n, "kv cache append v shape",
                  concat("n = ", n, " positions (as k)"), v.shape_string());
  if (!counts.empty())
    HEADCOUNT_CHECK(static_cast<i64>(counts.size()) == c.batch, "kv cache append counts",
                    concat(c.batch, " entries (one per sequence)"), counts.size());
  i64* len = lengths_.data() + layer * c.batch;
  // Check everything before writing anything: an append past the capacity changes nothing.
  for (i64 b = 0; b < c.batch; ++b) {
    const i64 count = counts.empty() ? n : counts[static_cast<std::size_t>(b)];
    HEADCOUNT_CHECK(count >= 0 && count <= n, concat("kv cache append counts[", b, "]"),
                    concat("0 to n = ", n), count);
    HEADCOUNT_CHECK(
        len[b] + count <= c.capacity,
        concat("kv cache append (layer ", layer, ", sequence ", b, ")"),
        concat("length + new positions <= capacity = ", c.capacity, " (reserve() to grow)"),
        concat(len[b], " + ", count, " = ", len[b] + count));
  }
  for (const TensorView* t : {&k, &v}) {
    const float* data = t->ptr<const float>();
    for (i64 b = 0; b < c.batch; ++b) {
      const i64 count = counts.empty() ? n : counts[static_cast<std::size_t>(b)];
      for (i64 j = 0; j < count; ++j)
        for (i64 h = 0; h < kv_heads; ++h)
          for (i64 d = 0; d < t->shape[3]; ++d) {
            const float x = data[t->offset({b, j, h, d})];
            if (!std::isfinite(x))
              fail(t == &k ? "kv cache append k" : "kv cache append v",
                   concat("expected finite values, got ", x, " at [", b, ", ", j, ", ", h, ", ", d,
                          "]"));
          }
    }
  }

  const LayerData data = layer_data(layer);
  const i64 element = cache_element_bytes(c.dtype);
  for (i64 b = 0; b < c.batch; ++b) {
    const i64 count = counts.empty() ? n : counts[static_cast<std::size_t>(b)];
    for (i64 h = 0; h < kv_heads; ++h) {
      const i64 row0 = (b * kv_heads + h) * c.capacity + len[b];
      for (i64 j = 0; j < count; ++j) {
        const i64 row = row0 + j;
        store_row(c.dtype, k.ptr<const float>() + k.offset({b, j, h, 0}), k.strides[3], c.head_dim,
                  data.k + row * c.head_dim * element, data.k_scale ? data.k_scale + row : nullptr);
        store_row(c.dtype, v.ptr<const float>() + v.offset({b, j, h, 0}), v.strides[3],
                  c.v_head_dim, data.v + row * c.v_head_dim * element,
                  data.v_scale ? data.v_scale + row : nullptr);
      }
    }
    len[b] += count;
  }
}

void KvCache::truncate(i64 b, i64 length) {
  HEADCOUNT_CHECK(b >= 0 && b < config_.batch, "kv cache truncate sequence",
                  concat("0 to ", config_.batch - 1), b);
  for (i64 layer = 0; layer < config_.layers; ++layer) {
    i64& len = lengths_[static_cast<std::size_t>(layer * config_.batch + b)];
    HEADCOUNT_CHECK(length >= 0 && length <= len,
                    concat("kv cache truncate (layer ", layer, ", sequence ", b, ")"),
                    concat("a length from 0 to the current ", len), length);
  }
  for (i64 layer = 0; layer < config_.layers; ++layer)
    lengths_[static_cast<std::size_t>(layer * config_.batch + b)] = length;
}

void KvCache::reset() { std::fill(lengths_.begin(), lengths_.end(), 0); }

void KvCache::reserve(i64 capacity) {
  const i64 longest = lengths_.empty() ? 0 : *std::max_element(lengths_.begin(), lengths_.end());
  HEADCOUNT_CHECK(capacity >= 1 && capacity >= longest, "kv cache reserve capacity",
                  concat(">= the longest cached sequence (", longest, ") and >= 1"), capacity);
  if (capacity == config_.capacity) return;
  KvCacheConfig grown_config = config_;
  grown_config.capacity = capacity;
  KvCache grown(grown_config);
  const i64 element = cache_element_bytes(config_.dtype);
  for (i64 layer = 0; layer < config_.layers; ++layer) {
    const LayerData from = layer_data(layer), to = grown.layer_data(layer);
    for (i64 b = 0; b < config_.batch; ++b) {
      const i64 len = lengths_[static_cast<std::size_t>(layer * config_.batch + b)];
      const i64 kv_heads = config_.kv_heads_in(layer);
      for (i64 h = 0; h < kv_heads; ++h) {
        const i64 src = (b * kv_heads + h) * config_.capacity;
        const i64 dst = (b * kv_heads + h) * capacity;
        std::memcpy(to.k + dst * config_.head_dim * element,
                    from.k + src * config_.head_dim * element,
                    static_cast<std::size_t>(len * config_.head_dim * element));
        std::memcpy(to.v + dst * config_.v_head_dim * element,
                    from.v + src * config_.v_head_dim * element,
                    static_cast<std::size_t>(len * config_.v_head_dim * element));
        if (from.k_scale) {
          std::memcpy(to.k_scale + dst, from.k_scale + src, static_cast<std::size_t>(len) * 4);
          std::memcpy(to.v_scale + dst, from.v_scale + src, static_cast<std::size_t>(len) * 4);
        }
      }
    }
  }
  grown.lengths_ = lengths_;
  *this = std::move(grown);
}

i64 KvCache::bytes() const {
  i64 per_position = 0;
  for (i64 layer = 0; layer < config_.layers; ++layer)
    per_position += cache_token_bytes(config_.dtype, config_.kv_heads_in(layer), config_.head_dim,
                                      config_.v_head_dim);
  return config_.batch * config_.capacity * per_position;
}

KvView KvCache::view(i64 layer) const {
  check_layer(layer, "kv cache view");
  const LayerData d = layer_data(layer);
  return KvView{.dtype = config_.dtype,
                .batch = config_.batch,
                .kv_heads = config_.kv_heads_in(layer),
                .capacity = config_.capacity,
                .head_dim = config_.head_dim,
                .v_head_dim = config_.v_head_dim,
                .k = d.k,
                .v = d.v,
                .k_scale = d.k_scale,
                .v_scale = d.v_scale,
                .lengths = lengths(layer)};
}

TensorView KvCache::cache_view(void* data, i64 kv_heads, i64 dim, const char* what) const {
  HEADCOUNT_CHECK(config_.dtype != CacheDType::int8, concat(what, " dtype"),
                  "f32 or bf16 (int8 has no TensorView)", cache_dtype_name(config_.dtype));
  const KvCacheConfig& c = config_;
  return TensorView::strided(data, c.dtype == CacheDType::f32 ? DType::f32 : DType::bf16,
                             {c.batch, c.capacity, kv_heads, dim},
                             {kv_heads * c.capacity * dim, dim, c.capacity * dim, 1});
}

TensorView KvCache::k_tensor(i64 layer) const {
  check_layer(layer, "kv cache k_tensor");
  return cache_view(layer_data(layer).k, config_.kv_heads_in(layer), config_.head_dim,
                    "kv cache k_tensor");
}

TensorView KvCache::v_tensor(i64 layer) const {
  check_layer(layer, "kv cache v_tensor");
  return cache_view(layer_data(layer).v, config_.kv_heads_in(layer), config_.v_head_dim,
                    "kv cache v_tensor");
}

namespace {
float element_at(CacheDType dtype, const std::byte* base, const float* scales, i64 row, i64 dim,
                 i64 i) {
  switch (dtype) {
    case CacheDType::f32:
      return reinterpret_cast<const float*>(base)[row * dim + i];
    case CacheDType::bf16:
      return to_float(reinterpret_cast<const bf16*>(base)[row * dim + i]);
    case CacheDType::int8:
      return scales[row] *
             static_cast<float>(reinterpret_cast<const std::int8_t*>(base)[row * dim + i]);
  }
  return 0.0f;
}
}  // namespace

float KvCache::k_at(i64 layer, i64 b, i64 h, i64 j, i64 d) const {
  check_layer(layer, "kv cache k_at");
  const LayerData data = layer_data(layer);
  return element_at(config_.dtype, data.k, data.k_scale,
                    (b * config_.kv_heads_in(layer) + h) * config_.capacity + j, config_.head_dim,
                    d);
}

float KvCache::v_at(i64 layer, i64 b, i64 h, i64 j, i64 e) const {
  check_layer(layer, "kv cache v_at");
  const LayerData data = layer_data(layer);
  return element_at(config_.dtype, data.v, data.v_scale,
                    (b * config_.kv_heads_in(layer) + h) * config_.capacity + j, config_.v_head_dim,
                    e);
}

}  // namespace headcount
