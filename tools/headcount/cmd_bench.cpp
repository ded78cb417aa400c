// `headcount bench`: the attention kernels and the layer timed against this machine.
//
// Every run first measures the sgemm rate on the same thread count, twice: as OpenBLAS is
// configured in this process (OPENBLAS_CORETYPE as the environment sets it), and with
// OpenBLAS's AVX-512 kernel in a child process of this binary (OPENBLAS_CORETYPE=COOPERLAKE
// set for the child only). Each row then reports the median of its timed calls, GFLOP/s
// from the kernel's own multiply-add counters, the percentage of the better sgemm rate,
// and the peak resident memory of one call. Rows go to stdout as a table (or all at the
// end as JSON with --json); progress goes to stderr.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "headcount/error.h"
#include "headcount/isa.h"
#include "layers/packed_gemm.h"
#include "suites/bench_decode.h"
#include "suites/bench_decoder.h"
#include "suites/bench_decoder_kv.h"
#include "suites/bench_encoder.h"
#include "suites/bench_measure.h"
#include "suites/bench_rows.h"
#include "suites/bench_train.h"

namespace headcount::cli {
namespace {

using bench::RowResult;
using bench::RowSpec;
using bench::SgemmRate;
using nlohmann::json;

struct BenchArgs {
  std::string suite = "all";
  int threads = std::max(1u, std::thread::hardware_concurrency());
  int repeats = 5;
  double row_seconds = 10;
  bool json = false;
  bool quick = false;
  bool sgemm_only = false;       // hidden: the child process that measures one sgemm rate
  std::int64_t sgemm_size = 0;   // hidden: 0 = 2048 (1024 with --quick)
  std::string model_dir;         // encoder suite
  std::int64_t train_heads = 4;  // train suite: heads at d_model 128
  std::string sentences =
      HEADCOUNT_SOURCE_DIR "/../shared/data/stsb/sts-test.tsv";  // encoder suite
};

constexpr double kSpreadTarget = 0.15;   // heads suite: time within +/-15% of the mean
constexpr double kCorePctTarget = 70.0;  // streaming fp32 n 4096: % of the best sgemm rate
constexpr double kBf16SpeedupTarget = 1.6;
constexpr std::int64_t kStreamingExtraBytes = 64ll << 20;  // n 16384: inputs + outputs + 64 MiB
constexpr double kBackwardPctTarget =
    60.0;  // streaming backward fp32 n 4096: % of the best sgemm rate

const char* kFlopsMethod =
    "FLOPs = 2 x (score_macs + weighted_sum_macs) as counted by the kernel's AttentionStats, "
    "so causal rows count only what is computed (for non-causal rows this is "
    "4*batch*heads*q_len*kv_len*head_dim); layer rows add 2 x the Q, K, V and O projection "
    "multiply-adds";
const char* kPeakMethod =
    "peak_bytes = VmHWM - VmRSS(before) around the first (cold) call of each row: "
    "malloc_trim(0), then '5' written to /proc/self/clear_refs resets the high-water mark; "
    "inputs and outputs are allocated and touched before (io_bytes), the row's fresh Context "
    "grows its scratch inside the measured call";
const char* kTimeMethod =
    "seconds = median of the timed calls after one cold call (warm-up); calls are capped to "
    "fit --row-seconds judged by the cold call, at least one (repeats gives the count run)";

std::string fmt(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string mib(std::int64_t bytes) { return fmt("%.1f", static_cast<double>(bytes) / (1 << 20)); }

// ---- the human table ------------------------------------------------------------------

void print_table_header() {
  std::printf("%-9s %-7s %-9s %-5s %5s %5s %5s %4s %6s %6s %-6s %11s %9s %7s %10s %4s\n", "op",
              "suite", "kernel", "dtype", "batch", "heads", "kv_h", "hd", "q_len", "kv_len",
              "causal", "median ms", "GFLOP/s", "%sgemm", "peak MiB", "reps");
}

void print_row(const RowResult& r) {
  const RowSpec& s = r.spec;
  std::printf("%-9s %-7s %-9s %-5s %5lld %5lld %5lld %4lld %6lld %6lld %-6s ", bench::op_name(s.op),
              s.suite.c_str(), kernel_name(s.kernel), dtype_name(s.dtype),
              static_cast<long long>(s.batch), static_cast<long long>(s.heads),
              static_cast<long long>(s.kv_heads), static_cast<long long>(s.head_dim),
              static_cast<long long>(s.seq_len), static_cast<long long>(s.seq_len),
              s.causal ? "yes" : "no");
  if (r.status != "ok") {
    std::printf("%s: %s\n", r.status.c_str(), r.error.c_str());
  } else {
    std::printf("%11.3f %9.1f %7.1f %10s %4zu\n", r.timing.median * 1e3, r.gflops, r.pct_of_sgemm,
                r.timing.peak_bytes ? mib(*r.timing.peak_bytes).c_str() : "n/a",
                r.timing.seconds.size());
  }
  std::fflush(stdout);
}

// ---- JSON -------------------------------------------------------------------------------

json row_json(const RowResult& r) {
  const RowSpec& s = r.spec;
  json j{{"suite", s.suite},
         {"op", bench::op_name(s.op)},
         {"kernel", kernel_name(s.kernel)},
         {"dtype", dtype_name(s.dtype)},
         {"batch", s.batch},
         {"heads", s.heads},
         {"kv_heads", s.kv_heads},
         {"head_dim", s.head_dim},
         {"d_model", s.d_model()},
         {"q_len", s.seq_len},
         {"kv_len", s.seq_len},
         {"causal", s.causal},
         {"threads", r.threads},
         {"status", r.status},
         {"io_bytes", r.io_bytes},
         {"cost_model_reference_score_bytes", r.model_reference_score_bytes}};
  if (r.status != "ok") {
    j["error"] = r.error;
    for (const char* key : {"seconds", "gflops", "pct_of_sgemm", "peak_bytes"}) j[key] = nullptr;
    return j;
  }
  j["seconds"] = r.timing.median;
  j["seconds_min"] = r.timing.min;
  j["seconds_max"] = r.timing.max;
  j["repeats"] = r.timing.seconds.size();
  j["warmup_seconds"] = r.timing.warmup_seconds;
  j["flops"] = r.flops;
  j["gflops"] = r.gflops;
  j["pct_of_sgemm"] = r.pct_of_sgemm;
  j["peak_bytes"] = r.timing.peak_bytes ? json(*r.timing.peak_bytes) : json(nullptr);
  return j;
}

// ---- summaries --------------------------------------------------------------------------

const RowResult* find_row(const std::vector<RowResult>& rows, const std::string& suite,
                          bench::Op op, Kernel kernel, DType dtype, std::int64_t heads,
                          std::int64_t kv_heads, std::int64_t n, bool causal) {
  for (const RowResult& r : rows) {
    const RowSpec& s = r.spec;
    if (r.status == "ok" && s.suite == suite && s.op == op && s.kernel == kernel &&
        s.dtype == dtype && s.heads == heads && s.kv_heads == kv_heads && s.seq_len == n &&
        s.causal == causal)
      return &r;
  }
  return nullptr;
}

// Heads suite: how far time strays from its mean over heads {1, 2, 4, 8, 16}.
json heads_spread(const std::vector<RowResult>& rows) {
  json out = json::array();
  for (bench::Op op : {bench::Op::attention, bench::Op::layer})
    for (Kernel kernel : {Kernel::streaming, Kernel::reference}) {
      std::vector<double> times;
      std::int64_t n = 0;
      for (std::int64_t h : {1, 2, 4, 8, 16})
        for (const RowResult& r : rows)
          if (r.status == "ok" && r.spec.suite == "heads" && r.spec.op == op &&
              r.spec.kernel == kernel && r.spec.heads == h) {
            times.push_back(r.timing.median);
            n = r.spec.seq_len;
          }
      if (times.size() != 5) continue;
      double mean = 0;
      for (double t : times) mean += t / times.size();
      const double hi = *std::max_element(times.begin(), times.end()) / mean - 1;
      const double lo = *std::min_element(times.begin(), times.end()) / mean - 1;
      out.push_back({{"op", bench::op_name(op)},
                     {"kernel", kernel_name(kernel)},
                     {"q_len", n},
                     {"heads", {1, 2, 4, 8, 16}},
                     {"mean_seconds", mean},
                     {"max_over_mean_minus_1", hi},
                     {"min_over_mean_minus_1", lo},
                     {"within_15_percent", hi <= kSpreadTarget && lo >= -kSpreadTarget}});
    }
  return out;
}

// Heads suite: measured peak memory beside the cost model's batch·heads·n² doubles.
json heads_memory(const std::vector<RowResult>& rows) {
  json out = json::array();
  for (std::int64_t h : {1, 2, 4, 8, 16, 32, 64}) {
    const RowResult* ref = nullptr;
    const RowResult* str = nullptr;
    for (const RowResult& r : rows) {
      if (r.spec.suite != "heads" || r.spec.op != bench::Op::attention || r.spec.heads != h ||
          r.status != "ok")
        continue;
      (r.spec.kernel == Kernel::reference ? ref : str) = &r;
    }
    if (!ref && !str) continue;
    const RowResult* any = ref ? ref : str;
    auto peak = [](const RowResult* r) {
      return r && r->timing.peak_bytes ? json(*r->timing.peak_bytes) : json(nullptr);
    };
    out.push_back({{"heads", h},
                   {"reference_peak_bytes", peak(ref)},
                   {"cost_model_reference_score_bytes", any->model_reference_score_bytes},
                   {"streaming_peak_bytes", peak(str)}});
  }
  return out;
}

// Issue 3's targets that this run's rows can speak to.
json targets(const std::vector<RowResult>& rows, const std::string& sgemm_basis) {
  using bench::Op;
  json out = json::array();
  const RowResult* f32 =
      find_row(rows, "seq", Op::attention, Kernel::streaming, DType::f32, 8, 8, 4096, false);
  const RowResult* b16 =
      find_row(rows, "seq", Op::attention, Kernel::streaming, DType::bf16, 8, 8, 4096, false);
  if (f32)
    out.push_back({{"target", detail::concat("streaming fp32, n 4096, heads 8, head_dim 64: >= ",
                                             kCorePctTarget, "% of sgemm (", sgemm_basis, ")")},
                   {"value", fmt("%.1f%%", f32->pct_of_sgemm)},
                   {"met", f32->pct_of_sgemm >= kCorePctTarget}});
  if (f32)
    out.push_back({{"target", "streaming bf16 >= 1.6x fp32 at n 4096"},
                   {"value", b16 ? fmt("%.2fx", f32->timing.median / b16->timing.median)
                                 : std::string("bf16 unsupported")},
                   {"met", b16 && f32->timing.median / b16->timing.median >= kBf16SpeedupTarget}});
  for (const json& s : heads_spread(rows)) {
    if (s["kernel"] != "streaming") continue;
    out.push_back(
        {{"target", detail::concat("heads suite, streaming ", s["op"].get<std::string>(),
                                   ": time for heads {1,2,4,8,16} within +/-15% of the mean")},
         {"value", fmt("%+.1f%%", 100 * s["max_over_mean_minus_1"].get<double>()) + " / " +
                       fmt("%+.1f%%", 100 * s["min_over_mean_minus_1"].get<double>())},
         {"met", s["within_15_percent"]}});
  }
  if (const RowResult* r = find_row(rows, "backward", Op::backward, Kernel::streaming, DType::f32,
                                    8, 8, 4096, false))
    out.push_back(
        {{"target", detail::concat("streaming backward fp32, n 4096, heads 8, head_dim 64: >= ",
                                   kBackwardPctTarget, "% of sgemm (", sgemm_basis, ")")},
         {"value", fmt("%.1f%%", r->pct_of_sgemm)},
         {"met", r->pct_of_sgemm >= kBackwardPctTarget}});
  for (bool causal : {false, true}) {
    const RowResult* r = find_row(rows, "backward", Op::backward, Kernel::streaming, DType::f32, 8,
                                  8, 16384, causal);
    if (!r || !r->timing.peak_bytes) continue;
    out.push_back(
        {{"target", detail::concat("streaming backward fp32 n 16384", causal ? " causal" : "",
                                   ": peak <= inputs + outputs + gradients + 64 MiB")},
         {"value",
          detail::concat("peak ", mib(*r->timing.peak_bytes),
                         " MiB beyond inputs + outputs + gradients (", mib(r->io_bytes), " MiB)")},
         {"met", *r->timing.peak_bytes <= kStreamingExtraBytes}});
  }
  for (bool causal : {false, true}) {
    const RowResult* r =
        find_row(rows, "seq", Op::attention, Kernel::streaming, DType::f32, 8, 8, 16384, causal);
    if (!r || !r->timing.peak_bytes) continue;
    out.push_back({{"target", detail::concat("streaming fp32 n 16384", causal ? " causal" : "",
                                             ": peak <= inputs + outputs + 64 MiB")},
                   {"value", detail::concat("peak ", mib(*r->timing.peak_bytes),
                                            " MiB beyond inputs + outputs (", mib(r->io_bytes),
                                            " MiB); the reference's heads*n^2 doubles "
                                            "(cost model): ",
                                            mib(r->model_reference_score_bytes), " MiB")},
                   {"met", *r->timing.peak_bytes <= kStreamingExtraBytes}});
  }
  return out;
}

void print_summaries(const std::vector<RowResult>& rows, const std::string& sgemm_basis) {
  const json spread = heads_spread(rows);
  if (!spread.empty()) {
    std::printf(
        "\nheads suite: time over heads {1, 2, 4, 8, 16} (target: within +/-15%% of the mean)\n");
    std::printf("%-9s %-9s %10s %12s %12s %s\n", "op", "kernel", "mean ms", "max/mean-1",
                "min/mean-1", "within");
    for (const json& s : spread)
      std::printf("%-9s %-9s %10.3f %+11.1f%% %+11.1f%% %s\n", s["op"].get<std::string>().c_str(),
                  s["kernel"].get<std::string>().c_str(), 1e3 * s["mean_seconds"].get<double>(),
                  100 * s["max_over_mean_minus_1"].get<double>(),
                  100 * s["min_over_mean_minus_1"].get<double>(),
                  s["within_15_percent"].get<bool>() ? "yes" : "no");
  }
  const json memory = heads_memory(rows);
  if (!memory.empty()) {
    std::printf(
        "\nheads suite, attention core: measured peak vs the cost model's heads*n^2 doubles\n");
    std::printf("%5s %18s %24s %18s\n", "heads", "reference peak MiB", "cost model h*n^2*8 MiB",
                "streaming peak MiB");
    for (const json& m : memory) {
      auto cell = [&](const char* key) {
        return m[key].is_null() ? std::string("n/a") : mib(m[key].get<std::int64_t>());
      };
      std::printf("%5lld %18s %24s %18s\n", static_cast<long long>(m["heads"].get<std::int64_t>()),
                  cell("reference_peak_bytes").c_str(),
                  cell("cost_model_reference_score_bytes").c_str(),
                  cell("streaming_peak_bytes").c_str());
    }
  }
  const json goals = targets(rows, sgemm_basis);
  if (!goals.empty()) {
    std::printf("\ntargets (issue 3)\n");
    for (const json& t : goals)
      std::printf("  [%s] %s: %s\n", t["met"].get<bool>() ? "met" : "NOT met",
                  t["target"].get<std::string>().c_str(), t["value"].get<std::string>().c_str());
  }
}

// ---- the run ----------------------------------------------------------------------------

void run_sgemm_only(const BenchArgs& a) {
  const SgemmRate rate =
      bench::measure_sgemm(a.threads, a.sgemm_size ? a.sgemm_size : 2048, a.repeats);
  std::printf("%s\n", bench::sgemm_to_json(rate).c_str());
}

void run_bench(const BenchArgs& a) {
  static const std::vector<std::string> suites = {"heads", "seq",     "gqa",       "layer",
                                                  "all",   "decode",  "encoder",   "backward",
                                                  "train", "decoder", "decoder-kv"};
  check(std::find(suites.begin(), suites.end(), a.suite) != suites.end(), "--suite",
        "heads, seq, gqa, layer, all, decode, encoder, backward, train, decoder or decoder-kv",
        a.suite);
  check(a.threads >= 1 && a.threads <= 1024, "--threads", "1 to 1024", a.threads);
  check(a.repeats >= 1, "--repeats", ">= 1", a.repeats);
  check(a.row_seconds > 0, "--row-seconds", "> 0", a.row_seconds);
  if (a.sgemm_only) return run_sgemm_only(a);
  // Decode is memory-bound: it measures the memory bandwidth (a stream triad), not sgemm.
  if (a.suite == "decode")
    return bench::run_decode_suite({.threads = a.threads,
                                    .repeats = a.repeats,
                                    .row_seconds = a.row_seconds,
                                    .json = a.json,
                                    .quick = a.quick});
  if (a.suite == "train")
    return bench::run_train_suite({.threads = a.threads,
                                   .steps = a.quick ? 3 : std::max(a.repeats, 20),
                                   .json = a.json,
                                   .heads = a.train_heads});
  if (a.suite == "decoder")
    return bench::run_decoder_suite({.threads = a.threads,
                                     .repeats = std::min(a.repeats, 3),
                                     .json = a.json,
                                     .quick = a.quick,
                                     .model = a.model_dir.empty() ? HEADCOUNT_SOURCE_DIR
                                                  "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
                                                                  : a.model_dir,
                                     .text = HEADCOUNT_SOURCE_DIR "/data/pride-and-prejudice.txt"});
  if (a.suite == "decoder-kv")
    return bench::run_decoder_kv_suite(
        {.threads = a.threads,
         .repeats = std::min(a.repeats, 3),
         .json = a.json,
         .quick = a.quick,
         .model = a.model_dir.empty() ? HEADCOUNT_SOURCE_DIR
                      "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
                                      : a.model_dir,
         .text = HEADCOUNT_SOURCE_DIR "/data/pride-and-prejudice.txt"});
  if (a.suite == "encoder")
    return bench::run_encoder_suite({.threads = a.threads,
                                     .repeats = std::min(a.repeats, 3),
                                     .json = a.json,
                                     .quick = a.quick,
                                     .model_dir = a.model_dir,
                                     .sentences = a.sentences});

  // 1. The machine: sgemm as configured, then OpenBLAS's best kernel in a child.
  const std::int64_t gemm_size = a.sgemm_size ? a.sgemm_size : (a.quick ? 1024 : 2048);
  const int gemm_repeats = a.quick ? 3 : 7;
  std::fprintf(stderr, "bench: sgemm %lld^3 on %d thread%s, as configured...\n",
               static_cast<long long>(gemm_size), a.threads, a.threads == 1 ? "" : "s");
  const SgemmRate configured = bench::measure_sgemm(a.threads, gemm_size, gemm_repeats);
  std::fprintf(stderr, "bench: sgemm with OPENBLAS_CORETYPE=%s in a child process...\n",
               bench::kBestCoretype);
  std::optional<SgemmRate> best;
  std::string best_error;
  try {
    best = bench::measure_sgemm_in_child(bench::kBestCoretype, a.threads, gemm_size, gemm_repeats);
  } catch (const Error& e) {
    best_error = e.what();
  }
  const bool use_best = best && best->gflops > configured.gflops;
  const double sgemm_gflops = use_best ? best->gflops : configured.gflops;
  const std::string sgemm_basis =
      use_best ? detail::concat("OPENBLAS_CORETYPE=", bench::kBestCoretype, " rate, ",
                                fmt("%.1f", sgemm_gflops), " GFLOP/s")
               : detail::concat("as-configured rate, ", fmt("%.1f", sgemm_gflops), " GFLOP/s");

  json header{{"command", "headcount bench"},
              {"suite", a.suite},
              {"quick", a.quick},
              {"threads", a.threads},
              {"repeats", a.repeats},
              {"row_seconds", a.row_seconds},
              {"date", bench::utc_now()},
              {"cpu_model", bench::cpu_model()},
              {"cpu_flags", bench::cpu_flags()},
              {"corename", configured.corename},
              {"sgemm_as_configured", json::parse(bench::sgemm_to_json(configured))},
              {"sgemm_best", best ? json::parse(bench::sgemm_to_json(*best)) : json(nullptr)},
              {"sgemm_gflops", sgemm_gflops},
              {"pct_of_sgemm_basis", use_best ? "best" : "as_configured"},
              {"methods",
               {{"flops", kFlopsMethod}, {"peak_bytes", kPeakMethod}, {"seconds", kTimeMethod}}}};
  if (!best) header["sgemm_best_error"] = best_error;
  // Which micro-kernels this host's rows ran: the instruction set the Context resolves to, and
  // the packed GEMM's kernel per weight dtype at the layer suite's shape (k 512, 1,000 rows).
  const Isa isa = best_isa();
  header["isa"] = isa_name(isa);
  header["gemm_kernels"] = {{"fp32", layers::packed_gemm_kernel(isa, DType::f32, 512, 1000)},
                            {"bf16", layers::packed_gemm_kernel(isa, DType::bf16, 512, 1000)},
                            {"int8", layers::packed_gemm_kernel(isa, DType::i8, 512, 1000)}};

  if (!a.json) {
    std::printf("headcount bench --suite %s: %d thread%s, %s, %s\n", a.suite.c_str(), a.threads,
                a.threads == 1 ? "" : "s", bench::cpu_model().c_str(),
                header["date"].get<std::string>().c_str());
    std::printf("cpu flags: %s\n", header["cpu_flags"].get<std::string>().c_str());
    std::printf("instruction set %s; packed GEMM at k 512: %s, %s, %s\n", isa_name(isa),
                header["gemm_kernels"]["fp32"].get<std::string>().c_str(),
                header["gemm_kernels"]["bf16"].get<std::string>().c_str(),
                header["gemm_kernels"]["int8"].get<std::string>().c_str());
    std::printf(
        "sgemm %lld^3, median of %d: as configured (OPENBLAS_CORETYPE=%s, core %s) %.1f GFLOP/s\n",
        static_cast<long long>(gemm_size), gemm_repeats,
        configured.coretype_env.empty() ? "unset" : configured.coretype_env.c_str(),
        configured.corename.c_str(), configured.gflops);
    if (best)
      std::printf(
          "      best kernel for this CPU (child with OPENBLAS_CORETYPE=%s, core %s) %.1f "
          "GFLOP/s\n",
          bench::kBestCoretype, best->corename.c_str(), best->gflops);
    else
      std::printf("      best kernel: not measured (%s)\n", best_error.c_str());
    std::printf("%%sgemm is against the %s\n", sgemm_basis.c_str());
    std::printf("GFLOP/s: %s\npeak: %s\ntime: %s\n", kFlopsMethod, kPeakMethod, kTimeMethod);
    std::fflush(stdout);
  }

  // 2. The suites.
  const std::vector<bench::SuitePlan> plans = bench::plan_suites(a.suite, a.quick);
  std::size_t total = 0, done = 0;
  for (const auto& p : plans) total += p.rows.size();
  std::vector<RowResult> rows;
  json notes = json::object();
  for (const bench::SuitePlan& plan : plans) {
    notes[plan.name] = plan.notes;
    if (!a.json) {
      std::printf("\nsuite %s:", plan.name.c_str());
      for (const std::string& note : plan.notes) std::printf(" %s.", note.c_str());
      std::printf("\n");
      print_table_header();
    }
    for (const RowSpec& spec : plan.rows) {
      std::fprintf(stderr, "bench: [%zu/%zu] %s %s %s %s heads %lld kv %lld n %lld%s...\n", ++done,
                   total, plan.name.c_str(), bench::op_name(spec.op), kernel_name(spec.kernel),
                   dtype_name(spec.dtype), static_cast<long long>(spec.heads),
                   static_cast<long long>(spec.kv_heads), static_cast<long long>(spec.seq_len),
                   spec.causal ? " causal" : "");
      rows.push_back(bench::run_row(spec, a.threads, a.repeats, a.row_seconds, sgemm_gflops));
      if (!a.json) print_row(rows.back());
    }
  }

  // 3. Summaries.
  if (a.json) {
    json out{{"header", header},
             {"notes", notes},
             {"rows", json::array()},
             {"heads_spread", heads_spread(rows)},
             {"heads_memory", heads_memory(rows)},
             {"targets", targets(rows, sgemm_basis)}};
    for (const RowResult& r : rows) out["rows"].push_back(row_json(r));
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    print_summaries(rows, sgemm_basis);
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time the kernels and the layer against this machine's sgemm rate");
  cmd->add_option("--suite", a->suite,
                  "heads, seq, gqa, layer, all (those four), decode (KV-cache decoding), encoder "
                  "(all-MiniLM-L6-v2 sentences/s), backward (the attention backward), train (one "
                  "training step), decoder (SmolLM2 prefill and decode tokens/s) or decoder-kv "
                  "(SmolLM2 with 9, 3 and 1 K/V heads at contexts 512, 2048, 8192)")
      ->capture_default_str();
  cmd->add_option("--model", a->model_dir,
                  "encoder suite: model directory (default: the set-up's); decoder suites: the "
                  "GGUF file (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)");
  cmd->add_option("--sentences", a->sentences,
                  "encoder suite: an STS-B file whose sentences are embedded")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Workers (and OpenBLAS threads)")->capture_default_str();
  cmd->add_option("--repeats", a->repeats,
                  "Timed calls per row after one warm-up (the median is reported)")
      ->capture_default_str();
  cmd->add_option("--row-seconds", a->row_seconds,
                  "Time budget for a row's timed calls; slow rows run fewer (at least one)")
      ->capture_default_str();
  cmd->add_option("--train-heads", a->train_heads,
                  "train suite: heads at d_model 128 (head_dim 128 / H; the head-sweep series)")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object on stdout instead of the table");
  cmd->add_flag("--quick", a->quick, "Small shapes for smoke tests");
  // The child process that measures sgemm under another OPENBLAS_CORETYPE.
  cmd->add_flag("--sgemm-only", a->sgemm_only)->group("");
  cmd->add_option("--sgemm-size", a->sgemm_size)->group("");
  cmd->callback([a] { run_bench(*a); });
}

}  // namespace headcount::cli
