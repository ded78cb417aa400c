// What `headcount serve` counts, written for GET /metrics in Prometheus' text format (0.0.4):
//   headcount_requests_total{route,status}      counter, every answered request
//   headcount_request_duration_seconds{route}   histogram, from routing to the answer
//   headcount_queue_depth                        gauge, embedding requests waiting
//   headcount_embed_batch_sentences              histogram, sentences per scheduler step
//   headcount_embed_sentences_total              counter, sentences embedded
//   headcount_embed_tokens_total                 counter, their tokens ([CLS]/[SEP] included)
//   headcount_decoder_queue_depth                gauge, completion requests waiting for a slot
//   headcount_decoder_running                    gauge, completion requests decoding
//   headcount_decode_batch_rows                  histogram, requests per decode step
//   headcount_time_to_first_token_seconds        histogram, from queueing to the first token
//   headcount_prompt_tokens_total                counter, prompt tokens prefilled
//   headcount_prefill_calls_total                counter, prefill calls (a prompt's chunks)
//   headcount_generated_tokens_total             counter, tokens generated (tokens/s: its rate)
// Routes outside the served set are counted as route="other", so a scan of random paths
// cannot grow the label set without bound.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace headcount::serve {

// Cumulative buckets, as Prometheus keeps them: counts[i] = observations <= bounds[i].
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The series lines of `name` (with `labels`, e.g. route="/embed", or ""), sum and count.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bucket, not yet cumulative
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  Metrics();
  // The route label for a request path: the path itself when served, else "other".
  static std::string route_label(const std::string& path);
  void record_request(const std::string& path, int status, double seconds);
  void record_batch(std::int64_t sentences, std::int64_t tokens);
  void set_queue_depth(std::int64_t depth) { queue_depth_.store(depth); }
  void set_decoder_queue_depth(std::int64_t depth) { decoder_queue_depth_.store(depth); }
  void set_decoder_running(std::int64_t running) { decoder_running_.store(running); }
  void record_decode_step(std::int64_t rows);
  void record_first_token(double seconds);
  void record_prompt(std::int64_t tokens);  // one prefill call of `tokens` rows
  void record_generated(std::int64_t tokens);
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::map<std::string, Histogram> durations_;
  Histogram batch_sentences_;
  std::uint64_t sentences_ = 0, tokens_ = 0;
  std::atomic<std::int64_t> queue_depth_{0};
  Histogram decode_rows_, first_token_;
  std::uint64_t prompt_tokens_ = 0, prefill_calls_ = 0, generated_tokens_ = 0;
  std::atomic<std::int64_t> decoder_queue_depth_{0}, decoder_running_{0};
};

}  // namespace headcount::serve
