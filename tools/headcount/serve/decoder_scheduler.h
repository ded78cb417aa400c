// Continuous batching for the decoder. The HTTP threads tokenize and submit; ONE scheduler thread
// owns the model's Context and loops:
//   - admit: waiting requests take free slots (at most --parallel hold one), in arrival order;
//   - prefill: the oldest slot still prefilling gets its prompt's next chunk of
//     --prefill-chunk tokens (Transformer::prefill into its own KvCache: every chunk's rows are
//     bitwise those of one prefill of the whole prompt, as generate runs it); with no request
//     decoding, the whole rest of the prompt at once. The last chunk chooses the first token;
//   - step: one Transformer::decode over every request that is decoding, each with its own
//     cache and position (one pass over the weights for all of them), each one's next token
//     chosen.
// So a long prompt delays the running streams by one chunk per step, not by its whole prefill.
// Every row of decode() is bitwise what the sequence's own forward gives alone, and each
// request has its own TokenChooser (generate's seeded draws), so a completion is bitwise
// `headcount generate`'s for the same prompt, options and seed, whatever else is running: the
// result does not depend on the load. (A bf16 or int8 KV cache holds rounded keys, which a
// later chunk would read where the one-shot prefill reads the exact projections: with those
// the prompt is prefilled whole.)
// A request whose client has gone (cancel) or whose deadline has passed leaves at the next step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "headcount/context.h"
#include "headcount/kv_cache.h"
#include "headcount/transformer.h"
#include "metrics.h"
#include "scheduler.h"

namespace headcount::serve {

struct DecoderSchedulerOptions {
  int threads = 1;              // the model's worker pool (--threads)
  int parallel = 4;             // requests decoding at once (--parallel)
  std::size_t max_queue = 256;  // requests waiting for a slot; one more is refused (503)
  CacheDType kv_dtype = CacheDType::f32;
  std::int32_t eos = -1;            // ends a request (finish_reason "stop"); -1: none
  std::int64_t prefill_chunk = 32;  // prompt tokens per prefill call between steps; 0: whole
};

struct DecodeJob {
  std::vector<std::int32_t> prompt;  // 1 to context - max_tokens ids (checked by the routes)
  std::int64_t max_tokens = 16;      // new tokens at most; 0: the prompt is only scored (echo)
  float temperature = 1, top_p = 1;
  std::uint64_t seed = 0;
  bool stop_at_eos = true;       // false: run to max_tokens (ignore_eos)
  int top_logprobs = -1;         // -1: no log-probabilities; else alternatives per token
  bool prompt_logprobs = false;  // each prompt token's log-probability too (echo)
  Clock::time_point deadline;
};

// A token and, when asked, its log-probability under the model (log-softmax of the logits, in
// double: the distribution before temperature and top_p) and the most likely alternatives
// (largest first; the lower id first on a tie).
struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<std::int32_t, float>> top;
};

// One request's tokens on their way from the scheduler thread to its HTTP thread.
class DecodeStream {
 public:
  struct Update {
    std::vector<TokenLogprob> tokens;  // arrived since the last next()
    bool done = false;
    std::string finish_reason;  // when done without error: "stop" (EOS) or "length"
    int error_status = 0;       // when done with an error: 504 (deadline), 500, 503
    std::string error_message;
  };
  // Waits up to `wait` for news (or until the deadline: then 504, and the request is cancelled).
  Update next(std::chrono::milliseconds wait);
  // The client has gone, or a stop string has ended the text: the slot is freed at next step.
  void cancel();
  bool cancelled() const;
  // Each prompt token's log-probability but the first's (DecodeJob::prompt_logprobs): complete
  // once next() has returned a token or done.
  const std::vector<TokenLogprob>& prompt_logprobs() const { return prompt_logprobs_; }

 private:
  friend class DecoderScheduler;
  void push(TokenLogprob token);
  void finish(std::string reason, int error_status = 0, std::string error_message = {});

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<TokenLogprob> pending_;
  bool done_ = false, cancelled_ = false;
  std::string finish_reason_, error_message_;
  int error_status_ = 0;
  Clock::time_point deadline_;
  std::vector<TokenLogprob> prompt_logprobs_;
};

class DecoderScheduler {
 public:
  // `model` must outlive the scheduler; starts the scheduler thread (which owns the Context).
  DecoderScheduler(const Transformer& model, const DecoderSchedulerOptions& options,
                   Metrics& metrics);
  ~DecoderScheduler();  // stop()
  DecoderScheduler(const DecoderScheduler&) = delete;
  DecoderScheduler& operator=(const DecoderScheduler&) = delete;

  // Queues the job; throws ApiError 503 (Retry-After) when max_queue requests already wait or
  // after stop(). Called from the HTTP threads.
  std::shared_ptr<DecodeStream> submit(DecodeJob job);

  // Finishes every queued and running request, then joins the thread. Idempotent.
  void stop();

 private:
  struct Waiting;
  struct Slot;
  void loop();
  // A prefill chunk of the oldest slot still prefilling (the whole rest of its prompt when no
  // slot is decoding); its last chunk chooses the first token.
  void prefill(Context& ctx, std::vector<Slot>& slots);
  void step(Context& ctx, std::vector<Slot>& slots);

  const Transformer& model_;
  DecoderSchedulerOptions options_;
  Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Waiting>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

// The log-probability of `token` and the `top` most likely tokens under one row of logits.
TokenLogprob token_logprob(std::span<const float> logits, std::int32_t token, int top);

}  // namespace headcount::serve
