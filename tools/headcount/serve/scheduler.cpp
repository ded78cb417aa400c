#include "scheduler.h"

#include <algorithm>
#include <atomic>
#include <exception>

#include "api_error.h"
#include "headcount/context.h"
#include "headcount/error.h"

namespace headcount::serve {

struct EmbeddingScheduler::Pending {
  EmbedJob job;
  std::int64_t tokens = 0;
  std::promise<std::vector<float>> promise;
  // Set by the HTTP thread that gave up waiting (504): the scheduler then skips the job.
  std::atomic<bool> abandoned{false};
};

EmbeddingScheduler::EmbeddingScheduler(const BertEncoder& encoder, const SchedulerOptions& options,
                                       Metrics& metrics)
    : encoder_(encoder), options_(options), metrics_(metrics) {
  thread_ = std::thread([this] { loop(); });
}

EmbeddingScheduler::~EmbeddingScheduler() { stop(); }

void EmbeddingScheduler::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<float> EmbeddingScheduler::run(EmbedJob job) {
  auto pending = std::make_shared<Pending>();
  for (const auto& ids : job.ids) pending->tokens += static_cast<std::int64_t>(ids.size());
  pending->job = std::move(job);
  const Clock::time_point deadline = pending->job.deadline;
  std::future<std::vector<float>> result = pending->promise.get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping_)
      throw ApiError(503, "the server is shutting down", "server_error", "", "shutting_down");
    if (queue_.size() >= options_.max_queue)
      throw ApiError(503,
                     "the embedding queue is full (" + std::to_string(options_.max_queue) +
                         " requests waiting, --max-queue); retry later",
                     "server_error", "", "queue_full");
    queue_.push_back(pending);
    metrics_.set_queue_depth(static_cast<std::int64_t>(queue_.size()));
  }
  wake_.notify_one();
  if (result.wait_until(deadline) != std::future_status::ready) {
    pending->abandoned.store(true);
    {
      // Still waiting: give its queue slot back now, not when the scheduler reaches it.
      std::lock_guard lock(mutex_);
      if (const auto it = std::find(queue_.begin(), queue_.end(), pending); it != queue_.end()) {
        queue_.erase(it);
        metrics_.set_queue_depth(static_cast<std::int64_t>(queue_.size()));
      }
    }
    throw ApiError(504,
                   "the request's deadline passed before its embeddings were ready (--timeout-s)",
                   "timeout_error", "", "timeout");
  }
  return result.get();
}

void EmbeddingScheduler::loop() {
  // The Context lives on this thread alone: it sizes its workspaces once and reuses them.
  Context ctx({.threads = options_.threads});
  std::vector<std::shared_ptr<Pending>> step;
  while (true) {
    step.clear();
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every queued job is done
      // Take requests in arrival order while they fit the token budget; the first always runs,
      // so a request larger than the budget is a step of its own.
      std::int64_t tokens = 0;
      while (!queue_.empty() &&
             (step.empty() || tokens + queue_.front()->tokens <= options_.max_batch_tokens)) {
        tokens += queue_.front()->tokens;
        step.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      metrics_.set_queue_depth(static_cast<std::int64_t>(queue_.size()));
    }
    run_step(ctx, step);
  }
}

void EmbeddingScheduler::run_step(Context& ctx, std::vector<std::shared_ptr<Pending>>& step) {
  const Clock::time_point now = Clock::now();
  const std::int64_t d = encoder_.dim();
  // Jobs whose client gave up or whose deadline passed are not computed.
  std::erase_if(step, [&](const std::shared_ptr<Pending>& p) {
    if (p->abandoned.load()) return true;
    if (p->job.deadline <= now) {
      p->promise.set_exception(std::make_exception_ptr(
          ApiError(504, "the request's deadline passed while it waited in the queue (--timeout-s)",
                   "timeout_error", "", "timeout")));
      return true;
    }
    return false;
  });
  // Normalised and plain (TEI's normalize=false) embeddings are separate embed_batch calls.
  for (const bool normalize : {true, false}) {
    std::vector<std::vector<std::int32_t>> sequences;
    std::vector<std::pair<std::size_t, std::size_t>> owner;  // (job in step, row in job)
    std::int64_t tokens = 0;
    for (std::size_t j = 0; j < step.size(); ++j) {
      if (step[j]->job.normalize != normalize) continue;
      for (std::size_t r = 0; r < step[j]->job.ids.size(); ++r) {
        sequences.push_back(step[j]->job.ids[r]);
        owner.emplace_back(j, r);
        tokens += static_cast<std::int64_t>(step[j]->job.ids[r].size());
      }
    }
    if (sequences.empty()) continue;
    std::vector<std::vector<float>> results(step.size());
    for (std::size_t j = 0; j < step.size(); ++j)
      if (step[j]->job.normalize == normalize)
        results[j].resize(step[j]->job.ids.size() * static_cast<std::size_t>(d));
    try {
      const std::vector<LengthBatch> batches =
          batch_by_length(sequences, options_.batch_size, encoder_.tokenizer().pad_id());
      std::vector<float> pooled;
      // Longest batch first, as BertEncoder::embed does: the workspaces are sized once.
      for (auto it = batches.rbegin(); it != batches.rend(); ++it) {
        pooled.resize(static_cast<std::size_t>(it->tokens.batch * d));
        encoder_.embed_batch(
            ctx, it->tokens,
            TensorView::contiguous(pooled.data(), DType::f32, {it->tokens.batch, d}), normalize);
        for (std::size_t r = 0; r < it->rows.size(); ++r) {
          const auto [j, row] = owner[it->rows[r]];
          std::copy_n(pooled.data() + r * static_cast<std::size_t>(d), d,
                      results[j].data() + row * static_cast<std::size_t>(d));
        }
      }
    } catch (const std::exception& e) {
      // Not expected (the inputs were checked); answer each request instead of dying.
      for (std::size_t j = 0; j < step.size(); ++j)
        if (step[j]->job.normalize == normalize)
          step[j]->promise.set_exception(std::make_exception_ptr(ApiError(
              500, std::string("the encoder failed: ") + e.what(), "server_error", "", "")));
      continue;
    }
    metrics_.record_batch(static_cast<std::int64_t>(sequences.size()), tokens);
    for (std::size_t j = 0; j < step.size(); ++j)
      if (step[j]->job.normalize == normalize) step[j]->promise.set_value(std::move(results[j]));
  }
}

}  // namespace headcount::serve
