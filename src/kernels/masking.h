// The visible keys of one query row. Causal, sliding-window and key-padding masks each
// allow one contiguous interval of keys, so their intersection is an interval too: the
// kernels loop over [begin, end) and never test a mask per element. Only the additive
// bias can hide keys inside the interval (with -inf).
#pragma once

#include <algorithm>
#include <cstdint>

#include "headcount/attention.h"

namespace headcount::kernels {

struct KeyRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;  // exclusive; begin >= end means no visible key
  bool empty() const { return begin >= end; }
};

struct MaskSpec {
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  std::int64_t diagonal_offset = 0;  // kv_len - q_len: bottom-right alignment

  // A window wider than q_len + kv_len sees every key, as an unbounded one does: it is clamped
  // there, so keys_for's diagonal +- window cannot overflow (a window of 2^63 - 1, which the CLI
  // accepts, did: fuzz/, tests/testdata/fuzz-regressions/attention_options-window-overflow).
  static MaskSpec from(const AttentionParams& params, const AttentionShape& shape) {
    const std::int64_t widest = shape.q_len + shape.kv_len;
    auto clamp = [widest](std::int64_t window) {
      return window < 0 ? window : std::min(window, widest);
    };
    return MaskSpec{.causal = params.causal,
                    .window_left = clamp(params.window_left),
                    .window_right = clamp(params.window_right),
                    .diagonal_offset = shape.kv_len - shape.q_len};
  }

  // Keys visible to query `row` when `key_length` keys are valid.
  KeyRange keys_for(std::int64_t row, std::int64_t key_length) const {
    const std::int64_t diagonal = row + diagonal_offset;
    std::int64_t begin = 0;
    std::int64_t end = key_length;
    if (causal) end = std::min(end, diagonal + 1);
    if (window_right >= 0) end = std::min(end, diagonal + window_right + 1);
    if (window_left >= 0) begin = std::max(begin, diagonal - window_left);
    return KeyRange{begin, std::max(begin, end)};
  }
};

// Valid keys of batch element b: key_lengths[b], or all of them.
inline std::int64_t key_length_of(const AttentionParams& params, const AttentionShape& shape,
                                  std::int64_t b) {
  return params.key_lengths.empty() ? shape.kv_len
                                    : params.key_lengths[static_cast<std::size_t>(b)];
}

}  // namespace headcount::kernels
