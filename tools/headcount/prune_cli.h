// What the compression commands (prune, prune-curve, prune-speed, convert) share: where STS-B
// lives, and the head counts of the curve's 10% steps (compress/sweeps.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "compress/sweeps.h"

namespace headcount::cli {

// ../shared/data/stsb/<name> beside the source tree (present on the development machine only).
inline std::string default_sts_file(const std::string& name) {
  return std::filesystem::path(HEADCOUNT_SOURCE_DIR "/../shared/data/stsb/" + name)
      .lexically_normal()
      .string();
}

// The curve's 10% steps and the iterative ranking's steps (the sweeps' own definitions).
using compress::curve_counts;
using compress::iterative_counts;

}  // namespace headcount::cli
