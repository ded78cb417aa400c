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

const char* const kRoutes[] = {"/health",        "/metrics", "/v1/models",
                               "/v1/embeddings", "/embed",   "/tokenize"};

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

Metrics::Metrics() : batch_sentences_(kBatchBounds) {}

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
  return out;
}

}  // namespace headcount::serve
