// esp_graphs.h: the three graph families and the exact minimum feedback arc set.
#include "train/tasks/esp_graphs.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "headcount/error.h"

namespace headcount::train::tasks {

using detail::concat;

std::vector<Arc> esp_graph_arcs(const std::string& graph, std::int64_t vertices) {
  check(vertices >= 2 && vertices <= kMaxEspVertices, "task.vertices",
        concat("an integer in [2, ", kMaxEspVertices, "]"), vertices);
  std::vector<Arc> arcs;
  for (std::int64_t u = 0; u < vertices; ++u)
    for (std::int64_t v = 0; v < vertices; ++v) {
      if (u == v) continue;
      const bool arc = graph == "transitive" ? u < v
                       : graph == "complete" ? true
                       : graph == "cycle"    ? v == (u + 1) % vertices
                                             : false;
      if (arc) arcs.emplace_back(u, v);
    }
  check(graph == "transitive" || graph == "complete" || graph == "cycle", "task.graph",
        "transitive, complete or cycle", concat("\"", graph, "\""));
  return arcs;
}

std::int64_t minimum_feedback_arc_set(const std::vector<Arc>& arcs, std::int64_t vertices) {
  check(vertices >= 1 && vertices <= kMaxEspVertices, "vertices",
        concat("an integer in [1, ", kMaxEspVertices, "]"), vertices);
  // into[v]: the set of vertices w with an arc v -> w. Placing v after the set S makes the arcs
  // from v into S point backwards.
  std::vector<std::uint32_t> into(static_cast<std::size_t>(vertices), 0);
  for (const auto& [u, v] : arcs) {
    check(u >= 0 && u < vertices && v >= 0 && v < vertices && u != v, "arc",
          concat("two distinct vertices in [0, ", vertices, ")"), concat(u, " -> ", v));
    into[static_cast<std::size_t>(u)] |= 1u << v;
  }
  const std::uint32_t full = (1u << vertices) - 1;
  std::vector<std::int64_t> best(static_cast<std::size_t>(full) + 1,
                                 std::numeric_limits<std::int64_t>::max());
  best[0] = 0;
  for (std::uint32_t set = 0; set < full; ++set) {
    if (best[set] == std::numeric_limits<std::int64_t>::max()) continue;
    for (std::int64_t v = 0; v < vertices; ++v) {
      if (set & (1u << v)) continue;
      const std::int64_t back = std::popcount(into[static_cast<std::size_t>(v)] & set);
      std::int64_t& next = best[set | (1u << v)];
      next = std::min(next, best[set] + back);
    }
  }
  return best[full];
}

}  // namespace headcount::train::tasks
