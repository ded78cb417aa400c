// Once a context is warm, the streaming kernel and the layer allocate nothing: no operator
// new (counted by replacing it in this test binary) and no scratch growth (counted by the
// context). On these machines a fresh page costs ~11 us, so this decides benchmarks.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "headcount/attention.h"
#include "headcount/head_stats.h"
#include "headcount/multi_head_attention.h"

namespace {
std::atomic<long> g_news{0};
}  // namespace

void* operator new(std::size_t bytes) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t bytes) { return operator new(bytes); }
// The nothrow forms too (std::stable_sort's buffer uses them): every form of new here must
// pair with the free() below, or AddressSanitizer reports a mismatch.
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  g_news.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(bytes ? bytes : 1);
}
void* operator new[](std::size_t bytes, const std::nothrow_t& tag) noexcept {
  return operator new(bytes, tag);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace headcount::testing {
namespace {

TEST(HotPath, TheCounterSeesAllocations) {
  const long before = g_news.load();
  ::operator delete(::operator new(4));  // an explicit call: a new-expression may be elided
  EXPECT_EQ(g_news.load(), before + 1);
}

TEST(HotPath, StreamingKernelAllocatesNothingOnceWarm) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor q(dtype, {2, 300, 8, 64}), k(dtype, {2, 300, 2, 64}), v(dtype, {2, 300, 2, 64});
    Tensor out(DType::f32, {2, 300, 8, 64}), lse(DType::f32, {2, 8, 300});
    const std::int64_t lengths[2] = {300, 123};
    Context ctx({.threads = 2});
    const AttentionParams p{.q = q.view(),
                            .k = k.view(),
                            .v = v.view(),
                            .out = out.view(),
                            .lse = lse.view(),
                            .causal = true,
                            .key_lengths = lengths};
    attention_streaming(ctx, p);  // warm-up: scratch grows here
    const long news = g_news.load();
    const std::int64_t grown = ctx.allocations();
    for (int i = 0; i < 3; ++i) attention_streaming(ctx, p);
    EXPECT_EQ(g_news.load(), news) << dtype_name(dtype);
    EXPECT_EQ(ctx.allocations(), grown) << dtype_name(dtype);
  }
}

// The second pass of head statistics holds nothing beyond its output: no allocation at all once
// warm, so no hidden h*n^2 buffer either.
TEST(HotPath, RowStatsSecondPassAllocatesNothingOnceWarm) {
  Tensor q(DType::f32, {1, 1024, 4, 32}), k(DType::f32, {1, 1024, 4, 32}),
      v(DType::f32, {1, 1024, 4, 32});
  for (Tensor* t : {&q, &k, &v})
    for (std::int64_t i = 0; i < t->numel(); ++i)
      t->data<float>()[i] = static_cast<float>(i % 13) * 0.05f;
  Tensor out(DType::f32, {1, 1024, 4, 32}), lse(DType::f32, {1, 4, 1024});
  Context ctx({.threads = 2});
  const AttentionParams p{
      .q = q.view(), .k = k.view(), .v = v.view(), .out = out.view(), .lse = lse.view()};
  attention_streaming(ctx, p);
  const RowStatsSpec spec{.offsets = {-1, 0, 1}};
  Tensor stats(DType::f64, {1, 4, 1024, spec.fields()});
  attention_row_stats(ctx, p, spec, stats.view());  // warm-up
  const long news = g_news.load();
  const std::int64_t grown = ctx.allocations();
  for (int i = 0; i < 3; ++i) attention_row_stats(ctx, p, spec, stats.view());
  EXPECT_EQ(g_news.load(), news);
  EXPECT_EQ(ctx.allocations(), grown);
}

TEST(HotPath, LayerAllocatesNothingOnceWarm) {
  const MultiHeadAttentionConfig config{.d_model = 128, .heads = 4, .kv_heads = 2};
  const MultiHeadAttention layer(config, MultiHeadAttentionWeights::random(config, 1));
  Tensor x(DType::f32, {3, 200, 128}), out(DType::f32, {3, 200, 128});
  Context ctx({.threads = 2});
  layer.forward(ctx, x.view(), out.view(), {.causal = true});
  const long news = g_news.load();
  const std::int64_t grown = ctx.allocations();
  for (int i = 0; i < 3; ++i) layer.forward(ctx, x.view(), out.view(), {.causal = true});
  EXPECT_EQ(g_news.load(), news);
  EXPECT_EQ(ctx.allocations(), grown);
}

// A rotary layer's decode steps (the Llama decoder's per-token path): the rotation, the cache
// append and the decode kernel allocate nothing once warm either.
TEST(HotPath, RotaryDecodeStepAllocatesNothingOnceWarm) {
  const MultiHeadAttentionConfig config{
      .d_model = 128, .heads = 4, .kv_heads = 2, .bias = false, .rope_base = 1e5f};
  const MultiHeadAttention layer(config, MultiHeadAttentionWeights::random(config, 1));
  Tensor x(DType::f32, {1, 1, 128}), out(DType::f32, {1, 1, 128});
  KvCache kv({.layers = 1, .batch = 1, .kv_heads = 2, .head_dim = 32, .capacity = 16});
  Context ctx({.threads = 2});
  layer.decode_step(ctx, x.view(), kv, 0, out.view());
  const long news = g_news.load();
  const std::int64_t grown = ctx.allocations();
  for (int i = 0; i < 5; ++i) layer.decode_step(ctx, x.view(), kv, 0, out.view());
  EXPECT_EQ(g_news.load(), news);
  EXPECT_EQ(ctx.allocations(), grown);
  EXPECT_EQ(kv.length(0, 0), 6);
}

}  // namespace
}  // namespace headcount::testing
