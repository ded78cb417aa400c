// `headcount bench --suite decode`: the decode kernel against a KV cache, timed per token and
// set against this machine's memory bandwidth measured in the same run (a stream triad).
//
// Rows: cache lengths {1k, 4k, 16k, 32k} x kv_heads {32, 8, 4, 1} x cache dtype {f32, bf16,
// int8} x batch {1, 8}, at heads 32, head_dim 128, one new token per sequence (q_len 1).
// A cache bigger than max_cache_gib (or than 70% of MemAvailable) is not allocated: its rows
// are listed as skipped, with the reason.
#pragma once

namespace headcount::cli::bench {

struct DecodeSuiteOptions {
  int threads = 2;           // workers of the kernel and of the triad
  int repeats = 30;          // timed decode steps per row after one warm-up (median)
  double row_seconds = 2.0;  // a row stops early once its timed steps take this long
  bool json = false;         // one JSON object on stdout instead of the table
  bool quick = false;        // smoke test: 1k and 4k, batch 1, kv_heads {32, 8}
  double max_cache_gib = 8;  // the biggest cache a row may allocate
};

// Measures the triad, runs every row, prints the rows and where the targets stand
// (table or JSON on stdout, progress on stderr). Throws headcount::Error on bad options.
void run_decode_suite(const DecodeSuiteOptions& options);

}  // namespace headcount::cli::bench
