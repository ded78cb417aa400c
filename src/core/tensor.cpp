#include "headcount/tensor.h"

#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <new>
#include <sstream>

#include "headcount/error.h"

namespace headcount {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::i8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::i8:
      return "i8";
  }
  return "?";
}

namespace {
std::string join(const std::int64_t* values, int count) {
  std::ostringstream out;
  out << '[';
  for (int i = 0; i < count; ++i) out << (i ? ", " : "") << values[i];
  out << ']';
  return out.str();
}

TensorView make_contiguous(void* data, DType dtype, const std::int64_t* shape, std::size_t rank) {
  check(rank >= 1 && rank <= static_cast<std::size_t>(kMaxRank), "tensor rank", "1 to 4 dimensions",
        rank);
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.rank = static_cast<int>(rank);
  std::int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.shape[d] = shape[d];
    view.strides[d] = stride;
    stride *= shape[d];
  }
  return view;
}
}  // namespace

std::string shape_string(const std::vector<std::int64_t>& shape) {
  return join(shape.data(), static_cast<int>(shape.size()));
}

std::int64_t TensorView::numel() const {
  std::int64_t n = rank > 0 ? 1 : 0;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  std::int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::string TensorView::shape_string() const { return join(shape.data(), rank); }
std::string TensorView::strides_string() const { return join(strides.data(), rank); }

TensorView TensorView::contiguous(void* data, DType dtype,
                                  std::initializer_list<std::int64_t> shape) {
  return make_contiguous(data, dtype, shape.begin(), shape.size());
}

TensorView TensorView::contiguous(void* data, DType dtype, const std::vector<std::int64_t>& shape) {
  return make_contiguous(data, dtype, shape.data(), shape.size());
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                               std::initializer_list<std::int64_t> strides) {
  check(shape.size() == strides.size(), "strides", detail::concat(shape.size(), " entries"),
        strides.size());
  TensorView view = make_contiguous(data, dtype, shape.begin(), shape.size());
  int d = 0;
  for (std::int64_t s : strides) view.strides[d++] = s;
  return view;
}

void Tensor::AlignedFree::operator()(std::byte* p) const { std::free(p); }

Tensor::Tensor(DType dtype, std::vector<std::int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  check(!shape_.empty() && shape_.size() <= static_cast<std::size_t>(kMaxRank), "tensor rank",
        "1 to 4 dimensions", shape_.size());
  numel_ = 1;
  const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / 8;  // bytes fit too
  bool empty = false;
  for (std::int64_t extent : shape_) {
    check(extent >= 0, "tensor shape", "non-negative sizes", shape_string(shape_));
    empty = empty || extent == 0;
  }
  for (std::int64_t extent : shape_) {
    if (empty) {
      numel_ = 0;
      break;
    }
    check(numel_ <= limit / extent, "tensor shape", "a size that fits in 64 bits",
          shape_string(shape_));
    numel_ *= extent;
  }
  // The buffer is zeroed, so under overcommit an allocation above physical memory "succeeds" and
  // the memset summons the OOM killer: refuse it here instead, as one Error before allocating.
  // (Only large requests pay for asking: the kernel's count of pages is a system call.)
  constexpr std::size_t kAskAbove = std::size_t{1} << 30;
  if (this->bytes() > kAskAbove) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    const auto memory = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
    check(pages <= 0 || page <= 0 || this->bytes() <= memory, "tensor shape",
          detail::concat("at most ", memory, " bytes (this machine's memory)"),
          detail::concat(shape_string(shape_), " ", dtype_name(dtype_), " = ", this->bytes(),
                         " bytes"));
  }
  constexpr std::size_t kAlign = 64;  // one cache line, and one AVX-512 register
  std::size_t bytes = (this->bytes() + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) bytes = kAlign;
  void* p = std::aligned_alloc(kAlign, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  buffer_.reset(static_cast<std::byte*>(p));
}

TensorView Tensor::view() const { return TensorView::contiguous(buffer_.get(), dtype_, shape_); }

}  // namespace headcount
