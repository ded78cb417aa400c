// Arrays between Python and the library.
//
// In: any object nanobind reads as an ndarray (numpy through the buffer protocol, PyTorch
// and every other DLPack producer through __dlpack__), on the CPU. float32 and bfloat16 are
// read in place, whatever their strides: a TensorView takes the producer's strides, so nothing
// is copied (tests check the pointer). float16 and float64 are converted to one float32 copy;
// other dtypes are a ValueError naming the argument.
// Out: numpy float32 arrays that own a headcount::Tensor, or an `out=` array written in place
// (float32, writable, any strides).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "headcount/tensor.h"

namespace headcount::python {

namespace nb = nanobind;

using NumpyF32 = nb::ndarray<nb::numpy, float>;

// A view of an input, with the float32 copy it reads when the input had to be converted.
struct Input {
  TensorView view;
  Tensor copy;  // empty when `view` reads the caller's memory
  bool copied() const { return !copy.empty(); }
};

// `rank`: required number of dimensions (0: any up to 4). allow_bf16: the kernel takes bf16
// views (attention's q, k, v); elsewhere bf16 is converted to float32 like float16.
// unit_rows: the last dimension must have stride 1 (the layer's GEMMs read rows); an input
// without it is copied.
Input as_input(nb::handle object, const char* name, int rank, bool allow_bf16 = false,
               bool unit_rows = false);
std::optional<Input> as_optional_input(nb::handle object, const char* name, int rank,
                                       bool allow_bf16 = false);

// An `out=` argument: a writable float32 CPU array, viewed in place.
TensorView as_output(nb::handle object, const char* name);

// A new numpy array that owns `tensor` (no copy).
nb::object to_numpy(Tensor&& tensor);

// A Python sequence of ints (or a 1-D integer array) as int64 values; None: empty.
std::vector<std::int64_t> as_int_list(nb::handle object, const char* name);

}  // namespace headcount::python
