// mqar-headdim: the claims protocol's E-D (bench/prereg/mqar-headdim-v1.md). Heads too narrow
// to separate many keys lose recall, and the loss is not simply one of head count:
//   task    assoc-recall (MQAR, src/train/tasks/assoc_recall.cpp): 8 pairs, 8 queries, 64 keys,
//           64 values, seq 32 (no filler); dev for the pilot, test for the verdict (the two
//           halves of the held-out side, synthetic_task.h), read once at the end;
//   models  2 layers, d_model 64, d_ff 256; main series h in {1, 4, 16, 32} of head_dim 64/h
//           (equal weights and multiply-adds); control h = 32 at head_dim 16 (width 512);
//   stages  probe -> pilot (seed 101 x lr {1e-3, 3e-3, 1e-2}, dev) -> test (seeds 1..5).
// Rule: h = 4 (head_dim 16) against main h = 32 (head_dim 2), paired test accuracy; the control
// says whether h = 32 loses because its heads are narrow or because they are many.
#include <algorithm>
#include <iterator>

#include "experiments/experiments.h"
#include "experiments/runner.h"
#include "experiments/stages.h"
#include "headcount/error.h"

namespace headcount::experiments {
namespace {

using detail::concat;
using nlohmann::json;

constexpr std::int64_t kMainHeads[] = {1, 4, 16, 32};
constexpr std::int64_t kDModel = 64, kControlHeads = 32, kControlHeadDim = 16, kBatch = 32;
// Steps of every run, from each version's probe (bench/results/2026-12-06-mqar-headdim[-v2]-probe
// .json, recorded in its pre-registration before its pilot): R10's largest multiple of 100
// within 0.85 x 19 min x 2 lanes. The protocol expected about 1,500; v1's steps take 5.2-24.7
// ms, v2's 2.7-11.5.
constexpr std::int64_t kSteps[] = {4400, 9200, 9200, 7700};  // v3: v2's probe (same cells);
                                                             // v4: its own probe (rotary)
