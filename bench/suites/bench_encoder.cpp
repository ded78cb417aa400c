// `headcount bench --suite encoder`: the packed projections (fp32, bf16, int8) against
// OpenBLAS, then the whole encoder (tokenisation to normalised embeddings) at batch 1 and 32,
// fp32, bf16 and int8 projections alternated in the same run.
#include "bench_encoder.h"

#include <cblas.h>  // OpenBLAS: the yardstick column

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "headcount/encoder.h"
#include "headcount/error.h"
#include "headcount/sts.h"
#include "layers/packed_gemm.h"

namespace headcount::cli::bench {
namespace {

// The encoder's four projections (x · W + b) at one sentence (14 tokens, STS-B's median with
// [CLS] and [SEP]) and at a batch of 32 such sentences, on the packed GEMM and on OpenBLAS
// (cblas_sgemm as configured, on the context's thread count: bias copied, then C += A·B; the
// yardstick only: nothing in the library calls it), and on the packed GEMM with bf16
// weights (x rounded to bf16 inside the call, counted in its time) and with int8 weights (x
// quantised inside the call, counted too), alternated in this run;
// medians of `repeats` rounds of calls lasting ~20 ms each.
nlohmann::json time_projections(Context& ctx, int repeats, bool print) {
  struct Shape {
    const char* name;
    std::int64_t k, n;
  };
  const Shape shapes[] = {
      {"qkv", 384, 1152}, {"o", 384, 384}, {"ffn up+gelu", 384, 1536}, {"ffn down", 1536, 384}};
  nlohmann::json rows = nlohmann::json::array();
  if (print)
    std::printf("%-12s %5s %5s %5s %14s %14s %7s %12s %7s %12s %7s\n", "projection", "m", "k", "n",
                "packed GF/s", "OpenBLAS GF/s", "ratio", "bf16 GF/s", "/fp32", "int8 GOP/s",
                "/fp32");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::int64_t m : {14, 448}) {
    for (const Shape& s : shapes) {
      std::vector<float> x(static_cast<std::size_t>(m * s.k)),
          w(static_cast<std::size_t>(s.k * s.n)), bias(static_cast<std::size_t>(s.n)),
          y(static_cast<std::size_t>(m * s.n));
      for (float& v : x) v = dist(rng);
      for (float& v : w) v = dist(rng);
      for (float& v : bias) v = dist(rng);
      const Tensor packed = layers::pack_weights(w.data(), s.k, s.n, s.n);
      const Tensor packed_bf16 = layers::pack_weights(w.data(), s.k, s.n, s.n, DType::bf16);
      const Tensor packed_i8 = layers::pack_weights(w.data(), s.k, s.n, s.n, DType::i8);
      const layers::GemmEpilogue epilogue =
          s.n == 1536 ? layers::GemmEpilogue::gelu_erf : layers::GemmEpilogue::none;
      auto run_packed = [&] {
        layers::packed_gemm(ctx, {.m = m,
                                  .x = x.data(),
                                  .ldx = s.k,
                                  .w = &packed,
                                  .n = s.n,
                                  .bias = bias.data(),
                                  .y = y.data(),
                                  .ldy = s.n,
                                  .epilogue = epilogue});
      };
      auto run_bf16 = [&] {
        layers::packed_gemm(ctx, {.m = m,
                                  .x = x.data(),
                                  .ldx = s.k,
                                  .w = &packed_bf16,
                                  .n = s.n,
                                  .bias = bias.data(),
                                  .y = y.data(),
                                  .ldy = s.n,
                                  .epilogue = epilogue});
      };
      auto run_i8 = [&] {
        layers::packed_gemm(ctx, {.m = m,
                                  .x = x.data(),
                                  .ldx = s.k,
                                  .w = &packed_i8,
                                  .n = s.n,
                                  .bias = bias.data(),
                                  .y = y.data(),
                                  .ldy = s.n,
                                  .epilogue = epilogue});
      };
      auto run_blas = [&] {
        for (std::int64_t r = 0; r < m; ++r)
          std::copy(bias.begin(), bias.end(), y.begin() + r * s.n);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(m),
                    static_cast<blasint>(s.n), static_cast<blasint>(s.k), 1.0f, x.data(),
                    static_cast<blasint>(s.k), w.data(), static_cast<blasint>(s.n), 1.0f, y.data(),
                    static_cast<blasint>(s.n));
      };
      openblas_set_num_threads(ctx.threads());
      const double flops = 2.0 * static_cast<double>(m * s.k * s.n);
      const int calls = std::max(1, static_cast<int>(0.02 / (flops / 50e9)));
      auto rate = [&](auto& fn) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int c = 0; c < calls; ++c) fn();
        return flops * calls /
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
      };
      run_packed();
      run_blas();
      run_bf16();
      run_i8();
      std::vector<double> packed_rates, blas_rates, bf16_rates, i8_rates;
      for (int r = 0; r < std::max(3, repeats); ++r) {
        packed_rates.push_back(rate(run_packed));
        blas_rates.push_back(rate(run_blas));
        bf16_rates.push_back(rate(run_bf16));
        i8_rates.push_back(rate(run_i8));
      }
      std::sort(packed_rates.begin(), packed_rates.end());
      std::sort(blas_rates.begin(), blas_rates.end());
      std::sort(bf16_rates.begin(), bf16_rates.end());
      std::sort(i8_rates.begin(), i8_rates.end());
      const double p = packed_rates[packed_rates.size() / 2], b = blas_rates[blas_rates.size() / 2],
                   h = bf16_rates[bf16_rates.size() / 2], q = i8_rates[i8_rates.size() / 2];
      rows.push_back({{"projection", s.name},
                      {"m", m},
                      {"k", s.k},
                      {"n", s.n},
                      {"packed_gflops", p},
                      {"openblas_gflops", b},
                      {"ratio", p / b},
                      {"packed_bf16_gflops", h},
                      {"bf16_over_fp32", h / p},
                      {"packed_int8_gops", q},
                      {"int8_over_fp32", q / p}});
      if (print)
        std::printf("%-12s %5lld %5lld %5lld %14.1f %14.1f %6.2fx %12.1f %6.2fx %12.1f %6.2fx\n",
                    s.name, static_cast<long long>(m), static_cast<long long>(s.k),
                    static_cast<long long>(s.n), p, b, p / b, h, h / p, q, q / p);
    }
  }
  openblas_set_num_threads(1);  // back to one: no OpenBLAS threads spin beside the context's
  return rows;
}

}  // namespace

void run_encoder_suite(const EncoderSuiteOptions& o) {
  check(o.repeats >= 1, "--repeats", ">= 1", o.repeats);
  const std::string model_dir = o.model_dir.empty() ? default_model_dir() : o.model_dir;
  std::fprintf(stderr, "bench: loading %s\n", model_dir.c_str());
  const BertEncoder encoder = BertEncoder::load(model_dir);
  const BertEncoder encoder_bf16 = BertEncoder::load(model_dir, {.dtype = DType::bf16});
  const BertEncoder encoder_i8 = BertEncoder::load(model_dir, {.dtype = DType::i8});
  // The same order as bench/peers/encoder_peers.py: every sentence1, then every sentence2.
  std::vector<std::string> texts;
  const std::vector<StsPair> pairs = read_sts(o.sentences);
  for (const StsPair& p : pairs) texts.push_back(p.sentence1);
  for (const StsPair& p : pairs) texts.push_back(p.sentence2);
  if (o.quick && texts.size() > 64) texts.resize(64);

  Context ctx({.threads = o.threads});
  const nlohmann::json projections = time_projections(ctx, o.repeats, !o.json);
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json)
    std::printf(
        "encoder suite: all-MiniLM-L6-v2, %zu sentences of %s, %d thread%s, median of %d "
        "passes\n%6s %-5s %12s %14s %12s  %s\n",
        texts.size(), o.sentences.c_str(), o.threads, o.threads == 1 ? "" : "s", o.repeats, "batch",
        "dtype", "seconds", "sentences/s", "tokens/s", "GEMM micro-kernel");
  for (std::int64_t batch : {1, 32})
    for (const BertEncoder* e : {&encoder, &encoder_bf16, &encoder_i8}) {
      const char* dtype = e->dtype() == DType::bf16 ? "bf16"
                          : e->dtype() == DType::i8 ? "int8"
                                                    : "f32";
      std::fprintf(stderr, "bench: encoder %s batch %lld...\n", dtype,
                   static_cast<long long>(batch));
      const EncoderTiming t = time_encoder(ctx, *e, texts, batch, o.repeats);
      const double tokens_per_second = static_cast<double>(t.tokens) / t.median_seconds;
      // The projections' micro-kernel at this batch's mean row count (k = 384: W_qkv, W_o, up).
      const std::int64_t rows_per_call =
          (t.tokens * batch + t.sentences / 2) / std::max<std::int64_t>(1, t.sentences);
      const std::string gemm_kernel =
          layers::packed_gemm_kernel(ctx.isa(), e->dtype(), 384, rows_per_call);
      rows.push_back({{"suite", "encoder"},
                      {"kernel", "streaming"},
                      {"dtype", dtype},
                      {"batch", batch},
                      {"threads", o.threads},
                      {"sentences", t.sentences},
                      {"tokens", t.tokens},
                      {"seconds", t.median_seconds},
                      {"sentences_per_second", t.sentences_per_second},
                      {"tokens_per_second", tokens_per_second},
                      {"gemm_kernel", gemm_kernel}});
      if (!o.json)
        std::printf("%6lld %-5s %12.3f %14.1f %12.0f  %s\n", static_cast<long long>(batch), dtype,
                    t.median_seconds, t.sentences_per_second, tokens_per_second,
                    gemm_kernel.c_str());
    }
  if (o.json)
    std::printf("%s\n",
                nlohmann::json{{"suite", "encoder"}, {"rows", rows}, {"projections", projections}}
                    .dump(2)
                    .c_str());
}

}  // namespace headcount::cli::bench
