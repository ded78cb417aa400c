// Training with the heads over ranks (tensor parallel, Megatron-LM, Shoeybi et al. 2019).
// Rank r of P holds, in every block, the K/V heads split_heads gives it with their query heads
// (its columns of W_qkv's Q, K and V parts and of b_qkv, its rows of W_o) and 1/P of the FFN
// (its columns of W_up, W_gate and b_up, its rows of W_down); b_o and b_down live on rank 0
// (held at zero elsewhere, so each is added once). Everything else (embeddings, norms, head)
// is replicated. Per block and step:
//   forward:  partial Attn(h1) → all-reduce → + x;  partial FFN(h2) → all-reduce → + mid
//   backward: partial dL/dh2 (from its W_up columns) → all-reduce;  partial dL/dh1 → all-reduce
// (the Model's partial sums, train/model.h), so the replicated parameters' gradients are the
// same on every rank and need no message; the clipping norm sums the sharded squares (one
// double). A rank's model is the one-process model with heads / P heads and d_ff / P: the
// activations of its heads are bitwise the one process's (a head is computed whole on one
// rank); the sums over heads and FFN columns are regrouped (rank parts, then the all-reduce).
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "distributed/comm.h"
#include "distributed/watchdog.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::distributed {

using headcount::detail::concat;
using i64 = std::int64_t;

namespace {

// How a parameter is cut: its column ranges, its row ranges, on rank 0 only, or replicated.
enum class Cut { replicated, columns, rows, first_rank };

struct Range {
  i64 begin = 0, count = 0;
};

// Parameter `name` of the whole model `c`, cut over P ranks: how, and rank r's ranges (of
// columns or rows; a vector is one row of columns).
struct ParameterCut {
  Cut cut = Cut::replicated;
  std::vector<std::vector<Range>> ranges;  // [rank] -> ranges, in the part's order
};

ParameterCut cut_of(const std::string& name, const train::ModelConfig& c, int P) {
  ParameterCut out;
  if (!name.starts_with("blocks.")) return out;
  const std::size_t dot = name.find('.', 7);
  const i64 layer = std::stoll(name.substr(7, dot - 7));
  const std::string field = name.substr(dot + 1);
  const i64 hd = c.head_dim, H = c.heads_in(layer), KV = c.kv_heads_in(layer);
  out.ranges.resize(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    std::vector<Range>& ranges = out.ranges[static_cast<std::size_t>(r)];
    const HeadSplit s = split_heads(H, KV, P, r);
    const i64 f = c.d_ff / P;
    if (field == "attn.w_qkv" || field == "attn.b_qkv") {
      out.cut = Cut::columns;
      ranges = {{s.head_begin * hd, s.heads * hd},
                {(H + s.kv_head_begin) * hd, s.kv_heads * hd},
                {(H + KV + s.kv_head_begin) * hd, s.kv_heads * hd}};
    } else if (field == "attn.w_o") {
      out.cut = Cut::rows;
      ranges = {{s.head_begin * hd, s.heads * hd}};
    } else if (field == "ffn.w_up" || field == "ffn.w_gate" || field == "ffn.b_up") {
      out.cut = Cut::columns;
      ranges = {{r * f, f}};
    } else if (field == "ffn.w_down") {
      out.cut = Cut::rows;
      ranges = {{r * f, f}};
    } else if (field == "attn.b_o" || field == "ffn.b_down") {
      out.cut = Cut::first_rank;
    } else {
      out.cut = Cut::replicated;
    }
  }
  return out;
}

// A [rows, cols] view of a tensor (a vector is one row).
std::pair<i64, i64> matrix_shape(const Tensor& t) {
  return t.rank() == 2 ? std::pair{t.size(0), t.size(1)} : std::pair{i64{1}, t.size(0)};
}

i64 total(const std::vector<Range>& ranges) {
  i64 n = 0;
  for (const Range& r : ranges) n += r.count;
  return n;
}

// Copies rank r's part of `whole` (its ranges, in order) to part, or back.
void copy_part(const ParameterCut& cut, const std::vector<Range>& ranges, i64 rows, i64 cols,
               float* whole, float* part, bool to_part) {
  if (cut.cut == Cut::columns) {
    const i64 width = total(ranges);
    for (i64 row = 0; row < rows; ++row) {
      i64 at = 0;
      for (const Range& g : ranges) {
        float* w = whole + row * cols + g.begin;
        float* p = part + row * width + at;
        to_part ? std::copy_n(w, g.count, p) : std::copy_n(p, g.count, w);
        at += g.count;
      }
    }
  } else {  // rows
    i64 at = 0;
    for (const Range& g : ranges) {
      float* w = whole + g.begin * cols;
      float* p = part + at * cols;
      to_part ? std::copy_n(w, g.count * cols, p) : std::copy_n(p, g.count * cols, w);
      at += g.count;
    }
  }
}

// The slice's configuration: every layer's heads and K/V heads and d_ff divided by P; head_dim
// and the scale as the whole model's (explicit: their defaults would follow the new counts).
train::ModelConfig slice_config(const train::ModelConfig& c, int P) {
  train::ModelConfig s = c;
  s.heads = c.heads / P;
  s.kv_heads = c.kv_heads / P;
  for (auto& h : s.layer_heads) h /= P;
  for (auto& h : s.layer_kv_heads) h /= P;
  if (!c.attention_only) s.d_ff = c.d_ff / P;
  return s;
}

Tensor copy_of(const Tensor& t) {
  Tensor out(DType::f32, t.shape());
  std::copy_n(t.data<const float>(), t.numel(), out.data<float>());
  return out;
}

}  // namespace

void make_heads_parallel(MPI_Comm comm, train::Trainer& trainer, const Watchdog& watchdog,
                         CommStats* comm_stats) {
  const int rank = detail::comm_rank(comm), P = detail::comm_size(comm);
  const train::ModelConfig& c = trainer.config().model;
  std::vector<ParameterCut> cuts;
  detail::agree(
      comm,
      [&] {
        HEADCOUNT_CHECK(trainer.replica() == nullptr, "--parallel heads",
                        "a run that is not also data parallel", "a data-parallel replica");
        HEADCOUNT_CHECK(watchdog.timeout_seconds >= 0, "timeout", ">= 0 seconds",
                        watchdog.timeout_seconds);
        for (i64 l = 0; l < c.layers; ++l)  // throws naming ranks and kv_heads
          split_heads(c.heads_in(l), c.kv_heads_in(l), P, rank);
        if (!c.attention_only)
          HEADCOUNT_CHECK(c.d_ff % P == 0, "ranks",
                          concat("a divisor of d_ff = ", c.d_ff,
                                 " (each rank holds d_ff / ranks "
                                 "columns of the FFN)"),
                          P);
        for (const train::Parameter& p : trainer.model().parameters())
          cuts.push_back(cut_of(p.name, c, P));
      },
      watchdog);
  const i64 shape[] = {trainer.step(), trainer.config().steps, trainer.config().batch,
                       static_cast<i64>(trainer.model().parameters().size()),
                       detail::parameter_hash(trainer.model().parameters())};
  detail::agree_values(comm, shape, "heads parallel (step, steps, batch, parameters, their hash)",
                       watchdog);

  train::TensorParallel plan{.slice = train::Model(slice_config(c, P), trainer.config().seed)};
  const std::vector<train::Parameter>& whole = trainer.model().parameters();
  plan.norm.sharded.resize(whole.size());
  for (std::size_t i = 0; i < whole.size(); ++i) {
    // One rank holds the whole model: its norm sums every square in the one process's order.
    plan.norm.sharded[i] = P > 1 && cuts[i].cut != Cut::replicated;
    // rank 0's bias is the whole one; the others hold zero and never move it.
    if (cuts[i].cut == Cut::first_rank && rank != 0) plan.slice.parameters()[i].frozen = true;
  }
  plan.take = [cuts, rank](std::size_t i, const Tensor& w) {
    const ParameterCut& cut = cuts[i];
    if (cut.cut == Cut::replicated || (cut.cut == Cut::first_rank && rank == 0)) return copy_of(w);
    if (cut.cut == Cut::first_rank) {
      Tensor zero(DType::f32, w.shape());
      std::fill_n(zero.data<float>(), zero.numel(), 0.0f);
      return zero;
    }
    const auto [rows, cols] = matrix_shape(w);
    const std::vector<Range>& ranges = cut.ranges[static_cast<std::size_t>(rank)];
    std::vector<i64> shape = w.shape();
    shape[cut.cut == Cut::columns ? shape.size() - 1 : 0] = total(ranges);
    Tensor part(DType::f32, shape);
    copy_part(cut, ranges, rows, cols, const_cast<float*>(w.data<const float>()),
              part.data<float>(), true);
    return part;
  };
  plan.gather = [cuts, comm, watchdog, comm_stats, P](std::size_t i, const Tensor& part) {
    const ParameterCut& cut = cuts[i];
    if (cut.cut == Cut::replicated) return copy_of(part);
    Tensor out = copy_of(part);
    if (cut.cut == Cut::first_rank) {  // rank 0's is the whole tensor
      detail::bcast_watched(comm, out.data<float>(), out.numel(), MPI_FLOAT, 0, watchdog,
                            "the checkpoint gather (heads parallel)", comm_stats);
      return out;
    }
    // Every rank's part has the same size (the split is even): all-gather, then place each.
    const i64 n = part.numel();
    std::vector<float> all(static_cast<std::size_t>(n * P));
    detail::collective_watched(
        comm, watchdog, "the checkpoint gather (heads parallel)", comm_stats,
        [&](std::vector<MPI_Request>& requests) {
          requests.emplace_back();
          detail::check_mpi(
              MPI_Iallgather(part.data<const float>(), static_cast<int>(n), MPI_FLOAT, all.data(),
                             static_cast<int>(n), MPI_FLOAT, comm, &requests.back()),
              "MPI_Iallgather");
        });
    std::vector<i64> shape = part.shape();
    const std::size_t cut_dim = cut.cut == Cut::columns ? shape.size() - 1 : 0;
    shape[cut_dim] = 0;
    for (int r = 0; r < P; ++r) shape[cut_dim] += total(cut.ranges[static_cast<std::size_t>(r)]);
    out = Tensor(DType::f32, shape);
    const auto [rows, cols] = matrix_shape(out);
    for (int r = 0; r < P; ++r)
      copy_part(cut, cut.ranges[static_cast<std::size_t>(r)], rows, cols, out.data<float>(),
                all.data() + r * n, false);
    return out;
  };
  plan.norm.sum_over_ranks = [comm, watchdog, comm_stats](double squares) {
    const detail::SumBuffer b{.data = &squares, .count = 1, .type = MPI_DOUBLE};
    detail::allreduce_sum_watched(comm, {&b, 1}, watchdog, "the gradient norm (heads parallel)",
                                  comm_stats);
    return squares;
  };
  // One rank: no partial sums (its outputs are whole), so the step is the one process's, bit
  // for bit (post-LN's backward otherwise adds the FFN's dL/dmid in another order).
  if (P > 1)
    plan.slice.set_partial_sum([comm, watchdog, comm_stats](float* data, i64 count) {
      const detail::SumBuffer b{.data = data, .count = count, .type = MPI_FLOAT};
      detail::allreduce_sum_watched(comm, {&b, 1}, watchdog,
                                    "the partial sum of a block (heads parallel)", comm_stats);
    });
  plan.writer = rank == 0;
  trainer.set_tensor_parallel(std::move(plan));
}

}  // namespace headcount::distributed
