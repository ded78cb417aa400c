// multi-relation: tokens x_t uniform in [0, p); the target at position t depends on tokens at
// other places, so one softmax average cannot serve every relation at once (issue 11's blur).
//   mode "offsets" (default): y_t = (sum_i c_i x_{t - a_i}) mod p for the configured offsets
//     a_i and coefficients c_i; the default a = [1, 4], c = [1, -1] is y_t = (x_{t-1} - x_{t-4})
//     mod p, order-sensitive (swapping the offsets negates the answer); three offsets give the
//     three-relation variant. Positions t < max a_i are not scored.
//   mode "previous-occurrence": content-addressed; y_t = x_{j+1} where j < t is the last earlier
//     position with x_j = x_t; positions whose token has not occurred before are not scored.
//   mode "previous-occurrence-offset": the two kinds of relation compete for one softmax;
//     y_t = (x_{j+1} + sum_i c_i x_{t - a_i}) mod p with j as above; default a = [1], c = [-1],
//     i.e. y_t = (next-after-previous-occurrence(x_t) - x_{t-1}) mod p. Scored where j exists
//     and t >= max a_i.
// vocab = p for inputs and targets alike; causal (every relation looks back).
#include <algorithm>

#include "headcount/error.h"
#include "train/tasks/config_reader.h"
#include "train/tasks/synthetic_task.h"
#include "train/tasks/tasks.h"

namespace headcount::train::tasks {
namespace {

using detail::concat;

class MultiRelationTask final : public SyntheticTask {
 public:
  explicit MultiRelationTask(const nlohmann::json& config) {
    ConfigReader read(config);
    p_ = read.integer("p", 16, 2, 1 << 20);
    seq_len_ = read.integer("seq_len", 32, 2, 1 << 16);
    mode_ = read.choice("mode", "offsets",
                        {"offsets", "previous-occurrence", "previous-occurrence-offset"});
    if (mode_ != "previous-occurrence") {
      const bool combined = mode_ == "previous-occurrence-offset";
      offsets_ = read.integers(
          "offsets", combined ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{1, 4},
          combined ? 1 : 0, 1 << 16, 1, 8);
      for (const std::int64_t a : offsets_)
        check(a < seq_len_, ConfigReader::key("offsets"),
              concat("offsets below seq_len = ", seq_len_), nlohmann::json(offsets_).dump());
      coefficients_ =
          read.integers("coefficients",
                        combined               ? std::vector<std::int64_t>(offsets_.size(), -1)
                        : offsets_.size() == 2 ? std::vector<std::int64_t>{1, -1}
                                               : std::vector<std::int64_t>(offsets_.size(), 1),
                        -(p_ - 1), p_ - 1, 1, 8);
      check(coefficients_.size() == offsets_.size(), ConfigReader::key("coefficients"),
            concat(offsets_.size(), " coefficients (one per offset)"), coefficients_.size());
      for (const std::int64_t c : coefficients_)
        check(c % p_ != 0, ConfigReader::key("coefficients"),
              concat("coefficients that are non-zero mod p = ", p_), c);
      std::vector<std::int64_t> sorted = offsets_;
      std::sort(sorted.begin(), sorted.end());
      check(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
            ConfigReader::key("offsets"), "distinct offsets", nlohmann::json(offsets_).dump());
      first_scored_ = sorted.back();
    } else {
      for (const char* field : {"offsets", "coefficients"})
        check(!read.has(field), ConfigReader::key(field), "no offsets in mode previous-occurrence",
              "a value");
    }
    const std::int64_t validation =
        read.integer("validation_sequences", kDefaultValidationSequences, 1, 1 << 20);
    read.finish();
    check(count_sequences(p_, seq_len_) >= 64, ConfigReader::key("p"),
          "p^seq_len >= 64 (enough distinct rows)", count_sequences(p_, seq_len_));
    build_validation(validation);
  }

  std::string name() const override { return "multi-relation"; }
  std::int64_t vocab_size() const override { return p_; }
  bool causal() const override { return true; }
  nlohmann::json describe() const override {
    nlohmann::json d = describe_common();
    d["p"] = p_;
    d["mode"] = mode_;
    if (mode_ == "offsets") {
      d["offsets"] = offsets_;
      d["coefficients"] = coefficients_;
      d["rule"] =
          "y_t = (sum_i coefficients[i] * x[t - offsets[i]]) mod p, scored for t >= max offset";
    } else if (mode_ == "previous-occurrence-offset") {
      d["offsets"] = offsets_;
      d["coefficients"] = coefficients_;
      d["rule"] =
          "y_t = (x[j + 1] + sum_i coefficients[i] * x[t - offsets[i]]) mod p for the last j < t "
          "with x[j] = x[t], scored where such j exists and t >= max offset";
    } else {
      d["rule"] = "y_t = x[j + 1] for the last j < t with x[j] = x[t], scored where such j exists";
    }
    return d;
  }

 protected:
  void generate(CounterRng& rng, std::int32_t* tokens, std::int32_t* targets) const override {
    for (std::int64_t t = 0; t < seq_len_; ++t)
      tokens[t] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(p_)));
    if (mode_ == "offsets") {
      for (std::int64_t t = 0; t < seq_len_; ++t) {
        if (t < first_scored_) {
          targets[t] = Batch::kIgnore;
          continue;
        }
        std::int64_t y = 0;
        for (std::size_t i = 0; i < offsets_.size(); ++i)
          y += coefficients_[i] * tokens[t - offsets_[i]];
        targets[t] = static_cast<std::int32_t>(((y % p_) + p_) % p_);
      }
    } else {
      // last[v]: the latest position holding v so far, -1 before it appears.
      const bool combined = mode_ == "previous-occurrence-offset";
      thread_local std::vector<std::int64_t> last;
      last.assign(static_cast<std::size_t>(p_), -1);
      for (std::int64_t t = 0; t < seq_len_; ++t) {
        const std::int64_t j = last[static_cast<std::size_t>(tokens[t])];
        last[static_cast<std::size_t>(tokens[t])] = t;
        if (j < 0 || (combined && t < first_scored_)) {
          targets[t] = Batch::kIgnore;
          continue;
        }
        std::int64_t y = tokens[j + 1];
        if (combined)
          for (std::size_t i = 0; i < offsets_.size(); ++i)
            y += coefficients_[i] * tokens[t - offsets_[i]];
        targets[t] = static_cast<std::int32_t>(((y % p_) + p_) % p_);
      }
    }
  }

 private:
  std::int64_t p_ = 0, first_scored_ = 0;
  std::string mode_;
  std::vector<std::int64_t> offsets_, coefficients_;
};

}  // namespace

std::unique_ptr<Task> make_multi_relation(const nlohmann::json& config) {
  return std::make_unique<MultiRelationTask>(config);
}

}  // namespace headcount::train::tasks
