// make_task / task_names: the one table from a task's name to its constructor.
#include <utility>

#include "headcount/error.h"
#include "train/tasks/tasks.h"

namespace headcount::train {
namespace {

using Factory = std::unique_ptr<Task> (*)(const nlohmann::json&);
const std::pair<const char*, Factory> kTasks[] = {
    {"char-lm", tasks::make_char_lm},
    {"copy", tasks::make_copy},
    {"assoc-recall", tasks::make_assoc_recall},
    {"multi-relation", tasks::make_multi_relation},
    {"esp", tasks::make_esp},
    {"multi-retrieval", tasks::make_retrieval},
};

}  // namespace

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : kTasks) names.emplace_back(name);
  return names;
}

std::unique_ptr<Task> make_task(const nlohmann::json& config) {
  check(config.is_object(), "task", "a JSON object such as {\"name\": \"copy\"}", config.dump());
  std::string listed;
  for (const auto& [name, factory] : kTasks)
    listed += (listed.empty() ? "" : ", ") + std::string(name);
  const auto name = config.find("name");
  check(name != config.end() && name->is_string(), "task.name", "one of " + listed,
        name == config.end() ? std::string("nothing") : name->dump());
  for (const auto& [known, factory] : kTasks)
    if (*name == known) return factory(config);
  fail("task.name", detail::concat("expected one of ", listed, ", got ", name->dump()));
}

namespace tasks {
std::int64_t count_sequences(std::int64_t alphabet, std::int64_t length) {
  constexpr std::int64_t kCap = std::int64_t{1} << 62;
  std::int64_t count = 1;
  for (std::int64_t i = 0; i < length; ++i) {
    if (count > kCap / alphabet) return kCap;
    count *= alphabet;
  }
  return count;
}
}  // namespace tasks

}  // namespace headcount::train
