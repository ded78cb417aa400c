// esp: an Endpoint Selection Problem over the arcs of a fixed directed graph, after "Two
// (narrow) heads are better than (an arbitrarily wide) one" (ICLR 2026, OpenReview
// RRmPbbZsvl). The paper's exact definition was not available here; this is headcount's own
// reconstruction, built so that its two stated facts hold by the argument below:
//   graph G: `vertices` vertices, `arcs` arcs, no 2-cycles, drawn once from graph_seed.
//     "cyclic": a Hamiltonian cycle through a random vertex order plus random chords in random
//     directions; "acyclic": a Hamiltonian path plus chords that all point forward along it
//     (a DAG). Both families have the same vertex and arc counts.
//   a row: an arc (u, v) of G drawn uniformly; seq_len - 1 endpoint tokens, k copies of u and
//     seq_len - 1 - k of v (k uniform in [1, seq_len - 2]) in a random order; then the query
//     token `vertices`. Scored: only the query position, target v (the arc's head, the endpoint
//     the arc selects). Every other position is Batch::kIgnore.
// Why one head fails on cycles and two do not (attention-only, one layer): at the query the
// single head's output is a convex combination of value vectors whose weights come from
// scores s(token) (the query token is fixed; positions carry no information, the order being
// random). To pick v whatever the counts, the weight must sit on v, i.e. s must rise along every
// arc by more than log(seq_len), which is possible on a DAG (a topological order) and impossible
// around a cycle; otherwise some arc's mixtures range from nearly pure u to nearly pure v, and
// the linear readout must map nearly pure u both to u (arc pred->u) and to v (arc u->v). Two
// heads with opposite scores of any order read (max, min) of the pair separately, from which a
// linear readout picks the head of the arc on any graph without 2-cycles.
// vocab = vertices + 1 (the query token); causal.
#include <algorithm>
#include <numeric>

#include "headcount/error.h"
#include "train/tasks/config_reader.h"
#include "train/tasks/synthetic_task.h"
#include "train/tasks/tasks.h"

namespace headcount::train::tasks {
namespace {

using detail::concat;

class EspTask final : public SyntheticTask {
 public:
  explicit EspTask(const nlohmann::json& config) {
    ConfigReader read(config);
    vertices_ = read.integer("vertices", 8, 3, 1 << 12);
    const std::int64_t most = vertices_ * (vertices_ - 1) / 2;  // no 2-cycles: one arc per pair
    arcs_count_ = read.integer("arcs", std::min<std::int64_t>(12, most), vertices_, most);
    graph_ = read.choice("graph", "cyclic", {"cyclic", "acyclic"});
    graph_seed_ = static_cast<std::uint64_t>(read.integer("graph_seed", 1, 0, 1ll << 62));
    seq_len_ = read.integer("seq_len", 16, 8, 1 << 16);  // >= 378 distinct rows
    const std::int64_t validation =
        read.integer("validation_sequences", kDefaultValidationSequences, 1, 1 << 20);
    read.finish();
    build_graph();
    build_validation(validation);
  }

  std::string name() const override { return "esp"; }
  std::int64_t vocab_size() const override { return vertices_ + 1; }
  bool causal() const override { return true; }
  nlohmann::json describe() const override {
    nlohmann::json d = describe_common();
    d["vertices"] = vertices_;
    d["graph"] = graph_;
    d["graph_seed"] = graph_seed_;
    d["query_token"] = vertices_;
    nlohmann::json arcs = nlohmann::json::array();
    for (const auto& [u, v] : arcs_) arcs.push_back({u, v});
    d["arcs"] = arcs;
    d["rule"] =
        "an arc (u, v) of the fixed graph; seq_len - 1 tokens, k copies of u and the rest v "
        "(k uniform in [1, seq_len - 2]) in random order, then the query token; scored: the "
        "query position, target v (the arc's head)";
    d["definition"] =
        "headcount's reconstruction of the Endpoint Selection Problem (the paper's exact "
        "definition was not available): see src/train/tasks/esp.cpp";
    return d;
  }

 protected:
  void generate(CounterRng& rng, std::int32_t* tokens, std::int32_t* targets) const override {
    const auto& [u, v] = arcs_[rng.below(arcs_.size())];
    const std::int64_t n = seq_len_ - 1;
    const auto k = 1 + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(n - 1)));
    for (std::int64_t i = 0; i < n; ++i) tokens[i] = static_cast<std::int32_t>(i < k ? u : v);
    for (std::int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
      const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i + 1)));
      std::swap(tokens[i], tokens[j]);
    }
    tokens[n] = static_cast<std::int32_t>(vertices_);
    for (std::int64_t i = 0; i < n; ++i) targets[i] = Batch::kIgnore;
    targets[n] = static_cast<std::int32_t>(v);
  }

 private:
  void build_graph() {
    CounterRng rng(graph_seed_, Stream::graph, graph_ == "cyclic" ? 1 : 2, 0);
    std::vector<std::int64_t> order(static_cast<std::size_t>(vertices_));
    std::iota(order.begin(), order.end(), 0);
    for (std::int64_t i = vertices_ - 1; i > 0; --i)
      std::swap(order[static_cast<std::size_t>(i)],
                order[rng.below(static_cast<std::uint64_t>(i + 1))]);
    const auto at = [&](std::int64_t i) { return order[static_cast<std::size_t>(i)]; };
    // linked[a * n + b]: a and b already share an arc (either direction).
    std::vector<char> linked(static_cast<std::size_t>(vertices_ * vertices_), 0);
    const auto add = [&](std::int64_t a, std::int64_t b) {
      arcs_.emplace_back(a, b);
      linked[static_cast<std::size_t>(a * vertices_ + b)] = 1;
      linked[static_cast<std::size_t>(b * vertices_ + a)] = 1;
    };
    const bool cyclic = graph_ == "cyclic";
    for (std::int64_t i = 0; i + 1 < vertices_; ++i) add(at(i), at(i + 1));
    if (cyclic) add(at(vertices_ - 1), at(0));
    // Chords: pairs (i < j) of positions along the order, unlinked, drawn until enough.
    while (static_cast<std::int64_t>(arcs_.size()) < arcs_count_) {
      std::int64_t i = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(vertices_)));
      std::int64_t j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(vertices_)));
      if (i == j || linked[static_cast<std::size_t>(at(i) * vertices_ + at(j))]) continue;
      if (i > j) std::swap(i, j);
      const bool forward = !cyclic || rng.below(2) == 0;  // DAG chords point forward
      forward ? add(at(i), at(j)) : add(at(j), at(i));
    }
  }

  std::int64_t vertices_ = 0, arcs_count_ = 0;
  std::string graph_;
  std::uint64_t graph_seed_ = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> arcs_;
};

}  // namespace

// "mode": "endpoints" (this file's reconstruction, the default: the first and second designs'
// experiments ran it) or "selector" (the published task, esp_selector.cpp).
std::unique_ptr<Task> make_esp(const nlohmann::json& config) {
  nlohmann::json rest = config;
  std::string mode = "endpoints";
  if (rest.contains("mode")) {
    const nlohmann::json& m = rest.at("mode");
    HEADCOUNT_CHECK(m.is_string() && (m == "endpoints" || m == "selector"), "task.mode",
                    "\"endpoints\" or \"selector\"", m.dump());
    mode = m.get<std::string>();
    rest.erase("mode");
  }
  if (mode == "selector") return make_esp_selector(rest);
  return std::make_unique<EspTask>(rest);
}

}  // namespace headcount::train::tasks
