// The BERT encoder with its heads and FFN split over ranks (tensor parallel). A rank's slice
// is itself an encoder, built the way a pruned one is: in every layer it keeps the K/V heads
// split_heads gives it with their query heads (prune_heads removes the others: their rows of
// W_q, W_k, W_v, columns of W_o) and intermediate_size / P of the FFN (its rows of the up
// projection and of its bias, its columns of the down projection); the output biases of the
// attention and the FFN stay on rank 0 (zero elsewhere, so each is added once). Embeddings,
// LayerNorms and pooling are replicated. Per layer the forward all-reduces the attention's
// partial output and the FFN's (BertEncoder::set_partial_sum), before the residual add and
// LayerNorm, so every rank's residual stream is the whole encoder's.
#include <algorithm>
#include <vector>

#include "distributed/comm.h"
#include "distributed/tensor_slices.h"
#include "distributed/watchdog.h"
#include "headcount/compress.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::distributed {

using headcount::detail::concat;
using i64 = std::int64_t;

using detail::column_range;
using detail::row_range;

EncoderWeights heads_parallel_slice(const EncoderWeights& weights, int ranks, int rank) {
  const EncoderConfig& c = weights.config;
  HEADCOUNT_CHECK(c.intermediate_size % ranks == 0, "ranks",
                  concat("a divisor of intermediate_size = ", c.intermediate_size,
                         " (each rank holds intermediate_size / ranks FFN columns)"),
                  ranks);
  // The heads this rank does not hold, by their original indices (prune_heads' convention).
  std::vector<std::vector<i64>> remove(static_cast<std::size_t>(c.layers));
  for (i64 l = 0; l < c.layers; ++l) {
    const HeadSplit s = split_heads(c.layer_heads(l), c.layer_kv_heads(l), ranks, rank);
    for (i64 h = 0; h < c.layer_heads(l); ++h)
      if (h < s.head_begin || h >= s.head_begin + s.heads)
        remove[static_cast<std::size_t>(l)].push_back(c.original_head(l, h));
  }
  EncoderWeights out = ranks == 1 ? EncoderWeights{.source_dir = weights.source_dir,
                                                   .config = weights.config,
                                                   .model = weights.model.clone()}
                                  : prune_heads(weights, remove);
  const i64 f = c.intermediate_size / ranks, begin = rank * f;
  out.config.intermediate_size = f;
  out.model.config.d_ff = f;
  using model::Role;
  for (i64 l = 0; l < c.layers; ++l) {
    out.model.at(Role::ffn_up_weight, l) =
        row_range(out.model.at(Role::ffn_up_weight, l), begin, f);
    out.model.at(Role::ffn_up_bias, l) = row_range(out.model.at(Role::ffn_up_bias, l), begin, f);
    out.model.at(Role::ffn_down_weight, l) =
        column_range(out.model.at(Role::ffn_down_weight, l), begin, f);
    if (rank != 0)
      for (Role bias : {Role::o_bias, Role::ffn_down_bias}) {
        Tensor& b = out.model.at(bias, l);
        std::fill_n(b.data<float>(), b.numel(), 0.0f);
      }
  }
  return out;
}

BertEncoder heads_parallel_encoder(MPI_Comm comm, const EncoderWeights& weights,
                                   const Watchdog& watchdog, CommStats* comm_stats) {
  const int rank = detail::comm_rank(comm), P = detail::comm_size(comm);
  EncoderWeights slice;
  detail::agree(
      comm, [&] { slice = heads_parallel_slice(weights, P, rank); }, watchdog);
  BertEncoder encoder = encoder_from_weights(slice);
  if (P > 1)  // one rank's outputs are whole: nothing to sum
    encoder.set_partial_sum([comm, watchdog, comm_stats](float* data, i64 count) {
      const detail::SumBuffer b{.data = data, .count = count, .type = MPI_FLOAT};
      detail::allreduce_sum_watched(comm, {&b, 1}, watchdog,
                                    "the partial sum of an encoder layer (heads parallel)",
                                    comm_stats);
    });
  return encoder;
}

}  // namespace headcount::distributed
