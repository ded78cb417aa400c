// TrainConfig <-> JSON: the format of `headcount train --config FILE` and of the config a
// checkpoint stores (the resolved one, so a resumed run has the same schedule).
#include <nlohmann/json.hpp>
#include <set>

#include "headcount/error.h"
#include "headcount/train/trainer.h"

namespace headcount::train {

using detail::concat;
using nlohmann::json;

namespace {

void check_keys(const json& j, const char* what, const std::set<std::string>& known,
                const char* list) {
  HEADCOUNT_CHECK(j.is_object(), what, "a JSON object", j.dump());
  for (const auto& item : j.items())
    HEADCOUNT_CHECK(known.count(item.key()) == 1, what, concat("known fields (", list, ")"),
                    concat("\"", item.key(), "\""));
}

std::int64_t integer(const json& j, const char* key, std::int64_t fallback, std::int64_t min) {
  if (!j.contains(key)) return fallback;
  const json& v = j.at(key);
  HEADCOUNT_CHECK(v.is_number_integer(), concat("train.", key), "an integer", v.dump());
  const std::int64_t value = v.get<std::int64_t>();
  HEADCOUNT_CHECK(value >= min, concat("train.", key), concat(">= ", min), value);
  return value;
}

}  // namespace

TrainConfig train_config_from_json(const json& j) {
  check_keys(j, "config", {"model", "task", "optim", "train"}, "model, task, optim, train");
  HEADCOUNT_CHECK(j.contains("task"), "config", "a \"task\" object", "none");
  TrainConfig c;
  HEADCOUNT_CHECK(j.at("task").is_object(), "task", "a JSON object", j.at("task").dump());
  c.task = j.at("task");
  if (j.contains("model")) c.model = model_config_from_json(j.at("model"));
  if (j.contains("optim")) c.optim = optim_config_from_json(j.at("optim"));
  if (j.contains("train")) {
    const json& t = j.at("train");
    check_keys(t, "train",
               {"steps", "batch", "seed", "eval_every", "eval_batches", "checkpoint_every",
                "log_every", "kernel", "preset"},
               "steps, batch, seed, eval_every, eval_batches, checkpoint_every, log_every, kernel, "
               "preset");
    c.steps = integer(t, "steps", c.steps, 0);
    c.batch = integer(t, "batch", c.batch, 1);
    c.seed = static_cast<std::uint64_t>(integer(t, "seed", static_cast<std::int64_t>(c.seed), 0));
    c.eval_every = integer(t, "eval_every", c.eval_every, 0);
    c.eval_batches = integer(t, "eval_batches", c.eval_batches, 0);
    c.checkpoint_every = integer(t, "checkpoint_every", c.checkpoint_every, 0);
    c.log_every = integer(t, "log_every", c.log_every, 0);
    if (t.contains("kernel")) {
      HEADCOUNT_CHECK(t.at("kernel").is_string(), "train.kernel", "\"reference\" or \"streaming\"",
                      t.at("kernel").dump());
      c.kernel = parse_kernel(t.at("kernel").get<std::string>());
    }
    if (t.contains("preset")) {
      HEADCOUNT_CHECK(t.at("preset").is_string(), "train.preset", "a string",
                      t.at("preset").dump());
      c.preset = t.at("preset").get<std::string>();
    }
  }
  return c;
}

json to_json(const TrainConfig& c) {
  return {{"task", c.task},
          {"model", to_json(c.model)},
          {"optim", to_json(c.optim)},
          {"train",
           {{"steps", c.steps},
            {"batch", c.batch},
            {"seed", c.seed},
            {"eval_every", c.eval_every},
            {"eval_batches", c.eval_batches},
            {"checkpoint_every", c.checkpoint_every},
            {"log_every", c.log_every},
            {"kernel", kernel_name(c.kernel)},
            {"preset", c.preset}}}};
}

}  // namespace headcount::train
