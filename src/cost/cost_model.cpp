// The cost model's arithmetic: resolve a CostConfig, then count each stage from the
// formulas tabled in include/headcount/cost.h.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "headcount/cost.h"
#include "headcount/decode.h"
#include "headcount/error.h"
#include "simd/tuning.h"

namespace headcount {
namespace {

void check_size(std::int64_t value, std::string_view param) {
  check(value >= 1, param, "a size >= 1", value);
}

// A default-or-size field: 0 takes the default, anything else must be a size.
void check_optional_size(std::int64_t value, std::string_view param, std::string_view fallback) {
  check(value >= 0, param, detail::concat("a size >= 1, or 0 for ", fallback), value);
}

// Products of a few sizes reach 10^12 and beyond at realistic shapes (B*H*n*m*Dk), so
// every product and sum is checked rather than trusted to fit.
std::int64_t product(std::string_view stage, std::initializer_list<std::int64_t> factors) {
  std::int64_t result = 1;
  for (std::int64_t factor : factors) {
    if (__builtin_mul_overflow(result, factor, &result)) {
      fail(stage, "the counts overflow 64 bits; reduce the sizes");
    }
  }
  return result;
}

std::int64_t sum(std::string_view stage, std::int64_t a, std::int64_t b) {
  std::int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) fail(stage, "the counts overflow 64 bits");
  return result;
}

// A total row: sums the additive columns, takes the peak of the "at once" columns.
StageCost total(std::string name, std::initializer_list<const StageCost*> rows) {
  StageCost out{.stage = std::move(name)};
  for (const StageCost* row : rows) {
    out.weights = sum(out.stage, out.weights, row->weights);
    out.macs = sum(out.stage, out.macs, row->macs);
    out.activation_bytes = sum(out.stage, out.activation_bytes, row->activation_bytes);
    out.reference_score_entries =
        std::max(out.reference_score_entries, row->reference_score_entries);
    out.streaming_score_entries =
        std::max(out.streaming_score_entries, row->streaming_score_entries);
  }
  return out;
}

}  // namespace

CostConfig resolve(const CostConfig& config) {
  CostConfig out = config;
  check_size(out.d_model, "d_model");
  check_size(out.heads, "heads");

  check_optional_size(out.kv_heads, "kv_heads", "heads");
  if (out.kv_heads == 0) out.kv_heads = out.heads;
  check(out.heads % out.kv_heads == 0, "kv_heads",
        detail::concat("a divisor of heads (", out.heads, ")"), out.kv_heads);

  check_optional_size(out.head_dim, "head_dim", "d_model / heads");
  if (out.head_dim == 0) {
    check(out.d_model % out.heads == 0, "heads",
          detail::concat("a divisor of d_model (", out.d_model, ") when head_dim is not given"),
          out.heads);
    out.head_dim = out.d_model / out.heads;
  }
  check_optional_size(out.v_head_dim, "v_head_dim", "head_dim");
  if (out.v_head_dim == 0) out.v_head_dim = out.head_dim;

  check_size(out.seq_len, "seq_len");
  check_optional_size(out.kv_len, "kv_len", "seq_len");
  if (out.kv_len == 0) out.kv_len = out.seq_len;
  check_size(out.batch, "batch");

  check_optional_size(out.d_ff, "d_ff", "4 * d_model");
  if (out.d_ff == 0) out.d_ff = product("d_ff", {4, out.d_model});

  check(out.dtype == DType::f32 || out.dtype == DType::bf16, "dtype", "f32 or bf16",
        dtype_name(out.dtype));
  check(out.threads >= 1, "threads", "a count >= 1", out.threads);
  check(out.context >= 0, "context", "positions >= 1, or 0 for no KV-cache section", out.context);
  check_size(out.layers, "layers");
  return out;
}

const StageCost& CostReport::stage(std::string_view name) const {
  for (const StageCost& row : stages) {
    if (row.stage == name) return row;
  }
  fail("stage", detail::concat("no stage named \"", name, "\""));
}

CostReport estimate_cost(const CostConfig& config) {
  const CostConfig c = resolve(config);
  const std::int64_t B = c.batch, n = c.seq_len, m = c.kv_len, d = c.d_model;
  const std::int64_t H = c.heads, Hkv = c.kv_heads, Dk = c.head_dim, Dv = c.v_head_dim;
  const std::int64_t bytes = static_cast<std::int64_t>(dtype_size(c.dtype));

  const StageCost q{.stage = "Q projection",
                    .weights = product("Q projection", {d, H, Dk}),
                    .macs = product("Q projection", {B, n, d, H, Dk}),
                    .activation_bytes = product("Q projection", {B, n, H, Dk, bytes})};
  const StageCost k{.stage = "K projection",
                    .weights = product("K projection", {d, Hkv, Dk}),
                    .macs = product("K projection", {B, m, d, Hkv, Dk}),
                    .activation_bytes = product("K projection", {B, m, Hkv, Dk, bytes})};
  const StageCost v{.stage = "V projection",
                    .weights = product("V projection", {d, Hkv, Dv}),
                    .macs = product("V projection", {B, m, d, Hkv, Dv}),
                    .activation_bytes = product("V projection", {B, m, Hkv, Dv, bytes})};
  // The one place head count survives the Dk = d/H cancellation: every head forms its own
  // n x m grid. The streaming kernel instead keeps one tile per worker, whatever the shape.
  const StageCost scores{
      .stage = "scores",
      .macs = product("scores", {B, H, n, m, Dk}),
      .activation_bytes = product("scores", {B, H, n, m, bytes}),
      .reference_score_entries = product("scores", {B, H, n, m}),
      .streaming_score_entries = product(
          "scores", {c.threads, tuning::streaming_tile_entries(c.heads / c.kv_heads, c.seq_len)})};
  const StageCost weighted{.stage = "weighted sum",
                           .macs = product("weighted sum", {B, H, n, m, Dv}),
                           .activation_bytes = product("weighted sum", {B, n, H, Dv, bytes})};
  const StageCost o{.stage = "O projection",
                    .weights = product("O projection", {H, Dv, d}),
                    .macs = product("O projection", {B, n, H, Dv, d}),
                    .activation_bytes = product("O projection", {B, n, d, bytes})};
  const StageCost block = total("attention block", {&q, &k, &v, &scores, &weighted, &o});
  // Two matrices, d -> d_ff -> d; the stage's output is taken to be the d_ff-wide hidden,
  // the largest tensor the feed-forward produces.
  const StageCost ffn{.stage = "feed-forward",
                      .weights = product("feed-forward", {2, d, c.d_ff}),
                      .macs = product("feed-forward", {2, B, n, d, c.d_ff}),
                      .activation_bytes = product("feed-forward", {B, n, c.d_ff, bytes})};
  const StageCost layer = total("layer", {&block, &ffn});

  CostReport report{.config = c, .stages = {q, k, v, scores, weighted, o, block, ffn, layer}};
  report.kv_cache_bytes_per_token = product(
      "kv cache",
      {sum("kv cache", product("kv cache", {Hkv, Dk}), product("kv cache", {Hkv, Dv})), bytes});
  report.kv_cache_bytes = product("kv cache", {report.kv_cache_bytes_per_token, B, m});
  report.total_parameters = layer.weights;
  report.projections = total("projections", {&q, &k, &v, &o});

  if (c.context > 0) {
    std::int64_t gqa = c.kv_heads > 1 && c.kv_heads < H ? c.kv_heads : 0;
    for (std::int64_t g = std::max<std::int64_t>(2, H / 4); gqa == 0 && g > 1; --g)
      if (H % g == 0 && g < H) gqa = g;
    std::vector<std::pair<const char*, std::int64_t>> layouts = {{"MHA", H}};
    if (gqa > 0) layouts.push_back({"GQA", gqa});
    if (H > 1) layouts.push_back({"MQA", 1});
    for (const auto& [name, kv_heads_binding] : layouts) {
      // A copy: clang before 16 cannot capture a structured binding in a lambda.
      const std::int64_t kv_heads = kv_heads_binding;
      auto bytes = [&](CacheDType dtype) {
        return product("kv cache",
                       {c.layers, B, c.context, cache_token_bytes(dtype, kv_heads, Dk, Dv)});
      };
      report.kv_cache_layouts.push_back({.layout = name,
                                         .kv_heads = kv_heads,
                                         .configured = kv_heads == Hkv,
                                         .f32_bytes = bytes(CacheDType::f32),
                                         .bf16_bytes = bytes(CacheDType::bf16),
                                         .int8_bytes = bytes(CacheDType::int8)});
    }
  }
  return report;
}

CommunicationCost communication_cost(const CostConfig& config, int ranks) {
  const CostConfig c = resolve(config);
  check(ranks >= 1, "ranks", "at least 1", ranks);
  CommunicationCost out;
  out.ranks = ranks;
  const std::int64_t P = ranks;
  const char* stage = "communication";
  if (c.kv_heads % P == 0) {
    out.heads_possible = true;
    out.allreduce_bytes = product(stage, {4, c.batch, c.seq_len, c.d_model});
    out.allreduce_wire_bytes =
        out.allreduce_bytes / P * 2 * (P - 1) +
        out.allreduce_bytes % P * 2 * (P - 1) / P;  // 2(P-1)/P of it, rounded down
    out.gather_bytes =
        P == 1 ? 0 : product(stage, {4, c.batch, c.seq_len, c.heads / P, c.v_head_dim + 1});
    if (c.d_ff % P == 0) {
      out.block_possible = true;
      out.block_forward_bytes = P == 1 ? 0 : product(stage, {2, out.allreduce_bytes});
      out.block_train_step_bytes = P == 1 ? 0 : product(stage, {4, out.allreduce_bytes});
    }
  }
  if (c.seq_len % (2 * P) == 0 && c.kv_len == c.seq_len) {
    out.ring_possible = true;
    out.ring_bytes_per_step =
        product(stage, {4, c.batch, c.seq_len / P, c.kv_heads, c.head_dim + c.v_head_dim});
    out.ring_bytes = product(stage, {P - 1, out.ring_bytes_per_step});
    out.ring_backward_bytes = P == 1 ? 0 : product(stage, {2 * P - 1, out.ring_bytes_per_step});
  }
  return out;
}

}  // namespace headcount
