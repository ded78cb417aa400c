// The attention backward against PyTorch autograd: every case of
// tests/testdata/golden_backward/manifest.json (scripts/make_golden_backward.py: SDPA in
// float32 and float64, loss sum(out * g)) is mapped onto headcount's params and run
// through both backward kernels.
//
// Checks and tolerances (u = 2^-24):
//  1. The tests' own float64 backward (attention_backward_naive.h) against PyTorch's float64
//     gradients: two double evaluations of one function, so within 1e-10·max|grad| (the
//     double-sum slack derived in test_attention_backward.cpp).
//  2. Each kernel against PyTorch's float32 gradients: |ours - torch32| <= |ours - exact| +
//     |torch32 - exact|, with exact = PyTorch's float64 gradient. |torch32 - exact| is
//     measured from the fixture; |ours - exact| is bounded as in test_attention_backward.cpp
//     (reference: u·|exact| + 1e-10·max|exact|; streaming: 3x the plain fp32 backward's
//     error on these inputs + u·max condition). Plus 1e-10·max|exact| for using PyTorch's
//     float64 value as exact.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention_backward_naive.h"
#include "attention_inputs.h"
#include "headcount/attention_backward.h"
#include "headcount/npy.h"

namespace headcount::testing {
namespace {

using json = nlohmann::json;
constexpr double kU = 1.0 / (1 << 24);

std::string golden_dir() { return std::string(HEADCOUNT_TESTDATA_DIR) + "/golden_backward"; }

const json& manifest() {
  static const json m = [] {
    std::ifstream in(golden_dir() + "/manifest.json");
    return in ? json::parse(in) : json();
  }();
  return m;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  if (manifest().is_object())
    for (const json& c : manifest()["cases"]) names.push_back(c["name"].get<std::string>());
  return names;
}

const json& find_case(const std::string& name) {
  for (const json& c : manifest()["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no case " + name);
}

Tensor load(const json& c, const std::string& key) {
  return read_npy(golden_dir() + "/" + c["arrays"][key].get<std::string>());
}

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<std::size_t>(i)] =
        t.dtype() == DType::f64 ? t.data<double>()[i] : t.data<float>()[i];
  return out;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The case as headcount inputs: PyTorch's masks become headcount's flags, bias and lengths.
AttentionInputs inputs_of(const json& c) {
  const json& cfg = c["config"];
  const json& fl = c["flags"];
  AttentionInputs in;
  in.c = AttentionCase{.batch = cfg["batch"],
                       .heads = cfg["heads"],
                       .kv_heads = cfg["kv_heads"],
                       .head_dim = cfg["head_dim"],
                       .v_head_dim = cfg["v_head_dim"],
                       .q_len = cfg["q_len"],
                       .kv_len = cfg["kv_len"]};
  if (!fl["scale"].is_null()) in.c.scale = fl["scale"].get<float>();
  const std::string causal = fl["causal"].is_null() ? "" : fl["causal"].get<std::string>();
  in.c.causal = causal == "square" || causal == "bottom_right";
  in.q_storage = read_npy_f32(golden_dir() + "/" + c["arrays"]["q"].get<std::string>());
  in.k_storage = read_npy_f32(golden_dir() + "/" + c["arrays"]["k"].get<std::string>());
  in.v_storage = read_npy_f32(golden_dir() + "/" + c["arrays"]["v"].get<std::string>());
  in.q = in.q_storage.view();
  in.k = in.k_storage.view();
  in.v = in.v_storage.view();
  const std::int64_t L = in.c.q_len, S = in.c.kv_len;
  const std::string mask =
      fl["attn_mask_type"].is_null() ? "" : fl["attn_mask_type"].get<std::string>();
  if (mask == "float_additive") {
    Tensor m = read_npy_f32(golden_dir() + "/" + c["arrays"]["attn_mask"].get<std::string>());
    const bool per_head = m.rank() == 4;
    in.bias_storage =
        Tensor(DType::f32, {per_head ? m.size(0) : 1, per_head ? m.size(1) : 1, L, S});
    std::copy_n(m.data<float>(), m.numel(), in.bias_storage.data<float>());
    in.c.bias = per_head ? BiasKind::per_head : BiasKind::broadcast;
  } else if (mask == "bool_true_allows") {  // key padding [B, 1, 1, S]: a suffix of each row
    Tensor m = read_npy_f32(golden_dir() + "/" + c["arrays"]["attn_mask"].get<std::string>());
    for (std::int64_t b = 0; b < in.c.batch; ++b) {
      std::int64_t n = 0;
      while (n < S && m.data<float>()[b * S + n] != 0) ++n;
      for (std::int64_t j = n; j < S; ++j)
        EXPECT_EQ(m.data<float>()[b * S + j], 0) << "padding is not a suffix";
      in.key_lengths.push_back(n);
    }
    in.c.key_padding = true;
  }
  if (causal == "top_left") {  // PyTorch's is_causal with L != S: query i sees keys j <= i
    in.bias_storage = Tensor(DType::f32, {1, 1, L, S});
    for (std::int64_t i = 0; i < L; ++i)
      for (std::int64_t j = 0; j < S; ++j)
        in.bias_storage.data<float>()[i * S + j] =
            j <= i ? 0.0f : -std::numeric_limits<float>::infinity();
    in.c.bias = BiasKind::broadcast;
  }
  if (!in.bias_storage.empty()) in.bias = in.bias_storage.view();
  return in;
}

class GoldenBackward : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenBackward, MatchesPyTorchAutograd) {
  const json& c = find_case(GetParam());
  const AttentionInputs in = inputs_of(c);
  const AttentionCase& ac = in.c;
  const Tensor g = read_npy_f32(golden_dir() + "/" + c["arrays"]["g"].get<std::string>());
  const bool has_d_bias = c["arrays"].contains("d_bias");

  const NaiveGrads naive = naive_backward_f64(in, g.view()),
                   plain = naive_backward_f32(in, g.view());
  struct Grad {
    const char* key;
    const std::vector<double>* naive;
    const std::vector<double>* plain;
    const std::vector<double>* cond;
  };
  std::vector<Grad> grads = {{"d_q", &naive.d_q, &plain.d_q, &naive.cond_q},
                             {"d_k", &naive.d_k, &plain.d_k, &naive.cond_k},
                             {"d_v", &naive.d_v, &plain.d_v, &naive.cond_v}};
  if (has_d_bias) grads.push_back({"d_bias", &naive.d_bias, &plain.d_bias, &naive.cond_bias});

  // 1. the tests' float64 backward = PyTorch's float64 autograd
  for (const Grad& gr : grads) {
    const std::vector<double> exact = as_doubles(load(c, std::string(gr.key) + "_fp64"));
    ASSERT_EQ(exact.size(), gr.naive->size()) << gr.key;
    EXPECT_LE(max_diff(*gr.naive, exact), 1e-10 * max_abs(exact)) << gr.key;
  }

  // 2. both kernels against PyTorch's float32 gradients
  for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
    Context ctx({.threads = 2});
    Tensor out(DType::f32, {ac.batch, ac.q_len, ac.heads, ac.v_head_dim}),
        lse(DType::f32, {ac.batch, ac.heads, ac.q_len});
    const AttentionParams p = in.params(out, lse);
    attention(ctx, Kernel::streaming, p);
    Tensor d_q(DType::f32, {ac.batch, ac.q_len, ac.heads, ac.head_dim}),
        d_k(DType::f32, {ac.batch, ac.kv_len, ac.kv_heads, ac.head_dim}),
        d_v(DType::f32, {ac.batch, ac.kv_len, ac.kv_heads, ac.v_head_dim}), d_bias;
    AttentionGrads ag{.d_out = g.view(), .d_q = d_q.view(), .d_k = d_k.view(), .d_v = d_v.view()};
    if (has_d_bias) {
      d_bias = Tensor(DType::f32, {in.bias.shape[0], in.bias.shape[1], ac.q_len, ac.kv_len});
      ag.d_bias = d_bias.view();
    }
    attention_backward(ctx, kernel, p, ag);
    const Tensor* ours[] = {&d_q, &d_k, &d_v, &d_bias};
    for (std::size_t t = 0; t < grads.size(); ++t) {
      const Grad& gr = grads[t];
      const std::vector<double> exact = as_doubles(load(c, std::string(gr.key) + "_fp64"));
      const std::vector<double> torch32 = as_doubles(load(c, gr.key));
      const std::vector<double> got = as_doubles(*ours[t]);
      const double torch_error = max_diff(torch32, exact);
      const double own = kernel == Kernel::reference
                             ? kU * max_abs(exact) + 1e-10 * max_abs(exact)
                             : 3 * max_diff(*gr.plain, exact) + kU * max_abs(*gr.cond);
      const double bound = own + torch_error + 1e-10 * max_abs(exact);
      EXPECT_LE(max_diff(got, torch32), bound) << GetParam() << " " << kernel_name(kernel) << " "
                                               << gr.key << ": PyTorch fp32 errs " << torch_error;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenBackward, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

TEST(GoldenBackwardManifest, HasTheCases) {
  ASSERT_TRUE(manifest().is_object()) << "cannot read " << golden_dir() << "/manifest.json";
  EXPECT_EQ(case_names().size(), 12u);
}

}  // namespace
}  // namespace headcount::testing
