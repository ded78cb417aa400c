// Uptraining a converted encoder by distillation (encoder_training.h):
//
//   corpus text -> sentences -> token ids (the teacher's tokenizer), kept with
//   min_tokens <= T <= max_tokens, sorted by T and cut into padded batches of batch_size
//   (key padding in both models); the batch order shuffled from `seed` per step (cycling
//   through the order):
//     x   = teacher embedding LayerNorm output [B, T, d]     (frozen, shared by both)
//     h_t = teacher.forward(batch)                            (BertEncoder, MHA)
//     h_s = student.forward_hidden(x)                         (train::Model, e.g. GQA)
//     L   = mean over the sentences' tokens and features of (h_s - h_t)²;
//     dL/dh_s = 2 (h_s - h_t) / (tokens · d), 0 on padded rows
//     backward_hidden, clip, AdamW step (OptimConfig's schedule)
// Final hidden states rather than the pooled embedding: every token's state is a target
// (T·d numbers per sentence instead of d), and matching them matches their mean, which is what
// the sentence embedding is; the pooled embedding alone leaves the per-token states free.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>

#include "headcount/encoder_training.h"
#include "headcount/error.h"
#include "headcount/train/definition.h"

namespace headcount {

using detail::concat;

std::vector<std::string> split_sentences(const std::string& text) {
  std::vector<std::string> out;
  std::string current;
  bool space = false;
  auto flush = [&] {
    while (!current.empty() && current.back() == ' ') current.pop_back();
    if (!current.empty()) out.push_back(current);
    current.clear();
    space = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '\n' && i + 1 < text.size() && text[i + 1] == '\n') {  // a blank line ends a sentence
      flush();
      continue;
    }
    if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') {
      space = !current.empty();
      continue;
    }
    if (space) current.push_back(' ');
    space = false;
    current.push_back(ch);
    if (ch == '.' || ch == '!' || ch == '?') {
      // Closing quotes and brackets stay with their sentence.
      while (i + 1 < text.size() &&
             (text[i + 1] == '"' || text[i + 1] == '\'' || text[i + 1] == ')'))
        current.push_back(text[++i]);
      flush();
    }
  }
  flush();
  return out;
}

namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Sentences kept by token count, in padded batches of neighbouring lengths (batch_by_length).
std::vector<TokenBatch> length_batches(const BertEncoder& teacher,
                                       const std::vector<std::string>& sentences,
                                       const DistillOptions& o, std::int64_t& kept) {
  std::vector<std::vector<std::int32_t>> ids;
  for (const std::string& s : sentences) {
    std::vector<std::int32_t> t = teacher.tokenizer().encode(s);
    const auto T = static_cast<std::int64_t>(t.size());
    if (T >= o.min_tokens && T <= o.max_tokens) ids.push_back(std::move(t));
  }
  kept = static_cast<std::int64_t>(ids.size());
  std::vector<TokenBatch> batches;
  for (LengthBatch& b : batch_by_length(ids, o.batch_size, teacher.tokenizer().pad_id()))
    batches.push_back(std::move(b.tokens));
  return batches;
}

}  // namespace

DistillResult distill_encoder(Context& ctx, const BertEncoder& teacher,
                              const EncoderWeights& student,
                              const std::vector<std::string>& sentences, const DistillOptions& o) {
  HEADCOUNT_CHECK(o.steps > 0 || (std::isfinite(o.seconds) && o.seconds > 0), "uptraining budget",
                  "a step count > 0 or a number of seconds > 0",
                  concat(o.steps, " steps, ", o.seconds, " s"));
  HEADCOUNT_CHECK(o.batch_size >= 1, "uptraining batch size", ">= 1", o.batch_size);
  HEADCOUNT_CHECK(o.min_tokens >= 1 && o.min_tokens <= o.max_tokens, "uptraining token range",
                  "1 <= min_tokens <= max_tokens", concat(o.min_tokens, " .. ", o.max_tokens));
  const EncoderConfig &tc = teacher.config(), &sc = student.config;
  bool same_heads = sc.layers == tc.layers;
  for (std::int64_t l = 0; same_heads && l < tc.layers; ++l)
    same_heads = sc.layer_heads(l) == tc.layer_heads(l);
  HEADCOUNT_CHECK(sc.hidden_size == tc.hidden_size &&
                      sc.intermediate_size == tc.intermediate_size && same_heads,
                  "student",
                  concat("the teacher's shape but for K/V heads (", tc.layers, " layers, d ",
                         tc.hidden_size, tc.is_pruned() ? ", the same heads pruned" : "", ")"),
                  concat(sc.layers, " layers, d ", sc.hidden_size,
                         sc.is_pruned() || tc.is_pruned() ? ", other heads per layer" : ""));
  DistillResult r;
  const std::vector<TokenBatch> batches = length_batches(teacher, sentences, o, r.sentences);
  r.batches_available = static_cast<std::int64_t>(batches.size());
  HEADCOUNT_CHECK(!batches.empty(), "uptraining corpus",
                  concat("sentences of ", o.min_tokens, " to ", o.max_tokens, " tokens"), "none");

  train::Model model = train::from_weights(student.model, train::WeightParts::layers);
  // A time budget has no known step count: the schedule then decays over a nominal 1e9 steps
  // (in effect constant after warm-up unless min_lr < lr is asked for with --uptrain-steps).
  const train::OptimConfig optim = train::resolve(o.optim, o.steps > 0 ? o.steps : 1'000'000'000);
  train::AdamW adam(model.parameters(), optim);
  std::vector<std::size_t> order(batches.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(o.seed);
  std::shuffle(order.begin(), order.end(), rng);

  const std::int64_t d = tc.hidden_size;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (std::int64_t step = 0; o.steps > 0 ? step < o.steps : elapsed() < o.seconds; ++step) {
    const TokenBatch& b = batches[order[static_cast<std::size_t>(step) % order.size()]];
    const Tensor x = encoder_layer_input(ctx, teacher, b);
    Tensor target(DType::f32, {b.batch, b.seq_len, d}), hidden(DType::f32, {b.batch, b.seq_len, d});
    teacher.executor().forward(ctx, b, target.view(), {.kernel = o.kernel});
    model.forward_hidden(ctx, b.batch, b.seq_len, x.data<const float>(), hidden.data<float>(),
                         {.kernel = o.kernel, .key_lengths = b.lengths});
    // The loss over the sentences' own tokens; the padded rows get zero gradient (so nothing
    // flows from them, train/model.h's key padding).
    std::int64_t tokens = 0;
    for (std::int64_t len : b.lengths) tokens += len;
    const double n = static_cast<double>(tokens * d);
    float* g = hidden.data<float>();  // becomes dL/dh_s in place
    const float* t = target.data<const float>();
    double loss = 0;
    for (std::int64_t row = 0; row < b.batch * b.seq_len; ++row) {
      const bool valid = row % b.seq_len < b.lengths[static_cast<std::size_t>(row / b.seq_len)];
      for (std::int64_t i = row * d; i < (row + 1) * d; ++i) {
        const double diff = valid ? static_cast<double>(g[i]) - t[i] : 0.0;
        loss += diff * diff;
        g[i] = static_cast<float>(2.0 * diff / n);
      }
    }
    loss /= n;
    HEADCOUNT_CHECK(std::isfinite(loss), "uptraining loss", "a finite value",
                    concat(loss, " at step ", step));
    model.backward_hidden(ctx, g);
    if (optim.grad_clip > 0) train::clip_grad_norm(model.parameters(), optim.grad_clip);
    adam.step(ctx, model.parameters(), train::learning_rate(optim, step));
    if (step == 0) r.first_loss = loss;
    r.last_loss = loss;
    r.steps = step + 1;
    if (o.progress) o.progress(step, loss);
  }
  r.wall_seconds = elapsed();
  r.cpu_seconds = cpu_seconds() - cpu_start;
  r.student = {
      .source_dir = student.source_dir, .config = student.config, .model = student.model.clone()};
  train::write_weights(model, r.student.model, train::WeightParts::layers);
  return r;
}

}  // namespace headcount
