// Semantic textual similarity (STS-B): read pairs, score them with an encoder, and correlate
// the cosine similarities with the gold scores.
//
// File format (the STS Benchmark's own files): UTF-8, one pair per line, TAB-separated fields
//   genre  file  year  id  score  sentence1  sentence2  [anything else, ignored]
// with no quote processing (some sentences hold a lone "). Empty lines are skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "headcount/context.h"
#include "headcount/encoder.h"

namespace headcount {

struct StsPair {
  double score = 0;  // gold similarity, 0..5
  std::string sentence1, sentence2;
};

// Throws Error naming the file and line for a short line or a score that is not a finite number,
// and for a file with no pairs.
std::vector<StsPair> read_sts(const std::string& path);

// Pearson correlation of x and y (NaN if either is constant or n < 2).
double pearson(const std::vector<double>& x, const std::vector<double>& y);
// Spearman rank correlation: Pearson of the ranks, ties given their average rank.
double spearman(const std::vector<double>& x, const std::vector<double>& y);

struct StsResult {
  double spearman = 0;  // x 100
  double pearson = 0;   // x 100
  std::int64_t pairs = 0;
  std::vector<double> cosines;  // one per pair, in file order
};

// Embeds both sides (normalised, mean-pooled, dynamic batching) and correlates cosine(s1, s2)
// with the gold scores.
StsResult evaluate_sts(Context& ctx, const BertEncoder& encoder, const std::vector<StsPair>& pairs,
                       const EmbedOptions& options = {});

}  // namespace headcount
