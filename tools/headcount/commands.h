// One register function per CLI command; each lives in its own cmd_<name>.cpp.
// A command's callback throws headcount::Error on bad input; main() prints it as one
// line on stderr and exits with code 2.
#pragma once

#include <CLI/CLI.hpp>

namespace headcount::cli {

void register_cost(CLI::App& app);
void register_attention(CLI::App& app);
void register_layer(CLI::App& app);
void register_bench(CLI::App& app);
void register_embed(CLI::App& app);
void register_similarity(CLI::App& app);
void register_sts(CLI::App& app);
void register_heads(CLI::App& app);
void register_train(CLI::App& app);
void register_experiment(CLI::App& app);
void register_prune(CLI::App& app);
void register_prune_curve(CLI::App& app);
void register_prune_speed(CLI::App& app);
void register_convert(CLI::App& app);
void register_gguf_info(CLI::App& app);
void register_generate(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_serve(CLI::App& app);

}  // namespace headcount::cli
