// ConfigReader: each accessor marks its field read, checks the JSON type and the range, and
// throws Error("task.<field>: expected ..., got <the JSON as given>").
#include "train/tasks/config_reader.h"

#include "headcount/error.h"

namespace headcount::train::tasks {

using detail::concat;

ConfigReader::ConfigReader(const nlohmann::json& config) : config_(config) {
  check(config.is_object(), "task", "a JSON object such as {\"name\": \"copy\"}", config.dump());
  read_.insert("name");
}

bool ConfigReader::has(const std::string& field) const { return config_.contains(field); }

std::int64_t ConfigReader::integer(const std::string& field, std::int64_t fallback,
                                   std::int64_t min, std::int64_t max) {
  read_.insert(field);
  const auto it = config_.find(field);
  if (it == config_.end()) return fallback;
  const bool ok =
      it->is_number_integer() && it->get<std::int64_t>() >= min && it->get<std::int64_t>() <= max;
  check(ok, key(field), concat("an integer in [", min, ", ", max, "]"), it->dump());
  return it->get<std::int64_t>();
}

double ConfigReader::number(const std::string& field, double fallback, double min, double max) {
  read_.insert(field);
  const auto it = config_.find(field);
  if (it == config_.end()) return fallback;
  const bool ok = it->is_number() && it->get<double>() >= min && it->get<double>() <= max;
  check(ok, key(field), concat("a number in [", min, ", ", max, "]"), it->dump());
  return it->get<double>();
}

bool ConfigReader::boolean(const std::string& field, bool fallback) {
  read_.insert(field);
  const auto it = config_.find(field);
  if (it == config_.end()) return fallback;
  check(it->is_boolean(), key(field), "true or false", it->dump());
  return it->get<bool>();
}

std::string ConfigReader::string(const std::string& field, const std::string& fallback) {
  read_.insert(field);
  const auto it = config_.find(field);
  if (it == config_.end()) return fallback;
  check(it->is_string() && !it->get<std::string>().empty(), key(field), "a non-empty string",
        it->dump());
  return it->get<std::string>();
}

std::string ConfigReader::choice(const std::string& field, const std::string& fallback,
                                 const std::vector<std::string>& choices) {
  const std::string value = string(field, fallback);
  std::string listed;
  bool found = false;
  for (const std::string& c : choices) {
    listed += (listed.empty() ? "" : ", ") + c;
    found = found || c == value;
  }
  check(found, key(field), "one of " + listed, concat("\"", value, "\""));
  return value;
}

std::vector<std::int64_t> ConfigReader::integers(const std::string& field,
                                                 const std::vector<std::int64_t>& fallback,
                                                 std::int64_t min, std::int64_t max,
                                                 std::size_t min_count, std::size_t max_count) {
  read_.insert(field);
  const auto it = config_.find(field);
  if (it == config_.end()) return fallback;
  const std::string expected = concat("a list of ", min_count, " to ", max_count,
                                      " integers, each in [", min, ", ", max, "]");
  check(it->is_array() && it->size() >= min_count && it->size() <= max_count, key(field), expected,
        it->dump());
  std::vector<std::int64_t> values;
  for (const auto& v : *it) {
    check(v.is_number_integer() && v.get<std::int64_t>() >= min && v.get<std::int64_t>() <= max,
          key(field), expected, it->dump());
    values.push_back(v.get<std::int64_t>());
  }
  return values;
}

void ConfigReader::finish() const {
  for (const auto& [field, value] : config_.items()) {
    if (read_.count(field) != 0) continue;
    std::string known;
    for (const std::string& f : read_) known += (known.empty() ? "" : ", ") + f;
    fail(key(field), concat("unknown field (expected one of ", known, ")"));
  }
}

}  // namespace headcount::train::tasks
