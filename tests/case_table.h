// The one table of attention cases that drives the kernel tests (and, later, the
// benchmarks): every head layout (MHA, GQA, MQA), odd widths, odd lengths, every mask,
// strided K/V views and fully masked rows.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace headcount::testing {

enum class BiasKind { none, per_head, broadcast };      // [B, H, n, m] or [1, 1, n, m]
enum class KvLayout { contiguous, fused, head_major };  // see make_inputs()

struct AttentionCase {
  std::int64_t batch = 2;
  std::int64_t heads = 1, kv_heads = 1;
  std::int64_t head_dim = 8, v_head_dim = 8;
  std::int64_t q_len = 7, kv_len = 7;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  bool key_padding = false;  // lengths kv_len, kv_len / 3, 0, ... : one batch element empty
  BiasKind bias = BiasKind::none;
  KvLayout kv_layout = KvLayout::contiguous;
  bool q_inner_stride = false;  // q read with stride 2 along head_dim
  std::optional<float> scale;

  std::string name() const;
  bool masked() const;  // any mask or bias at all
};

std::vector<AttentionCase> kernel_cases();

// gtest prints the case by name instead of its bytes.
inline void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name(); }

}  // namespace headcount::testing
