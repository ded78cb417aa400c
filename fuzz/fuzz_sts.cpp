// Fuzz target: read_sts on arbitrary bytes (lines, TABs, CR, scores). Either an Error naming
// the line, or at least one pair, every score finite.
#include <cmath>
#include <cstdint>
#include <string_view>

#include "fuzz_input.h"
#include "headcount/error.h"
#include "headcount/sts.h"

using headcount::fuzz::MemoryFile;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const MemoryFile file(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const std::vector<headcount::StsPair> pairs = headcount::read_sts(file.path());
    FUZZ_ASSERT(!pairs.empty());
    std::vector<double> scores;
    for (const headcount::StsPair& p : pairs) {
      FUZZ_ASSERT(std::isfinite(p.score));
      FUZZ_ASSERT(p.sentence1.find('\t') == std::string::npos);
      scores.push_back(p.score);
    }
    // The correlations of a file's own scores: NaN only for a constant or one-pair column.
    const double r = headcount::spearman(scores, scores);
    FUZZ_ASSERT(std::isnan(r) || std::fabs(r - 1.0) < 1e-9);
  } catch (const headcount::Error&) {
  }
  return 0;
}
