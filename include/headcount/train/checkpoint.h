// Checkpoints: the named tensors of a run (parameters, optimizer moments) as one safetensors
// file, and its JSON state (config, step, seeds, curve) beside it. Both are written to a
// temporary name in the same directory and renamed into place, so a kill mid-write leaves the
// previous checkpoint intact.
#pragma once

#include <string>
#include <vector>

#include "headcount/tensor.h"
#include "nlohmann/json.hpp"

namespace headcount::train {

struct NamedTensor {
  std::string name;
  TensorView view;  // f32, contiguous
};

// Writes dir/<stem>.safetensors then dir/<stem>.json (state), each atomically (temporary file,
// fsync, rename). The JSON is written last, so a reader that finds it finds matching tensors.
void save_checkpoint(const std::string& dir, const std::string& stem, const std::vector<NamedTensor>& tensors,
                     const nlohmann::json& state);

struct LoadedCheckpoint {
  nlohmann::json state;
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
};
// Reads and validates both files; throws Error naming the file and field on any mismatch.
LoadedCheckpoint load_checkpoint(const std::string& dir, const std::string& stem);

// Copies a loaded checkpoint's tensors into `into` by name: every name must be present with
// the same shape (Error otherwise, naming the tensor and both shapes).
void restore_tensors(const LoadedCheckpoint& checkpoint, const std::vector<NamedTensor>& into);

}  // namespace headcount::train
