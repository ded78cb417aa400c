// convert_kv_heads: builds the GQA model's config, copies every tensor but the attention's
// w_qkv / b_qkv, and writes those as Q columns unchanged, then each new K (and V) head as the
// double-accumulated mean of its group's old heads (see kv_convert.h).
#include "headcount/train/kv_convert.h"

#include <vector>

#include "headcount/error.h"

namespace headcount::train {
namespace {

using detail::concat;

// Columns [first, first + width) of row r of a [rows, cols] matrix, or of a vector (rows 1).
void pool_heads(const float* old_data, std::int64_t old_cols, float* new_data,
                std::int64_t new_cols, std::int64_t rows, std::int64_t old_first,
                std::int64_t new_first, std::int64_t groups, std::int64_t per_group,
                std::int64_t head_dim) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t d = 0; d < head_dim; ++d) {
        double sum = 0;
        for (std::int64_t k = 0; k < per_group; ++k)
          sum += old_data[r * old_cols + old_first + (g * per_group + k) * head_dim + d];
        new_data[r * new_cols + new_first + g * head_dim + d] =
            static_cast<float>(sum / static_cast<double>(per_group));
      }
}

}  // namespace

void copy_parameters(const Model& from, Model& to) {
  const auto& a = from.parameters();
  auto& b = to.parameters();
  check(a.size() == b.size(), "parameters", concat(b.size(), " tensors"), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    check(a[i].name == b[i].name && a[i].value.shape() == b[i].value.shape(),
          concat("parameters[", i, "]"), b[i].name + " of the same shape", a[i].name);
    std::copy(a[i].value.data<float>(), a[i].value.data<float>() + a[i].value.numel(),
              b[i].value.data<float>());
  }
}

Model convert_kv_heads(const Model& model, std::int64_t kv_heads) {
  const ModelConfig& c = model.config();
  check(c.uniform_heads(), "model",
        "the same head counts in every layer (a per-layer conversion is not written)",
        "per-layer head counts");
  check(kv_heads >= 1 && c.kv_heads % kv_heads == 0, "kv_heads",
        concat("a divisor of ", c.kv_heads), kv_heads);
  ModelConfig nc = c;
  nc.kv_heads = kv_heads;
  Model out(nc, 0);
  const std::int64_t hd = c.head_dim, q = c.heads * hd, r = c.kv_heads / kv_heads;
  const std::int64_t old_w = (c.heads + 2 * c.kv_heads) * hd, new_w = (c.heads + 2 * kv_heads) * hd;
  const auto& from = model.parameters();
  auto& to = out.parameters();
  for (std::size_t i = 0; i < from.size(); ++i) {
    const Parameter& a = from[i];
    Parameter& b = to[i];
    const bool qkv = a.name.ends_with("attn.w_qkv") || a.name.ends_with("attn.b_qkv");
    if (!qkv) {
      std::copy(a.value.data<float>(), a.value.data<float>() + a.value.numel(),
                b.value.data<float>());
      continue;
    }
    const std::int64_t rows = a.value.rank() == 2 ? a.value.shape()[0] : 1;
    const float* src = a.value.data<float>();
    float* dst = b.value.data<float>();
    for (std::int64_t row = 0; row < rows; ++row)  // Q columns unchanged
      std::copy(src + row * old_w, src + row * old_w + q, dst + row * new_w);
    pool_heads(src, old_w, dst, new_w, rows, q, q, kv_heads, r, hd);  // K
    pool_heads(src, old_w, dst, new_w, rows, q + c.kv_heads * hd, q + kv_heads * hd, kv_heads, r,
               hd);  // V
  }
  return out;
}

}  // namespace headcount::train
