// assoc-recall: multi-query associative recall (MQAR; Arora et al. 2023, "Zoology"). A row
// holds N key-value pairs, then Q of those keys again (distinct, in random order) each followed
// by its value, placed at random pair-aligned slots of the tail; the rest of the tail is a
// filler token. As a causal LM the model must, at each query key, predict its value:
//   tokens  = k1 v1 k2 v2 ... kN vN | _ _ kq vq _ _ kr vr ...      (_ = filler)
//   targets =  -  -  ...             | - -  vq -  - -  vr  - ...    (- = Batch::kIgnore)
// Keys are 0..keys-1, values keys..keys+values-1, filler keys+values; as in Zoology the keys
// and the values of a row are each drawn without replacement. seq_len defaults to 2(N + Q)
// (no filler); a longer one spreads the queries out, as Zoology's harder settings do.
#include <numeric>

#include "headcount/error.h"
#include "train/tasks/config_reader.h"
#include "train/tasks/synthetic_task.h"
#include "train/tasks/tasks.h"

namespace headcount::train::tasks {
namespace {

using detail::concat;

// The first `count` entries of a uniform random permutation of 0..n-1 (partial Fisher-Yates).
void choose_distinct(CounterRng& rng, std::vector<std::int64_t>& pool, std::int64_t n,
                     std::int64_t count) {
  pool.resize(static_cast<std::size_t>(n));
  std::iota(pool.begin(), pool.end(), 0);
  for (std::int64_t i = 0; i < count; ++i) {
    const auto j = i + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(n - i)));
    std::swap(pool[static_cast<std::size_t>(i)], pool[static_cast<std::size_t>(j)]);
  }
}

class AssocRecallTask final : public SyntheticTask {
 public:
  explicit AssocRecallTask(const nlohmann::json& config) {
    ConfigReader read(config);
    pairs_ = read.integer("num_pairs", 8, 1, 1 << 14);
    queries_ = read.integer("num_queries", pairs_, 1, pairs_);
    keys_ = read.integer("keys", 32, pairs_, 1 << 20);
    values_ = read.integer("values", 32, pairs_, 1 << 20);
    seq_len_ = read.integer("seq_len", 2 * (pairs_ + queries_), 2 * (pairs_ + queries_), 1 << 16);
    const std::int64_t validation =
        read.integer("validation_sequences", kDefaultValidationSequences, 1, 1 << 20);
    const HeldOut held_out = read_held_out(read);
    read.finish();
    check(keys_ * values_ >= 64, ConfigReader::key("keys"),
          "keys x values >= 64 (enough distinct rows)", keys_ * values_);
    build_validation(validation, held_out);
  }

  std::string name() const override { return "assoc-recall"; }
  std::int64_t vocab_size() const override { return keys_ + values_ + 1; }
  bool causal() const override { return true; }
  nlohmann::json describe() const override {
    nlohmann::json d = describe_common();
    d["num_pairs"] = pairs_;
    d["num_queries"] = queries_;
    d["keys"] = keys_;
    d["values"] = values_;
    d["filler"] = keys_ + values_;
    d["rule"] =
        "N key-value pairs, then Q distinct keys again at random slots; scored: the value after "
        "each query";
    return d;
  }

 protected:
  void generate(CounterRng& rng, std::int32_t* tokens, std::int32_t* targets) const override {
    thread_local std::vector<std::int64_t> key_pool, value_pool, query_pool, slot_pool;
    choose_distinct(rng, key_pool, keys_, pairs_);
    choose_distinct(rng, value_pool, values_, pairs_);
    const auto key = [&](std::int64_t i) {
      return static_cast<std::int32_t>(key_pool[static_cast<std::size_t>(i)]);
    };
    const auto value = [&](std::int64_t i) {
      return static_cast<std::int32_t>(keys_ + value_pool[static_cast<std::size_t>(i)]);
    };
    for (std::int64_t t = 0; t < seq_len_; ++t) {
      tokens[t] = static_cast<std::int32_t>(keys_ + values_);
      targets[t] = Batch::kIgnore;
    }
    for (std::int64_t i = 0; i < pairs_; ++i) {
      tokens[2 * i] = key(i);
      tokens[2 * i + 1] = value(i);
    }
    choose_distinct(rng, query_pool, pairs_, queries_);
    const std::int64_t slots = (seq_len_ - 2 * pairs_) / 2;
    choose_distinct(rng, slot_pool, slots, queries_);
    for (std::int64_t q = 0; q < queries_; ++q) {
      const std::int64_t pair = query_pool[static_cast<std::size_t>(q)];
      const std::int64_t at = 2 * pairs_ + 2 * slot_pool[static_cast<std::size_t>(q)];
      tokens[at] = key(pair);
      tokens[at + 1] = value(pair);
      targets[at] = value(pair);
    }
  }

 private:
  std::int64_t pairs_ = 0, queries_ = 0, keys_ = 0, values_ = 0;
};

}  // namespace

std::unique_ptr<Task> make_assoc_recall(const nlohmann::json& config) {
  return std::make_unique<AssocRecallTask>(config);
}

}  // namespace headcount::train::tasks
