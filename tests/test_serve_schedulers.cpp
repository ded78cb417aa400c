// `headcount serve`'s two schedulers without HTTP, driven from several threads at once: the
// decoder's continuous batching on the small seeded Llama (no model file), the encoder's dynamic
// batching on MiniLM (skipped without it). Every result must be bitwise the offline one (the
// decoder: generate_tokens with the same prompt, options and seed; the encoder: embed), and a
// cancelled or late request must end without holding anything. Also built into the
// ThreadSanitizer tree (scripts/test.sh), where the scheduler threads, the HTTP-side readers and
// the worker pool meet.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "headcount/decoder.h"
#include "headcount/encoder.h"
#include "sanitized.h"
#include "serve/api_error.h"
#include "serve/decoder_scheduler.h"
#include "serve/metrics.h"
#include "serve/scheduler.h"
#include "small_llama.h"

namespace headcount {
namespace {

using serve::Clock;
using serve::DecodeJob;
using serve::DecodeStream;

// Everything one stream delivers: its tokens and how it ended.
struct Outcome {
  std::vector<std::int32_t> tokens;
  std::string finish_reason;
  int error_status = 0;
};

Outcome drain(DecodeStream& stream) {
  Outcome out;
  for (;;) {
    DecodeStream::Update u = stream.next(std::chrono::milliseconds(50));
    for (const serve::TokenLogprob& t : u.tokens) out.tokens.push_back(t.token);
    if (u.done) {
      out.finish_reason = u.finish_reason;
      out.error_status = u.error_status;
      return out;
    }
  }
}

TEST(DecoderScheduler, ConcurrentRequestsAreEachTheirOfflineGeneration) {
  model::Weights weights = testing::small_llama();
  weights.config.context = 256;
  const Transformer model(weights);
  const int requests = HEADCOUNT_TEST_SANITIZED ? 8 : 16;
  // Prompts of 3 to 60 tokens (several prefill chunks of 7), greedy and sampled, 1 to 40 tokens.
  std::vector<DecodeJob> jobs;
  for (int r = 0; r < requests; ++r) {
    DecodeJob job;
    for (int i = 0; i < 3 + (r * 13) % 58; ++i) job.prompt.push_back((r * 5 + i * 3) % 40);
    job.max_tokens = 1 + (r * 7) % 40;
    job.temperature = r % 3 == 0 ? 0.0f : 0.9f;
    job.top_p = r % 2 == 0 ? 1.0f : 0.8f;
    job.seed = 100 + static_cast<std::uint64_t>(r);
    job.top_logprobs = r % 4 == 0 ? 2 : -1;
    job.deadline = Clock::now() + std::chrono::minutes(5);
    jobs.push_back(job);
  }
  std::vector<std::vector<std::int32_t>> expected;
  {
    Context ctx({.threads = 1});
    for (const DecodeJob& job : jobs)
      expected.push_back(generate_tokens(ctx, model, job.prompt,
                                         {.max_tokens = job.max_tokens,
                                          .temperature = job.temperature,
                                          .top_p = job.top_p,
                                          .seed = job.seed,
                                          .stop_at_eos = false})
                             .tokens);
  }
  serve::Metrics metrics;
  serve::DecoderScheduler scheduler(model, {.threads = 2, .parallel = 3, .prefill_chunk = 7},
                                    metrics);
  std::vector<Outcome> outcomes(jobs.size());
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (std::size_t r = static_cast<std::size_t>(c); r < jobs.size(); r += 4)
        outcomes[r] = drain(*scheduler.submit(jobs[r]));
    });
  for (std::thread& t : clients) t.join();
  for (std::size_t r = 0; r < jobs.size(); ++r) {
    EXPECT_EQ(outcomes[r].tokens, expected[r]) << "request " << r;
    EXPECT_EQ(outcomes[r].finish_reason, "length") << "request " << r;
    EXPECT_EQ(outcomes[r].error_status, 0);
  }
  // The gauges are set after each loop of the scheduler, which may still be running when the
  // last client has its last token: read them once it has stopped.
  scheduler.stop();
  const std::string text = metrics.render();
  EXPECT_NE(text.find("headcount_decoder_running 0"), std::string::npos);
  EXPECT_NE(text.find("headcount_decoder_queue_depth 0"), std::string::npos);
}

TEST(DecoderScheduler, CancelledAndLateRequestsEndAndFreeTheirSlots) {
  model::Weights weights = testing::small_llama();
  weights.config.context = 256;
  const Transformer model(weights);
  serve::Metrics metrics;
  serve::DecoderScheduler scheduler(model, {.threads = 1, .parallel = 1}, metrics);
  DecodeJob long_job{.prompt = {1, 2, 3},
                     .max_tokens = 250,
                     .temperature = 0,
                     .deadline = Clock::now() + std::chrono::minutes(5)};
  // A cancelled request leaves at the next step; the one slot is then free for the next.
  std::shared_ptr<DecodeStream> first = scheduler.submit(long_job);
  (void)first->next(std::chrono::seconds(10));  // it runs
  first->cancel();
  DecodeJob short_job = long_job;
  short_job.max_tokens = 5;
  const Outcome next = drain(*scheduler.submit(short_job));
  EXPECT_EQ(next.tokens.size(), 5u);
  // Past its deadline before it could start: 504, and nothing generated. (A deadline passing
  // while it runs, and a full queue, are tested through HTTP, where a request is slow enough to
  // be caught: tests/python/test_serve_decoder.py.)
  DecodeJob late = long_job;
  late.deadline = Clock::now() - std::chrono::milliseconds(1);
  const Outcome timed_out = drain(*scheduler.submit(late));
  EXPECT_EQ(timed_out.error_status, 504);
  EXPECT_TRUE(timed_out.tokens.empty());
  // Requests still waiting or running when the scheduler stops are finished first.
  std::vector<std::shared_ptr<DecodeStream>> left;
  for (int i = 0; i < 2; ++i) left.push_back(scheduler.submit(short_job));
  scheduler.stop();
  for (const auto& stream : left) EXPECT_EQ(drain(*stream).tokens.size(), 5u);
}

TEST(EmbeddingScheduler, ConcurrentRequestsAreEachEmbedsBits) {
  const std::filesystem::path dir = default_model_dir();
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "model absent: " << dir << " (scripts/setup.sh)";
  const BertEncoder encoder = BertEncoder::load(dir.string());
  const std::vector<std::string> sentences = {
      "A man is playing a guitar.",
      "Someone plays an instrument.",
      "The cat sleeps.",
      "A very long sentence about the history of printing presses in the fifteenth century.",
      "Hi",
      "Café crème, s'il vous plaît!",
      "Water boils at one hundred degrees.",
      "x"};
  Context ctx({.threads = 1});
  const Tensor expected = encoder.embed(ctx, sentences);
  const std::int64_t d = encoder.dim();
  serve::Metrics metrics;
  serve::EmbeddingScheduler scheduler(
      encoder, {.threads = 2, .max_batch_tokens = 40, .max_queue = 64}, metrics);
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int round = 0; round < (HEADCOUNT_TEST_SANITIZED ? 2 : 6); ++round)
        for (std::size_t s = static_cast<std::size_t>(c); s < sentences.size(); s += 2) {
          serve::EmbedJob job{.ids = {encoder.tokenizer().encode(sentences[s])},
                              .normalize = true,
                              .deadline = Clock::now() + std::chrono::minutes(5)};
          const std::vector<float> row = scheduler.run(std::move(job));
          if (!std::equal(row.begin(), row.end(),
                          expected.data<const float>() + static_cast<std::int64_t>(s) * d))
            ++wrong;
        }
    });
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace headcount
