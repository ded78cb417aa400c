// What `headcount bench` measures besides the kernels themselves: this machine's sgemm rate
// (as OpenBLAS is configured, and with its best kernel for this CPU in a child process),
// the resident-memory high-water mark of one call, medians of timed repetitions, and the
// facts that go into the report's header.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace headcount::cli::bench {

// The core type OpenBLAS is asked for in the child process that measures "the best
// kernel for this CPU": its AVX-512 sgemm kernel (the AVX512_BF16 core, which OpenBLAS
// 0.3.21 also knows how to dispatch to; SKYLAKEX shares its sgemm kernel).
inline constexpr const char* kBestCoretype = "COOPERLAKE";

struct SgemmRate {
  std::int64_t size = 0;  // C[size, size] = A[size, size] · B[size, size]
  int repeats = 0;        // timed calls after one warm-up; the median is reported
  int threads = 0;
  double seconds = 0;        // median
  double gflops = 0;         // 2·size³ / seconds / 1e9
  std::string corename;      // openblas_get_corename()
  std::string coretype_env;  // OPENBLAS_CORETYPE as this process saw it ("" if unset)
};

// Times OpenBLAS's cblas_sgemm on `threads` threads in this process, as OpenBLAS is configured
// here: the machine's yardstick (headcount's own products never call it).
SgemmRate measure_sgemm(int threads, std::int64_t size, int repeats);

// Runs this same binary's hidden `bench --sgemm-only` in a child process whose
// environment sets OPENBLAS_CORETYPE=coretype (this process's environment is untouched),
// and reads back its JSON. Throws Error with the child's first line of output on failure.
SgemmRate measure_sgemm_in_child(const std::string& coretype, int threads, std::int64_t size,
                                 int repeats);

// JSON for one rate (what --sgemm-only prints, and what the header carries).
std::string sgemm_to_json(const SgemmRate& rate);

// How much resident memory `fn` adds at its peak, in bytes: after malloc_trim(0) (so that
// memory freed earlier is given back rather than silently reused), write "5" to
// /proc/self/clear_refs (resets VmHWM to the current RSS), read VmRSS, run fn, read VmHWM;
// the result is VmHWM - VmRSS(before). nullopt where /proc/self/clear_refs cannot be
// written (then fn still runs).
std::optional<std::int64_t> measure_peak(const std::function<void()>& fn);

struct Timing {
  std::vector<double> seconds;  // each timed call, in order
  double median = 0, min = 0, max = 0;
  double warmup_seconds = 0;               // the first (cold) call, not counted
  std::optional<std::int64_t> peak_bytes;  // measured on the cold call
};

// One cold call (warm-up, and the peak-memory probe), then up to `repeats` timed calls:
// as many as fit in `budget_seconds` judged by the cold call, at least one. Exceptions
// from fn propagate.
Timing time_calls(const std::function<void()>& fn, int repeats, double budget_seconds);

std::string cpu_model();  // /proc/cpuinfo's "model name"
std::string cpu_flags();  // the SIMD flags that matter here, e.g. "avx2 avx512f avx512_bf16"
std::string utc_now();    // "2025-01-31T12:34:56Z"

}  // namespace headcount::cli::bench
