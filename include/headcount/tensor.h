// Tensors: a non-owning strided view (what kernels take) and an owning, 64-byte
// aligned buffer (what callers allocate). Strides are counted in elements, not bytes,
// so a view of the fused QKV matrix can hand each head a column range without a copy.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace headcount {

enum class DType : std::uint8_t { f32, f64, bf16, i8 };
// Element type of a KV cache (decode.h has its names, sizes and quantisation rule). Here, beside
// DType, because the decode micro-kernels (src/simd, below the kernels) take it too.
enum class CacheDType : std::uint8_t { f32, bf16, int8 };

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

// bfloat16 storage: the top 16 bits of an IEEE float32. Arithmetic is always fp32.
struct bf16 {
  std::uint16_t bits = 0;
};
inline float to_float(bf16 value) {
  std::uint32_t word = static_cast<std::uint32_t>(value.bits) << 16;
  float out;
  std::memcpy(&out, &word, sizeof out);
  return out;
}
// Round to nearest, ties to even; NaN stays NaN (quiet bit forced so it cannot become inf).
inline bf16 to_bf16(float value) {
  std::uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  if ((word & 0x7fffffffu) > 0x7f800000u)
    return bf16{static_cast<std::uint16_t>((word >> 16) | 0x40)};
  word += 0x7fffu + ((word >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(word >> 16)};
}

inline constexpr int kMaxRank = 4;

// A strided window onto memory someone else owns. Inputs and outputs of kernels are
// views; the kernel never frees or reallocates them.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  // elements, not bytes

  bool empty() const { return data == nullptr; }
  std::int64_t numel() const;
  bool is_contiguous() const;
  std::string shape_string() const;    // "[2, 7, 8, 64]"
  std::string strides_string() const;  // "[3584, 512, 64, 1]"

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Element offset of an index (rank entries). Inline: the reference kernels call it per
  // element, and out of line it was half the time of the float64 backward reference (and, with
  // the initializer list on the stack of every call, more under AddressSanitizer). Forced: clang
  // under AddressSanitizer left it out of line (12% of the backward tests' time there).
  [[gnu::always_inline]] std::int64_t offset(std::initializer_list<std::int64_t> index) const {
    std::int64_t off = 0;
    int d = 0;
    for (std::int64_t i : index) off += i * strides[d++];
    return off;
  }

  // Row-major (C order) view over `data`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape);
  static TensorView contiguous(void* data, DType dtype, const std::vector<std::int64_t>& shape);
  // View with explicit strides (in elements).
  static TensorView strided(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                            std::initializer_list<std::int64_t> strides);
};

// An owning, zero-initialised, 64-byte aligned, C-ordered buffer.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<std::int64_t> shape);

  DType dtype() const { return dtype_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t size(int dim) const { return shape_.at(static_cast<std::size_t>(dim)); }
  std::int64_t numel() const { return numel_; }
  std::size_t bytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  bool empty() const { return !buffer_; }

  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(buffer_.get());
  }
  TensorView view() const;

 private:
  struct AlignedFree {
    void operator()(std::byte* p) const;
  };
  DType dtype_ = DType::f32;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_ = 0;
  std::unique_ptr<std::byte[], AlignedFree> buffer_;
};

// "[2, 7, 8]"
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace headcount
