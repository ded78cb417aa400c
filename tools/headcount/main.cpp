// headcount: the command line. Exit codes: 0 success, 2 bad input (one line on stderr),
// 1 an unexpected internal failure.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "commands.h"
#include "headcount/error.h"
#include "headcount/version.h"

int main(int argc, char** argv) {
  CLI::App app{"headcount: an exact multi-head attention engine and its cost model", "headcount"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");
  app.set_version_flag("--version", std::string("headcount ") + headcount::version());
  headcount::cli::register_cost(app);
  headcount::cli::register_attention(app);
  headcount::cli::register_layer(app);
  headcount::cli::register_bench(app);
  headcount::cli::register_embed(app);
  headcount::cli::register_similarity(app);
  headcount::cli::register_sts(app);
  headcount::cli::register_heads(app);
  headcount::cli::register_train(app);
  headcount::cli::register_experiment(app);
  headcount::cli::register_prune(app);
  headcount::cli::register_prune_curve(app);
  headcount::cli::register_prune_speed(app);
  headcount::cli::register_convert(app);
  headcount::cli::register_gguf_info(app);
  headcount::cli::register_generate(app);
  headcount::cli::register_perplexity(app);
  headcount::cli::register_serve(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "headcount: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const headcount::Error& e) {
    std::fprintf(stderr, "headcount: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "headcount: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "headcount: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
