// Fuzz target: `headcount attention`'s mask and length options, parsed by the functions the CLI
// calls (tools/headcount/attention_options.h), then checked by validate() and run on tiny inputs.
// Input: lines "key-lengths\nscale\nwindow-left\nwindow-right\n<shape bytes>", where the shape
// bytes pick batch, q_len, kv_len, heads, group, head_dim, causal and a bias with -inf entries.
// Outcomes: an Error (parse or validate), or both kernels run, and where the scale keeps every
// score small (|scale| <= 2) the streaming kernel must agree with the float64 reference.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "attention_options.h"
#include "fuzz_input.h"
#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/error.h"

namespace {

// What CLI11 does for an int64 option: the whole text as a decimal integer, else an error.
bool parse_int(std::string_view text, std::int64_t& value) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size();
}

// Deterministic values in [-1, 1] (a 32-bit LCG), so a crash replays exactly.
void fill(headcount::Tensor& t, std::uint32_t seed) {
  float* x = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = static_cast<float>(seed >> 8) / static_cast<float>(1 << 23) - 1.0f;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using headcount::DType;
  using headcount::Tensor;
  const auto lines =
      headcount::fuzz::split(std::string_view(reinterpret_cast<const char*>(data), size), "\n");
  auto line = [&](std::size_t i) { return i < lines.size() ? lines[i] : std::string_view(); };

  std::vector<std::int64_t> key_lengths;
  std::optional<float> scale;
  try {
    key_lengths = headcount::cli::parse_key_lengths(std::string(line(0)));
    scale = headcount::cli::parse_scale(std::string(line(1)));
  } catch (const headcount::Error&) {
    return 0;
  }
  std::int64_t window_left = -1, window_right = -1;
  if (!line(2).empty() && !parse_int(line(2), window_left)) return 0;
  if (!line(3).empty() && !parse_int(line(3), window_right)) return 0;

  std::string_view shape = line(4);
  auto byte = [&](std::size_t i) {
    return i < shape.size() ? static_cast<std::uint8_t>(shape[i]) : 0u;
  };
  const std::int64_t batch = 1 + byte(0) % 3, q_len = byte(1) % 7, kv_len = byte(2) % 7;
  const std::int64_t kv_heads = 1 + byte(3) % 2, group = 1 + (byte(3) >> 1) % 3;
  const std::int64_t heads = kv_heads * group, head_dim = 1 + byte(4) % 8;
  const bool causal = (byte(5) & 1) != 0, with_bias = (byte(5) & 2) != 0;

  Tensor q(DType::f32, {batch, q_len, heads, head_dim});
  Tensor k(DType::f32, {batch, kv_len, kv_heads, head_dim});
  Tensor v(DType::f32, {batch, kv_len, kv_heads, head_dim});
  fill(q, 1 + byte(6));
  fill(k, 2 + byte(7));
  fill(v, 3 + byte(8));
  Tensor bias;
  if (with_bias) {
    bias = Tensor(DType::f32, {1, heads, q_len, kv_len});
    fill(bias, 4 + byte(9));
    float* b = bias.data<float>();
    for (std::int64_t i = 0; i < bias.numel(); ++i)
      if (byte(10 + static_cast<std::size_t>(i) / 8) >> (i % 8) & 1) b[i] = -INFINITY;
  }

  Tensor out_ref(DType::f32, {batch, q_len, heads, head_dim}),
      out_str(out_ref.dtype(), out_ref.shape());
  Tensor lse_ref(DType::f32, {batch, heads, q_len}), lse_str(lse_ref.dtype(), lse_ref.shape());
  headcount::AttentionParams params{.q = q.view(),
                                    .k = k.view(),
                                    .v = v.view(),
                                    .out = out_ref.view(),
                                    .lse = lse_ref.view(),
                                    .scale = scale,
                                    .causal = causal,
                                    .window_left = window_left,
                                    .window_right = window_right,
                                    .key_lengths = key_lengths};
  if (with_bias) params.bias = bias.view();
  try {
    (void)headcount::validate(params);
  } catch (const headcount::Error&) {
    return 0;
  }
  headcount::Context ctx(headcount::ContextOptions{.threads = 1});
  try {
    headcount::attention(ctx, headcount::Kernel::reference, params);
    params.out = out_str.view();
    params.lse = lse_str.view();
    headcount::attention(ctx, headcount::Kernel::streaming, params);
  } catch (const headcount::Error&) {
    return 0;  // a score that overflows fp32 (a huge --scale) is refused, not computed
  }

  // |q.k| <= head_dim <= 8, so with |scale| <= 2 every score is at most 16 (plus a bias in
  // [-1, 1]): the streaming kernel's float scores carry a relative error of a few 2^-24 per
  // multiply-add, about 1e-5 absolute on a score, and so on each softmax weight and on out (a
  // convex combination of values in [-1, 1]). 1e-4 leaves a factor of 10.
  const float used_scale = scale ? *scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  if (std::fabs(used_scale) <= 2.0f) {
    for (std::int64_t i = 0; i < out_ref.numel(); ++i)
      FUZZ_ASSERT(std::fabs(out_ref.data<float>()[i] - out_str.data<float>()[i]) <= 1e-4f);
    for (std::int64_t i = 0; i < lse_ref.numel(); ++i) {
      const float a = lse_ref.data<float>()[i], b = lse_str.data<float>()[i];
      FUZZ_ASSERT(a == b || std::fabs(a - b) <= 1e-4f);
    }
  }
  return 0;
}
