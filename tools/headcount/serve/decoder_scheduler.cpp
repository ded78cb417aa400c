#include "decoder_scheduler.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>

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
  std::shared_ptr<Waiting> request;
  KvCache cache;
  std::optional<TokenChooser> chooser;
  std::int64_t prefilled = 0;  // prompt rows in the cache; the request decodes once all are
  std::vector<TokenLogprob> prompt_scored;
  std::int32_t last = 0;      // the token to feed back at the next step
  std::int64_t produced = 0;  // new tokens so far

  bool decoding() const {
    return prefilled == static_cast<std::int64_t>(request->job.prompt.size());
  }
  DecodeStream& stream() const { return *request->stream; }
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
  std::vector<Slot> slots;  // in admission order
  while (true) {
    std::vector<std::shared_ptr<Waiting>> admitted;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !slots.empty(); });
      if (queue_.empty() && slots.empty()) break;  // only when stopping
      while (!queue_.empty() &&
             slots.size() + admitted.size() < static_cast<std::size_t>(options_.parallel)) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      metrics_.set_decoder_queue_depth(static_cast<std::int64_t>(queue_.size()));
    }
    try {
      for (std::shared_ptr<Waiting>& w : admitted) {
        if (w->stream->cancelled()) continue;  // its client left while it waited
        if (Clock::now() >= w->job.deadline) {
          w->stream->finish("", 504,
                            "the request waited for a slot past its deadline (--timeout-s)");
          continue;
        }
        // As generate_tokens: the prompt and every new token but the last (never fed back).
        const auto n = static_cast<std::int64_t>(w->job.prompt.size());
        KvCache cache = model_.make_cache(n + std::max<std::int64_t>(w->job.max_tokens, 1) - 1,
                                          options_.kv_dtype);
        slots.push_back(Slot{.request = std::move(w), .cache = std::move(cache)});
      }
      // Requests whose client left, or whose deadline passed, leave before any work.
      const Clock::time_point now = Clock::now();
      std::erase_if(slots, [&](Slot& slot) {
        if (slot.stream().cancelled()) return true;
        if (now < slot.request->job.deadline) return false;
        slot.stream().finish("", 504, "the request took longer than its deadline (--timeout-s)");
        return true;
      });
      prefill(ctx, slots);
      step(ctx, slots);
    } catch (const std::exception& e) {
      // Not expected (the routes check every input): end what was in flight, keep serving.
      const std::string message = std::string("internal error: ") + e.what();
      for (Slot& slot : slots) slot.stream().finish("", 500, message);
      slots.clear();
    }
    std::int64_t decoding = 0;
    for (const Slot& slot : slots) decoding += slot.decoding() ? 1 : 0;
    metrics_.set_decoder_running(decoding);
  }
}

void DecoderScheduler::prefill(Context& ctx, std::vector<Slot>& slots) {
  const auto it =
      std::find_if(slots.begin(), slots.end(), [](const Slot& slot) { return !slot.decoding(); });
  if (it == slots.end()) return;
  Slot& slot = *it;
  const DecodeJob& job = slot.request->job;
  DecodeStream& stream = slot.stream();
  const auto n = static_cast<std::int64_t>(job.prompt.size());
  const std::int64_t vocab = model_.config().vocab;
  const bool others_decoding =
      std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.decoding(); });
  const bool chunked = options_.prefill_chunk > 0 && options_.kv_dtype == CacheDType::f32;
  const std::int64_t len = chunked && others_decoding
                               ? std::min(options_.prefill_chunk, n - slot.prefilled)
                               : n - slot.prefilled;
  const std::span<const std::int32_t> rows =
      std::span<const std::int32_t>(job.prompt)
          .subspan(static_cast<std::size_t>(slot.prefilled), static_cast<std::size_t>(len));
  const Tensor logits =
      model_.prefill(ctx, rows, slot.cache, job.prompt_logprobs ? Logits::all : Logits::last);
  const float* out = logits.data<const float>();
  if (job.prompt_logprobs)  // row i predicts prompt token i + 1
    for (std::int64_t i = 0; i < len && slot.prefilled + i + 1 < n; ++i)
      slot.prompt_scored.push_back(
          token_logprob({out + i * vocab, static_cast<std::size_t>(vocab)},
                        job.prompt[static_cast<std::size_t>(slot.prefilled + i + 1)],
                        std::max(job.top_logprobs, 0)));
  slot.prefilled += len;
  metrics_.record_prompt(len);
  if (!slot.decoding()) return;

  // The prompt is in: publish its scores, then choose the first token from its last row.
  {
    std::lock_guard lock(stream.mutex_);  // before the first token or done
    stream.prompt_logprobs_ = std::move(slot.prompt_scored);
  }
  if (job.max_tokens == 0) {  // echo alone: the prompt scored, nothing generated
    stream.finish("length");
    slots.erase(it);
    return;
  }
  const std::span<const float> last(out + (job.prompt_logprobs ? (len - 1) * vocab : 0),
                                    static_cast<std::size_t>(vocab));
  slot.chooser.emplace(job.temperature, job.top_p, job.seed);
  slot.last = (*slot.chooser)(last);
  slot.produced = 1;
  stream.push(job.top_logprobs >= 0 ? token_logprob(last, slot.last, job.top_logprobs)
                                    : TokenLogprob{.token = slot.last});
  metrics_.record_first_token(
      std::chrono::duration<double>(Clock::now() - slot.request->submitted).count());
  metrics_.record_generated(1);
  if (job.stop_at_eos && slot.last == options_.eos)
    stream.finish("stop");
  else if (slot.produced >= job.max_tokens)
    stream.finish("length");
  else
    return;
  slots.erase(it);
}

void DecoderScheduler::step(Context& ctx, std::vector<Slot>& slots) {
  std::vector<std::int32_t> ids;
  std::vector<KvCache*> caches;
  std::vector<Slot*> running;
  for (Slot& slot : slots)
    if (slot.decoding()) {
      ids.push_back(slot.last);
      caches.push_back(&slot.cache);
      running.push_back(&slot);
    }
  if (running.empty()) return;
  const Tensor logits = model_.decode(ctx, ids, caches);
  const std::int64_t vocab = model_.config().vocab;
  metrics_.record_decode_step(static_cast<std::int64_t>(running.size()));
  for (std::size_t b = 0; b < running.size(); ++b) {
    Slot& slot = *running[b];
    const DecodeJob& job = slot.request->job;
    const std::span<const float> row(
        logits.data<const float>() + static_cast<std::int64_t>(b) * vocab,
        static_cast<std::size_t>(vocab));
    slot.last = (*slot.chooser)(row);
    ++slot.produced;
    slot.stream().push(job.top_logprobs >= 0 ? token_logprob(row, slot.last, job.top_logprobs)
                                             : TokenLogprob{.token = slot.last});
    if (job.stop_at_eos && slot.last == options_.eos)
      slot.stream().finish("stop");
    else if (slot.produced >= job.max_tokens)
      slot.stream().finish("length");
  }
  metrics_.record_generated(static_cast<std::int64_t>(running.size()));
  std::erase_if(slots, [](const Slot& slot) {
    std::lock_guard lock(slot.stream().mutex_);
    return slot.stream().done_;
  });
}

}  // namespace headcount::serve
