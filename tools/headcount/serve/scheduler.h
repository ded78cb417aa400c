// Dynamic batching for embeddings: the HTTP threads tokenize and submit; ONE scheduler thread
// takes every request waiting (up to a token budget), runs their sentences through the encoder
// together (batch_by_length + embed_batch, as BertEncoder::embed does), and completes each
// request's future with its own rows. The encoder's rows do not depend on their batch
// (tests/test_encoder_invariance.cpp), so each embedding is bitwise `headcount embed`'s for the
// same text, whatever else was in the step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "headcount/context.h"
#include "headcount/encoder.h"
#include "metrics.h"

namespace headcount::serve {

using Clock = std::chrono::steady_clock;

struct SchedulerOptions {
  int threads = 1;                    // the encoder's worker pool (--threads)
  std::int64_t max_batch_tokens = 0;  // tokens per step; a larger single request runs alone
  std::int64_t batch_size = 32;       // sequences per forward pass inside a step (embed's default)
  std::size_t max_queue = 0;          // requests waiting; one more is refused (503)
};

// One request's sentences as token ids ([CLS] ... [SEP]); the result is [ids.size(), dim]
// floats, row-major, in input order.
struct EmbedJob {
  std::vector<std::vector<std::int32_t>> ids;
  bool normalize = true;
  Clock::time_point deadline;
};

class EmbeddingScheduler {
 public:
  // `encoder` must outlive the scheduler. Starts the scheduler thread (which owns the Context).
  EmbeddingScheduler(const BertEncoder& encoder, const SchedulerOptions& options, Metrics& metrics);
  ~EmbeddingScheduler();  // stop()
  EmbeddingScheduler(const EmbeddingScheduler&) = delete;
  EmbeddingScheduler& operator=(const EmbeddingScheduler&) = delete;

  // Queues the job; throws ApiError 503 (Retry-After) when max_queue requests already wait,
  // and after stop(). Waits for the result until the job's deadline, then throws ApiError 504
  // (the job is dropped if it has not started). Called from the HTTP threads.
  std::vector<float> run(EmbedJob job);

  // Finishes every queued job, then joins the thread. Idempotent.
  void stop();

 private:
  struct Pending;
  void loop();
  void run_step(Context& ctx, std::vector<std::shared_ptr<Pending>>& step);

  const BertEncoder& encoder_;
  SchedulerOptions options_;
  Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Pending>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace headcount::serve
