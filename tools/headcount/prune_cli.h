// What the compression commands (prune, prune-curve, prune-speed, convert) share: where STS-B
// lives, and the head counts of the curve's 10% steps.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace headcount::cli {

// ../shared/data/stsb/<name> beside the source tree (present on the development machine only).
inline std::string default_sts_file(const std::string& name) {
  return std::filesystem::path(HEADCOUNT_SOURCE_DIR "/../shared/data/stsb/" + name)
      .lexically_normal()
      .string();
}

// Heads removed at 0, 10, ..., 90% of `total`: round(f * total).
inline std::vector<std::int64_t> curve_counts(std::int64_t total) {
  std::vector<std::int64_t> counts;
  for (int tenth = 0; tenth <= 9; ++tenth)
    counts.push_back(std::llround(tenth * static_cast<double>(total) / 10.0));
  return counts;
}

// The re-ranking steps of --iterative up to `count`: the curve's counts below it, then count.
inline std::vector<std::int64_t> iterative_counts(std::int64_t total, std::int64_t count) {
  std::vector<std::int64_t> steps;
  for (std::int64_t k : curve_counts(total))
    if (k > 0 && k < count) steps.push_back(k);
  if (count > 0) steps.push_back(count);
  return steps;
}

}  // namespace headcount::cli
