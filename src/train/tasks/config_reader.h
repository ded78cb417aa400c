// Reads a task's JSON config field by field with defaults, range checks and one error format,
// "task.<field>: expected X, got Y"; finish() rejects fields nobody read (a misspelt option
// must not silently fall back to its default).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace headcount::train::tasks {

class ConfigReader {
 public:
  explicit ConfigReader(const nlohmann::json& config);

  bool has(const std::string& field) const;
  std::int64_t integer(const std::string& field, std::int64_t fallback, std::int64_t min,
                       std::int64_t max);
  double number(const std::string& field, double fallback, double min, double max);
  bool boolean(const std::string& field, bool fallback);
  std::string string(const std::string& field, const std::string& fallback);
  // One of `choices`.
  std::string choice(const std::string& field, const std::string& fallback,
                     const std::vector<std::string>& choices);
  // A list of integers, each in [min, max], of length in [min_count, max_count].
  std::vector<std::int64_t> integers(const std::string& field,
                                     const std::vector<std::int64_t>& fallback, std::int64_t min,
                                     std::int64_t max, std::size_t min_count,
                                     std::size_t max_count);
  void finish() const;

  static std::string key(const std::string& field) { return "task." + field; }

 private:
  const nlohmann::json& config_;
  std::set<std::string> read_;
};

}  // namespace headcount::train::tasks
