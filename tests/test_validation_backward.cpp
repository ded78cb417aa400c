// Every bad input to the backward kernels is an Error that names the field and says
// "expected X, got Y" (both kernels must say the same), never a crash or NaN gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "headcount/attention_backward.h"
#include "headcount/error.h"

namespace headcount::testing {
namespace {

struct Fixture {
  Tensor q{DType::f32, {2, 5, 4, 8}};
  Tensor k{DType::f32, {2, 6, 2, 8}};
  Tensor v{DType::f32, {2, 6, 2, 3}};
  Tensor out{DType::f32, {2, 5, 4, 3}};
  Tensor lse{DType::f32, {2, 4, 5}};
  Tensor bias{DType::f32, {1, 4, 5, 6}};
  Tensor d_out{DType::f32, {2, 5, 4, 3}};
  Tensor d_q{DType::f32, {2, 5, 4, 8}};
  Tensor d_k{DType::f32, {2, 6, 2, 8}};
  Tensor d_v{DType::f32, {2, 6, 2, 3}};
  Tensor d_bias{DType::f32, {1, 4, 5, 6}};
  AttentionParams params() const {
    return {.q = q.view(),
            .k = k.view(),
            .v = v.view(),
            .out = out.view(),
            .lse = lse.view(),
            .bias = bias.view()};
  }
  AttentionGrads grads() const {
    return {.d_out = d_out.view(),
            .d_q = d_q.view(),
            .d_k = d_k.view(),
            .d_v = d_v.view(),
            .d_bias = d_bias.view()};
  }
};

// The message both kernels throw (they must agree), or "no error".
std::string error_of(const AttentionParams& p, const AttentionGrads& g) {
  std::string messages[2];
  int i = 0;
  for (Kernel kernel : {Kernel::reference, Kernel::streaming}) {
    Context ctx;
    try {
      attention_backward(ctx, kernel, p, g);
      messages[i] = "no error";
    } catch (const Error& e) {
      messages[i] = e.what();
    }
    ++i;
  }
  EXPECT_EQ(messages[0], messages[1]);
  return messages[0];
}

TEST(BackwardValidation, AcceptsTheFixture) {
  Fixture f;
  EXPECT_EQ(error_of(f.params(), f.grads()), "no error");
  EXPECT_NO_THROW(validate_backward(f.params(), f.grads()));
}

TEST(BackwardValidation, ForwardChecksComeFirst) {
  Fixture f;
  AttentionParams p = f.params();
  p.window_left = -2;
  EXPECT_EQ(error_of(p, f.grads()), "window_left: expected -1 (unbounded) or >= 0, got -2");
}

TEST(BackwardValidation, MissingDOut) {
  Fixture f;
  AttentionGrads g = f.grads();
  g.d_out = {};
  EXPECT_EQ(error_of(f.params(), g),
            "d_out: expected a tensor [batch, q_len, heads, v_head_dim], got no data");
}

TEST(BackwardValidation, DOutShape) {
  Fixture f;
  Tensor d_out(DType::f32, {2, 5, 4, 8});
  AttentionGrads g = f.grads();
  g.d_out = d_out.view();
  EXPECT_EQ(
      error_of(f.params(), g),
      "d_out shape: expected [2, 5, 4, 3] [batch, q_len, heads, v_head_dim], got [2, 5, 4, 8]");
}

TEST(BackwardValidation, DOutNotFinite) {
  Fixture f;
  f.d_out.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(error_of(f.params(), f.grads()),
            "d_out: expected finite values, got nan at [0, 0, 2, 1]");
}

TEST(BackwardValidation, GradientShapes) {
  Fixture f;
  Tensor wrong_q(DType::f32, {2, 5, 4, 7}), wrong_k(DType::f32, {2, 5, 2, 8}),
      wrong_v(DType::f32, {2, 6, 4, 3});
  AttentionGrads g = f.grads();
  g.d_q = wrong_q.view();
  EXPECT_EQ(error_of(f.params(), g),
            "d_q shape: expected [2, 5, 4, 8] [batch, q_len, heads, head_dim], got [2, 5, 4, 7]");
  g = f.grads();
  g.d_k = wrong_k.view();
  EXPECT_EQ(
      error_of(f.params(), g),
      "d_k shape: expected [2, 6, 2, 8] [batch, kv_len, kv_heads, head_dim], got [2, 5, 2, 8]");
  g = f.grads();
  g.d_v = wrong_v.view();
  EXPECT_EQ(
      error_of(f.params(), g),
      "d_v shape: expected [2, 6, 2, 3] [batch, kv_len, kv_heads, v_head_dim], got [2, 6, 4, 3]");
}

TEST(BackwardValidation, GradientDtypeAndRank) {
  Fixture f;
  Tensor bf(DType::bf16, {2, 6, 2, 3}), rank3(DType::f32, {2, 5, 32});
  AttentionGrads g = f.grads();
  g.d_v = bf.view();
  EXPECT_EQ(error_of(f.params(), g), "d_v dtype: expected f32, got bf16");
  g = f.grads();
  g.d_q = rank3.view();
  EXPECT_EQ(error_of(f.params(), g),
            "d_q rank: expected 4 dims [batch, q_len, heads, head_dim], got 3 dims [2, 5, 32]");
}

TEST(BackwardValidation, GradientThatWritesOneAddressTwice) {
  Fixture f;
  AttentionGrads g = f.grads();
  g.d_k = TensorView::strided(f.d_k.data<float>(), DType::f32, {2, 6, 2, 8}, {96, 0, 8, 1});
  EXPECT_EQ(error_of(f.params(), g),
            "d_k strides: expected non-zero strides on every dimension of size > 1 (an output), "
            "got [96, 0, 8, 1]");
}

TEST(BackwardValidation, GradientSharingMemoryWithAnInput) {
  Fixture f;
  AttentionGrads g = f.grads();
  g.d_q = f.q.view();
  EXPECT_EQ(error_of(f.params(), g),
            "d_q: expected memory not shared with q, got a view overlapping q");
  g = f.grads();
  g.d_v = TensorView::contiguous(f.d_k.data<float>() + 4, DType::f32, {2, 6, 2, 3});
  EXPECT_EQ(error_of(f.params(), g),
            "d_k: expected memory not shared with d_v, got a view overlapping d_v");
}

TEST(BackwardValidation, DBiasWithoutBias) {
  Fixture f;
  AttentionParams p = f.params();
  p.bias = {};
  EXPECT_EQ(error_of(p, f.grads()),
            "d_bias: expected no tensor (params.bias is empty), got [1, 4, 5, 6]");
}

TEST(BackwardValidation, DBiasShape) {
  Fixture f;
  Tensor d_bias(DType::f32, {2, 4, 5, 6});
  AttentionGrads g = f.grads();
  g.d_bias = d_bias.view();
  EXPECT_EQ(error_of(f.params(), g),
            "d_bias shape: expected [1, 4, 5, 6] (the shape of bias), got [2, 4, 5, 6]");
}

TEST(BackwardValidation, LseNotFinite) {
  Fixture f;
  f.lse.data<float>()[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(error_of(f.params(), f.grads()),
            "lse: expected finite values or -inf (a row that sees no key), got inf at [0, 0, 3]");
}

TEST(BackwardValidation, OutNotFinite) {
  Fixture f;
  f.out.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(error_of(f.params(), f.grads()),
            "out: expected finite values, got nan at [0, 0, 0, 0]");
}

// Only the streaming kernel needs the forward's results; the reference recomputes them.
TEST(BackwardValidation, StreamingNeedsOutAndLse) {
  Fixture f;
  Context ctx;
  AttentionParams p = f.params();
  p.lse = {};
  EXPECT_NO_THROW(attention_backward(ctx, Kernel::reference, p, f.grads()));
  try {
    attention_backward(ctx, Kernel::streaming, p, f.grads());
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "lse: expected the forward's lse (the streaming backward reads it), got no data");
  }
  p = f.params();
  p.out = {};
  EXPECT_NO_THROW(attention_backward(ctx, Kernel::reference, p, f.grads()));
  try {
    attention_backward(ctx, Kernel::streaming, p, f.grads());
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_STREQ(
        e.what(),
        "out: expected the forward's output (the streaming backward reads it), got no data");
  }
}

}  // namespace
}  // namespace headcount::testing
