// Token + learned position embeddings.
//   forward:  x[b, t] = tok_emb[tokens[b, t]] + pos_emb[t]
//   backward: d_tok_emb[v] = Σ_{(b,t): tokens[b,t] = v} dx[b, t]   (scatter-add)
//             d_pos_emb[t] = Σ_b dx[b, t]
// The scatter-add walks tokens in (b, t) order inside each column chunk, so the sums are the
// same on every run and thread count.
#pragma once

#include <cstdint>

#include "headcount/context.h"

namespace headcount::train {

struct EmbeddingShape {
  std::int64_t batch = 0, seq_len = 0, d_model = 0, vocab = 0, context = 0;
};

// tokens must already be checked to lie in [0, vocab). pos_emb / d_pos_emb null: no position
// table (rotary positions act inside attention).
void embedding_forward(Context& ctx, const EmbeddingShape& shape, const std::int32_t* tokens,
                       const float* tok_emb, const float* pos_emb, float* x);
// Overwrites d_tok_emb [vocab, d_model] and d_pos_emb [context, d_model] (rows past seq_len: 0).
void embedding_backward(Context& ctx, const EmbeddingShape& shape, const std::int32_t* tokens,
                        const float* dx, float* d_tok_emb, float* d_pos_emb);

}  // namespace headcount::train
