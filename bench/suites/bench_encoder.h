// `headcount bench --suite encoder`: sentences per second of all-MiniLM-L6-v2 over the
// STS-B test sentences, at batch 1 and 32.
#pragma once

#include <string>

namespace headcount::cli::bench {

struct EncoderSuiteOptions {
  int threads = 2;
  int repeats = 3;  // timed passes over all sentences after one warm-up (median)
  bool json = false;
  bool quick = false;     // the first 64 sentences only
  std::string model_dir;  // empty: the default model directory
  std::string sentences;  // an STS-B file; both sides of every pair are embedded
};

void run_encoder_suite(const EncoderSuiteOptions& options);

}  // namespace headcount::cli::bench
