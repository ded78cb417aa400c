// Embedding forward (gather + add) and backward (deterministic scatter-add).
#include "train/embedding.h"

#include <algorithm>

namespace headcount::train {
namespace {
constexpr std::int64_t kColumns = 32;
}

void embedding_forward(Context& ctx, const EmbeddingShape& s, const std::int32_t* tokens,
                       const float* tok_emb, const float* pos_emb, float* x) {
  ctx.parallel_for(s.batch, [&](std::int64_t b, int) {
    for (std::int64_t t = 0; t < s.seq_len; ++t) {
      const float* tok = tok_emb + static_cast<std::int64_t>(tokens[b * s.seq_len + t]) * s.d_model;
      float* out = x + (b * s.seq_len + t) * s.d_model;
      if (pos_emb == nullptr) {
        std::copy_n(tok, s.d_model, out);
        continue;
      }
      const float* pos = pos_emb + t * s.d_model;
      for (std::int64_t c = 0; c < s.d_model; ++c) out[c] = tok[c] + pos[c];
    }
  });
}

void embedding_backward(Context& ctx, const EmbeddingShape& s, const std::int32_t* tokens,
                        const float* dx, float* d_tok_emb, float* d_pos_emb) {
  const std::int64_t rows = s.batch * s.seq_len;
  // Each task owns a band of columns of both tables and adds every token's row in order.
  ctx.parallel_for((s.d_model + kColumns - 1) / kColumns, [&](std::int64_t task, int) {
    const std::int64_t c0 = task * kColumns, c1 = std::min(s.d_model, c0 + kColumns);
    for (std::int64_t v = 0; v < s.vocab; ++v)
      std::fill(d_tok_emb + v * s.d_model + c0, d_tok_emb + v * s.d_model + c1, 0.0f);
    if (d_pos_emb != nullptr)
      for (std::int64_t t = 0; t < s.context; ++t)
        std::fill(d_pos_emb + t * s.d_model + c0, d_pos_emb + t * s.d_model + c1, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* grad = dx + r * s.d_model;
      float* tok = d_tok_emb + static_cast<std::int64_t>(tokens[r]) * s.d_model;
      for (std::int64_t c = c0; c < c1; ++c) tok[c] += grad[c];
      if (d_pos_emb == nullptr) continue;
      float* pos = d_pos_emb + (r % s.seq_len) * s.d_model;
      for (std::int64_t c = c0; c < c1; ++c) pos[c] += grad[c];
    }
  });
}

}  // namespace headcount::train
