// HTML sections for saved compression results, shared by `headcount prune-curve --out` and the
// heads report (`headcount heads --prune-curve FILE --convert-sweep FILE`): the pruning curve
// (STS-B test Spearman against the fraction of heads removed, per ranking, with Michel et al.
// 2019's claim beside it) and the MHA -> GQA table (Spearman and KV-cache bytes per K/V head
// count and method), each a line chart and a table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace headcount::report {

// A `headcount prune-curve` result (its --json-out). Error if its fields are missing.
std::string prune_curve_section(const nlohmann::json& curve);
// A `headcount prune-curve --model FILE.gguf` result: test NLL against the share of K/V groups
// removed (ablation order, random orders mean +- std) and the speed table of the pruned models.
std::string decoder_prune_curve_section(const nlohmann::json& curve);
// A `headcount convert-sweep` result (its --json-out).
std::string convert_sweep_section(const nlohmann::json& sweep);
// A JSON file, or Error naming it.
nlohmann::json read_json_file(const std::string& path);

}  // namespace headcount::report
