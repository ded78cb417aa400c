// Presenting a CostReport: a table for people and a JSON object for programs.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "headcount/cost.h"
#include "simd/tuning.h"

namespace headcount {
namespace {

// 1048576 -> "1,048,576": the figures span ten orders of magnitude, and grouped digits are
// what lets a reader compare 512,000,000 with 1,048,576,000 at a glance.
std::string grouped(std::int64_t value) {
  std::string digits = std::to_string(value < 0 ? -static_cast<std::uint64_t>(value)
                                                : static_cast<std::uint64_t>(value));
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

// Zero in a cost column means "this stage has none" (no weights in the scores), so it
// prints as a dash rather than a number to be read.
std::string cell(std::int64_t value) { return value == 0 ? "-" : grouped(value); }

bool is_total(const StageCost& row) {
  return row.stage == "attention block" || row.stage == "layer";
}

constexpr int kColumns = 6;
using Row = std::array<std::string, kColumns>;

}  // namespace

std::string format_cost_table(const CostReport& report) {
  const CostConfig& c = report.config;
  const std::int64_t bytes = static_cast<std::int64_t>(dtype_size(c.dtype));
  std::ostringstream out;
  out << "layer cost: d_model " << grouped(c.d_model) << ", heads " << c.heads << ", kv_heads "
      << c.kv_heads << ", head_dim " << c.head_dim << ", v_head_dim " << c.v_head_dim << ", d_ff "
      << grouped(c.d_ff) << "\n            batch " << c.batch << ", seq_len " << grouped(c.seq_len)
      << ", kv_len " << grouped(c.kv_len) << ", dtype " << dtype_name(c.dtype) << " (" << bytes
      << " bytes), threads " << c.threads << "\n\n";

  std::vector<Row> rows = {
      {"stage", "weights", "multiply-adds", "activation bytes", "ref. scores", "stream scores"}};
  for (const StageCost& s : report.stages) {
    rows.push_back({s.stage, cell(s.weights), cell(s.macs), cell(s.activation_bytes),
                    cell(s.reference_score_entries), cell(s.streaming_score_entries)});
  }
  std::array<std::size_t, kColumns> width{};
  for (const Row& row : rows) {
    for (int i = 0; i < kColumns; ++i) width[i] = std::max(width[i], row[i].size());
  }
  const auto print_row = [&](const Row& row) {
    out << row[0] << std::string(width[0] - row[0].size(), ' ');  // names left-aligned
    for (int i = 1; i < kColumns; ++i) {
      out << "  " << std::string(width[i] - row[i].size(), ' ') << row[i];
    }
    out << '\n';
  };
  std::size_t line_width = width[0];
  for (int i = 1; i < kColumns; ++i) line_width += 2 + width[i];
  const std::string rule(line_width, '-');

  print_row(rows[0]);
  out << rule << '\n';
  for (std::size_t i = 0; i < report.stages.size(); ++i) {
    if (is_total(report.stages[i])) out << rule << '\n';
    print_row(rows[i + 1]);
  }

  const std::int64_t tile = tuning::streaming_tile_entries(c.heads / c.kv_heads, c.seq_len);
  char approx[32];
  std::snprintf(approx, sizeof approx, "%.3g", static_cast<double>(report.projections.macs));
  out << "\nprojections (Q, K, V, O together): " << grouped(report.projections.weights)
      << " weights, " << grouped(report.projections.macs) << " multiply-adds (~" << approx << ")\n";
  out << "parameters: " << grouped(report.total_parameters)
      << " (weight matrices only; biases are not counted)\n"
      << "KV cache: " << grouped(report.kv_cache_bytes_per_token)
      << " bytes per token per layer = kv_heads * (head_dim + v_head_dim) * " << bytes
      << " bytes;\n  " << grouped(report.kv_cache_bytes) << " bytes for batch * kv_len tokens\n"
      << "scores held at once: the reference path materialises batch * heads * seq_len * kv_len\n"
      << "  = " << grouped(report.stage("scores").reference_score_entries)
      << " scores (ref. scores); the streaming path holds threads * tile entries\n  = " << c.threads
      << " * " << grouped(tile) << " = " << grouped(report.stage("scores").streaming_score_entries)
      << " (stream scores), whatever the lengths and head count\n"
      << "activation bytes: the tensor each stage outputs (scores: the reference path's full\n"
      << "  grid; feed-forward: the d_ff-wide hidden); total rows sum their stages and take\n"
      << "  the peak of the two scores columns\n";

  if (!report.kv_cache_layouts.empty()) {
    out << "\nKV cache for the whole context: " << grouped(c.context) << " positions x batch "
        << c.batch << " x " << c.layers << " layer" << (c.layers == 1 ? "" : "s") << " (K and V)\n";
    std::vector<std::array<std::string, 5>> kv_rows = {
        {"layout", "kv_heads", "f32 bytes", "bf16 bytes", "int8 bytes"}};
    for (const KvCacheLayoutCost& l : report.kv_cache_layouts)
      kv_rows.push_back({l.layout + (l.configured ? " *" : ""), std::to_string(l.kv_heads),
                         grouped(l.f32_bytes), grouped(l.bf16_bytes), grouped(l.int8_bytes)});
    std::array<std::size_t, 5> w{};
    for (const auto& row : kv_rows)
      for (int i = 0; i < 5; ++i) w[i] = std::max(w[i], row[i].size());
    for (const auto& row : kv_rows) {
      out << row[0] << std::string(w[0] - row[0].size(), ' ');
      for (int i = 1; i < 5; ++i) out << "  " << std::string(w[i] - row[i].size(), ' ') << row[i];
      out << '\n';
    }
    out << "* = the configured kv_heads. bytes = layers * batch * context * kv_heads * (head_dim "
           "+\n"
        << "  v_head_dim) * element bytes; int8 adds one fp32 scale per token, kv head and K/V.\n"
        << "  GQA, when not configured: the largest divisor of heads <= max(2, heads/4).\n";
  }
  return out.str();
}

std::string cost_to_json(const CostReport& report, int indent) {
  const CostConfig& c = report.config;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const StageCost& s : report.stages) {
    stages.push_back({{"stage", s.stage},
                      {"weights", s.weights},
                      {"macs", s.macs},
                      {"activation_bytes", s.activation_bytes},
                      {"reference_score_entries", s.reference_score_entries},
                      {"streaming_score_entries", s.streaming_score_entries}});
  }
  nlohmann::ordered_json doc = {
      {"config",
       {{"d_model", c.d_model},
        {"heads", c.heads},
        {"kv_heads", c.kv_heads},
        {"head_dim", c.head_dim},
        {"v_head_dim", c.v_head_dim},
        {"seq_len", c.seq_len},
        {"kv_len", c.kv_len},
        {"batch", c.batch},
        {"d_ff", c.d_ff},
        {"dtype", dtype_name(c.dtype)},
        {"bytes_per_element", dtype_size(c.dtype)},
        {"threads", c.threads}}},
      {"stages", std::move(stages)},
      {"kv_cache_bytes_per_token", report.kv_cache_bytes_per_token},
      {"kv_cache_bytes", report.kv_cache_bytes},
      {"total_parameters", report.total_parameters},
      {"projections",
       {{"weights", report.projections.weights},
        {"macs", report.projections.macs},
        {"activation_bytes", report.projections.activation_bytes}}},
      {"streaming_tile_entries", tuning::streaming_tile_entries(c.heads / c.kv_heads, c.seq_len)}};
  if (!report.kv_cache_layouts.empty()) {
    nlohmann::ordered_json layouts = nlohmann::ordered_json::array();
    for (const KvCacheLayoutCost& l : report.kv_cache_layouts)
      layouts.push_back(
          {{"layout", l.layout},
           {"kv_heads", l.kv_heads},
           {"configured", l.configured},
           {"bytes", {{"f32", l.f32_bytes}, {"bf16", l.bf16_bytes}, {"int8", l.int8_bytes}}}});
    doc["kv_cache_context"] = {{"context", c.context},
                               {"layers", c.layers},
                               {"batch", c.batch},
                               {"layouts", std::move(layouts)}};
  }
  return doc.dump(indent);
}

}  // namespace headcount
