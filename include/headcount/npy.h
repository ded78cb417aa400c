// NumPy .npy files: C order, little-endian float32 ('<f4') and float64 ('<f8'), format
// versions 1.0, 2.0 and 3.0. Anything else (another dtype, Fortran order, a short file,
// a malformed header) is an Error that names the file and what was wrong.
#pragma once

#include <string>

#include "headcount/tensor.h"

namespace headcount {

// Reads a whole .npy file into an owning tensor of dtype f32 or f64 (as stored).
Tensor read_npy(const std::string& path);

// Reads a .npy file and converts it to f32 (f64 values are rounded to nearest).
Tensor read_npy_f32(const std::string& path);

// Writes a view (f32 or f64, any strides) as a C-order .npy file. The file appears whole
// or not at all: data goes to a temporary file in the same directory, renamed on success.
void write_npy(const std::string& path, const TensorView& view);

}  // namespace headcount
