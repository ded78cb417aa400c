#include "decoder_scheduler.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>

#include "api_error.h"
#include "headcount/decoder.h"

namespace headcount::serve {

// ---- DecodeStream: the HTTP thread's side ---------------------------------------------------

DecodeStream::Update DecodeStream::next(std::chrono::milliseconds wait) {
  std::unique_lock lock(mutex_);
  const Clock::time_point until = std::min(Clock::now() + wait, deadline_);
  changed_.wait_until(lock, until, [&] { return done_ || !pending_.empty(); });
  if (!done_ && pending_.empty() && Clock::now() >= deadline_) {
    // Past the deadline with nothing new: end it here (the scheduler drops it at its next step).
    done_ = cancelled_ = true;
    error_status_ = 504;
    error_message_ = "the request took longer than its deadline (--timeout-s)";
  }
  Update update{.tokens = std::move(pending_), .done = done_};
  pending_.clear();
  if (done_) {
    update.finish_reason = finish_reason_;
    update.error_status = error_status_;
    update.error_message = error_message_;
  }
  return update;
}

void DecodeStream::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
}

bool DecodeStream::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

void DecodeStream::push(TokenLogprob token) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(token));
  }
  changed_.notify_all();
}

void DecodeStream::finish(std::string reason, int error_status, std::string error_message) {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;  // the HTTP side already ended it at the deadline
    done_ = true;
    finish_reason_ = std::move(reason);
    error_status_ = error_status;
    error_message_ = std::move(error_message);
  }
  changed_.notify_all();
}

// ---- log-probabilities ----------------------------------------------------------------------

TokenLogprob token_logprob(std::span<const float> logits, std::int32_t token, int top) {
  double max = -std::numeric_limits<double>::infinity();
  for (const float x : logits) max = std::max(max, static_cast<double>(x));
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_z = max + std::log(sum);
  TokenLogprob out{.token = token,
                   .logprob = static_cast<float>(logits[static_cast<std::size_t>(token)] - log_z)};
  if (top > 0) {
    std::vector<std::int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    const auto k = std::min<std::size_t>(static_cast<std::size_t>(top), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [&](std::int32_t a, std::int32_t b) {
                        const float la = logits[static_cast<std::size_t>(a)];
                        const float lb = logits[static_cast<std::size_t>(b)];
                        return la > lb || (la == lb && a < b);
                      });
    for (std::size_t i = 0; i < k; ++i)
      out.top.emplace_back(ids[i],
                           static_cast<float>(logits[static_cast<std::size_t>(ids[i])] - log_z));
  }
  return out;
}

// ---- the scheduler --------------------------------------------------------------------------

struct DecoderScheduler::Waiting {
  DecodeJob job;
  std::shared_ptr<DecodeStream> stream;
  Clock::time_point submitted;
};

struct DecoderScheduler::Slot {
  std::shared_ptr<DecodeStream> stream;
  KvCache cache;
  TokenChooser chooser;
  std::int32_t last = 0;      // the token to feed back at the next step
  std::int64_t produced = 0;  // new tokens so far
  std::int64_t max_tokens = 0;
  int top_logprobs = -1;
  Clock::time_point deadline;
};

DecoderScheduler::DecoderScheduler(const Transformer& model, const DecoderSchedulerOptions& options,
                                   Metrics& metrics)
    : model_(model), options_(options), metrics_(metrics) {
  thread_ = std::thread([this] { loop(); });
}

DecoderScheduler::~DecoderScheduler() { stop(); }

void DecoderScheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<DecodeStream> DecoderScheduler::submit(DecodeJob job) {
  auto waiting = std::make_shared<Waiting>();
  waiting->stream = std::make_shared<DecodeStream>();
  waiting->stream->deadline_ = job.deadline;
  waiting->job = std::move(job);
  waiting->submitted = Clock::now();
  {
    std::lock_guard lock(mutex_);
    if (stopping_)
      throw ApiError(503, "the server is shutting down", "server_error", "", "shutting_down");
    if (queue_.size() >= options_.max_queue)
      throw ApiError(503,
                     "the completion queue is full (" + std::to_string(options_.max_queue) +
                         " requests waiting for a slot, --max-queue); retry later",
                     "server_error", "", "queue_full");
    queue_.push_back(waiting);
    metrics_.set_decoder_queue_depth(static_cast<std::int64_t>(queue_.size()));
  }
  wake_.notify_one();
  return waiting->stream;
}

void DecoderScheduler::loop() {
  Context ctx({.threads = options_.threads});
  std::vector<Slot> running;
  while (true) {
    std::shared_ptr<Waiting> next;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !running.empty(); });
      if (queue_.empty() && running.empty()) break;  // only when stopping
      // One admission per step: a new prompt's prefill runs between two steps of the running
      // requests, so a burst of arrivals does not stall them for a whole burst of prefills.
      if (!queue_.empty() && running.size() < static_cast<std::size_t>(options_.parallel)) {
        next = std::move(queue_.front());
        queue_.pop_front();
        metrics_.set_decoder_queue_depth(static_cast<std::int64_t>(queue_.size()));
      }
    }
    try {
      if (next) admit(ctx, *next, running);
      step(ctx, running);
    } catch (const std::exception& e) {
      // Not expected (the routes check every input): end what was in flight, keep serving.
      const std::string message = std::string("internal error: ") + e.what();
      if (next) next->stream->finish("", 500, message);
      for (Slot& slot : running) slot.stream->finish("", 500, message);
      running.clear();
    }
    metrics_.set_decoder_running(static_cast<std::int64_t>(running.size()));
  }
}

void DecoderScheduler::admit(Context& ctx, Waiting& waiting, std::vector<Slot>& running) {
  DecodeStream& stream = *waiting.stream;
  const DecodeJob& job = waiting.job;
  if (stream.cancelled()) return;  // its client left (or its deadline passed) while it waited
  if (Clock::now() >= job.deadline)
    return stream.finish("", 504, "the request waited for a slot past its deadline (--timeout-s)");
  const auto n = static_cast<std::int64_t>(job.prompt.size());
  const std::int64_t vocab = model_.config().vocab;
  // As generate_tokens: the prompt and every new token but the last (never fed back).
  KvCache cache =
      model_.make_cache(n + std::max<std::int64_t>(job.max_tokens, 1) - 1, options_.kv_dtype);
  const Tensor logits =
      model_.forward(ctx, job.prompt, cache, job.prompt_logprobs ? Logits::all : Logits::last);
  const float* rows = logits.data<const float>();
  if (job.prompt_logprobs) {
    std::vector<TokenLogprob> scored;
    for (std::int64_t i = 0; i + 1 < n; ++i)
      scored.push_back(token_logprob({rows + i * vocab, static_cast<std::size_t>(vocab)},
                                     job.prompt[static_cast<std::size_t>(i + 1)],
                                     std::max(job.top_logprobs, 0)));
    std::lock_guard lock(stream.mutex_);  // published before the first token or done
    stream.prompt_logprobs_ = std::move(scored);
  }
  metrics_.record_prompt(n);
  if (job.max_tokens == 0) return stream.finish("length");
  const std::span<const float> last(rows + (job.prompt_logprobs ? (n - 1) * vocab : 0),
                                    static_cast<std::size_t>(vocab));
  Slot slot{.stream = waiting.stream,
            .cache = std::move(cache),
            .chooser = TokenChooser(job.temperature, job.top_p, job.seed),
            .max_tokens = job.max_tokens,
            .top_logprobs = job.top_logprobs,
            .deadline = job.deadline};
  slot.last = slot.chooser(last);
  slot.produced = 1;
  stream.push(job.top_logprobs >= 0 ? token_logprob(last, slot.last, job.top_logprobs)
                                    : TokenLogprob{.token = slot.last});
  metrics_.record_first_token(
      std::chrono::duration<double>(Clock::now() - waiting.submitted).count());
  metrics_.record_generated(1);
  if (slot.last == options_.eos) return stream.finish("stop");
  if (slot.produced >= slot.max_tokens) return stream.finish("length");
  running.push_back(std::move(slot));
}

void DecoderScheduler::step(Context& ctx, std::vector<Slot>& running) {
  // Requests whose client left, or whose deadline passed, leave before the step.
  const Clock::time_point now = Clock::now();
  std::erase_if(running, [&](Slot& slot) {
    if (slot.stream->cancelled()) return true;
    if (now < slot.deadline) return false;
    slot.stream->finish("", 504, "the request took longer than its deadline (--timeout-s)");
    return true;
  });
  if (running.empty()) return;
  std::vector<std::int32_t> ids;
  std::vector<KvCache*> caches;
  for (Slot& slot : running) {
    ids.push_back(slot.last);
    caches.push_back(&slot.cache);
  }
  const Tensor logits = model_.decode(ctx, ids, caches);
  const std::int64_t vocab = model_.config().vocab;
  metrics_.record_decode_step(static_cast<std::int64_t>(running.size()));
  for (std::size_t b = 0; b < running.size(); ++b) {
    Slot& slot = running[b];
    const std::span<const float> row(
        logits.data<const float>() + static_cast<std::int64_t>(b) * vocab,
        static_cast<std::size_t>(vocab));
    slot.last = slot.chooser(row);
    ++slot.produced;
    slot.stream->push(slot.top_logprobs >= 0 ? token_logprob(row, slot.last, slot.top_logprobs)
                                             : TokenLogprob{.token = slot.last});
    if (slot.last == options_.eos)
      slot.stream->finish("stop");
    else if (slot.produced >= slot.max_tokens)
      slot.stream->finish("length");
  }
  metrics_.record_generated(static_cast<std::int64_t>(running.size()));
  std::erase_if(running, [](const Slot& slot) {
    std::lock_guard lock(slot.stream->mutex_);
    return slot.stream->done_;
  });
}

}  // namespace headcount::serve
