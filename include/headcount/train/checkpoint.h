// Checkpoints: the named tensors of a run (parameters, optimizer moments) and its JSON state
// (config, step, seeds, curve) as ONE safetensors file, dir/<stem>.safetensors, the state kept
// in the file's __metadata__ ("headcount.state") with a 64-bit checksum of the state and every
// tensor ("headcount.checksum"), so a corrupted byte anywhere fails the load. One file makes one
// atomic rename enough: at every moment the name holds either the previous checkpoint or the new
// one, whole, so a kill mid-write leaves the previous checkpoint intact (tested by killing a writer
// at random moments). dir/<stem>.json beside it is a pretty-printed copy of the state for people
// and scripts, written (atomically too) after the tensors; load_checkpoint reads the safetensors
// file only, so a kill between the two renames cannot make the pair disagree in a way that matters.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "headcount/tensor.h"
#include "nlohmann/json.hpp"

namespace headcount::train {

struct NamedTensor {
  std::string name;
  TensorView view;  // f32, contiguous
};

// Creates `dir` if needed, then writes dir/<stem>.safetensors (tensors in the given order + the
// state) and dir/<stem>.json (the state), each atomically: temporary file in the same directory,
// fsync, rename, fsync of the directory. Throws Error naming the tensor (duplicate name, not f32,
// not contiguous) or the file (cannot write; nothing is left under the final name then).
void save_checkpoint(const std::string& dir, const std::string& stem,
                     const std::vector<NamedTensor>& tensors, const nlohmann::json& state);

struct LoadedCheckpoint {
  nlohmann::json state;
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order
};
// Reads and validates dir/<stem>.safetensors (every byte range, the format tag, the state, every
// tensor F32); throws Error naming the file and the field on any mismatch: a truncated or
// corrupted file never loads.
LoadedCheckpoint load_checkpoint(const std::string& dir, const std::string& stem);

// Copies a loaded checkpoint's tensors into `into` by name: every name in `into` must be present
// with the same shape (Error otherwise, naming the tensor and both shapes). Tensors of the
// checkpoint that `into` does not name are left alone (restore parameters and moments apart).
void restore_tensors(const LoadedCheckpoint& checkpoint, const std::vector<NamedTensor>& into);

// The two paths of a checkpoint, for messages and scripts.
std::string checkpoint_tensors_path(const std::string& dir, const std::string& stem);
std::string checkpoint_state_path(const std::string& dir, const std::string& stem);

}  // namespace headcount::train
