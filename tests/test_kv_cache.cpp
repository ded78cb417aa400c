// KvCache: what goes in comes back (exactly for f32, within the stated rounding for bf16 and
// int8), ragged appends, truncate / reset / reserve, errors that name the numbers, and bytes()
// equal to what the cost model reports.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "expect_error.h"
#include "headcount/cost.h"
#include "headcount/error.h"
#include "headcount/kv_cache.h"

namespace headcount::testing {
namespace {

Tensor random_tensor(std::vector<std::int64_t> shape, std::uint64_t seed, float stddev = 1.0f) {
  Tensor t(DType::f32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

float at(const Tensor& t, std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t d) {
  return t.data<float>()[t.view().offset({b, j, h, d})];
}

TEST(KvCache, AppendReadsBackInEveryDtype) {
  for (CacheDType dtype : {CacheDType::f32, CacheDType::bf16, CacheDType::int8}) {
    SCOPED_TRACE(cache_dtype_name(dtype));
    KvCache cache({.layers = 2,
                   .batch = 2,
                   .kv_heads = 3,
                   .head_dim = 5,
                   .v_head_dim = 7,
                   .capacity = 9,
                   .dtype = dtype});
    const Tensor k = random_tensor({2, 4, 3, 5}, 1), v = random_tensor({2, 4, 3, 7}, 2);
    const std::int64_t counts[2] = {4, 2};
    cache.append(1, k.view(), v.view(), counts);
    EXPECT_EQ(cache.length(1, 0), 4);
    EXPECT_EQ(cache.length(1, 1), 2);
    EXPECT_EQ(cache.length(0, 0), 0);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t j = 0; j < counts[b]; ++j)
        for (std::int64_t h = 0; h < 3; ++h) {
          for (const bool is_k : {true, false}) {
            const Tensor& src = is_k ? k : v;
            const std::int64_t dim = is_k ? 5 : 7;
            float max_abs = 0;
            for (std::int64_t d = 0; d < dim; ++d)
              max_abs = std::max(max_abs, std::fabs(at(src, b, j, h, d)));
            for (std::int64_t d = 0; d < dim; ++d) {
              const float x = at(src, b, j, h, d);
              const float got = is_k ? cache.k_at(1, b, h, j, d) : cache.v_at(1, b, h, j, d);
              if (dtype == CacheDType::f32) EXPECT_EQ(got, x);
              // bf16: round to nearest, 8 significant bits: relative error <= 2^-8.
              if (dtype == CacheDType::bf16)
                EXPECT_LE(std::fabs(got - x), std::ldexp(std::fabs(x), -8));
              // int8: |x - scale*round(x/scale)| <= scale/2 = max|x|/254, plus the fp32 rounding of
              // scale = max|x|/127 (relative 2^-24, times |q| <= 127) and of the product (2^-24
              // |x|).
              if (dtype == CacheDType::int8)
                EXPECT_LE(std::fabs(got - x), max_abs / 254 * (1 + 1e-6f) + 2e-7f * max_abs);
            }
          }
        }
  }
}

TEST(KvCache, TensorViewsAreTokenMajorViewsOfTheSameMemory) {
  KvCache cache({.batch = 2, .kv_heads = 2, .head_dim = 4, .capacity = 6});
  const Tensor k = random_tensor({2, 3, 2, 4}, 3), v = random_tensor({2, 3, 2, 4}, 4);
  cache.append(0, k.view(), v.view());
  const TensorView kt = cache.k_tensor(0), vt = cache.v_tensor(0);
  EXPECT_EQ(kt.shape_string(), "[2, 6, 2, 4]");
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t j = 0; j < 3; ++j)
      for (std::int64_t h = 0; h < 2; ++h)
        for (std::int64_t d = 0; d < 4; ++d) {
          EXPECT_EQ(kt.ptr<float>()[kt.offset({b, j, h, d})], at(k, b, j, h, d));
          EXPECT_EQ(vt.ptr<float>()[vt.offset({b, j, h, d})], at(v, b, j, h, d));
        }
  KvCache int8({.head_dim = 4, .capacity = 2, .dtype = CacheDType::int8});
  expect_error([&] { (void)int8.k_tensor(0); },
               {"k_tensor dtype", "expected f32 or bf16", "got int8"});
}

TEST(KvCache, AppendPastCapacityIsAnErrorThatChangesNothing) {
  KvCache cache({.batch = 2, .kv_heads = 1, .head_dim = 4, .capacity = 8});
  const Tensor six = random_tensor({2, 6, 1, 4}, 5), three = random_tensor({2, 3, 1, 4}, 6);
  const std::int64_t counts[2] = {6, 2};
  cache.append(0, six.view(), six.view(), counts);
  expect_error([&] { cache.append(0, three.view(), three.view()); },
               {"kv cache append (layer 0, sequence 0)",
                "expected length + new positions <= capacity = 8", "got 6 + 3 = 9"});
  EXPECT_EQ(cache.length(0, 0), 6);
  EXPECT_EQ(cache.length(0, 1), 2);  // sequence 1 would have fit: still nothing was written
  cache.reserve(16);                 // the explicit growth step
  EXPECT_EQ(cache.capacity(), 16);
  cache.append(0, three.view(), three.view());
  EXPECT_EQ(cache.length(0, 0), 9);
  for (std::int64_t j = 0; j < 6; ++j)
    EXPECT_EQ(cache.k_at(0, 0, 0, j, 2), at(six, 0, j, 0, 2)) << j;
  for (std::int64_t j = 0; j < 3; ++j)
    EXPECT_EQ(cache.v_at(0, 1, 0, 2 + j, 1), at(three, 1, j, 0, 1)) << j;
  expect_error([&] { cache.reserve(4); },
               {"reserve capacity", "expected >= the longest cached sequence (9)", "got 4"});
}

TEST(KvCache, TruncateResetAndShapeErrors) {
  KvCache cache({.layers = 2,
                 .batch = 1,
                 .kv_heads = 2,
                 .head_dim = 4,
                 .capacity = 8,
                 .dtype = CacheDType::bf16});
  const Tensor k = random_tensor({1, 5, 2, 4}, 7);
  cache.append(0, k.view(), k.view());
  cache.append(1, k.view(), k.view());
  cache.truncate(0, 3);
  EXPECT_EQ(cache.length(0, 0), 3);
  EXPECT_EQ(cache.length(1, 0), 3);
  expect_error([&] { cache.truncate(0, 4); },
               {"truncate", "expected a length from 0 to the current 3", "got 4"});
  cache.reset();
  EXPECT_EQ(cache.length(1, 0), 0);

  const Tensor wrong_heads = random_tensor({1, 2, 3, 4}, 8);
  expect_error([&] { cache.append(0, wrong_heads.view(), wrong_heads.view()); },
               {"append k shape", "expected [1, n >= 1, 2, 4]", "got [1, 2, 3, 4]"});
  Tensor bf(DType::bf16, {1, 2, 2, 4});
  expect_error([&] { cache.append(0, bf.view(), bf.view()); },
               {"append k", "expected an f32 tensor", "got bf16"});
  expect_error([&] { cache.append(2, k.view(), k.view()); },
               {"append layer", "expected 0 to 1", "got 2"});
  expect_error([] { KvCache({.head_dim = 4, .capacity = 0}); },
               {"capacity", "expected >= 1 position", "got 0"});
}

// The cost model's KV-cache section is exactly the bytes a KvCache of that size holds.
TEST(KvCache, BytesEqualTheCostModel) {
  for (CacheDType dtype : {CacheDType::f32, CacheDType::bf16, CacheDType::int8}) {
    const CostReport r = estimate_cost({.d_model = 64,
                                        .heads = 8,
                                        .kv_heads = 2,
                                        .v_head_dim = 6,
                                        .batch = 3,
                                        .context = 37,
                                        .layers = 4});
    ASSERT_EQ(r.kv_cache_layouts.size(), 3u);
    for (const KvCacheLayoutCost& l : r.kv_cache_layouts) {
      const KvCache cache({.layers = 4,
                           .batch = 3,
                           .kv_heads = l.kv_heads,
                           .head_dim = 8,
                           .v_head_dim = 6,
                           .capacity = 37,
                           .dtype = dtype});
      const std::int64_t want = dtype == CacheDType::f32    ? l.f32_bytes
                                : dtype == CacheDType::bf16 ? l.bf16_bytes
                                                            : l.int8_bytes;
      EXPECT_EQ(cache.bytes(), want) << l.layout << ' ' << cache_dtype_name(dtype);
    }
    EXPECT_EQ(r.kv_cache_layouts[0].layout, "MHA");
    EXPECT_EQ(r.kv_cache_layouts[1].kv_heads, 2);
    EXPECT_TRUE(r.kv_cache_layouts[1].configured);
    EXPECT_EQ(r.kv_cache_layouts[2].kv_heads, 1);
  }
  // The f32 MHA figure is the existing per-token figure times layers and context.
  const CostReport mha =
      estimate_cost({.d_model = 512, .heads = 8, .seq_len = 1000, .context = 1000, .layers = 6});
  EXPECT_EQ(mha.kv_cache_layouts[0].f32_bytes, 6 * mha.kv_cache_bytes);
  EXPECT_EQ(mha.kv_cache_layouts[1].kv_heads, 2);  // GQA not configured: heads / 4
  EXPECT_FALSE(mha.kv_cache_layouts[1].configured);
}

// A cache whose layers hold different numbers of K/V heads (a decoder pruned by whole K/V groups):
// each layer reads back what it was given, in every dtype and across reserve(); bytes() is the sum
// of the layers' own per-token bytes; a layer given another layer's count is an error naming both.
TEST(KvCache, LayersWithTheirOwnKvHeadCounts) {
  for (CacheDType dtype : {CacheDType::f32, CacheDType::bf16, CacheDType::int8}) {
    SCOPED_TRACE(cache_dtype_name(dtype));
    const std::vector<std::int64_t> per_layer = {3, 1, 2};
    KvCache cache({.layers = 3,
                   .batch = 2,
                   .kv_heads = 3,
                   .head_dim = 5,
                   .v_head_dim = 4,
                   .capacity = 6,
                   .dtype = dtype,
                   .layer_kv_heads = per_layer});
    std::int64_t per_position = 0;
    for (std::int64_t g : per_layer) per_position += cache_token_bytes(dtype, g, 5, 4);
    EXPECT_EQ(cache.bytes(), 2 * 6 * per_position);
    std::vector<Tensor> ks, vs;
    for (std::int64_t l = 0; l < 3; ++l) {
      const std::int64_t g = per_layer[static_cast<std::size_t>(l)];
      ks.push_back(random_tensor({2, 3, g, 5}, 10 + static_cast<std::uint64_t>(l)));
      vs.push_back(random_tensor({2, 3, g, 4}, 20 + static_cast<std::uint64_t>(l)));
      cache.append(l, ks.back().view(), vs.back().view());
      EXPECT_EQ(cache.view(l).kv_heads, g);
    }
    cache.reserve(9);  // the copy must follow each layer's own layout
    for (std::int64_t l = 0; l < 3; ++l) {
      const std::int64_t g = per_layer[static_cast<std::size_t>(l)];
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t j = 0; j < 3; ++j)
          for (std::int64_t h = 0; h < g; ++h)
            for (std::int64_t d = 0; d < 4; ++d) {
              const float k = at(ks[static_cast<std::size_t>(l)], b, j, h, d);
              const float v = at(vs[static_cast<std::size_t>(l)], b, j, h, d);
              // f32 exact; the other dtypes within their rounding (AppendReadsBackInEveryDtype),
              // bounded here loosely by 2% of the row's scale: a wrong layout reads another
              // head's value, off by O(1).
              const float tol = dtype == CacheDType::f32 ? 0.0f : 0.02f * 4.0f;
              EXPECT_NEAR(cache.k_at(l, b, h, j, d), k, tol) << l << ' ' << b << ' ' << j;
              EXPECT_NEAR(cache.v_at(l, b, h, j, d), v, tol) << l << ' ' << b << ' ' << j;
            }
    }
    if (dtype != CacheDType::int8) EXPECT_EQ(cache.k_tensor(1).shape_string(), "[2, 9, 1, 5]");
    const Tensor wrong = random_tensor({2, 1, 3, 5}, 30), wrong_v = random_tensor({2, 1, 3, 4}, 31);
    expect_error([&] { cache.append(1, wrong.view(), wrong_v.view()); },
                 {"kv cache append k", "[2, n >= 1, 1, 5]"});
  }
  expect_error(
      [] {
        KvCache(
            {.layers = 3, .kv_heads = 2, .head_dim = 4, .capacity = 2, .layer_kv_heads = {2, 1}});
      },
      {"kv cache layer_kv_heads", "one count per layer (3)", "2"});
  expect_error(
      [] {
        KvCache(
            {.layers = 2, .kv_heads = 2, .head_dim = 4, .capacity = 2, .layer_kv_heads = {2, 0}});
      },
      {"kv cache layer_kv_heads[1]", ">= 1", "0"});
}

}  // namespace
}  // namespace headcount::testing
