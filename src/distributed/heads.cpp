// Heads over ranks (tensor parallel). A rank's slice of the layer is itself a layer: heads /
// P query heads and kv_heads / P K/V heads over the same d_model, whose weights are columns of
// W_q, W_k, W_v and rows of W_o. Data path per rank:
//   x [B, n, d] (replicated) · W_qkv[:, its columns] → its heads' Q, K, V
//   → the streaming kernel on its heads → its concat columns [B, n, heads/P * Dv]
//   · W_o[its rows, :] (+ b_o on rank 0) → partial [B, n, d]
//   → MPI_Allreduce(sum) → out [B, n, d] on every rank.
// The one message per forward is the all-reduce of B * n * d floats.
#include <algorithm>
#include <array>
#include <functional>
#include <utility>
#include <vector>

#include "distributed/comm.h"
#include "distributed/tensor_slices.h"
#include "distributed/watchdog.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::distributed {

using headcount::detail::concat;
using i64 = std::int64_t;

HeadSplit split_heads(i64 heads, i64 kv_heads, int ranks, int rank) {
  HEADCOUNT_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank", concat("0 to ", ranks - 1),
                  rank);
  HEADCOUNT_CHECK(kv_heads >= 1 && heads % kv_heads == 0, "kv_heads",
                  concat("a divisor of heads = ", heads), kv_heads);
  HEADCOUNT_CHECK(ranks <= kv_heads, "ranks",
                  concat("at most kv_heads = ", kv_heads, " (each rank holds whole K/V heads)"),
                  ranks);
  HEADCOUNT_CHECK(kv_heads % ranks == 0, "ranks",
                  concat("a divisor of kv_heads = ", kv_heads,
                         " (each rank holds the same number of K/V heads)"),
                  ranks);
  HeadSplit s;
  s.ranks = ranks;
  s.rank = rank;
  s.kv_heads = kv_heads / ranks;
  s.kv_head_begin = rank * s.kv_heads;
  const i64 group = heads / kv_heads;
  s.heads = s.kv_heads * group;
  s.head_begin = s.kv_head_begin * group;
  return s;
}

namespace {

// A view of heads [begin, begin + count) along dimension `dim` of a view.
TensorView head_slice(const TensorView& t, int dim, i64 begin, i64 count) {
  TensorView s = t;
  s.data = static_cast<std::byte*>(t.data) +
           begin * t.strides[dim] * static_cast<i64>(dtype_size(t.dtype));
  s.shape[dim] = count;
  return s;
}

}  // namespace

HeadParallelAttention::HeadParallelAttention(MPI_Comm comm, const MultiHeadAttentionConfig& config,
                                             const MultiHeadAttentionWeights& weights)
    : comm_(comm) {
  const int rank = detail::comm_rank(comm), ranks = detail::comm_size(comm);
  detail::agree(comm, [&] {
    config_ = resolve(config);
    split_ = split_heads(config_.heads, config_.kv_heads, ranks, rank);
    // The whole layer's shapes here; the local layer's constructor checks its slice's values.
    const auto& c = config_;
    const std::pair<const Tensor*, std::vector<i64>> shapes[] = {
        {&weights.w_q, {c.d_model, c.heads * c.head_dim}},
        {&weights.w_k, {c.kv_dim, c.kv_heads * c.head_dim}},
        {&weights.w_v, {c.kv_dim, c.kv_heads * c.v_head_dim}},
        {&weights.w_o, {c.heads * c.v_head_dim, c.d_model}},
        {&weights.b_q, {c.heads * c.head_dim}},
        {&weights.b_k, {c.kv_heads * c.head_dim}},
        {&weights.b_v, {c.kv_heads * c.v_head_dim}},
        {&weights.b_o, {c.d_model}}};
    const char* names[] = {"w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"};
    for (int i = 0; i < (c.bias ? 8 : 4); ++i) {
      const auto& [t, shape] = shapes[i];
      HEADCOUNT_CHECK(t->dtype() == DType::f32 && t->shape() == shape, names[i],
                      concat("an f32 tensor ", shape_string(shape)),
                      concat(dtype_name(t->dtype()), ' ', shape_string(t->shape())));
    }
  });
  const auto& c = config_;
  const HeadSplit& s = split_;
  MultiHeadAttentionConfig lc = c;
  lc.heads = s.heads;
  lc.kv_heads = s.kv_heads;
  MultiHeadAttentionWeights lw;
  lw.w_q = detail::column_range(weights.w_q, s.head_begin * c.head_dim, s.heads * c.head_dim);
  lw.w_k = detail::column_range(weights.w_k, s.kv_head_begin * c.head_dim, s.kv_heads * c.head_dim);
  lw.w_v =
      detail::column_range(weights.w_v, s.kv_head_begin * c.v_head_dim, s.kv_heads * c.v_head_dim);
  lw.w_o = detail::row_range(weights.w_o, s.head_begin * c.v_head_dim, s.heads * c.v_head_dim);
  if (c.bias) {
    lw.b_q = detail::row_range(weights.b_q, s.head_begin * c.head_dim, s.heads * c.head_dim);
    lw.b_k = detail::row_range(weights.b_k, s.kv_head_begin * c.head_dim, s.kv_heads * c.head_dim);
    lw.b_v =
        detail::row_range(weights.b_v, s.kv_head_begin * c.v_head_dim, s.kv_heads * c.v_head_dim);
    // b_o once: rank 0 adds it, the others add +0, which changes no value.
    lw.b_o = Tensor(DType::f32, {c.d_model});
    if (rank == 0)
      std::copy_n(weights.b_o.data<const float>(), c.d_model, lw.b_o.data<float>());
    else
      std::fill_n(lw.b_o.data<float>(), c.d_model, 0.0f);
  }
  local_ = std::make_unique<MultiHeadAttention>(lc, std::move(lw));
}

HeadParallelAttention::~HeadParallelAttention() = default;

LayerStats HeadParallelAttention::forward(Context& ctx, const TensorView& x, const TensorView& out,
                                          const AttentionOptions& options, CommStats* comm,
                                          const Watchdog& watchdog) const {
  const auto start = std::chrono::steady_clock::now();
  const auto& c = config_;
  const HeadSplit& s = split_;
  AttentionOptions lo = options;
  detail::agree(
      comm_,
      [&] {
        HEADCOUNT_CHECK(options.probs_mode == ProbsMode::none, "probs_mode",
                        "none (a head-parallel layer does not gather probabilities)",
                        "per_head or averaged");
        HEADCOUNT_CHECK(x.rank == 3 && x.shape[2] == c.d_model, "x",
                        concat("[batch, seq_len, ", c.d_model, "]"), x.shape_string());
        HEADCOUNT_CHECK(
            !out.empty() && out.rank == 3 && out.dtype == DType::f32 &&
                out.shape[0] == x.shape[0] && out.shape[1] == x.shape[1] &&
                out.shape[2] == c.d_model,
            "out", concat("an f32 tensor [", x.shape[0], ", ", x.shape[1], ", ", c.d_model, "]"),
            out.shape_string());
        if (!options.head_mask.empty()) {
          HEADCOUNT_CHECK(static_cast<i64>(options.head_mask.size()) == c.heads, "head_mask",
                          concat(c.heads, " entries (one per head of the whole layer)"),
                          options.head_mask.size());
          lo.head_mask = options.head_mask.subspan(static_cast<std::size_t>(s.head_begin),
                                                   static_cast<std::size_t>(s.heads));
        }
        if (!options.bias.empty()) {
          HEADCOUNT_CHECK(options.bias.rank == 4 &&
                              (options.bias.shape[1] == c.heads || options.bias.shape[1] == 1),
                          "bias", concat("[batch or 1, ", c.heads, " or 1, q_len, kv_len]"),
                          options.bias.shape_string());
          if (options.bias.shape[1] == c.heads)
            lo.bias = head_slice(options.bias, 1, s.head_begin, s.heads);
        }
        // This rank's lse, checked here with the others rather than by the local layer alone (a
        // rank throwing there would leave the others waiting in the all-reduce).
        if (!options.lse.empty())
          HEADCOUNT_CHECK(options.lse.rank == 3 && options.lse.dtype == DType::f32 &&
                              options.lse.shape[0] == x.shape[0] &&
                              options.lse.shape[1] == s.heads && options.lse.shape[2] == x.shape[1],
                          "lse",
                          concat("an f32 tensor [", x.shape[0], ", ", s.heads, ", ", x.shape[1],
                                 "] (this rank's heads)"),
                          options.lse.shape_string());
      },
      watchdog);
  std::vector<i64> shape{x.shape[0], x.shape[1], options.causal, options.window_left,
                         options.window_right};
  detail::agree(
      comm_, [&] { detail::agree_values(comm_, shape, "x shape and masks", watchdog); }, watchdog);

  // The partial sum of this rank's heads, in `out` itself when its rows are contiguous.
  const i64 count = x.shape[0] * x.shape[1] * c.d_model;
  const bool in_place = out.is_contiguous();
  Tensor partial;
  if (!in_place) partial = Tensor(DType::f32, {x.shape[0], x.shape[1], c.d_model});
  const TensorView target = in_place ? out : partial.view();
  LayerStats stats = local_->forward(ctx, x, target, lo);
  const detail::SumBuffer sum[] = {
      {.data = target.ptr<float>(), .count = count, .type = MPI_FLOAT}};
  detail::allreduce_sum_watched(comm_, sum, watchdog, "the all-reduce after W_o", comm);
  if (!in_place)
    for (i64 b = 0; b < x.shape[0]; ++b)
      for (i64 t = 0; t < x.shape[1]; ++t)
        std::copy_n(partial.data<const float>() + (b * x.shape[1] + t) * c.d_model, c.d_model,
                    out.ptr<float>() + out.offset({b, t, 0}));
  if (comm) comm->total_seconds += detail::seconds_since(start);
  return stats;
}

namespace {

// Every rank passed the same attention shape (Error naming it otherwise).
void agree_on_shape(MPI_Comm comm, const AttentionShape& shape, const Watchdog& watchdog) {
  const std::vector<i64> dims{shape.batch,    shape.q_len,    shape.kv_len,    shape.heads,
                              shape.kv_heads, shape.head_dim, shape.v_head_dim};
  detail::agree(
      comm, [&] { detail::agree_values(comm, dims, "attention shape", watchdog); }, watchdog);
}

// This rank's heads of the whole problem: views, no copies (a bias per head is sliced too).
AttentionParams local_heads(const AttentionParams& params, const HeadSplit& split, i64 heads) {
  AttentionParams local = params;
  local.q = head_slice(params.q, 2, split.head_begin, split.heads);
  local.k = head_slice(params.k, 2, split.kv_head_begin, split.kv_heads);
  local.v = head_slice(params.v, 2, split.kv_head_begin, split.kv_heads);
  local.out = head_slice(params.out, 2, split.head_begin, split.heads);
  if (!params.lse.empty()) local.lse = head_slice(params.lse, 1, split.head_begin, split.heads);
  if (!params.bias.empty() && params.bias.shape[1] == heads)
    local.bias = head_slice(params.bias, 1, split.head_begin, split.heads);
  return local;
}

// Every rank's heads on rank 0, one message per rank (`tag`): the others pack their part into
// `buffer` (pack(own rank, false)) and send it; rank 0 receives each in rank order and unpacks
// it (pack(r, true)). Every rank's part has the buffer's size (the split is even). Waits under
// the watchdog; `what` names the data in its messages.
void gather_heads(MPI_Comm comm, std::vector<float>& buffer, int tag, const char* what,
                  const Watchdog& watchdog, CommStats* comm_stats,
                  const std::function<void(int rank, bool unpack)>& pack) {
  const int rank = detail::comm_rank(comm), ranks = detail::comm_size(comm);
  const i64 floats = static_cast<i64>(buffer.size());
  const auto wait_start = std::chrono::steady_clock::now();
  if (rank == 0) {
    for (int r = 1; r < ranks; ++r) {
      MPI_Request request;
      detail::check_mpi(
          MPI_Irecv(buffer.data(), static_cast<int>(floats), MPI_FLOAT, r, tag, comm, &request),
          "Irecv");
      detail::wait_watched(comm, {&request, 1}, std::array{r}, watchdog,
                           concat("the gathering of the heads' ", what, " on rank 0"), nullptr);
      pack(r, true);
      if (comm_stats) comm_stats->bytes_received += floats * 4;
    }
  } else {
    pack(rank, false);
    MPI_Request request;
    detail::check_mpi(
        MPI_Isend(buffer.data(), static_cast<int>(floats), MPI_FLOAT, 0, tag, comm, &request),
        "Isend");
    detail::wait_watched(comm, {&request, 1}, std::array{0}, watchdog,
                         concat("the gathering of the heads' ", what, " (rank 0 receiving)"),
                         nullptr);
    if (comm_stats) {
      comm_stats->bytes_sent += floats * 4;
      comm_stats->messages += 1;
    }
  }
  if (comm_stats) comm_stats->wait_seconds += detail::seconds_since(wait_start);
}

}  // namespace

AttentionStats attention_heads(MPI_Comm comm, Context& ctx, Kernel kernel,
                               const AttentionParams& params, CommStats* comm_stats,
                               const Watchdog& watchdog) {
  const auto start = std::chrono::steady_clock::now();
  const int rank = detail::comm_rank(comm), ranks = detail::comm_size(comm);
  AttentionShape shape;
  HeadSplit split;
  detail::agree(
      comm,
      [&] {
        HEADCOUNT_CHECK(params.probs_mode == ProbsMode::none, "probs_mode",
                        "none (--distributed heads does not gather probabilities)",
                        "per_head or averaged");
        shape = validate(params);
        split = split_heads(shape.heads, shape.kv_heads, ranks, rank);
      },
      watchdog);
  agree_on_shape(comm, shape, watchdog);

  const AttentionParams local = local_heads(params, split, shape.heads);
  const AttentionStats stats = attention(ctx, kernel, local);

  // Gather on rank 0: each other rank packs its heads' out [B, q_len, heads/P, Dv] and lse
  // [B, heads/P, q_len] into one message; rank 0 unpacks them in rank order.
  const i64 B = shape.batch, n = shape.q_len, hl = split.heads, dv = shape.v_head_dim;
  const bool with_lse = !params.lse.empty();
  const i64 floats = B * n * hl * dv + (with_lse ? B * hl * n : 0);
  HEADCOUNT_CHECK(floats <= INT32_MAX, "out", "at most 2^31 - 1 floats per rank to gather", floats);
  std::vector<float> buffer(static_cast<std::size_t>(floats));
  auto pack = [&](const HeadSplit& sp, bool unpack) {
    float* p = buffer.data();
    for (i64 b = 0; b < B; ++b)
      for (i64 t = 0; t < n; ++t)
        for (i64 h = 0; h < hl; ++h)
          for (i64 e = 0; e < dv; ++e, ++p) {
            float& x = params.out.ptr<float>()[params.out.offset({b, t, sp.head_begin + h, e})];
            if (unpack)
              x = *p;
            else
              *p = x;
          }
    if (with_lse)
      for (i64 b = 0; b < B; ++b)
        for (i64 h = 0; h < hl; ++h)
          for (i64 t = 0; t < n; ++t, ++p) {
            float& x = params.lse.ptr<float>()[params.lse.offset({b, sp.head_begin + h, t})];
            if (unpack)
              x = *p;
            else
              *p = x;
          }
  };
  gather_heads(comm, buffer, 0, "outputs", watchdog, comm_stats, [&](int r, bool unpack) {
    pack(r == rank ? split : split_heads(shape.heads, shape.kv_heads, ranks, r), unpack);
  });
  if (comm_stats) comm_stats->total_seconds += detail::seconds_since(start);
  return stats;
}

namespace {

// Copies the heads [begin, begin + count) (dimension 2) of a [B, rows, heads, dim] view to a
// contiguous buffer at `p`, or back; returns the position after them.
float* heads_block(const TensorView& t, i64 begin, i64 count, float* p, bool unpack) {
  for (i64 b = 0; b < t.shape[0]; ++b)
    for (i64 r = 0; r < t.shape[1]; ++r)
      for (i64 h = 0; h < count; ++h)
        for (i64 e = 0; e < t.shape[3]; ++e, ++p) {
          float& x = t.ptr<float>()[t.offset({b, r, begin + h, e})];
          if (unpack)
            x = *p;
          else
            *p = x;
        }
  return p;
}

}  // namespace

AttentionBackwardStats attention_heads_backward(MPI_Comm comm, Context& ctx, Kernel kernel,
                                                const AttentionParams& params,
                                                const AttentionGrads& grads, CommStats* comm_stats,
                                                const Watchdog& watchdog) {
  const auto start = std::chrono::steady_clock::now();
  const int rank = detail::comm_rank(comm), ranks = detail::comm_size(comm);
  AttentionShape shape;
  HeadSplit split;
  detail::agree(
      comm,
      [&] {
        HEADCOUNT_CHECK(grads.d_bias.empty(), "d_bias",
                        "none (the heads split does not gather a bias gradient)", "a tensor");
        HEADCOUNT_CHECK(params.probs_mode == ProbsMode::none, "probs_mode", "none",
                        "per_head or averaged");
        shape = validate(params);
        validate_backward(params, grads);
        split = split_heads(shape.heads, shape.kv_heads, ranks, rank);
      },
      watchdog);
  agree_on_shape(comm, shape, watchdog);

  // (A K/V head's query heads are all on this rank, so its dK, dV are whole here.)
  const AttentionParams local = local_heads(params, split, shape.heads);
  const AttentionGrads local_grads{
      .d_out = head_slice(grads.d_out, 2, split.head_begin, split.heads),
      .d_q = head_slice(grads.d_q, 2, split.head_begin, split.heads),
      .d_k = head_slice(grads.d_k, 2, split.kv_head_begin, split.kv_heads),
      .d_v = head_slice(grads.d_v, 2, split.kv_head_begin, split.kv_heads),
      .d_bias = {}};
  const AttentionBackwardStats stats = attention_backward(ctx, kernel, local, local_grads);

  // Gather dQ, dK, dV of every rank's heads on rank 0, one message per rank.
  const i64 B = shape.batch, hl = split.heads, kvl = split.kv_heads;
  const i64 floats = B * shape.q_len * hl * shape.head_dim +
                     B * shape.kv_len * kvl * (shape.head_dim + shape.v_head_dim);
  HEADCOUNT_CHECK(floats <= INT32_MAX, "d_q, d_k, d_v",
                  "at most 2^31 - 1 floats per rank to gather", floats);
  std::vector<float> buffer(static_cast<std::size_t>(floats));
  auto pack = [&](const HeadSplit& sp, bool unpack) {
    float* p = buffer.data();
    p = heads_block(grads.d_q, sp.head_begin, sp.heads, p, unpack);
    p = heads_block(grads.d_k, sp.kv_head_begin, sp.kv_heads, p, unpack);
    heads_block(grads.d_v, sp.kv_head_begin, sp.kv_heads, p, unpack);
  };
  gather_heads(comm, buffer, 3, "gradients", watchdog, comm_stats, [&](int r, bool unpack) {
    pack(r == rank ? split : split_heads(shape.heads, shape.kv_heads, ranks, r), unpack);
  });
  if (comm_stats) comm_stats->total_seconds += detail::seconds_since(start);
  return stats;
}

}  // namespace headcount::distributed
