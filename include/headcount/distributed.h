// Attention split over MPI ranks (built with -DHEADCOUNT_MPI=ON; library headcount_distributed).
// Every function here is collective over the communicator it is given: each rank calls it
// with the same shapes and options. The communicator is the caller's (MPI_COMM_WORLD or a
// sub-communicator); nothing here calls MPI_Init or MPI_Finalize.
//
// Two splits (docs/distributed.md has the data paths, the bounds and the measurements):
//
//  - Heads over ranks (tensor parallel, Megatron-LM). Each of P ranks holds a contiguous
//    group of kv_heads / P K/V heads with their query heads: its columns of W_q, W_k, W_v
//    and its rows of W_o. The input x is replicated; each rank projects, attends and mixes
//    its heads into a partial [B, n, d_model]; one MPI_Allreduce (sum) after W_o gives every
//    rank the layer's output. P must divide kv_heads (so P <= kv_heads).
//
//  - Data over ranks (data-parallel training, the sentences of `embed`): each rank computes its
//    share of the rows; gradients are summed by MPI_Allreduce in buckets, embeddings gathered
//    on rank 0 in input order. Waits go through the watchdog (a deadline on every collective
//    wait, naming the rank that did not arrive).
//
//  - Sequence over ranks (ring attention, Liu et al. 2023). The sequence of n rows is cut
//    into 2P chunks of n / (2P); rank r holds chunks r and 2P-1-r (zig-zag: under a causal
//    mask every rank then has the same number of visible (query, key) pairs, so none idles)
//    of Q, K and V. At step t every rank attends to the K/V block of rank r - t, which arrives
//    in pieces (MPI_Isend / MPI_Irecv, shifted by t) while the local streaming kernel runs on
//    the piece in hand; each piece gives a partial (O, lse) merged exactly by log-sum-exp,
//    with the decode kernel's merge.
//
// Errors: bad shapes or counts throw headcount::Error on every rank, before any message of
// the computation is sent (the ranks agree first: a rank with bad input makes every rank
// throw, so no rank is left waiting).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "headcount/attention.h"
#include "headcount/attention_backward.h"
#include "headcount/compress.h"
#include "headcount/context.h"
#include "headcount/encoder.h"
#include "headcount/multi_head_attention.h"
#include "headcount/tensor.h"
#include "headcount/train/trainer.h"

namespace headcount::distributed {

// What one rank's call moved and how long it waited, counted where the messages are posted.
struct CommStats {
  std::int64_t bytes_sent = 0;      // payload bytes handed to MPI sends / the all-reduce
  std::int64_t bytes_received = 0;  // payload bytes received
  std::int64_t messages = 0;        // sends posted (an all-reduce counts as one)
  double total_seconds = 0;         // the whole call
  double wait_seconds = 0;          // blocked in MPI_Waitall / MPI_Allreduce
};

// ---- The watchdog: waiting with a deadline ----

// A rank that stops without dying (SIGSTOP, a deadlock, a livelock in its own work) leaves the
// others blocked in MPI, and mpirun sees nothing wrong. The waits of every split here poll
// (MPI_Test) against a deadline instead of blocking. Collectives first exchange arrival notices
// (one tiny message to and from every other rank), so a rank whose deadline passes knows which
// ranks never reached the wait. Then the lowest rank that did reach it prints one line,
//   headcount: error: rank 1 did not reach the gradient all-reduce of step 3 within 30 s (...)
// and calls MPI_Abort(comm, 2): mpirun ends every rank, the stopped one included, and exits
// non-zero. (The others abort too, silently, if that rank has not ended the job a grace period
// later.) A deadline only a rank that waited longer than `timeout_seconds` reaches: it must
// exceed the longest a rank can wait for a slower one's work (a step, a shard of sentences).
struct Watchdog {
  double timeout_seconds = 600;  // 0: no deadline (MPI's blocking waits)
};

// ---- Heads over ranks ----

// Which heads rank `rank` of `ranks` holds: kv heads [kv_head_begin, + kv_heads), query heads
// [head_begin, + heads). Throws Error when ranks does not divide kv_heads.
struct HeadSplit {
  int ranks = 1, rank = 0;
  std::int64_t kv_head_begin = 0, kv_heads = 0;
  std::int64_t head_begin = 0, heads = 0;
};
HeadSplit split_heads(std::int64_t heads, std::int64_t kv_heads, int ranks, int rank);

// The multi-head attention layer with its heads split over the ranks of `comm`.
class HeadParallelAttention {
 public:
  // Collective. `weights` are the whole layer's (the same on every rank); each rank keeps its
  // slice (W_q, W_k, W_v columns, W_o rows, and b_o on rank 0 only: the bias is added once).
  HeadParallelAttention(MPI_Comm comm, const MultiHeadAttentionConfig& config,
                        const MultiHeadAttentionWeights& weights);
  ~HeadParallelAttention();

  const HeadSplit& split() const { return split_; }
  const MultiHeadAttentionConfig& config() const { return config_; }
  // This rank's layer: heads() = split().heads over the same d_model.
  const MultiHeadAttention& local() const { return *local_; }

  // Self-attention, collective: x [B, n, d_model], the same on every rank; out [B, n,
  // d_model] on every rank. options as for MultiHeadAttention::forward with whole-layer
  // head_mask [heads] and bias [B or 1, heads or 1, n, n] (each rank takes its heads), and
  // lse, when given, this rank's heads only: [B, split().heads, n]. probs are not available.
  // Relative to the one-process layer: the attention core and the concat buffer are bitwise
  // the same (each head is computed whole on one rank); W_o's sum over the concat columns is
  // regrouped (each rank's part, then the all-reduce), within the bound in docs/distributed.md.
  LayerStats forward(Context& ctx, const TensorView& x, const TensorView& out,
                     const AttentionOptions& options = {}, CommStats* comm = nullptr,
                     const Watchdog& watchdog = {}) const;

 private:
  MPI_Comm comm_;
  MultiHeadAttentionConfig config_;
  HeadSplit split_;
  std::unique_ptr<MultiHeadAttention> local_;
};

// The attention core split by heads: params are the whole problem, the same on every rank
// (q, k, v replicated; masks, bias, scale). Each rank runs the kernel on its heads only; the
// outputs of every head (out and, when given, lse) are gathered on rank 0, bitwise what one
// process computes (no sum crosses a rank). On other ranks only their own heads' slices of
// out and lse are written. probs are not available.
AttentionStats attention_heads(MPI_Comm comm, Context& ctx, Kernel kernel,
                               const AttentionParams& params, CommStats* comm_stats = nullptr,
                               const Watchdog& watchdog = {});

// Its backward, collective: params as for attention_heads with out and lse (required by the
// streaming backward) at least this rank's heads' (what attention_heads leaves on every rank);
// grads whole-problem views: d_out read (replicated), d_q, d_k, d_v written: every head's on
// rank 0, this rank's heads' elsewhere (d_bias: none). A K/V head and its query heads are on
// one rank, so dK and dV are each computed whole there: bitwise one process's. dQ is too when
// the kernel splits a head's keys into the same number of chunks as for the whole problem
// (attention_backward_streaming: a function of batch x kv_heads); otherwise its per-chunk
// partials are regrouped (docs/distributed.md has the bound).
AttentionBackwardStats attention_heads_backward(MPI_Comm comm, Context& ctx, Kernel kernel,
                                                const AttentionParams& params,
                                                const AttentionGrads& grads,
                                                CommStats* comm_stats = nullptr,
                                                const Watchdog& watchdog = {});

// ---- Sequence over ranks ----

// The zig-zag layout: of n = seq_len rows cut into 2 * ranks chunks of `chunk` rows, rank
// `rank` holds chunk `rank` (global rows [first, first + chunk)) then chunk 2*ranks-1-rank
// ([second, second + chunk)), as local rows [0, chunk) and [chunk, 2*chunk). Throws Error
// unless 2 * ranks divides seq_len.
struct RingLayout {
  int ranks = 1, rank = 0;
  std::int64_t seq_len = 0, chunk = 0;
  std::int64_t first = 0, second = 0;
  std::int64_t local_rows() const { return 2 * chunk; }
  // The pieces a block travels in (ring_attention): min(8, local_rows()). Each row merges at
  // most 1 + (ranks - 1) * pieces() partials.
  std::int64_t pieces() const { return local_rows() < 8 ? local_rows() : 8; }
  std::int64_t global_row(std::int64_t local) const {
    return local < chunk ? first + local : second + local - chunk;
  }
};
RingLayout ring_layout(std::int64_t seq_len, int ranks, int rank);

// Ring attention forward, collective. Each block goes to the ranks that need it in
// RingLayout::pieces() pieces, two in memory at a time (src/distributed/ring.cpp says why).
// params hold this rank's rows in the zig-zag layout:
// q [B, 2*chunk, heads, head_dim], k and v [B, 2*chunk, kv_heads, *], out [B, 2*chunk, heads,
// v_head_dim], lse (optional) [B, heads, 2*chunk]; seq_len = ranks * 2 * chunk. causal and
// key_lengths are those of the whole sequence (key_lengths[b] <= seq_len); scale as usual.
// Not available: window, bias, probs (an Error says so). Self-attention: q_len = kv_len.
// Each K/V block reaches every rank once; the partials are merged in a fixed order (block r,
// r-1, ..., r+1, each piece by piece), so the result is the same on every run. With one rank
// it is bitwise the streaming kernel; with more, within the bound in docs/distributed.md.
AttentionStats ring_attention(MPI_Comm comm, Context& ctx, const AttentionParams& params,
                              CommStats* comm_stats = nullptr, const Watchdog& watchdog = {});

// Ring attention backward, collective: params as for ring_attention, with out and lse this
// rank's rows of the forward's results (lse required); grads this rank's rows: d_out read,
// d_q, d_k, d_v written (d_bias: none). Each rank's dQ stays local; dK/dV travel with their
// K/V block and come home after the last step. Communication: P-1 K/V blocks and P dK/dV
// blocks sent per rank. With one rank bitwise the streaming backward; with more, the sums over
// blocks are regrouped (docs/distributed.md).
AttentionBackwardStats ring_attention_backward(MPI_Comm comm, Context& ctx,
                                               const AttentionParams& params,
                                               const AttentionGrads& grads,
                                               CommStats* comm_stats = nullptr,
                                               const Watchdog& watchdog = {});

// ---- Data over ranks ----

// Rows [begin, end) of `rows` that rank `rank` of `ranks` takes: contiguous, in rank order,
// the counts differing by at most one (a rank may get none when rows < ranks).
struct RowShard {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};
RowShard shard_rows(std::int64_t rows, int ranks, int rank);

// Sentence embeddings with the sentences split over the ranks of `comm`, collective: `texts`
// is the whole list (the same on every rank); rank r embeds its shard_rows(texts.size(), P, r)
// and sends the rows to rank 0, which returns them all, [texts.size(), dim], in input order
// (the other ranks return an empty Tensor). Bitwise what encoder.embed(ctx, texts, options)
// computes in one process on the same instruction set: an embedding does not depend on the
// other sentences of its batch (see embed_sentences in src/distributed/embed.cpp).
// options.progress is called with this rank's counts.
Tensor embed_sentences(MPI_Comm comm, Context& ctx, const BertEncoder& encoder,
                       const std::vector<std::string>& texts, const EmbedOptions& options = {},
                       const Watchdog& watchdog = {}, CommStats* comm_stats = nullptr);

struct DataParallelOptions {
  // Gradients are summed in contiguous buckets: consecutive parameters packed together until a
  // bucket holds at least this many bytes; one MPI_Iallreduce each, all in flight together.
  // 25 MiB is PyTorch DDP's default.
  std::int64_t bucket_bytes = std::int64_t{25} << 20;
  Watchdog watchdog;
};

// Sums every Parameter::grad (and *loss, when not null) over the ranks of `comm`, in place,
// collective. `what` names the wait in the watchdog's message ("the gradient all-reduce of
// step 3"). `scratch` (optional) holds the packed buckets, kept between calls so that a step
// does not map fresh pages for them.
void allreduce_gradients(MPI_Comm comm, std::vector<train::Parameter>& params, double* loss,
                         const std::string& what, const DataParallelOptions& options = {},
                         CommStats* comm_stats = nullptr, std::vector<float>* scratch = nullptr);

// Makes `trainer` rank comm's replica of a data-parallel run, collective: each step rank r
// computes rows shard_rows(batch, P, r) of the global batch with the global batch's loss
// normaliser, allreduce_gradients sums the gradients and the loss, and every rank clips and
// steps alike; rank 0 is the writer (validation, logs, checkpoints). Before any work the ranks
// agree: 1 <= P <= batch, and the same parameters (a hash of every value) on every rank.
// Relative to one process on the global batch: every row's activations and activation
// gradients are bitwise the same, the loss and each parameter gradient are sums of the same
// terms regrouped (bounds in docs/distributed.md). `comm` and `comm_stats` must outlive the
// trainer's training.
void make_data_parallel(MPI_Comm comm, train::Trainer& trainer,
                        const DataParallelOptions& options = {}, CommStats* comm_stats = nullptr);

// ---- Heads over ranks, the encoder ----

// Rank `rank` of `ranks`' slice of an encoder: in every layer the K/V heads split_heads gives
// it with their query heads (the others removed as prune_heads removes heads), its
// intermediate_size / ranks FFN columns, and the attention's and FFN's output biases on rank 0
// only (zero elsewhere). Throws Error when ranks does not divide a layer's kv_heads or
// intermediate_size. Not collective (heads_parallel_encoder calls it on every rank).
EncoderWeights heads_parallel_slice(const EncoderWeights& weights, int ranks, int rank);

// The encoder of `weights` with its heads and FFN split over the ranks of `comm`, collective:
// each rank builds its slice (the ranks agree first that each could); the encoder's forward,
// embed_batch and embed are then collective (every rank calls them with the same input) and
// give every rank the whole encoder's result: per layer two MPI_Allreduce of [rows, d_model]
// floats, after the attention and after the FFN. Relative to one process: each head is
// computed whole on one rank; the sums over heads (W_o) and FFN columns (W_down) are regrouped
// (docs/distributed.md). `comm` and `comm_stats` must outlive the encoder's calls.
BertEncoder heads_parallel_encoder(MPI_Comm comm, const EncoderWeights& weights,
                                   const Watchdog& watchdog = {}, CommStats* comm_stats = nullptr);

// ---- Heads over ranks, training ----

// Makes `trainer` rank comm's slice of a heads-parallel (tensor-parallel) run, collective: in
// every block the rank keeps its K/V heads with their query heads (split_heads) and d_ff / P of
// the FFN, b_o and b_down on rank 0; the embeddings, norms and head are replicated
// (src/distributed/heads_training.cpp has the data path). Each step every rank runs the whole
// batch; per block the forward all-reduces the attention's and the FFN's partial outputs and
// the backward the partial gradients of their inputs (4 * batch * seq_len * d_model floats a
// block, 2 attention-only), the clipping norm one double; every rank evaluates, the checkpoint
// gathers the whole model and rank 0 (the writer) writes it, readable by a one-process run.
// Before any work the ranks agree: P divides every layer's kv_heads and d_ff, the trainer is
// not a data-parallel replica, and the same parameters (a hash) everywhere. Relative to one
// process: each head's attention is computed whole on one rank; the sums over heads (W_o) and
// FFN columns (W_down) and the backward's sums into dL/dh are regrouped (docs/distributed.md).
// `comm` and `comm_stats` must outlive the trainer's training.
void make_heads_parallel(MPI_Comm comm, train::Trainer& trainer, const Watchdog& watchdog = {},
                         CommStats* comm_stats = nullptr);

}  // namespace headcount::distributed
