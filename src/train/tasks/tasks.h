// The task constructors behind make_task(): one per file in this directory, each taking the
// task's JSON config (already known to carry its "name").
#pragma once

#include <memory>

#include "headcount/train/task.h"
#include "nlohmann/json.hpp"

namespace headcount::train::tasks {

std::unique_ptr<Task> make_char_lm(const nlohmann::json& config);
std::unique_ptr<Task> make_copy(const nlohmann::json& config);
std::unique_ptr<Task> make_assoc_recall(const nlohmann::json& config);
std::unique_ptr<Task> make_multi_relation(const nlohmann::json& config);
std::unique_ptr<Task> make_esp(const nlohmann::json& config);
std::unique_ptr<Task> make_esp_selector(const nlohmann::json& config);  // esp "mode": "selector"
std::unique_ptr<Task> make_retrieval(const nlohmann::json& config);

// The distinct sequences of `alphabet` symbols at `length` positions, saturating at 2^62.
std::int64_t count_sequences(std::int64_t alphabet, std::int64_t length);

}  // namespace headcount::train::tasks
