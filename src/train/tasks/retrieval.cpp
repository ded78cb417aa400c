// multi-retrieval: the target at position t is the tuple of tokens found at two or three other
// places, read as ONE class, so the model must fetch each of them and keep them apart (issue
// 11's blur, redesigned; see src/experiments/blur.cpp for why it replaced multi-relation there).
//   mode "ordered" (default): tokens x_t uniform in [0, p); y_t = sum_i x_{t - a_i} p^(k-1-i)
//     for the k configured offsets a_i, i.e. the ordered tuple (x_{t-a_1}, ..., x_{t-a_k}).
//   mode "unordered": the same tuple sorted ascending before it is read as a class, so only the
//     multiset of the fetched tokens counts (the control: one uniform average of the fetched
//     value vectors already carries the multiset; it is the order that an average blurs).
//   mode "key-value": a content-addressed relation beside a fixed offset. Each token is a pair
//     x = key * p + value (key in [0, keys), value in [0, p)); y_t = value(x_j) * p +
//     value(x_{t-a}) for the single offset a, j < t the last earlier position whose key equals
//     key(x_t). One attention layer can find j (the query carries key(x_t), the key at j carries
//     key(x_j)) and read value(x_j) there, unlike "the token after the previous occurrence",
//     which needs a second layer. Scored where j exists and t >= a.
// Positions t < max a_i are not scored. vocab = max(input tokens, classes); causal.
#include <algorithm>

#include "headcount/error.h"
#include "train/tasks/config_reader.h"
#include "train/tasks/synthetic_task.h"
#include "train/tasks/tasks.h"

namespace headcount::train::tasks {
namespace {

using detail::concat;

constexpr std::int64_t kMaxClasses = 4096;  // the output layer stays a small matrix

class RetrievalTask final : public SyntheticTask {
 public:
  explicit RetrievalTask(const nlohmann::json& config) {
    ConfigReader read(config);
    p_ = read.integer("p", 8, 2, kMaxClasses);
    seq_len_ = read.integer("seq_len", 32, 2, 1 << 16);
    mode_ = read.choice("mode", "ordered", {"ordered", "unordered", "key-value"});
    const bool kv = mode_ == "key-value";
    keys_ = kv ? read.integer("keys", 8, 1, kMaxClasses) : 1;
    offsets_ = read.integers("offsets",
                             kv ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{1, 4}, 1,
                             1 << 16, kv ? 1 : 2, kv ? 1 : 3);
    std::vector<std::int64_t> sorted = offsets_;
    std::sort(sorted.begin(), sorted.end());
    check(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
          ConfigReader::key("offsets"), "distinct offsets", nlohmann::json(offsets_).dump());
    check(sorted.back() < seq_len_, ConfigReader::key("offsets"),
          concat("offsets below seq_len = ", seq_len_), nlohmann::json(offsets_).dump());
    first_scored_ = sorted.back();
    const std::int64_t fetched = kv ? 2 : static_cast<std::int64_t>(offsets_.size());
    check(count_sequences(p_, fetched) <= kMaxClasses, ConfigReader::key("p"),
          concat("p^", fetched, " <= ", kMaxClasses, " classes"), p_);
    check(keys_ * p_ <= kMaxClasses, ConfigReader::key("keys"),
          concat("keys * p <= ", kMaxClasses, " input tokens"), keys_ * p_);
    classes_ = count_sequences(p_, fetched);
    const std::int64_t validation =
        read.integer("validation_sequences", kDefaultValidationSequences, 1, 1 << 20);
    const HeldOut held_out = read_held_out(read);
    read.finish();
    check(count_sequences(keys_ * p_, seq_len_) >= 64, ConfigReader::key("p"),
          "p^seq_len >= 64 (enough distinct rows)", count_sequences(keys_ * p_, seq_len_));
    build_validation(validation, held_out);
  }

  std::string name() const override { return "multi-retrieval"; }
  std::int64_t vocab_size() const override { return std::max(classes_, keys_ * p_); }
  bool causal() const override { return true; }
  nlohmann::json describe() const override {
    nlohmann::json d = describe_common();
    d["p"] = p_;
    d["mode"] = mode_;
    d["offsets"] = offsets_;
    d["classes"] = classes_;
    if (mode_ == "key-value") {
      d["keys"] = keys_;
      d["rule"] =
          "x = key * p + value; y_t = value(x[j]) * p + value(x[t - offsets[0]]) for the last j < "
          "t "
          "with key(x[j]) = key(x[t]), scored where such j exists and t >= offsets[0]";
    } else {
      d["rule"] = concat(
          "y_t = the ", mode_ == "ordered" ? "ordered" : "sorted (unordered)",
          " tuple (x[t - offsets[0]], ...) read as one base-p number, scored for t >= max offset");
    }
    return d;
  }

 protected:
  void generate(CounterRng& rng, std::int32_t* tokens, std::int32_t* targets) const override {
    const auto vocab = static_cast<std::uint64_t>(keys_ * p_);
    for (std::int64_t t = 0; t < seq_len_; ++t)
      tokens[t] = static_cast<std::int32_t>(rng.below(vocab));
    if (mode_ == "key-value") {
      // last[k]: the latest position whose key is k so far, -1 before it appears.
      std::vector<std::int64_t> last(static_cast<std::size_t>(keys_), -1);
      for (std::int64_t t = 0; t < seq_len_; ++t) {
        const auto key = static_cast<std::size_t>(tokens[t] / p_);
        const std::int64_t j = last[key];
        last[key] = t;
        if (j < 0 || t < first_scored_) {
          targets[t] = Batch::kIgnore;
          continue;
        }
        targets[t] =
            static_cast<std::int32_t>((tokens[j] % p_) * p_ + tokens[t - offsets_[0]] % p_);
      }
      return;
    }
    std::vector<std::int64_t> fetched(offsets_.size());
    for (std::int64_t t = 0; t < seq_len_; ++t) {
      if (t < first_scored_) {
        targets[t] = Batch::kIgnore;
        continue;
      }
      for (std::size_t i = 0; i < offsets_.size(); ++i) fetched[i] = tokens[t - offsets_[i]];
      if (mode_ == "unordered") std::sort(fetched.begin(), fetched.end());
      std::int64_t y = 0;
      for (const std::int64_t v : fetched) y = y * p_ + v;
      targets[t] = static_cast<std::int32_t>(y);
    }
  }

 private:
  std::int64_t p_ = 0, keys_ = 1, classes_ = 0, first_scored_ = 0;
  std::string mode_;
  std::vector<std::int64_t> offsets_;
};

}  // namespace

std::unique_ptr<Task> make_retrieval(const nlohmann::json& config) {
  return std::make_unique<RetrievalTask>(config);
}

}  // namespace headcount::train::tasks
