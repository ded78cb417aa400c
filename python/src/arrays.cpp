// Reading Python arrays as TensorViews (in place where the dtype allows) and handing Tensors
// back as numpy arrays. See arrays.h for the rules.
#include "arrays.h"

#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "headcount/error.h"

namespace headcount::python {
namespace {

std::string type_of(nb::handle object) { return nb::type_name(object.type()).c_str(); }

std::string dtype_string(nb::dlpack::dtype t) {
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
    case nb::dlpack::dtype_code::Int:
      kind = "int";
      break;
    case nb::dlpack::dtype_code::UInt:
      kind = "uint";
      break;
    case nb::dlpack::dtype_code::Float:
      kind = "float";
      break;
    case nb::dlpack::dtype_code::Bfloat:
      kind = "bfloat";
      break;
    case nb::dlpack::dtype_code::Complex:
      kind = "complex";
      break;
    case nb::dlpack::dtype_code::Bool:
      kind = "bool";
      break;
    default:
      break;
  }
  return std::string(kind) + std::to_string(t.bits);
}

bool is(nb::dlpack::dtype t, nb::dlpack::dtype_code code, int bits) {
  return t.code == static_cast<std::uint8_t>(code) && t.bits == bits && t.lanes == 1;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, word;
  if (exponent == 0x1f) {
    word = sign | 0x7f800000u | (mantissa << 13);  // inf / NaN
  } else if (exponent == 0) {
    // Subnormal (or zero): value = mantissa * 2^-24, exact in float32.
    const float value = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&word, &value, sizeof word);
    word |= sign;
  } else {
    word = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &word, sizeof out);
  return out;
}

// Copies any supported dtype, any strides, into a C-ordered float32 tensor.
Tensor convert(const nb::ndarray<nb::ro>& a, nb::dlpack::dtype t,
               const std::vector<std::int64_t>& shape) {
  Tensor out(DType::f32, shape);
  float* dst = out.data<float>();
  const int rank = static_cast<int>(shape.size());
  const auto* base = static_cast<const std::byte*>(a.data());
  const std::int64_t item = static_cast<std::int64_t>(t.bits / 8);
  std::int64_t index[kMaxRank] = {0, 0, 0, 0};
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    std::int64_t offset = 0;
    for (int d = 0; d < rank; ++d) offset += index[d] * a.stride(d);
    const std::byte* p = base + offset * item;
    if (is(t, nb::dlpack::dtype_code::Float, 64)) {
      double v;
      std::memcpy(&v, p, sizeof v);
      dst[i] = static_cast<float>(v);
    } else if (is(t, nb::dlpack::dtype_code::Float, 16)) {
      std::uint16_t h;
      std::memcpy(&h, p, sizeof h);
      dst[i] = half_to_float(h);
    } else if (is(t, nb::dlpack::dtype_code::Bfloat, 16)) {
      bf16 b;
      std::memcpy(&b.bits, p, sizeof b.bits);
      dst[i] = to_float(b);
    } else {
      std::memcpy(&dst[i], p, sizeof(float));
    }
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < shape[static_cast<std::size_t>(d)]) break;
      index[d] = 0;
    }
  }
  return out;
}

void check_rank_and_device(const nb::ndarray<nb::ro>& a, const char* name, int rank) {
  check(a.device_type() == nb::device::cpu::value, std::string(name) + ": device",
        "a CPU array (headcount computes on the CPU)",
        "device type " + std::to_string(a.device_type()));
  const int ndim = static_cast<int>(a.ndim());
  if (rank > 0) {
    check(ndim == rank, std::string(name) + ": dimensions", rank, ndim);
  } else {
    check(ndim >= 1 && ndim <= kMaxRank, std::string(name) + ": dimensions", "1 to 4", ndim);
  }
}

}  // namespace

Input as_input(nb::handle object, const char* name, int rank, bool allow_bf16, bool unit_rows) {
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(object, a, /*convert=*/false))
    fail(name,
         "expected a numpy array or a DLPack tensor (e.g. torch.Tensor), got " + type_of(object));
  check_rank_and_device(a, name, rank);
  const nb::dlpack::dtype t = a.dtype();
  const bool f32 = is(t, nb::dlpack::dtype_code::Float, 32);
  const bool b16 = is(t, nb::dlpack::dtype_code::Bfloat, 16);
  check(f32 || b16 || is(t, nb::dlpack::dtype_code::Float, 64) ||
            is(t, nb::dlpack::dtype_code::Float, 16),
        std::string(name) + ": dtype", "float32, bfloat16, float16 or float64", dtype_string(t));
  std::vector<std::int64_t> shape(a.ndim());
  for (std::size_t d = 0; d < a.ndim(); ++d) shape[d] = static_cast<std::int64_t>(a.shape(d));

  Input in;
  const bool rows_ok =
      !unit_rows || a.ndim() == 0 || a.stride(a.ndim() - 1) == 1 || a.shape(a.ndim() - 1) <= 1;
  if ((f32 || (b16 && allow_bf16)) && rows_ok) {
    TensorView& v = in.view;
    v.data = const_cast<void*>(a.data());  // inputs are only read
    v.dtype = f32 ? DType::f32 : DType::bf16;
    v.rank = static_cast<int>(a.ndim());
    for (int d = 0; d < v.rank; ++d) {
      v.shape[static_cast<std::size_t>(d)] = shape[static_cast<std::size_t>(d)];
      v.strides[static_cast<std::size_t>(d)] = a.stride(static_cast<std::size_t>(d));
    }
    return in;
  }
  in.copy = convert(a, t, shape);
  in.view = in.copy.view();
  return in;
}

std::optional<Input> as_optional_input(nb::handle object, const char* name, int rank,
                                       bool allow_bf16) {
  if (object.is_none()) return std::nullopt;
  return as_input(object, name, rank, allow_bf16);
}

TensorView as_output(nb::handle object, const char* name) {
  nb::ndarray<> a;
  if (!nb::try_cast(object, a, /*convert=*/false))
    fail(name, "expected a writable float32 numpy array or DLPack tensor, got " + type_of(object));
  check(a.device_type() == nb::device::cpu::value, std::string(name) + ": device", "a CPU array",
        "device type " + std::to_string(a.device_type()));
  check(is(a.dtype(), nb::dlpack::dtype_code::Float, 32), std::string(name) + ": dtype", "float32",
        dtype_string(a.dtype()));
  check(a.ndim() >= 1 && a.ndim() <= kMaxRank, std::string(name) + ": dimensions", "1 to 4",
        a.ndim());
  TensorView v;
  v.data = a.data();
  v.dtype = DType::f32;
  v.rank = static_cast<int>(a.ndim());
  for (int d = 0; d < v.rank; ++d) {
    v.shape[static_cast<std::size_t>(d)] =
        static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(d)));
    v.strides[static_cast<std::size_t>(d)] = a.stride(static_cast<std::size_t>(d));
  }
  return v;
}

nb::object to_numpy(Tensor&& tensor) {
  auto* owned = new Tensor(std::move(tensor));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<std::size_t> shape(owned->shape().begin(), owned->shape().end());
  NumpyF32 array(owned->data<float>(), shape.size(), shape.data(), owner);
  return array.cast();
}

std::vector<std::int64_t> as_int_list(nb::handle object, const char* name) {
  std::vector<std::int64_t> out;
  if (object.is_none()) return out;
  if (!nb::isinstance<nb::sequence>(object) && !nb::hasattr(object, "__iter__"))
    fail(name, "expected a sequence of integers, got " + type_of(object));
  for (nb::handle item : object) {
    std::int64_t value = 0;
    if (!nb::try_cast(nb::borrow(item).attr("__index__")(), value))
      fail(name, "expected a sequence of integers, got an element of type " + type_of(item));
    out.push_back(value);
  }
  return out;
}

}  // namespace headcount::python
