#include "metrics.h"

#include <algorithm>
#include <charconv>

namespace headcount::serve {
namespace {

// Latency buckets (seconds): a single sentence takes ~1-5 ms on two cores, a full 2048-input
// request seconds; a request past --timeout-s ends at the timeout.
const std::vector<double> kDurationBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                             0.25,  0.5,    1,     2.5,  5,     10,   30};
// Sentences per scheduler step: powers of two up to the largest request.
const std::vector<double> kBatchBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};

// Requests per decode step: 1 to --parallel (at most 4096).
const std::vector<double> kRowsBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};

const char* const kRoutes[] = {
    "/health",   "/metrics",        "/v1/models",           "/v1/embeddings", "/embed",
    "/tokenize", "/v1/completions", "/v1/chat/completions", "/detokenize",    "/"};

std::string number(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[static_cast<std::size_t>(at)];
  ++count_;
  sum_ += value;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cumulative) +
           "\n";
  }
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + braces + " " + number(sum_) + "\n";
  out += name + "_count" + braces + " " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : batch_sentences_(kBatchBounds), decode_rows_(kRowsBounds), first_token_(kDurationBounds) {}

void Metrics::record_decode_step(std::int64_t rows) {
  std::lock_guard lock(mutex_);
  decode_rows_.observe(static_cast<double>(rows));
}

void Metrics::record_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  first_token_.observe(seconds);
}

void Metrics::record_prompt(std::int64_t tokens) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += static_cast<std::uint64_t>(tokens);
  ++prefill_calls_;
}

void Metrics::record_generated(std::int64_t tokens) {
  std::lock_guard lock(mutex_);
  generated_tokens_ += static_cast<std::uint64_t>(tokens);
}

std::string Metrics::route_label(const std::string& path) {
  for (const char* route : kRoutes)
    if (path == route) return path;
  return "other";
}

void Metrics::record_request(const std::string& path, int status, double seconds) {
  const std::string route = route_label(path);
  std::lock_guard lock(mutex_);
  ++requests_[{route, status}];
  if (seconds >= 0) durations_.try_emplace(route, kDurationBounds).first->second.observe(seconds);
}

void Metrics::record_batch(std::int64_t sentences, std::int64_t tokens) {
  std::lock_guard lock(mutex_);
  batch_sentences_.observe(static_cast<double>(sentences));
  sentences_ += static_cast<std::uint64_t>(sentences);
  tokens_ += static_cast<std::uint64_t>(tokens);
}

std::string Metrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out += "# HELP headcount_requests_total HTTP requests answered, by route and status.\n";
  out += "# TYPE headcount_requests_total counter\n";
  for (const auto& [key, count] : requests_)
    out += "headcount_requests_total{route=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  out += "# HELP headcount_request_duration_seconds Time from routing to the answer.\n";
  out += "# TYPE headcount_request_duration_seconds histogram\n";
  for (const auto& [route, histogram] : durations_)
    histogram.render(out, "headcount_request_duration_seconds", "route=\"" + route + "\"");
  out += "# HELP headcount_queue_depth Embedding requests waiting for the scheduler.\n";
  out += "# TYPE headcount_queue_depth gauge\n";
  out += "headcount_queue_depth " + std::to_string(queue_depth_.load()) + "\n";
  out += "# HELP headcount_embed_batch_sentences Sentences per scheduler step.\n";
  out += "# TYPE headcount_embed_batch_sentences histogram\n";
  batch_sentences_.render(out, "headcount_embed_batch_sentences", "");
  out += "# HELP headcount_embed_sentences_total Sentences embedded.\n";
  out += "# TYPE headcount_embed_sentences_total counter\n";
  out += "headcount_embed_sentences_total " + std::to_string(sentences_) + "\n";
  out += "# HELP headcount_embed_tokens_total Tokens embedded ([CLS] and [SEP] included).\n";
  out += "# TYPE headcount_embed_tokens_total counter\n";
  out += "headcount_embed_tokens_total " + std::to_string(tokens_) + "\n";
  out += "# HELP headcount_decoder_queue_depth Completion requests waiting for a slot.\n";
  out += "# TYPE headcount_decoder_queue_depth gauge\n";
  out += "headcount_decoder_queue_depth " + std::to_string(decoder_queue_depth_.load()) + "\n";
  out += "# HELP headcount_decoder_running Completion requests decoding (--parallel at most).\n";
  out += "# TYPE headcount_decoder_running gauge\n";
  out += "headcount_decoder_running " + std::to_string(decoder_running_.load()) + "\n";
  out += "# HELP headcount_decode_batch_rows Requests per decode step.\n";
  out += "# TYPE headcount_decode_batch_rows histogram\n";
  decode_rows_.render(out, "headcount_decode_batch_rows", "");
  out += "# HELP headcount_time_to_first_token_seconds From queueing to the first token.\n";
  out += "# TYPE headcount_time_to_first_token_seconds histogram\n";
  first_token_.render(out, "headcount_time_to_first_token_seconds", "");
  out += "# HELP headcount_prompt_tokens_total Prompt tokens prefilled.\n";
  out += "# TYPE headcount_prompt_tokens_total counter\n";
  out += "headcount_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
  out += "# HELP headcount_prefill_calls_total Prefill calls (a prompt's chunks).\n";
  out += "# TYPE headcount_prefill_calls_total counter\n";
  out += "headcount_prefill_calls_total " + std::to_string(prefill_calls_) + "\n";
  out += "# HELP headcount_generated_tokens_total Tokens generated.\n";
  out += "# TYPE headcount_generated_tokens_total counter\n";
  out += "headcount_generated_tokens_total " + std::to_string(generated_tokens_) + "\n";
  return out;
}

}  // namespace headcount::serve
