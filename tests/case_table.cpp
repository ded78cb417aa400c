#include "case_table.h"

#include <array>
#include <sstream>
#include <utility>

namespace headcount::testing {

std::string AttentionCase::name() const {
  std::ostringstream s;
  s << "b" << batch << "_h" << heads << "_kv" << kv_heads << "_d" << head_dim;
  if (v_head_dim != head_dim) s << "_dv" << v_head_dim;
  s << "_q" << q_len << "_k" << kv_len;
  if (causal) s << "_causal";
  if (window_left >= 0 || window_right >= 0)
    s << "_win" << (window_left < 0 ? std::string("inf") : std::to_string(window_left)) << "_"
      << (window_right < 0 ? std::string("inf") : std::to_string(window_right));
  if (key_padding) s << "_pad";
  if (bias == BiasKind::per_head) s << "_biasH";
  if (bias == BiasKind::broadcast) s << "_bias1";
  if (kv_layout == KvLayout::fused) s << "_kvfused";
  if (kv_layout == KvLayout::head_major) s << "_kvheadmajor";
  if (q_inner_stride) s << "_qstride2";
  if (scale) s << "_scaled";
  return s.str();
}

bool AttentionCase::masked() const {
  return causal || window_left >= 0 || window_right >= 0 || key_padding || bias != BiasKind::none;
}

namespace {

// Mask and layout variants, cycled through so each head layout meets each of them.
void apply_variant(AttentionCase& c, int variant) {
  switch (variant % 9) {
    case 0:
      break;
    case 1:
      c.causal = true;
      break;
    case 2:
      c.key_padding = true;
      c.kv_layout = KvLayout::fused;
      break;
    case 3:
      c.window_left = 3;
      c.window_right = 2;
      break;
    case 4:
      c.bias = BiasKind::per_head;
      c.kv_layout = KvLayout::head_major;
      break;
    case 5:
      c.causal = true;
      c.key_padding = true;
      c.bias = BiasKind::broadcast;
      break;
    case 6:
      c.window_left = 0;
      c.window_right = -1;
      c.q_inner_stride = true;
      break;
    case 7:
      c.scale = 0.37f;
      c.v_head_dim = c.head_dim / 2 + 3;
      break;
    case 8:
      c.causal = true;
      c.window_left = 5;
      c.window_right = 0;
      c.kv_layout = KvLayout::fused;
      break;
  }
}

}  // namespace

std::vector<AttentionCase> kernel_cases() {
  std::vector<AttentionCase> cases;
  const std::array<std::int64_t, 6> head_dims = {8, 32, 59, 64, 111, 128};
  const std::array<std::pair<std::int64_t, std::int64_t>, 6> small_lengths = {
      {{7, 7}, {97, 97}, {7, 97}, {97, 7}, {1, 7}, {7, 1}}};

  // 1. Every head layout (every kv_heads dividing heads) with every head_dim, small lengths.
  int n = 0;
  for (std::int64_t heads : {1, 2, 3, 8, 12, 16}) {
    for (std::int64_t kv_heads = 1; kv_heads <= heads; ++kv_heads) {
      if (heads % kv_heads != 0) continue;
      for (std::int64_t head_dim : head_dims) {
        AttentionCase c{
            .heads = heads, .kv_heads = kv_heads, .head_dim = head_dim, .v_head_dim = head_dim};
        c.q_len = small_lengths[n % small_lengths.size()].first;
        c.kv_len = small_lengths[n % small_lengths.size()].second;
        apply_variant(c, n);
        cases.push_back(c);
        ++n;
      }
    }
  }

  // 2. Every pair of lengths from {1, 7, 97, 1000, 1025}, causal and not (bottom-right
  //    alignment matters when q_len != kv_len), on a grouped and a multi-head layout.
  const std::array<std::int64_t, 5> lengths = {1, 7, 97, 1000, 1025};
  n = 0;
  for (std::int64_t q_len : lengths) {
    for (std::int64_t kv_len : lengths) {
      for (bool causal : {false, true}) {
        const bool big = q_len >= 1000 && kv_len >= 1000;
        AttentionCase c{.batch = big ? 1 : 2,
                        .heads = n % 2 ? 3 : 2,
                        .kv_heads = 1 + (n % 2 ? 0 : 1),
                        .head_dim = head_dims[n % 4],
                        .v_head_dim = head_dims[n % 4],
                        .q_len = q_len,
                        .kv_len = kv_len,
                        .causal = causal};
        if (n % 3 == 1) c.key_padding = true;
        if (n % 5 == 2) c.kv_layout = KvLayout::head_major;
        cases.push_back(c);
        ++n;
      }
    }
  }

  // 3. Heavy cases at the sizes of a real layer, with everything switched on at once.
  cases.push_back({.batch = 1,
                   .heads = 16,
                   .kv_heads = 4,
                   .head_dim = 128,
                   .v_head_dim = 128,
                   .q_len = 1000,
                   .kv_len = 1025,
                   .causal = true,
                   .key_padding = true,
                   .bias = BiasKind::broadcast,
                   .kv_layout = KvLayout::fused});
  cases.push_back({.batch = 1,
                   .heads = 12,
                   .kv_heads = 12,
                   .head_dim = 111,
                   .v_head_dim = 111,
                   .q_len = 1025,
                   .kv_len = 1000,
                   .window_left = 100,
                   .window_right = 30,
                   .bias = BiasKind::per_head,
                   .kv_layout = KvLayout::head_major});
  cases.push_back({.batch = 3,
                   .heads = 8,
                   .kv_heads = 1,
                   .head_dim = 64,
                   .v_head_dim = 64,
                   .q_len = 97,
                   .kv_len = 1025,
                   .causal = true,
                   .key_padding = true,
                   .q_inner_stride = true});

  // 4. Keys enough that the fp32 kernel copies K and V head by head in several chunks
  //    (tuning.h: a 16 MiB budget; 12000 keys x (64 + 64) floats are 6.1 MB a head: two
  //    heads a chunk; 45000 x (59 + 32) are 16.4 MB (15.6 MiB): one head a chunk), with
  //    padding, a window and a padded V width; and 70000 x (64 + 64), 36 MB a head, above the
  //    budget: read in place.
  cases.push_back({.batch = 2,
                   .heads = 4,
                   .kv_heads = 2,
                   .head_dim = 64,
                   .v_head_dim = 64,
                   .q_len = 5,
                   .kv_len = 12000,
                   .key_padding = true});
  cases.push_back({.batch = 1,
                   .heads = 3,
                   .kv_heads = 3,
                   .head_dim = 59,
                   .v_head_dim = 19,
                   .q_len = 9,
                   .kv_len = 45000,
                   .window_left = 30000,
                   .window_right = 0,
                   .kv_layout = KvLayout::fused});
  cases.push_back({.batch = 1,
                   .heads = 2,
                   .kv_heads = 1,
                   .head_dim = 64,
                   .v_head_dim = 64,
                   .q_len = 3,
                   .kv_len = 70000,
                   .causal = true});

  // 5. V rows wider than the weighted sum's 64-float column block, which fp32 copies lay out
  //    an odd number of cache lines apart (streaming.cpp, Plan::v_ld): per tile from a width
  //    the vector does not divide (250 → 256, rows 272 apart), per tile from contiguous rows
  //    that are no longer read in place (256), and as packed heads (600 keys).
  cases.push_back({.batch = 1,
                   .heads = 2,
                   .kv_heads = 1,
                   .head_dim = 32,
                   .v_head_dim = 250,
                   .q_len = 70,
                   .kv_len = 300,
                   .key_padding = true});
  cases.push_back({.batch = 2,
                   .heads = 1,
                   .kv_heads = 1,
                   .head_dim = 256,
                   .v_head_dim = 256,
                   .q_len = 33,
                   .kv_len = 300});
  cases.push_back({.batch = 1,
                   .heads = 1,
                   .kv_heads = 1,
                   .head_dim = 64,
                   .v_head_dim = 512,
                   .q_len = 20,
                   .kv_len = 600,
                   .causal = true});
  cases.push_back({.batch = 1,
                   .heads = 2,
                   .kv_heads = 2,
                   .head_dim = 128,
                   .v_head_dim = 128,
                   .q_len = 40,
                   .kv_len = 600,
                   .kv_layout = KvLayout::fused});
  return cases;
}

}  // namespace headcount::testing
