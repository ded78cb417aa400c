// esp, mode "selector": the Endpoint Selection Problem as published in "Two (narrow) heads are
// better than (an arbitrarily wide) one" (ICLR 2026, OpenReview RRmPbbZsvl), the task of the
// claims protocol's E-A (../shared/claims-protocol.md, docs/what-the-split-buys.md).
//   graph G on `vertices` vertices: "transitive" (the transitive tournament, arcs i -> j for
//     i < j), "complete" (the complete digraph K*, every ordered pair), "cycle" (the directed
//     cycle 0 -> 1 -> ... -> n-1 -> 0).
//   one sequence per arc (u, v) and selector i in {1, 2}: (u, v, S_i, #), causal; only # is
//     scored, target u for S1 and v for S2. 2m sequences for m arcs.
//   vocab: vertices 0..n-1, S1 = n, S2 = n + 1, # = n + 2.
// Why one head is capped: at #, the query (token #, position 3) is the same in every sequence, so
// the single head's weights come from key scores alone, and the prediction is a function of
// the unordered mixture; the paper shows one attention-only layer with one head of any width
// answers at most 1 - MFAS(G) / (2m) of the sequences right, MFAS the minimum feedback arc set
// (T: 0, ceiling 1; K*_8: 28 of 56, ceiling 0.75; C_8: 1 of 8, ceiling 0.9375). Two heads reach
// 1. describe() reports m, MFAS (computed exactly, by dynamic programming over vertex subsets)
// and the ceiling, so the experiment's judge reads them from the task, not from a constant.
//   "enumerate": true  every training batch is the whole enumeration (batch must be 2m, full
//                      batch gradient descent); false: rows drawn uniformly from it.
// The validation set is the enumeration (the protocol's R3 exception: an expressivity question
// is trained and scored on every sequence there is).
#include <algorithm>

#include "headcount/error.h"
#include "train/tasks/config_reader.h"
#include "train/tasks/esp_graphs.h"
#include "train/tasks/random.h"
#include "train/tasks/synthetic_task.h"
#include "train/tasks/tasks.h"

namespace headcount::train::tasks {
namespace {

using detail::concat;

class EspSelectorTask final : public Task {
 public:
  explicit EspSelectorTask(const nlohmann::json& config) {
    ConfigReader read(config);
    vertices_ = read.integer("vertices", 8, 2, kMaxEspVertices);
    graph_ = read.choice("graph", "complete", {"transitive", "complete", "cycle"});
    enumerate_ = read.boolean("enumerate", true);
    read.finish();
    HEADCOUNT_CHECK(graph_ != "cycle" || vertices_ >= 3, ConfigReader::key("vertices"),
                    "at least 3 for a cycle (2 would be a 2-cycle)", vertices_);
    arcs_ = esp_graph_arcs(graph_, vertices_);
    mfas_ = minimum_feedback_arc_set(arcs_, vertices_);
    const auto m = static_cast<std::int64_t>(arcs_.size());
    all_ = Batch{.batch = 2 * m, .seq_len = kSeqLen};
    all_.tokens.resize(static_cast<std::size_t>(2 * m * kSeqLen));
    all_.targets.assign(all_.tokens.size(), Batch::kIgnore);
    for (std::int64_t a = 0; a < m; ++a)
      for (std::int64_t s = 0; s < 2; ++s) {
        const auto [u, v] = arcs_[static_cast<std::size_t>(a)];
        const std::int64_t row = 2 * a + s;
        std::int32_t* t = all_.tokens.data() + row * kSeqLen;
        t[0] = static_cast<std::int32_t>(u);
        t[1] = static_cast<std::int32_t>(v);
        t[2] = static_cast<std::int32_t>(vertices_ + s);  // S1 or S2
        t[3] = static_cast<std::int32_t>(vertices_ + 2);  // #
        all_.targets[static_cast<std::size_t>(row * kSeqLen + 3)] =
            static_cast<std::int32_t>(s == 0 ? u : v);
      }
  }

  std::string name() const override { return "esp"; }
  std::int64_t vocab_size() const override { return vertices_ + 3; }
  std::int64_t seq_len() const override { return kSeqLen; }
  bool causal() const override { return true; }

  Batch train_batch(std::uint64_t seed, std::int64_t step, std::int64_t batch) const override {
    check_batch_request(batch, "train_batch");
    check(step >= 0, "train_batch step", "a non-negative step", step);
    if (enumerate_) {
      HEADCOUNT_CHECK(
          batch == all_.batch, "batch",
          concat("the whole enumeration, 2m = ", all_.batch, " sequences (task.enumerate is true)"),
          batch);
      return all_;
    }
    Batch out{.batch = batch, .seq_len = kSeqLen};
    for (std::int64_t row = 0; row < batch; ++row) {
      CounterRng rng(seed, Stream::train, static_cast<std::uint64_t>(step),
                     static_cast<std::uint64_t>(row));
      const auto pick =
          static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(all_.batch)));
      const Batch one = slice_rows(all_, pick, 1);
      out.tokens.insert(out.tokens.end(), one.tokens.begin(), one.tokens.end());
      out.targets.insert(out.targets.end(), one.targets.begin(), one.targets.end());
    }
    return out;
  }

  std::int64_t validation_batches(std::int64_t batch) const override {
    check_batch_request(batch, "validation_batches");
    return (all_.batch + batch - 1) / batch;
  }
  Batch validation_batch(std::int64_t index, std::int64_t batch) const override {
    const std::int64_t count = validation_batches(batch);
    check(index >= 0 && index < count, "validation_batch index",
          concat("an index in [0, ", count, ")"), index);
    return slice_rows(all_, index * batch, std::min(batch, all_.batch - index * batch));
  }

  nlohmann::json describe() const override {
    const auto m = static_cast<std::int64_t>(arcs_.size());
    nlohmann::json arcs = nlohmann::json::array();
    for (const auto& [u, v] : arcs_) arcs.push_back({u, v});
    return {{"name", name()},
            {"mode", "selector"},
            {"vocab", vocab_size()},
            {"seq_len", kSeqLen},
            {"causal", true},
            {"vertices", vertices_},
            {"graph", graph_},
            {"arcs", arcs},
            {"arc_count", m},
            {"sequences", 2 * m},
            {"mfas", mfas_},
            {"one_head_ceiling", 1.0 - static_cast<double>(mfas_) / static_cast<double>(2 * m)},
            {"one_head_ceiling_count", 2 * m - mfas_},
            {"enumerate", enumerate_},
            {"tokens", {{"S1", vertices_}, {"S2", vertices_ + 1}, {"query", vertices_ + 2}}},
            {"rule",
             "one sequence (u, v, S_i, #) per arc (u, v) and selector i; scored: #, target u "
             "for S1 and v for S2; validation = every sequence"},
            {"definition",
             "the Endpoint Selection Problem of OpenReview RRmPbbZsvl (ICLR 2026): see "
             "src/train/tasks/esp_selector.cpp"}};
  }

 private:
  static constexpr std::int64_t kSeqLen = 4;
  std::int64_t vertices_ = 0, mfas_ = 0;
  std::string graph_;
  bool enumerate_ = true;
  std::vector<std::pair<std::int64_t, std::int64_t>> arcs_;
  Batch all_;
};

}  // namespace

std::unique_ptr<Task> make_esp_selector(const nlohmann::json& config) {
  return std::make_unique<EspSelectorTask>(config);
}

}  // namespace headcount::train::tasks
