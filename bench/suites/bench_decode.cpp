// The decode suite (bench_decode.h). Method:
//  - bandwidth: a stream triad a[i] = b[i] + s*c[i] over three float arrays, each
//    max(64 MiB, 4/3 x the last-level cache) up to 1 GiB (so the three together are >= 4x the
//    LLC), split across the same number of threads as the kernel (each thread first touches
//    its own slice); GB/s = 3 x array bytes / median seconds of 7 timed passes after one warm-up.
//  - a row: one KvCache per (dtype, batch, kv_heads) filled once to the longest length that
//    fits, then truncated from 32k down to 1k, timing attention_decode of one new token per
//    sequence against it: seconds = median step time (one token for each of the batch
//    sequences), tokens/s = batch / seconds, bytes read = what one step must read (every
//    cached K and V row, and the int8 scales), GB/s = bytes / seconds.
#include "bench_decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "headcount/decode.h"
#include "headcount/error.h"
#include "headcount/kv_cache.h"

namespace headcount::cli::bench {
namespace {

using nlohmann::json;
using i64 = std::int64_t;
using Clock = std::chrono::steady_clock;

constexpr i64 kHeads = 32, kHeadDim = 128;
constexpr double kPctTarget = 70.0;  // 16k cache: % of the measured bandwidth
constexpr double kGqaTarget = 3.0;   // kv_heads 8 vs 32, per token
constexpr double kInt8Target = 1.7;  // int8 vs f32 at 32k

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// "32768K" / "480M" from sysfs; 0 if unknown.
i64 llc_bytes() {
  for (int index = 4; index >= 0; --index) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string text;
    if (!(f >> text) || text.empty()) continue;
    i64 value = std::atoll(text.c_str());
    if (text.back() == 'K') value <<= 10;
    if (text.back() == 'M') value <<= 20;
    return value;
  }
  return 0;
}

i64 mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  i64 value = 0;
  std::string unit;
  while (f >> key >> value >> unit)
    if (key == "MemAvailable:") return value << 10;
  return 0;
}

struct Triad {
  i64 array_bytes = 0, llc = 0;
  int threads = 0;
  double seconds = 0, gbytes_per_second = 0;
};

Triad measure_triad(Context& ctx) {
  Triad t;
  t.llc = llc_bytes();
  t.threads = ctx.threads();
  t.array_bytes = std::clamp<i64>(t.llc * 4 / 3, 64ll << 20, 1ll << 30);
  const i64 n = t.array_bytes / 4;
  std::vector<float*> arrays(3);
  for (float*& a : arrays)
    a = static_cast<float*>(std::aligned_alloc(64, static_cast<std::size_t>(t.array_bytes)));
  float* a = arrays[0];
  const float* b = arrays[1];
  const float* c = arrays[2];
  const i64 parts = ctx.threads();
  auto slice = [&](i64 part, auto&& f) {
    const i64 lo = n * part / parts, hi = n * (part + 1) / parts;
    f(lo, hi);
  };
  ctx.parallel_for(parts, [&](i64 part, int) {
    slice(part, [&](i64 lo, i64 hi) {
      for (i64 i = lo; i < hi; ++i) arrays[0][i] = 0, arrays[1][i] = 1, arrays[2][i] = 2;
    });
  });
  std::vector<double> times;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = Clock::now();
    ctx.parallel_for(parts, [&](i64 part, int) {
      slice(part, [&](i64 lo, i64 hi) {
        for (i64 i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
      });
    });
    if (rep > 0) times.push_back(seconds_since(t0));
  }
  for (float* p : arrays) std::free(p);
  t.seconds = median(times);
  t.gbytes_per_second = 3.0 * static_cast<double>(t.array_bytes) / t.seconds / 1e9;
  return t;
}

struct Row {
  CacheDType dtype = CacheDType::f32;
  i64 batch = 1, kv_heads = 32, kv_len = 1024;
  int threads = 1, repeats = 0;
  std::string status = "ok", reason;
  double seconds = 0, tokens_per_second = 0, gbytes_per_second = 0, pct = 0;
  i64 bytes_read = 0;
};

json row_json(const Row& r) {
  json j{{"suite", "decode"},    {"kernel", "decode"}, {"dtype", cache_dtype_name(r.dtype)},
         {"batch", r.batch},     {"heads", kHeads},    {"kv_heads", r.kv_heads},
         {"head_dim", kHeadDim}, {"q_len", 1},         {"kv_len", r.kv_len},
         {"threads", r.threads}, {"status", r.status}};
  if (r.status != "ok") {
    j["reason"] = r.reason;
    for (const char* key :
         {"seconds", "tokens_per_second", "gbytes_per_second", "pct_of_bandwidth"})
      j[key] = nullptr;
    return j;
  }
  j["seconds"] = r.seconds;
  j["tokens_per_second"] = r.tokens_per_second;
  j["gbytes_per_second"] = r.gbytes_per_second;
  j["pct_of_bandwidth"] = r.pct;
  j["bytes_read"] = r.bytes_read;
  j["repeats"] = r.repeats;
  return j;
}

const Row* find(const std::vector<Row>& rows, CacheDType dtype, i64 batch, i64 kv_heads, i64 len) {
  for (const Row& r : rows)
    if (r.status == "ok" && r.dtype == dtype && r.batch == batch && r.kv_heads == kv_heads &&
        r.kv_len == len)
      return &r;
  return nullptr;
}

std::string fmt(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

json targets(const std::vector<Row>& rows) {
  json out = json::array();
  // 16k: the multi-head f32 row at batch 1 is the plain case; every 16k row is listed too.
  for (CacheDType dtype : {CacheDType::f32, CacheDType::bf16, CacheDType::int8})
    for (i64 batch : {1, 8})
      if (const Row* r = find(rows, dtype, batch, 32, 16384))
        out.push_back({{"target", detail::concat("decode, 16k cache, ", cache_dtype_name(dtype),
                                                 ", kv_heads 32, batch ", batch,
                                                 ": >= 70% of the measured bandwidth")},
                       {"value", fmt("%.1f%%", r->pct)},
                       {"met", r->pct >= kPctTarget}});
  for (CacheDType dtype : {CacheDType::f32, CacheDType::bf16, CacheDType::int8})
    for (i64 len : {16384, 32768}) {
      const Row* mha = find(rows, dtype, 1, 32, len);
      const Row* gqa = find(rows, dtype, 1, 8, len);
      if (!mha || !gqa) continue;
      const double x = mha->seconds / gqa->seconds;
      out.push_back(
          {{"target",
            detail::concat("kv_heads 8 (group 4) >= 3x faster per token than kv_heads 32, ",
                           cache_dtype_name(dtype), ", ", len / 1024, "k, batch 1")},
           {"value", fmt("%.2fx", x)},
           {"met", x >= kGqaTarget}});
    }
  for (i64 kv : {32, 8})
    for (i64 batch : {1, 8}) {
      const Row* f32 = find(rows, CacheDType::f32, batch, kv, 32768);
      const Row* i8 = find(rows, CacheDType::int8, batch, kv, 32768);
      if (!f32 || !i8) continue;
      const double x = f32->seconds / i8->seconds;
      out.push_back(
          {{"target", detail::concat("int8 cache >= 1.7x faster than f32 at 32k, kv_heads ", kv,
                                     ", batch ", batch)},
           {"value", fmt("%.2fx", x)},
           {"met", x >= kInt8Target}});
    }
  return out;
}

}  // namespace

void run_decode_suite(const DecodeSuiteOptions& o) {
  check(o.threads >= 1 && o.threads <= 1024, "--threads", "1 to 1024", o.threads);
  check(o.repeats >= 1, "--repeats", ">= 1", o.repeats);
  check(o.row_seconds > 0, "--row-seconds", "> 0", o.row_seconds);
  Context ctx({.threads = o.threads});

  std::fprintf(stderr, "bench decode: stream triad on %d thread%s...\n", o.threads,
               o.threads == 1 ? "" : "s");
  const Triad triad = measure_triad(ctx);

  const std::vector<i64> lengths =
      o.quick ? std::vector<i64>{4096, 1024} : std::vector<i64>{32768, 16384, 4096, 1024};
  const std::vector<i64> batches = o.quick ? std::vector<i64>{1} : std::vector<i64>{1, 8};
  const std::vector<i64> kv_list =
      o.quick ? std::vector<i64>{32, 8} : std::vector<i64>{32, 8, 4, 1};
  const i64 cap_bytes = static_cast<i64>(o.max_cache_gib * (1ll << 30));
  const i64 avail_bytes = mem_available_bytes() * 7 / 10;

  if (!o.json) {
    std::printf("headcount bench --suite decode: heads %lld, head_dim %lld, q_len 1, %d thread%s\n",
                static_cast<long long>(kHeads), static_cast<long long>(kHeadDim), o.threads,
                o.threads == 1 ? "" : "s");
    std::printf(
        "stream triad: 3 arrays of %.0f MiB (LLC %.0f MiB), %d threads, median of 7: %.1f GB/s\n",
        triad.array_bytes / 1048576.0, triad.llc / 1048576.0, triad.threads,
        triad.gbytes_per_second);
    std::printf(
        "seconds: median time of one decode step (one new token for each of the batch sequences);\n"
        "GB/s: K/V bytes one step must read (every cached row, + int8 scales) / seconds\n\n");
    std::printf("%-5s %5s %5s %6s %11s %12s %8s %7s %4s\n", "dtype", "batch", "kv_h", "kv_len",
                "ms/token", "tokens/s", "GB/s", "%bw", "reps");
  }

  std::vector<Row> rows;
  std::vector<std::string> notes;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (CacheDType dtype : {CacheDType::f32, CacheDType::bf16, CacheDType::int8})
    for (i64 batch : batches)
      for (i64 kv : kv_list) {
        const i64 token_bytes = cache_token_bytes(dtype, kv, kHeadDim, kHeadDim);
        i64 capacity = 0;
        for (i64 len : lengths)
          if (capacity == 0 && batch * len * token_bytes <= std::min(cap_bytes, avail_bytes))
            capacity = len;
        for (i64 len : lengths)
          if (len > capacity) {
            Row r{.dtype = dtype,
                  .batch = batch,
                  .kv_heads = kv,
                  .kv_len = len,
                  .threads = o.threads};
            r.status = "skipped";
            r.reason =
                detail::concat("cache of ", fmt("%.1f", batch * len * token_bytes / 1073741824.0),
                               " GiB exceeds the limit of ",
                               fmt("%.1f", std::min(cap_bytes, avail_bytes) / 1073741824.0),
                               " GiB (--max-cache-gib, 70% of MemAvailable)");
            rows.push_back(r);
            notes.push_back(detail::concat(cache_dtype_name(dtype), " batch ", batch, " kv_heads ",
                                           kv, " kv_len ", len, ": skipped, ", r.reason));
            if (!o.json)
              std::printf("%-5s %5lld %5lld %6lld skipped: %s\n", cache_dtype_name(dtype),
                          static_cast<long long>(batch), static_cast<long long>(kv),
                          static_cast<long long>(len), r.reason.c_str());
          }
        if (capacity == 0) continue;

        std::fprintf(stderr,
                     "bench decode: filling a %s cache, batch %lld, kv_heads %lld, %lld positions "
                     "(%.2f GiB)...\n",
                     cache_dtype_name(dtype), static_cast<long long>(batch),
                     static_cast<long long>(kv), static_cast<long long>(capacity),
                     batch * capacity * token_bytes / 1073741824.0);
        KvCache cache({.batch = batch,
                       .kv_heads = kv,
                       .head_dim = kHeadDim,
                       .capacity = capacity,
                       .dtype = dtype});
        const i64 step = 256;
        Tensor block(DType::f32, {batch, step, kv, kHeadDim});
        for (i64 i = 0; i < block.numel(); ++i) block.data<float>()[i] = normal(rng);
        for (i64 done = 0; done < capacity; done += step)
          cache.append(0, block.view(), block.view());
        Tensor q(DType::f32, {batch, 1, kHeads, kHeadDim}),
            out(DType::f32, {batch, 1, kHeads, kHeadDim});
        for (i64 i = 0; i < q.numel(); ++i) q.data<float>()[i] = normal(rng);

        for (i64 len : lengths) {
          if (len > capacity) continue;
          for (i64 b = 0; b < batch; ++b) cache.truncate(b, len);
          const DecodeParams params{.q = q.view(), .kv = cache.view(0), .out = out.view()};
          attention_decode(ctx, params);  // warm-up: scratch and workspace grow here
          std::vector<double> times;
          const auto row_start = Clock::now();
          for (int rep = 0;
               rep < o.repeats && (rep < 3 || seconds_since(row_start) < o.row_seconds); ++rep) {
            const auto t0 = Clock::now();
            attention_decode(ctx, params);
            times.push_back(seconds_since(t0));
          }
          Row r{
              .dtype = dtype, .batch = batch, .kv_heads = kv, .kv_len = len, .threads = o.threads};
          r.repeats = static_cast<int>(times.size());
          r.seconds = median(times);
          r.tokens_per_second = static_cast<double>(batch) / r.seconds;
          r.bytes_read = batch * len * token_bytes;
          r.gbytes_per_second = static_cast<double>(r.bytes_read) / r.seconds / 1e9;
          r.pct = 100.0 * r.gbytes_per_second / triad.gbytes_per_second;
          rows.push_back(r);
          if (!o.json) {
            std::printf("%-5s %5lld %5lld %6lld %11.4f %12.1f %8.1f %6.1f%% %4d\n",
                        cache_dtype_name(dtype), static_cast<long long>(batch),
                        static_cast<long long>(kv), static_cast<long long>(len), r.seconds * 1e3,
                        r.tokens_per_second, r.gbytes_per_second, r.pct, r.repeats);
            std::fflush(stdout);
          }
        }
      }

  const json goals = targets(rows);
  if (o.json) {
    json doc{
        {"header",
         {{"command", "headcount bench --suite decode"},
          {"threads", o.threads},
          {"heads", kHeads},
          {"head_dim", kHeadDim},
          {"triad",
           {{"array_bytes", triad.array_bytes},
            {"llc_bytes", triad.llc},
            {"threads", triad.threads},
            {"seconds", triad.seconds},
            {"gbytes_per_second", triad.gbytes_per_second}}},
          {"methods",
           {{"seconds",
             "median time of one decode step: one new token for each of the batch sequences"},
            {"gbytes_per_second",
             "K/V bytes one step must read (every cached row, + int8 scales) / seconds"},
            {"bandwidth",
             "stream triad a = b + s*c, 3 arrays >= 4/3 LLC each, same threads, median of 7"}}}}},
        {"notes", notes},
        {"rows", json::array()},
        {"targets", goals}};
    for (const Row& r : rows) doc["rows"].push_back(row_json(r));
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("\ntargets (issue 4)\n");
    for (const json& t : goals)
      std::printf("  [%s] %s: %s\n", t["met"].get<bool>() ? "met" : "NOT met",
                  t["target"].get<std::string>().c_str(), t["value"].get<std::string>().c_str());
  }
}

}  // namespace headcount::cli::bench
