// `headcount cost`: the cost model of one layer, as a table or as JSON.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "headcount/cost.h"
#include "headcount/error.h"

namespace headcount::cli {
namespace {

struct CostOptions {
  CostConfig config;
  std::string dtype = "f32";
  bool json = false;
};

DType parse_cost_dtype(const std::string& name) {
  check(name == "f32" || name == "bf16", "dtype", "f32 or bf16", name);
  return name == "f32" ? DType::f32 : DType::bf16;
}

}  // namespace

void register_cost(CLI::App& app) {
  // Shared with the callback, which runs after parsing, when `app` has filled it in.
  auto options = std::make_shared<CostOptions>();
  CostConfig& c = options->config;
  CLI::App* cmd = app.add_subcommand(
      "cost", "Count weights, multiply-adds, activation bytes and score memory of one layer");
  cmd->add_option("--d-model", c.d_model, "Model width")->required();
  cmd->add_option("--heads", c.heads, "Query heads")->required();
  cmd->add_option("--kv-heads", c.kv_heads, "Key/value heads, dividing heads (default: heads)");
  cmd->add_option("--head-dim", c.head_dim, "Query/key width per head (default: d_model/heads)");
  cmd->add_option("--v-head-dim", c.v_head_dim, "Value width per head (default: head_dim)");
  cmd->add_option("--seq-len", c.seq_len, "Query positions")->capture_default_str();
  cmd->add_option("--kv-len", c.kv_len, "Key/value positions (default: seq_len)");
  cmd->add_option("--batch", c.batch, "Sequences")->capture_default_str();
  cmd->add_option("--d-ff", c.d_ff, "Feed-forward hidden width (default: 4*d_model)");
  cmd->add_option("--dtype", options->dtype, "Element type: f32 or bf16")->capture_default_str();
  cmd->add_option("--threads", c.threads, "Streaming workers, one score tile each")
      ->capture_default_str();
  cmd->add_option("--context", c.context,
                  "KV-cache section: positions cached per sequence (MHA, GQA, MQA side by side)");
  cmd->add_option("--layers", c.layers, "Layers of the model, for the KV-cache section")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print a JSON object instead of the table");

  cmd->callback([options] {
    CostConfig config = options->config;
    config.dtype = parse_cost_dtype(options->dtype);
    const CostReport report = estimate_cost(config);
    const std::string text =
        options->json ? cost_to_json(report) + "\n" : format_cost_table(report);
    std::fputs(text.c_str(), stdout);
  });
}

}  // namespace headcount::cli
