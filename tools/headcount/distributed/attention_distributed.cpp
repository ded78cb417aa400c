// `headcount attention --distributed heads|ring` under mpirun. Rank 0 runs the single-process
// command (cmd_attention.cpp: read, check, compute, write) with this file's compute; the
// other ranks read no file. Messages, in order:
//   1. agree: rank 0's reading and this split's checks (ranks dividing kv_heads, or 2 x ranks
//      dividing seq_len; no bias/window with ring) either pass on rank 0 or every rank stops:
//      rank 0 prints the one-line error, every rank exits 2, before any work;
//   2. a header (shapes, masks, scale, kernel, threads) broadcast from rank 0;
//   3. the inputs: heads: q, k, v (and bias) broadcast whole; ring: each rank's zig-zag rows
//      of q, k, v sent to it;
//   4. the split's own computation (headcount/distributed.h);
//   5. the outputs back on rank 0: heads: attention_heads gathers them (with --grad-out dO
//      is broadcast too and attention_heads_backward gathers dq, dk, dv); ring: each rank
//      sends its rows of out (and lse), and with --grad-out its rows of dO went out in step 3
//      and its rows of dq, dk, dv (ring_attention_backward) come back here.
// A rank that dies: MPI_COMM_WORLD keeps MPI's default handler (errors are fatal), and
// mpirun ends the whole job, naming the rank (docs/distributed.md; tested by
// tests/mpi/rank_kill_check.py). A rank that stops without dying: every wait here and in the
// splits is under the watchdog (--timeout), which names it and aborts the job
// (tests/mpi/rank_hang_check.py).
#include "attention_distributed.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "distributed/mpi_cli.h"
#include "distributed/watchdog.h"
#include "headcount/distributed.h"
#include "headcount/error.h"

namespace headcount::cli {
namespace {

using headcount::detail::concat;
using i64 = std::int64_t;
namespace dist = headcount::distributed;

enum class Mode : i64 { heads = 0, ring = 1 };

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) fail("MPI", concat(what, " failed (error ", rc, ")"));
}

// Runs `checks` (may throw) on rank 0, nothing on the others; then either all go on or all
// throw rank 0's Error. Collective.
void agree_with_rank0(const std::function<void()>& checks, const dist::Watchdog& watchdog) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string message;
  if (rank == 0) {
    try {
      checks();
    } catch (const Error& e) {
      message = e.what();
    }
  }
  int length = static_cast<int>(message.size());
  dist::detail::bcast_watched(MPI_COMM_WORLD, &length, 1, MPI_INT, 0, watchdog,
                              "rank 0's checks of the inputs", nullptr);
  if (length == 0) return;
  message.resize(static_cast<std::size_t>(length));
  dist::detail::bcast_watched(MPI_COMM_WORLD, message.data(), length, MPI_CHAR, 0, watchdog,
                              "rank 0's checks of the inputs", nullptr);
  throw Error(message);
}

void bcast_floats(float* data, i64 count, const dist::Watchdog& watchdog) {
  dist::detail::bcast_watched(MPI_COMM_WORLD, data, count, MPI_FLOAT, 0, watchdog,
                              "the broadcast of the inputs", nullptr);
}

// A point-to-point message with rank `peer`, sent or received, waited for under the watchdog.
void exchange(float* data, i64 count, int peer, int tag, bool receive,
              const dist::Watchdog& watchdog, const char* what) {
  MPI_Request request;
  if (receive)
    check_mpi(
        MPI_Irecv(data, static_cast<int>(count), MPI_FLOAT, peer, tag, MPI_COMM_WORLD, &request),
        "Irecv");
  else
    check_mpi(
        MPI_Isend(data, static_cast<int>(count), MPI_FLOAT, peer, tag, MPI_COMM_WORLD, &request),
        "Isend");
  const int peers[1] = {peer};
  dist::detail::wait_watched(MPI_COMM_WORLD, {&request, 1}, peers, watchdog, what, nullptr);
}

// The header of step 2: everything a rank needs besides the tensors.
struct Header {
  Mode mode = Mode::heads;
  Kernel kernel = Kernel::streaming;
  i64 threads = 1, causal = 0, window_left = -1, window_right = -1, has_scale = 0, has_lse = 0,
      has_grads = 0;
  float scale = 0;
  std::vector<i64> q, k, v, bias;  // shapes; bias empty when none
  std::vector<i64> key_lengths;

  std::vector<i64> pack() const {
    std::vector<i64> out{static_cast<i64>(mode),
                         static_cast<i64>(kernel),
                         threads,
                         causal,
                         window_left,
                         window_right,
                         has_scale,
                         has_lse,
                         has_grads};
    i64 bits = 0;
    std::memcpy(&bits, &scale, 4);
    out.push_back(bits);
    for (const auto* shape : {&q, &k, &v, &bias, &key_lengths}) {
      out.push_back(static_cast<i64>(shape->size()));
      out.insert(out.end(), shape->begin(), shape->end());
    }
    return out;
  }
  static Header unpack(const std::vector<i64>& in) {
    Header h;
    std::size_t i = 0;
    h.mode = static_cast<Mode>(in[i++]);
    h.kernel = static_cast<Kernel>(in[i++]);
    h.threads = in[i++];
    h.causal = in[i++];
    h.window_left = in[i++];
    h.window_right = in[i++];
    h.has_scale = in[i++];
    h.has_lse = in[i++];
    h.has_grads = in[i++];
    const i64 bits = in[i++];
    std::memcpy(&h.scale, &bits, 4);
    for (auto* shape : {&h.q, &h.k, &h.v, &h.bias, &h.key_lengths}) {
      const auto n = static_cast<std::size_t>(in[i++]);
      shape->assign(in.begin() + static_cast<std::ptrdiff_t>(i),
                    in.begin() + static_cast<std::ptrdiff_t>(i + n));
      i += n;
    }
    return h;
  }
};

std::vector<i64> shape_of(const TensorView& t) {
  return t.empty() ? std::vector<i64>{}
                   : std::vector<i64>(t.shape.begin(), t.shape.begin() + t.rank);
}

// Rows `lay` of a whole [B, n, heads, dim] view, packed, appended to `dst`; or (unpack) the
// reverse, from `src` into the view.
void zigzag_rows(const TensorView& whole, const dist::RingLayout& lay, float*& cursor,
                 bool unpack) {
  for (i64 b = 0; b < whole.shape[0]; ++b)
    for (i64 t = 0; t < lay.local_rows(); ++t)
      for (i64 h = 0; h < whole.shape[2]; ++h)
        for (i64 d = 0; d < whole.shape[3]; ++d, ++cursor) {
          float& x = whole.ptr<float>()[whole.offset({b, lay.global_row(t), h, d})];
          if (unpack)
            x = *cursor;
          else
            *cursor = x;
        }
}
// The same for lse [B, heads, n].
void zigzag_lse(const TensorView& whole, const dist::RingLayout& lay, float*& cursor, bool unpack) {
  for (i64 b = 0; b < whole.shape[0]; ++b)
    for (i64 h = 0; h < whole.shape[1]; ++h)
      for (i64 t = 0; t < lay.local_rows(); ++t, ++cursor) {
        float& x = whole.ptr<float>()[whole.offset({b, h, lay.global_row(t)})];
        if (unpack)
          x = *cursor;
        else
          *cursor = x;
      }
}

i64 numel(const std::vector<i64>& shape) {
  i64 n = 1;
  for (i64 s : shape) n *= s;
  return n;
}

// Steps 2-5 on every rank. On rank 0 `whole` is the command's params (inputs read, outputs
// to fill); on the others it is built here from the header and the messages.
void serve(Header h, const AttentionParams* whole, const AttentionGrads* whole_grads,
           const dist::Watchdog& watchdog) {
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  std::vector<i64> packed = rank == 0 ? h.pack() : std::vector<i64>{};
  i64 size = static_cast<i64>(packed.size());
  dist::detail::bcast_watched(MPI_COMM_WORLD, &size, 1, MPI_INT64_T, 0, watchdog,
                              "the broadcast of the header", nullptr);
  packed.resize(static_cast<std::size_t>(size));
  dist::detail::bcast_watched(MPI_COMM_WORLD, packed.data(), size, MPI_INT64_T, 0, watchdog,
                              "the broadcast of the header", nullptr);
  if (rank != 0) h = Header::unpack(packed);

  Context ctx(ContextOptions{.threads = static_cast<int>(h.threads)});
  dist::CommStats comm;
  const auto start = std::chrono::steady_clock::now();
  const i64 B = h.q[0], n = h.q[1], H = h.q[2], Hkv = h.k[2], Dv = h.v[3];
  Tensor q, k, v, bias, out, lse;  // this rank's (followers: the inputs; ring: every rank's rows)
  AttentionParams p = whole ? *whole : AttentionParams{};
  if (!whole) {
    p.causal = h.causal != 0;
    p.window_left = h.window_left;
    p.window_right = h.window_right;
    if (h.has_scale) p.scale = h.scale;
  }
  p.key_lengths = h.key_lengths;

  if (h.mode == Mode::heads) {
    if (!whole) {
      q = Tensor(DType::f32, h.q);
      k = Tensor(DType::f32, h.k);
      v = Tensor(DType::f32, h.v);
      if (!h.bias.empty()) bias = Tensor(DType::f32, h.bias);
      out = Tensor(DType::f32, {B, n, H, Dv});
      if (h.has_lse) lse = Tensor(DType::f32, {B, H, n});
      p.q = q.view();
      p.k = k.view();
      p.v = v.view();
      p.out = out.view();
      if (!h.bias.empty()) p.bias = bias.view();
      if (h.has_lse) p.lse = lse.view();
    }
    // The command's inputs are contiguous tensors (read_npy_f32): broadcast in place.
    bcast_floats(p.q.ptr<float>(), numel(h.q), watchdog);
    bcast_floats(p.k.ptr<float>(), numel(h.k), watchdog);
    bcast_floats(p.v.ptr<float>(), numel(h.v), watchdog);
    if (!h.bias.empty()) bcast_floats(p.bias.ptr<float>(), numel(h.bias), watchdog);
    dist::attention_heads(MPI_COMM_WORLD, ctx, h.kernel, p, &comm, watchdog);
    if (h.has_grads) {
      // dO replicated; each rank's heads' backward on its slices of out and lse (what the
      // forward left it); dQ, dK, dV gathered on rank 0.
      Tensor d_out, d_q, d_k, d_v;
      AttentionGrads g = whole_grads ? *whole_grads : AttentionGrads{};
      if (!whole_grads) {
        d_out = Tensor(DType::f32, {B, n, H, Dv});
        d_q = Tensor(DType::f32, h.q);
        d_k = Tensor(DType::f32, h.k);
        d_v = Tensor(DType::f32, h.v);
        g = {.d_out = d_out.view(), .d_q = d_q.view(), .d_k = d_k.view(), .d_v = d_v.view()};
      }
      bcast_floats(g.d_out.ptr<float>(), B * n * H * Dv, watchdog);
      dist::attention_heads_backward(MPI_COMM_WORLD, ctx, h.kernel, p, g, &comm, watchdog);
    }
  } else {
    const i64 D = h.q[3];
    std::vector<float> buffer;
    const dist::RingLayout mine = dist::ring_layout(n, P, rank);
    const i64 L2 = mine.local_rows();
    q = Tensor(DType::f32, {B, L2, H, D});
    k = Tensor(DType::f32, {B, L2, Hkv, D});
    v = Tensor(DType::f32, {B, L2, Hkv, Dv});
    Tensor d_out, d_q, d_k, d_v;  // with --grad-out: this rank's rows of dO and the gradients
    if (h.has_grads) d_out = Tensor(DType::f32, {B, L2, H, Dv});
    const i64 in_floats = q.numel() + k.numel() + v.numel() + d_out.numel();
    buffer.resize(static_cast<std::size_t>(in_floats));
    if (rank == 0) {
      for (int r = P - 1; r >= 0; --r) {  // rank 0's own rows last, unpacked below
        const dist::RingLayout lay = dist::ring_layout(n, P, r);
        float* cursor = buffer.data();
        zigzag_rows(whole->q, lay, cursor, false);
        zigzag_rows(whole->k, lay, cursor, false);
        zigzag_rows(whole->v, lay, cursor, false);
        if (h.has_grads) zigzag_rows(whole_grads->d_out, lay, cursor, false);
        if (r != 0)
          exchange(buffer.data(), in_floats, r, 1, false, watchdog,
                   "the scatter of the inputs (receiving)");
      }
    } else {
      exchange(buffer.data(), in_floats, 0, 1, true, watchdog,
               "the scatter of the inputs (rank 0 sending)");
    }
    const float* src = buffer.data();
    for (Tensor* t : {&q, &k, &v, &d_out}) {
      if (t->empty()) continue;
      std::copy_n(src, t->numel(), t->data<float>());
      src += t->numel();
    }
    out = Tensor(DType::f32, {B, L2, H, Dv});
    if (h.has_lse) lse = Tensor(DType::f32, {B, H, L2});
    AttentionParams local = p;
    local.q = q.view();
    local.k = k.view();
    local.v = v.view();
    local.out = out.view();
    local.lse = h.has_lse ? lse.view() : TensorView{};
    dist::ring_attention(MPI_COMM_WORLD, ctx, local, &comm, watchdog);
    if (h.has_grads) {  // the backward reads the forward's out and lse (has_lse: always with grads)
      d_q = Tensor(DType::f32, q.shape());
      d_k = Tensor(DType::f32, k.shape());
      d_v = Tensor(DType::f32, v.shape());
      dist::ring_attention_backward(
          MPI_COMM_WORLD, ctx, local,
          {.d_out = d_out.view(), .d_q = d_q.view(), .d_k = d_k.view(), .d_v = d_v.view()}, &comm,
          watchdog);
    }

    // Every rank's rows of out (and lse, and the gradients) back to rank 0, in rank order.
    const i64 out_floats =
        out.numel() + (h.has_lse ? lse.numel() : 0) + d_q.numel() + d_k.numel() + d_v.numel();
    buffer.resize(static_cast<std::size_t>(out_floats));
    float* fill = std::copy_n(out.data<const float>(), out.numel(), buffer.data());
    if (h.has_lse) fill = std::copy_n(lse.data<const float>(), lse.numel(), fill);
    for (const Tensor* t : {&d_q, &d_k, &d_v})
      if (!t->empty()) fill = std::copy_n(t->data<const float>(), t->numel(), fill);
    if (rank == 0) {
      for (int r = 0; r < P; ++r) {
        if (r != 0)
          exchange(buffer.data(), out_floats, r, 2, true, watchdog,
                   "the gathering of the outputs on rank 0");
        const dist::RingLayout lay = dist::ring_layout(n, P, r);
        float* cursor = buffer.data();
        zigzag_rows(whole->out, lay, cursor, true);
        if (h.has_lse) zigzag_lse(whole->lse, lay, cursor, true);
        if (h.has_grads) {
          zigzag_rows(whole_grads->d_q, lay, cursor, true);
          zigzag_rows(whole_grads->d_k, lay, cursor, true);
          zigzag_rows(whole_grads->d_v, lay, cursor, true);
        }
      }
    } else {
      exchange(buffer.data(), out_floats, 0, 2, false, watchdog,
               "the gathering of the outputs (rank 0 receiving)");
    }
  }
  if (rank == 0) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "distributed: %s over %d rank%s; rank 0 sent %lld bytes in the computation, waited %.1f%% "
        "of %.3f ms\n",
        h.mode == Mode::heads ? "heads" : "ring", P, P == 1 ? "" : "s",
        static_cast<long long>(comm.bytes_sent),
        comm.total_seconds > 0 ? 100.0 * comm.wait_seconds / comm.total_seconds : 0.0, ms);
  }
}

}  // namespace

void run_distributed_attention(const std::string& mode_name, double timeout_seconds,
                               const std::function<void(const AttentionCompute&)>& rank0) {
  const bool known = mode_name == "heads" || mode_name == "ring";
  const Mode mode = mode_name == "heads" ? Mode::heads : Mode::ring;
  const dist::Watchdog watchdog{.timeout_seconds = timeout_seconds};
  int rank = 0, P = 1;
  // An error every rank knows of (a bad mode, a failed agreement, an error inside the split's
  // collective work): rank 0 prints headcount's line, then all meet in a barrier before
  // leaving MPI, so that no rank's exit (mpirun aborts the job at the first non-zero exit)
  // cuts rank 0 off before its line is out. An error on rank 0 alone, after the others are
  // done (writing the outputs), goes up to main() as usual.
  std::string collective_error;
  {
    MpiSession session;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (!known) {
      collective_error = concat("--distributed: expected heads or ring, got ", mode_name);
    } else if (!(timeout_seconds >= 0)) {
      collective_error = concat("--timeout: expected >= 0 seconds, got ", timeout_seconds);
    } else if (rank != 0) {
      try {
        agree_with_rank0({}, watchdog);
        serve(Header{}, nullptr, nullptr, watchdog);
        return;
      } catch (const Error& e) {
        collective_error = e.what();
      }
    } else {
      bool told = false, served = false;
      try {
        rank0([&](Kernel kernel, const AttentionParams& params, const AttentionGrads* grads,
                  int threads) {
          Header h;
          told = true;  // whatever the checks say, the others hear it from this agreement
          agree_with_rank0(
              [&] {
                const AttentionShape s = validate(params);
                if (mode == Mode::heads) {
                  if (grads != nullptr)
                    check(grads->d_bias.empty(), "--grad-bias",
                          "none with --distributed heads (the bias gradient is not gathered)",
                          "a path");
                  dist::split_heads(s.heads, s.kv_heads, P, 0);
                } else {
                  check(kernel == Kernel::streaming, "--kernel",
                        "streaming with --distributed ring", kernel_name(kernel));
                  check(params.bias.empty(), "--bias",
                        "none with --distributed ring (no additive bias on the ring)", "a bias");
                  check(params.window_left < 0 && params.window_right < 0,
                        "--window-left/--window-right", "unbounded with --distributed ring",
                        concat(params.window_left, ", ", params.window_right));
                  check(s.q_len == s.kv_len, "kv_len",
                        concat("q_len = ", s.q_len, " with --distributed ring"), s.kv_len);
                  dist::ring_layout(s.q_len, P, 0);
                }
              },
              watchdog);
          h.mode = mode;
          h.kernel = kernel;
          h.threads = threads;
          h.causal = params.causal;
          h.window_left = params.window_left;
          h.window_right = params.window_right;
          h.has_scale = params.scale.has_value();
          h.scale = params.scale.value_or(0.0f);
          h.has_lse = !params.lse.empty();
          h.has_grads = grads != nullptr;
          h.q = shape_of(params.q);
          h.k = shape_of(params.k);
          h.v = shape_of(params.v);
          h.bias = shape_of(params.bias);
          h.key_lengths.assign(params.key_lengths.begin(), params.key_lengths.end());
          serve(h, &params, grads, watchdog);
          served = true;
        });
        return;
      } catch (const Error& e) {
        if (served) throw;  // the others have finished: rank 0's own error
        // Failed before the others heard of the computation: tell them.
        if (!told) {
          try {
            agree_with_rank0([&] { throw Error(e.what()); }, watchdog);
          } catch (const Error&) {
          }
        }
        collective_error = e.what();
      }
    }
    if (rank == 0) {
      std::fprintf(stderr, "headcount: error: %s\n", collective_error.c_str());
      std::fflush(stderr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  std::exit(2);  // MPI is finalized; rank 0 printed the line
}

}  // namespace headcount::cli
