// `headcount attention`: run one attention kernel on .npy inputs and write .npy outputs.
//
// Inputs (float32, or float64 rounded to float32), in attention.h's layout:
//   q [batch, q_len, heads, head_dim], k [batch, kv_len, kv_heads, head_dim],
//   v [batch, kv_len, kv_heads, v_head_dim], bias [batch or 1, heads or 1, q_len, kv_len].
// Outputs (float32): out [batch, q_len, heads, v_head_dim], lse [batch, heads, q_len],
//   probs [batch, heads, q_len, kv_len] (reference kernel only).
// Gradients (--grad-out G with --grad-q, --grad-k, --grad-v, optionally --grad-bias): of the
//   loss sum(out ∘ G) at the given inputs, by the same kernel's backward, each in the shape
//   of its input (attention_backward.h).
// Everything is read, checked and computed before the first byte is written, and the
// outputs are committed together, so a failure leaves no output file behind.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attention_distributed.h"
#include "attention_options.h"
#include "commands.h"
#include "headcount/attention.h"
#include "headcount/attention_backward.h"
#include "headcount/context.h"
#include "headcount/error.h"
#include "headcount/npy.h"

namespace headcount::cli {
namespace {

struct AttentionCliOptions {
  std::string q, k, v, out, probs, lse, bias;
  std::string grad_out, grad_q, grad_k, grad_v, grad_bias;
  std::string kernel = "streaming";
  std::string scale;        // parsed here, so "nan" gets our message rather than CLI11's
  std::string key_lengths;  // "3,5"
  bool causal = false;
  int threads = 1;
  std::string distributed;  // "", heads or ring (under mpirun)
  double timeout = 600;     // --timeout, the watchdog's (with --distributed)
  std::int64_t window_left = -1, window_right = -1;
};

std::string index_string(std::int64_t flat, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_string(index);
}

// Non-finite input would propagate silently into every output row it touches; reject it
// at the edge. A bias may hold -inf: that is how it masks a key.
void check_finite(const std::string& path, const Tensor& t, bool allow_minus_inf = false) {
  const float* x = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (std::isfinite(x[i]) || (allow_minus_inf && x[i] == -INFINITY)) continue;
    fail(path,
         detail::concat("values: expected finite numbers", allow_minus_inf ? " (or -inf)" : "",
                        ", got ", x[i], " at index ", index_string(i, t.shape())));
  }
}

Tensor read_input(const std::string& path, int rank, const char* layout,
                  bool allow_minus_inf = false) {
  Tensor t = read_npy_f32(path);
  check(t.rank() == rank, path + ": shape", layout, shape_string(t.shape()));
  check_finite(path, t, allow_minus_inf);
  return t;
}

// Writes each output under a temporary name, then renames them all into place. If any
// step fails, the temporaries and any outputs already renamed are removed.
void write_outputs(const std::vector<std::pair<std::string, TensorView>>& outputs) {
  std::vector<std::string> temps;
  std::size_t renamed = 0;
  auto clean_up = [&] {
    for (std::size_t i = 0; i < temps.size(); ++i)
      std::remove((i < renamed ? outputs[i].first : temps[i]).c_str());
  };
  try {
    for (const auto& [path, view] : outputs) {
      temps.push_back(detail::concat(path, ".partial.", ::getpid()));
      try {
        write_npy(temps.back(), view);
      } catch (const Error& e) {
        // Name the output the user asked for, not our temporary.
        const std::string message = e.what();
        throw Error(message.starts_with(temps.back()) ? path + message.substr(temps.back().size())
                                                      : message);
      }
    }
    for (; renamed < outputs.size(); ++renamed) {
      if (std::rename(temps[renamed].c_str(), outputs[renamed].first.c_str()) != 0)
        fail(outputs[renamed].first, "file: cannot move the finished output into place");
    }
  } catch (...) {
    clean_up();
    throw;
  }
}

void run_attention(const AttentionCliOptions& o, bool kernel_given,
                   const AttentionCompute* distributed = nullptr) {
  // 1. Options first: a typo should not cost a read of large inputs.
  Kernel kernel = parse_kernel(o.kernel);
  if (!o.probs.empty()) {
    check(!kernel_given || kernel == Kernel::reference, "--probs",
          "--kernel reference (only the reference kernel materialises probabilities)", o.kernel);
    kernel = Kernel::reference;
  }
  const std::optional<float> scale = parse_scale(o.scale);
  const std::vector<std::int64_t> key_lengths = parse_key_lengths(o.key_lengths);
  const bool backward = !o.grad_out.empty();
  for (const auto& [flag, value] :
       {std::pair{"--grad-q", &o.grad_q}, std::pair{"--grad-k", &o.grad_k},
        std::pair{"--grad-v", &o.grad_v}, std::pair{"--grad-bias", &o.grad_bias}}) {
    if (backward && std::string(flag) != "--grad-bias")
      check(!value->empty(), flag, "a path (--grad-out asks for the gradients of q, k and v)",
            "none");
    if (!backward)
      check(value->empty(), flag, "--grad-out too (the gradient of the loss with respect to out)",
            "none");
  }
  if (!o.grad_bias.empty())
    check(!o.bias.empty(), "--grad-bias", "--bias too (the gradient of which bias?)", "none");
  if (distributed)
    check(o.probs.empty(), "--probs", "none with --distributed (no rank holds every probability)",
          o.probs);
  std::set<std::string> names{o.out};
  for (const std::string* p : {&o.lse, &o.probs, &o.grad_q, &o.grad_k, &o.grad_v, &o.grad_bias})
    if (!p->empty()) check(names.insert(*p).second, "outputs", "distinct paths", *p + " twice");

  // 2. Inputs, each checked for rank and finiteness with its file named.
  const Tensor q = read_input(o.q, 4, "4 dimensions [batch, q_len, heads, head_dim]");
  const Tensor k = read_input(o.k, 4, "4 dimensions [batch, kv_len, kv_heads, head_dim]");
  const Tensor v = read_input(o.v, 4, "4 dimensions [batch, kv_len, kv_heads, v_head_dim]");
  Tensor bias;
  if (!o.bias.empty())
    bias = read_input(o.bias, 4, "4 dimensions [batch or 1, heads or 1, q_len, kv_len]", true);

  // 3. Outputs, sized from the inputs; validate() checks that the sizes agree.
  const std::int64_t batch = q.size(0), q_len = q.size(1), heads = q.size(2);
  const std::int64_t kv_len = k.size(1), v_head_dim = v.size(3);
  Tensor out(DType::f32, {batch, q_len, heads, v_head_dim});
  Tensor lse, probs;
  AttentionParams params;
  params.q = q.view();
  params.k = k.view();
  params.v = v.view();
  params.out = out.view();
  params.scale = scale;
  params.causal = o.causal;
  params.window_left = o.window_left;
  params.window_right = o.window_right;
  params.key_lengths = key_lengths;
  if (!bias.empty()) params.bias = bias.view();
  // The streaming backward reads the forward's lse: computed whenever gradients are asked.
  if (!o.lse.empty() || backward) {
    lse = Tensor(DType::f32, {batch, heads, q_len});
    params.lse = lse.view();
  }
  if (!o.probs.empty()) {
    probs = Tensor(DType::f32, {batch, heads, q_len, kv_len});
    params.probs_mode = ProbsMode::per_head;
    params.probs = probs.view();
  }

  // The loss's gradient with respect to out, in out's shape, and the gradients' buffers.
  Tensor grad_out, d_q, d_k, d_v, d_bias;
  AttentionGrads grads;
  if (backward) {
    grad_out = read_input(o.grad_out, 4,
                          "4 dimensions [batch, q_len, heads, v_head_dim] (the shape of out)");
    check(grad_out.shape() == out.shape(), o.grad_out + ": shape",
          shape_string(out.shape()) + " (the shape of out: [batch, q_len, heads, v_head_dim])",
          shape_string(grad_out.shape()));
    d_q = Tensor(DType::f32, q.shape());
    d_k = Tensor(DType::f32, k.shape());
    d_v = Tensor(DType::f32, v.shape());
    grads = {.d_out = grad_out.view(), .d_q = d_q.view(), .d_k = d_k.view(), .d_v = d_v.view()};
    if (!o.grad_bias.empty()) {
      d_bias = Tensor(DType::f32, bias.shape());
      grads.d_bias = d_bias.view();
    }
    validate_backward(params, grads);  // before any work: the forward's checks and the gradients'
  }

  // 4. Compute.
  Context ctx(ContextOptions{.threads = o.threads});
  const auto start = std::chrono::steady_clock::now();
  if (distributed) {
    (*distributed)(kernel, params, backward ? &grads : nullptr, o.threads);
  } else {
    attention(ctx, kernel, params);
    if (backward) attention_backward(ctx, kernel, params, grads);
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  // 5. Commit every output together.
  std::vector<std::pair<std::string, TensorView>> outputs{{o.out, out.view()}};
  if (!o.lse.empty()) outputs.emplace_back(o.lse, lse.view());
  if (!o.probs.empty()) outputs.emplace_back(o.probs, probs.view());
  if (backward) {
    outputs.emplace_back(o.grad_q, d_q.view());
    outputs.emplace_back(o.grad_k, d_k.view());
    outputs.emplace_back(o.grad_v, d_v.view());
    if (!o.grad_bias.empty()) outputs.emplace_back(o.grad_bias, d_bias.view());
  }
  write_outputs(outputs);

  std::printf("attention: q %s k %s v %s -> out %s%s, kernel %s, %d thread%s, %.3f ms\n",
              shape_string(q.shape()).c_str(), shape_string(k.shape()).c_str(),
              shape_string(v.shape()).c_str(), shape_string(out.shape()).c_str(),
              backward ? (o.grad_bias.empty() ? " and dq, dk, dv" : " and dq, dk, dv, dbias") : "",
              kernel_name(kernel), o.threads, o.threads == 1 ? "" : "s", ms);
}

}  // namespace

#ifndef HEADCOUNT_HAVE_MPI
void run_distributed_attention(const std::string& mode, double,
                               const std::function<void(const AttentionCompute&)>&) {
  fail("--distributed",
       detail::concat(
           "this build has no MPI (configure with -DHEADCOUNT_MPI=ON); got --distributed ", mode));
}
#endif

void register_attention(CLI::App& app) {
  // Shared with the callback, which runs after parsing, when `app` has filled it in.
  auto o = std::make_shared<AttentionCliOptions>();
  CLI::App* cmd = app.add_subcommand("attention", "Run one attention kernel on .npy inputs");
  cmd->add_option("--q", o->q, "Queries .npy [batch, q_len, heads, head_dim]")->required();
  cmd->add_option("--k", o->k, "Keys .npy [batch, kv_len, kv_heads, head_dim]")->required();
  cmd->add_option("--v", o->v, "Values .npy [batch, kv_len, kv_heads, v_head_dim]")->required();
  cmd->add_option("--out", o->out, "Output .npy [batch, q_len, heads, v_head_dim]")->required();
  cmd->add_flag("--causal", o->causal, "Causal mask, aligned to the bottom right");
  cmd->add_option("--scale", o->scale, "Score scale (default 1/sqrt(head_dim))");
  cmd->add_option("--kernel", o->kernel, "reference or streaming")->capture_default_str();
  cmd->add_option("--probs", o->probs,
                  "Write per-head probabilities [batch, heads, q_len, kv_len] (reference kernel)");
  cmd->add_option("--lse", o->lse,
                  "Write the log-sum-exp of the scaled scores [batch, heads, q_len]");
  cmd->add_option("--threads", o->threads, "Workers")->capture_default_str();
  cmd->add_option("--window-left", o->window_left,
                  "Keys visible before the diagonal (-1: unbounded)")
      ->capture_default_str();
  cmd->add_option("--window-right", o->window_right,
                  "Keys visible after the diagonal (-1: unbounded)")
      ->capture_default_str();
  cmd->add_option("--key-lengths", o->key_lengths, "Valid keys per batch element, e.g. 3,5");
  cmd->add_option("--bias", o->bias, "Additive bias .npy [batch or 1, heads or 1, q_len, kv_len]");
  cmd->add_option(
      "--grad-out", o->grad_out,
      "Gradient G .npy of a loss with respect to out (shape of out): writes the gradients of "
      "sum(out * G)");
  cmd->add_option("--grad-q", o->grad_q, "Write dL/dq .npy (with --grad-out)");
  cmd->add_option("--grad-k", o->grad_k, "Write dL/dk .npy (with --grad-out)");
  cmd->add_option("--grad-v", o->grad_v, "Write dL/dv .npy (with --grad-out)");
  cmd->add_option("--grad-bias", o->grad_bias,
                  "Write dL/dbias .npy, the shape of --bias (with --grad-out)");

  cmd->add_option("--distributed", o->distributed,
                  "Under mpirun: split the heads (heads) or the sequence (ring) over the ranks; "
                  "rank 0 reads and "
                  "writes the files");
  cmd->add_option("--timeout", o->timeout,
                  "With --distributed: seconds a rank waits for the others before the job is "
                  "ended, naming the rank that did not arrive (0: forever)")
      ->capture_default_str();

  cmd->callback([o, cmd] {
    const bool kernel_given = cmd->count("--kernel") > 0;
    if (o->distributed.empty()) return run_attention(*o, kernel_given);
    run_distributed_attention(o->distributed, o->timeout, [&](const AttentionCompute& compute) {
      run_attention(*o, kernel_given, &compute);
    });
  });
}

}  // namespace headcount::cli
