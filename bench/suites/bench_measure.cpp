#include "bench_measure.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "headcount/context.h"
#include "headcount/error.h"
#include "headcount/tensor.h"
#include "layers/gemm.h"

// OpenBLAS's own query (cblas.h declares it; the CLI does not see OpenBLAS's include path).
#include <cblas.h>  // OpenBLAS: cblas_sgemm, openblas_set_num_threads, openblas_get_corename

namespace headcount::cli::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// A line "Key:   123 kB" of /proc/self/status, in bytes; -1 if absent.
std::int64_t status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
    return std::strtoll(line.c_str() + key.size() + 1, nullptr, 10) * 1024;
  }
  return -1;
}

bool reset_high_water_mark() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

SgemmRate measure_sgemm(int threads, std::int64_t size, int repeats) {
  check(size >= 1, "sgemm size", ">= 1", size);
  check(repeats >= 1, "--repeats", ">= 1", repeats);
  Context ctx({.threads = threads});
  Tensor a(DType::f32, {size, size}), b(DType::f32, {size, size}), c(DType::f32, {size, size});
  // Any finite values do; keep them small so nothing overflows.
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    a.data<float>()[i] = static_cast<float>(i % 13) * 0.01f;
    b.data<float>()[i] = static_cast<float>(i % 7) * 0.01f;
  }
  // OpenBLAS itself, threaded as it threads itself: the machine's sgemm rate (headcount's own
  // products run on its micro-kernels, never on OpenBLAS).
  const blasint n = static_cast<blasint>(size);
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<const float>(), n,
                b.data<const float>(), n, 0.0f, c.data<float>(), n);
  };
  openblas_set_num_threads(threads);
  run();  // warm-up: OpenBLAS's buffers and thread pool
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(seconds_since(start));
  }
  openblas_set_num_threads(1);  // back to one: no OpenBLAS threads spin beside the context's
  SgemmRate rate;
  rate.size = size;
  rate.repeats = repeats;
  rate.threads = threads;
  rate.seconds = median_of(times);
  rate.gflops = 2.0 * static_cast<double>(size) * size * size / rate.seconds / 1e9;
  const char* name = openblas_get_corename();
  rate.corename = name ? name : "unknown";
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  rate.coretype_env = env ? env : "";
  return rate;
}

std::string sgemm_to_json(const SgemmRate& r) {
  nlohmann::json j{{"size", r.size},
                   {"repeats", r.repeats},
                   {"threads", r.threads},
                   {"seconds", r.seconds},
                   {"gflops", r.gflops},
                   {"corename", r.corename},
                   {"OPENBLAS_CORETYPE", r.coretype_env}};
  return j.dump();
}

SgemmRate measure_sgemm_in_child(const std::string& coretype, int threads, std::int64_t size,
                                 int repeats) {
  char exe[4096];
  const ssize_t length = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (length <= 0) fail("sgemm child", "cannot find this program's path (/proc/self/exe)");
  exe[length] = '\0';
  // The variable is set for the child's command only; this process keeps its environment.
  const std::string command = "OPENBLAS_CORETYPE=" + shell_quote(coretype) + " " +
                              shell_quote(exe) + " bench --sgemm-only --threads " +
                              std::to_string(threads) + " --sgemm-size " + std::to_string(size) +
                              " --repeats " + std::to_string(repeats) + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) fail("sgemm child", "cannot start " + std::string(exe));
  std::string output;
  char buffer[4096];
  while (std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, got);
  const int status = ::pclose(pipe);

  std::istringstream lines(output);
  std::string line, first_line;
  while (std::getline(lines, line)) {
    if (first_line.empty()) first_line = line;
    if (line.empty() || line.front() != '{') continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("gflops")) continue;
    SgemmRate rate;
    rate.size = j.at("size").get<std::int64_t>();
    rate.repeats = j.at("repeats").get<int>();
    rate.threads = j.at("threads").get<int>();
    rate.seconds = j.at("seconds").get<double>();
    rate.gflops = j.at("gflops").get<double>();
    rate.corename = j.at("corename").get<std::string>();
    rate.coretype_env = j.at("OPENBLAS_CORETYPE").get<std::string>();
    return rate;
  }
  fail("sgemm child", detail::concat("OPENBLAS_CORETYPE=", coretype, " run exited with status ",
                                     status, ": ", first_line.empty() ? "no output" : first_line));
}

std::optional<std::int64_t> measure_peak(const std::function<void()>& fn) {
  ::malloc_trim(0);
  if (!reset_high_water_mark()) {
    fn();
    return std::nullopt;
  }
  const std::int64_t before = status_bytes("VmRSS");
  fn();
  const std::int64_t peak = status_bytes("VmHWM");
  if (before < 0 || peak < 0) return std::nullopt;
  return std::max<std::int64_t>(0, peak - before);
}

Timing time_calls(const std::function<void()>& fn, int repeats, double budget_seconds) {
  Timing t;
  const auto cold = std::chrono::steady_clock::now();
  t.peak_bytes = measure_peak(fn);
  t.warmup_seconds = seconds_since(cold);
  // The cold call pays for first-touch page faults, so it overestimates a warm call: the
  // budget never cuts the repetitions below what was asked for unless calls are slow.
  const int affordable =
      t.warmup_seconds > 0 ? static_cast<int>(budget_seconds / t.warmup_seconds) : repeats;
  const int count = std::clamp(affordable, 1, repeats);
  for (int r = 0; r < count; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    t.seconds.push_back(seconds_since(start));
  }
  t.median = median_of(t.seconds);
  t.min = *std::min_element(t.seconds.begin(), t.seconds.end());
  t.max = *std::max_element(t.seconds.begin(), t.seconds.end());
  return t;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown";
}

std::string cpu_flags() {
  static const std::set<std::string> wanted = {"avx2",        "fma",      "avx512f",
                                               "avx512bw",    "avx512vl", "avx512_vnni",
                                               "avx512_bf16", "amx_bf16", "amx_tile"};
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string word, out;
    while (words >> word)
      if (wanted.count(word)) out += (out.empty() ? "" : " ") + word;
    return out;
  }
  return "";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace headcount::cli::bench
