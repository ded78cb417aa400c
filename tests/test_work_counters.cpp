// The work counters (headcount/work_counters.h): exact multiply-adds of a GEMM call, of the
// attention kernels' forward (reference and streaming: h·n·m·(head_dim + v_head_dim) without a
// mask) and backward (five products), one exponential per score entry, nothing counted outside
// a scope, and one scope at a time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli_runner.h"
#include "expect_error.h"
#include "headcount/attention.h"
#include "headcount/attention_backward.h"
#include "headcount/work_counters.h"
#include "layers/gemm.h"

namespace headcount::testing {
namespace {

TEST(WorkCounters, GemmCountsMTimesNTimesK) {
  std::vector<float> a(7 * 5, 1.0f), b(5 * 3, 1.0f), c(7 * 3);
  Context ctx({.threads = 2});
  const layers::GemmArgs g{.m = 7,
                           .n = 3,
                           .k = 5,
                           .a = a.data(),
                           .lda = 5,
                           .b = b.data(),
                           .ldb = 3,
                           .c = c.data(),
                           .ldc = 3};
  layers::gemm(ctx, g);  // outside a scope: not counted
  WorkCounting counting;
  layers::gemm(ctx, g);
  layers::gemm(ctx, g);
  const WorkCounts counts = counting.counts();
  EXPECT_EQ(counts.gemm_macs, 2 * 7 * 3 * 5);
  EXPECT_EQ(counts.gemm_calls, 2);
  EXPECT_EQ(counts.attention_macs, 0);
  expect_error([] { WorkCounting second; }, {"WorkCounting", "one scope at a time"});
}

TEST(WorkCounters, AttentionForwardAndBackwardCountEveryProduct) {
  const std::int64_t B = 2, n = 37, m = 53, H = 4, KV = 2, dk = 16, dv = 8;
  Tensor q(DType::f32, {B, n, H, dk}), k(DType::f32, {B, m, KV, dk}), v(DType::f32, {B, m, KV, dv});
  Tensor out(DType::f32, {B, n, H, dv}), lse(DType::f32, {B, H, n});
  for (Tensor* t : {&q, &k, &v})
    for (std::int64_t i = 0; i < t->numel(); ++i)
      t->data<float>()[i] = 0.01f * static_cast<float>(i % 17);
  const AttentionParams p{
      .q = q.view(), .k = k.view(), .v = v.view(), .out = out.view(), .lse = lse.view()};
  Context ctx({.threads = 2});
  for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
    WorkCounting counting;
    attention(ctx, kernel, p);
    const WorkCounts c = counting.counts();
    EXPECT_EQ(c.attention_macs, B * H * n * m * (dk + dv)) << kernel_name(kernel);
    EXPECT_EQ(c.exponentials, B * H * n * m) << kernel_name(kernel);
    EXPECT_EQ(c.attention_calls, 1);
  }
  Tensor d_out(DType::f32, {B, n, H, dv}), d_q(DType::f32, {B, n, H, dk}),
      d_k(DType::f32, {B, m, KV, dk}), d_v(DType::f32, {B, m, KV, dv});
  for (std::int64_t i = 0; i < d_out.numel(); ++i)
    d_out.data<float>()[i] = 0.001f * static_cast<float>(i % 13);
  attention(ctx, Kernel::streaming, p);
  const AttentionGrads g{
      .d_out = d_out.view(), .d_q = d_q.view(), .d_k = d_k.view(), .d_v = d_v.view()};
  for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
    WorkCounting counting;
    attention_backward(ctx, kernel, p, g);
    const WorkCounts c = counting.counts();
    EXPECT_EQ(c.attention_macs, B * H * n * m * (3 * dk + 2 * dv)) << kernel_name(kernel);
    EXPECT_EQ(c.exponentials, B * H * n * m) << kernel_name(kernel);
  }
}

// E-H through the CLI, quick: the JSON and the page are whole, the counts follow from the shapes.
TEST(WorkCounters, QuickCostMeasuredJsonAndPage) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("headcount_cost_measured_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const CliResult r =
      run_cli("experiment cost-measured --quick --quiet --json-out '" + (dir / "c.json").string() +
              "' --out '" + (dir / "c.html").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(cli_runner_detail::slurp(dir / "c.json"));
  EXPECT_EQ(j.at("format"), "headcount.cost-measured.v1");
  EXPECT_EQ(j.at("verdicts").size(), 4u);
  EXPECT_TRUE(j.at("prereg").at("preregistered").get<bool>());
  for (const nlohmann::json& row : j.at("series").at("layer d512 n250")) {
    const std::int64_t h = row.at("heads"), n = 250, d = 512;
    EXPECT_EQ(row.at("exponentials"), h * n * n);
    // attention: scores and weighted sum, n·n·d each; GEMMs: 4 n d² + 2 n d (4d).
    EXPECT_EQ(row.at("attention_macs"), 2 * n * n * d);
    EXPECT_EQ(row.at("gemm_macs"), 4 * n * d * d + 8 * n * d * d);
  }
  const std::string page = cli_runner_detail::slurp(dir / "c.html");
  EXPECT_NE(page.find("data-claim=\"cost-measured.macs\""), std::string::npos);
  EXPECT_NE(page.find("data-prereg=\"yes\""), std::string::npos);
  const CliResult bad = run_cli("experiment cost-measured --stage pilot");
  EXPECT_EQ(bad.exit_code, 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace headcount::testing
