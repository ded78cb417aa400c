// `headcount bench --suite decoder-kv`: what the K/V head count costs a decoder at long contexts
// (issue 36). SmolLM2-135M as loaded (9 query heads over 3 K/V heads), its MHA export (each K/V
// head repeated: 9) and its MQA conversion (the 3 mean-pooled into 1) are built in memory and
// measured in one run at contexts 512, 2048 and 8192: KV-cache bytes (the cache's own count
// beside the cost model's), the prefill of the context, and decode tokens/s of the last tokens
// before it. What the conversions do to perplexity is `headcount convert-sweep`'s question.
#pragma once

#include <string>

namespace headcount::cli::bench {

struct DecoderKvSuiteOptions {
  int threads = 2;
  int repeats = 3;  // timed decode rounds per (context, variant) after one warm-up (medians)
  bool json = false;
  bool quick = false;  // contexts 64 and 128, 8 decoded tokens
  std::string model;   // the GGUF file
  std::string text;    // the tokens that fill the contexts (its first 64 KiB)
};

void run_decoder_kv_suite(const DecoderKvSuiteOptions& options);

}  // namespace headcount::cli::bench
