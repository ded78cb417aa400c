// The graphs of the Endpoint Selection Problem (esp_selector.cpp) and their minimum feedback
// arc set, which fixes one head's accuracy ceiling 1 - MFAS / (2m).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace headcount::train::tasks {

using Arc = std::pair<std::int64_t, std::int64_t>;

// The exact MFAS below enumerates vertex subsets: 2^16 x 16 steps at most.
inline constexpr std::int64_t kMaxEspVertices = 16;

// "transitive": i -> j for every i < j; "complete": every ordered pair i != j; "cycle":
// i -> i + 1 mod n. Arcs in lexicographic order. Error on another name or n out of [2, 16].
std::vector<Arc> esp_graph_arcs(const std::string& graph, std::int64_t vertices);

// The fewest arcs whose removal leaves the graph acyclic, i.e. the fewest arcs pointing
// backwards over all orderings of the vertices, exactly, by dynamic programming over the sets
// of vertices placed first: best(S + v) = min over v of best(S) + #arcs from v into S.
std::int64_t minimum_feedback_arc_set(const std::vector<Arc>& arcs, std::int64_t vertices);

}  // namespace headcount::train::tasks
