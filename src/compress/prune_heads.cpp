// Physical head pruning. Per layer, with head_dim hd, the kept heads' row blocks
// [k*hd, (k+1)*hd) of query.weight [h*hd, d] and query.bias are copied in order, likewise the
// kept K/V heads' blocks of key/value, and the kept heads' column blocks of
// attention.output.dense.weight [d, h*hd]. Every other tensor is copied unchanged. The pruned
// model computes what the full model computes with those heads' concat slices zeroed before
// W_o (the head mask), up to the order of fp32 summation in W_o's product.
#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "compress/tensor_copy.h"
#include "headcount/compress.h"
#include "headcount/error.h"

namespace headcount {

using detail::concat;
using model::Role;

namespace {

// Row blocks `blocks` (each `block` rows) of a [rows, cols] (or [rows]) tensor, in order.
Tensor take_row_blocks(const Tensor& t, const std::vector<std::int64_t>& blocks,
                       std::int64_t block) {
  std::vector<std::int64_t> shape = t.shape();
  const std::int64_t cols = t.rank() == 2 ? shape[1] : 1;
  shape[0] = static_cast<std::int64_t>(blocks.size()) * block;
  Tensor out(DType::f32, shape);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    std::memcpy(out.data<float>() + static_cast<std::int64_t>(i) * block * cols,
                t.data<const float>() + blocks[i] * block * cols,
                static_cast<std::size_t>(block * cols) * sizeof(float));
  return out;
}

// Column blocks of a [rows, cols] tensor, in order.
Tensor take_column_blocks(const Tensor& t, const std::vector<std::int64_t>& blocks,
                          std::int64_t block) {
  const std::int64_t rows = t.size(0), cols = t.size(1),
                     new_cols = static_cast<std::int64_t>(blocks.size()) * block;
  Tensor out(DType::f32, {rows, new_cols});
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < blocks.size(); ++i)
      std::memcpy(out.data<float>() + r * new_cols + static_cast<std::int64_t>(i) * block,
                  t.data<const float>() + r * cols + blocks[i] * block,
                  static_cast<std::size_t>(block) * sizeof(float));
  return out;
}

}  // namespace

namespace model {

Weights remove_heads(const Weights& w, const std::vector<std::vector<std::int64_t>>& positions) {
  const Config& c = w.config;
  check(static_cast<std::int64_t>(positions.size()) == c.layer_count(), "heads to remove",
        concat("one list per layer (", c.layer_count(), ")"), positions.size());
  Weights out = w.clone();
  const std::int64_t hd = c.head_dim;
  for (std::int64_t l = 0; l < c.layer_count(); ++l) {
    const std::set<std::int64_t> drop(positions[static_cast<std::size_t>(l)].begin(),
                                      positions[static_cast<std::size_t>(l)].end());
    if (drop.empty()) continue;
    const std::int64_t h = c.heads_in(l), g = c.kv_heads_in(l), group = h / g;
    for (std::int64_t i : drop)
      check(i >= 0 && i < h, concat("layer ", l, " head position"),
            concat("in [0, ", h, ") (the heads it has now)"), i);
    std::vector<std::int64_t> kept_q, kept_kv;
    for (std::int64_t kv = 0; kv < g; ++kv) {
      std::int64_t gone = 0;
      for (std::int64_t i = kv * group; i < (kv + 1) * group; ++i) gone += drop.count(i);
      check(gone == 0 || gone == group, concat("layer ", l, " K/V group ", kv),
            concat("all or none of its ", group,
                   " query heads removed (a K/V head goes only with its whole group)"),
            concat(gone, " of them"));
      if (gone == 0) kept_kv.push_back(kv);
    }
    for (std::int64_t i = 0; i < h; ++i)
      if (!drop.count(i)) kept_q.push_back(i);
    check(!kept_q.empty(), concat("layer ", l), "at least one head left",
          concat("all ", h, " removed"));
    for (Role role : {Role::q_weight, Role::q_bias})
      if (w.has(role, l)) out.at(role, l) = take_row_blocks(w.at(role, l), kept_q, hd);
    for (Role role : {Role::k_weight, Role::k_bias, Role::v_weight, Role::v_bias})
      if (w.has(role, l)) out.at(role, l) = take_row_blocks(w.at(role, l), kept_kv, hd);
    out.at(Role::o_weight, l) = take_column_blocks(w.at(Role::o_weight, l), kept_q, hd);
    out.config.layers[static_cast<std::size_t>(l)] = {
        .heads = static_cast<std::int64_t>(kept_q.size()),
        .kv_heads = static_cast<std::int64_t>(kept_kv.size())};
  }
  validate(out.config, "pruned model");
  return out;
}

}  // namespace model

EncoderWeights prune_heads(const EncoderWeights& w,
                           const std::vector<std::vector<std::int64_t>>& remove) {
  const EncoderConfig& c = w.config;
  check(static_cast<std::int64_t>(remove.size()) == c.layers, "heads to remove",
        concat("one list per layer (", c.layers, ")"), remove.size());
  // Original indices (config.json's "pruned_heads" convention) -> the heads' positions now.
  std::vector<std::vector<std::int64_t>> positions(static_cast<std::size_t>(c.layers));
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::set<std::int64_t> drop(remove[static_cast<std::size_t>(l)].begin(),
                                      remove[static_cast<std::size_t>(l)].end());
    std::set<std::int64_t> found;
    for (std::int64_t i = 0; i < c.layer_heads(l); ++i)
      if (drop.count(c.original_head(l, i))) {
        positions[static_cast<std::size_t>(l)].push_back(i);
        found.insert(c.original_head(l, i));
      }
    for (std::int64_t head : drop)
      check(found.count(head) == 1, concat("layer ", l, " head ", head),
            "a head the model still has",
            head < 0 || head >= c.heads ? concat("an index outside [0, ", c.heads, ")")
                                        : std::string("one pruned before"));
  }
  EncoderWeights out{
      .source_dir = w.source_dir, .config = c, .model = model::remove_heads(w.model, positions)};
  if (out.config.pruned_heads.empty())
    out.config.pruned_heads.assign(static_cast<std::size_t>(c.layers), {});
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const auto& drop = remove[static_cast<std::size_t>(l)];
    std::vector<std::int64_t>& pruned = out.config.pruned_heads[static_cast<std::size_t>(l)];
    pruned.insert(pruned.end(), drop.begin(), drop.end());
    std::sort(pruned.begin(), pruned.end());
    pruned.erase(std::unique(pruned.begin(), pruned.end()), pruned.end());
    if (!c.kv_heads.empty())
      out.config.kv_heads[static_cast<std::size_t>(l)] = out.model.config.kv_heads_in(l);
  }
  if (!out.config.is_pruned()) out.config.pruned_heads.clear();
  validate_head_layout(out.config, "pruned model");
  return out;
}

std::vector<std::vector<std::int64_t>> parse_head_list(const std::string& text,
                                                       const EncoderConfig& c) {
  std::vector<std::vector<std::int64_t>> remove(static_cast<std::size_t>(c.layers));
  check(!text.empty(), "--heads", "a list LAYER:HEAD,... (e.g. 0:3,5:11)", "an empty string");
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const std::size_t colon = item.find(':');
    std::int64_t layer = -1, head = -1;
    try {
      std::size_t used_l = 0, used_h = 0;
      if (colon != std::string::npos && colon > 0 && colon + 1 < item.size()) {
        layer = std::stoll(item.substr(0, colon), &used_l);
        head = std::stoll(item.substr(colon + 1), &used_h);
        if (used_l != colon || used_h != item.size() - colon - 1) layer = head = -1;
      }
    } catch (const std::exception&) {
      layer = head = -1;
    }
    check(
        layer >= 0 && layer < c.layers && head >= 0 && head < c.heads, "--heads",
        concat("LAYER:HEAD items with LAYER in [0, ", c.layers, ") and HEAD in [0, ", c.heads, ")"),
        concat("\"", item, "\""));
    remove[static_cast<std::size_t>(layer)].push_back(head);
  }
  return remove;
}

std::int64_t kv_cache_bytes_per_token(const EncoderConfig& c) {
  std::int64_t bytes = 0;
  for (std::int64_t l = 0; l < c.layers; ++l) bytes += 2 * c.layer_kv_heads(l) * c.head_dim() * 4;
  return bytes;
}

}  // namespace headcount
