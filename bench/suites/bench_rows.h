// The rows of `headcount bench`: which shapes each suite times (issue 3's table), and how
// one row is run: inputs allocated and filled once, a fresh Context, one cold call that
// also measures peak memory, then the timed calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench_measure.h"
#include "headcount/attention.h"
#include "headcount/tensor.h"

namespace headcount::cli::bench {

// attention: the kernel alone on [batch, n, heads, head_dim] views.
// layer: the whole multi-head attention layer (QKV GEMM, attention, W_O GEMM) on
//        x [batch, n, d_model = heads * head_dim], with biases.
// backward: the attention backward alone (attention_backward.h), given the forward's out
//        and lse (computed once, untimed), writing dq, dk, dv.
enum class Op { attention, layer, backward };
const char* op_name(Op op);

struct RowSpec {
  std::string suite;
  Op op = Op::attention;
  Kernel kernel = Kernel::streaming;
  DType dtype = DType::f32;  // q, k, v (attention rows); the layer is f32 throughout
  std::int64_t batch = 1, heads = 1, kv_heads = 1, head_dim = 64, seq_len = 1;
  bool causal = false;
  std::int64_t d_model() const { return heads * head_dim; }
};

struct RowResult {
  RowSpec spec;
  int threads = 1;
  std::string status = "ok";  // ok | unsupported (the kernel refused the input) | failed
  std::string error;          // the kernel's one-line reason when not ok
  Timing timing;
  std::int64_t flops = 0;  // 2 · (multiply-adds the kernel counted) [+ the GEMMs']
  double gflops = 0, pct_of_sgemm = 0;
  std::int64_t io_bytes = 0;  // inputs + outputs (+ gradients) the row allocates before timing
  std::int64_t model_reference_score_bytes = 0;  // cost model: batch·heads·n·m doubles
};

struct SuitePlan {
  std::string name;
  std::vector<RowSpec> rows;
  std::vector<std::string> notes;  // what the suite chose and left out, printed with it
};

// "heads" | "seq" | "gqa" | "layer" | "all" | "backward"; quick shrinks every suite for
// smoke tests.
std::vector<SuitePlan> plan_suites(const std::string& suite, bool quick);

// Runs one row; a headcount::Error from the kernel makes the row "unsupported".
RowResult run_row(const RowSpec& spec, int threads, int repeats, double budget_seconds,
                  double sgemm_gflops);

}  // namespace headcount::cli::bench
