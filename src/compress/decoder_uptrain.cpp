// Uptraining a Llama-family decoder (decoder_training.h):
//
//   window s mod W of `ids` (W = (ids - 1) / seq_len windows; the token after each is its last
//   target)
//     teacher logits = LlamaDecoder(teacher).executor().forward(window)
//                                       (distill only; the packed inference path, fp32)
//     student: train::Model (the same definition, training executor) forward_backward with
//              teacher_logits (KL) or with the targets (cross-entropy)
//     clip, AdamW step (OptimConfig's schedule)
//   then the student's weights written back into the definition.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "headcount/decoder.h"
#include "headcount/decoder_training.h"
#include "headcount/error.h"
#include "headcount/train/definition.h"

namespace headcount {

using detail::concat;

UptrainLoss parse_uptrain_loss(const std::string& name) {
  if (name == "distill") return UptrainLoss::distill;
  if (name == "text") return UptrainLoss::text;
  fail("--uptrain-loss", concat("expected distill or text, got ", name));
}

const char* uptrain_loss_name(UptrainLoss loss) {
  return loss == UptrainLoss::distill ? "distill" : "text";
}

DecoderUptrainResult uptrain_decoder(Context& ctx, const LlamaDecoder& teacher,
                                     const model::Weights& student,
                                     std::span<const std::int32_t> ids,
                                     const DecoderUptrainOptions& o) {
  HEADCOUNT_CHECK(o.steps >= 1, "uptrain steps", ">= 1", o.steps);
  HEADCOUNT_CHECK(o.seq_len >= 2 && o.seq_len <= student.config.context, "uptrain seq_len",
                  concat("in [2, the model's context = ", student.config.context, "]"), o.seq_len);
  const auto n = static_cast<std::int64_t>(ids.size());
  HEADCOUNT_CHECK(n >= o.seq_len + 1, "uptrain text",
                  concat("at least seq_len + 1 = ", o.seq_len + 1, " tokens"),
                  concat(n, " tokens"));
  HEADCOUNT_CHECK(teacher.config().vocab == student.config.vocab, "teacher",
                  concat("the student's vocabulary of ", student.config.vocab),
                  teacher.config().vocab);
  const std::int64_t vocab = student.config.vocab;
  for (std::int32_t id : ids)
    HEADCOUNT_CHECK(id >= 0 && id < vocab, "uptrain text", concat("token ids in [0, ", vocab, ")"),
                    id);
  const train::OptimConfig optim = train::resolve(o.optim, o.steps);
  train::Model model = train::from_weights(student);
  train::AdamW adam(model.parameters(), optim);

  DecoderUptrainResult r;
  r.windows = (n - 1) / o.seq_len;
  r.steps = o.steps;
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> losses;
  train::Batch batch{.batch = 1, .seq_len = o.seq_len};
  for (std::int64_t step = 0; step < o.steps; ++step) {
    const std::int64_t first = (step % r.windows) * o.seq_len;
    const std::span<const std::int32_t> window =
        ids.subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(o.seq_len));
    batch.tokens.assign(window.begin(), window.end());
    batch.targets.assign(ids.begin() + first + 1, ids.begin() + first + 1 + o.seq_len);
    train::ForwardOptions options;
    Tensor teacher_logits;
    if (o.loss == UptrainLoss::distill) {
      KvCache cache = teacher.make_cache(o.seq_len);
      teacher_logits = teacher.executor().forward(ctx, window, cache, Logits::all);
      options.teacher_logits = teacher_logits.data<const float>();
    }
    const train::StepResult s = model.forward_backward(ctx, batch, options);
    HEADCOUNT_CHECK(std::isfinite(s.loss), "uptraining", "a finite loss",
                    concat(s.loss, " at step ", step, " (lower --uptrain-lr)"));
    losses.push_back(s.loss);
    if (optim.grad_clip > 0) train::clip_grad_norm(model.parameters(), optim.grad_clip);
    adam.step(ctx, model.parameters(), train::learning_rate(optim, step));
    r.tokens += o.seq_len;
    if (o.progress) o.progress(step, s.loss);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.first_loss = losses.front();
  const std::size_t tail = std::min<std::size_t>(10, losses.size());
  double sum = 0;
  for (std::size_t i = losses.size() - tail; i < losses.size(); ++i) sum += losses[i];
  r.last_loss = sum / static_cast<double>(tail);
  r.student = student.clone();
  train::write_weights(model, r.student);
  return r;
}

}  // namespace headcount
