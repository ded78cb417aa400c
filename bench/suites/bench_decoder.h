// `headcount bench --suite decoder`: tokens per second of the Llama decoder (SmolLM2-135M from its
// GGUF file): prefill of a 512-token prompt and 128 greedy tokens decoded through the KV cache,
// with fp32, bf16 and int8 weights in one run.
#pragma once

#include <string>

namespace headcount::cli::bench {

struct DecoderSuiteOptions {
  int threads = 2;
  int repeats = 3;  // timed runs per weights dtype after one warm-up (medians)
  bool json = false;
  bool quick = false;  // 64-token prompt, 16 new tokens
  std::string model;   // the GGUF file
  std::string text;    // the prompt: the first 2,060 characters (512 tokens of SmolLM2's)
};

void run_decoder_suite(const DecoderSuiteOptions& options);

}  // namespace headcount::cli::bench
