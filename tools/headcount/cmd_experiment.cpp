// `headcount experiment NAME`: runs one of the experiments of src/experiments (a grid of
// training runs x seeds), then prints a summary (per cell mean ± std, each verdict with its
// reason), or the whole result JSON with --json; --json-out and --out write the JSON and the
// HTML page, each atomically (temporary + rename), once the run is over and both texts are
// built (every argument, output directories included, is checked before anything trains);
// --from draws the page of a saved result again. Progress goes to stderr. Bad input: one line,
// exit code 2 (main.cpp).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "commands.h"
#include "experiments/cost_measured.h"
#include "experiments/experiment.h"
#include "experiments/page.h"
#include "experiments/result.h"
#include "experiments/runner.h"
#include "experiments/stages.h"
#include "headcount/error.h"
#include "io/atomic_file.h"

namespace headcount::cli {
namespace {

using detail::concat;
using nlohmann::json;
namespace ex = headcount::experiments;

struct ExperimentArgs {
  std::string name, out, json_out, from, stage, envelope, compare_with, budget = "default";
  int seeds = 3, first_seed = 1;
  bool seeds_given = false;
  std::int64_t steps = 0;  // 0: the experiment's default
  bool steps_given = false;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool quick = false, json = false, list = false, quiet = false;
};

std::string list_text() {
  std::string text = "experiments:";
  for (const ex::ExperimentSpec& s : ex::experiment_specs())
    text += "\n  " + s.name + ": " + s.summary;
  text +=
      "\n  cost-measured: E-H: weights, multiply-adds and exponentials counted by the kernels, "
      "and time, across h (no training)";
  return text;
}

// An output path must name a file in a directory that exists, so a long run cannot end in
// an error about where to write.
void check_output(const std::string& option, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code error;
  HEADCOUNT_CHECK(!p.filename().empty() && fs::is_directory(dir, error), option,
                  "a file path in an existing directory", concat("\"", path, "\""));
  HEADCOUNT_CHECK(!fs::is_directory(p, error), option, "a file path, not a directory",
                  concat("\"", path, "\""));
}

void print_summary(const json& r) {
  std::printf("experiment %s: %zu cells x %d seeds, %s\n",
              r["experiment"]["name"].get<std::string>().c_str(), r["cells"].size(),
              r["settings"]["seeds"].get<int>(),
              r["experiment"]["metric"].get<std::string>().c_str());
  for (const json& c : r["cells"])
    std::printf("  %-14s %.4f ± %.4f   train multiply-adds/step %lld\n",
                c["id"].get<std::string>().c_str(), c["stats"]["mean"].get<double>(),
                c["stats"]["std"].get<double>(),
                static_cast<long long>(c["cost"]["train_macs"].get<std::int64_t>()));
  for (const json& v : r["verdicts"])
    std::printf("%s: %s\n  %s\n", v["id"].get<std::string>().c_str(),
                v["verdict"].get<std::string>().c_str(), v["reason"].get<std::string>().c_str());
  std::printf("%.1f s\n", r["timing"]["seconds"].get<double>());
}

void print_cost_measured(const json& r, bool as_json) {
  if (as_json) {
    std::printf("%s\n", r.dump(1).c_str());
    return;
  }
  std::printf("experiment cost-measured: gate %s (%lld multiply-adds)\n",
              r["gate"]["passed"].get<bool>() ? "passed" : "FAILED",
              static_cast<long long>(r["gate"]["measured"].get<std::int64_t>()));
  for (const auto& [name, rows] : r["series"].items())
    for (const json& row : rows)
      std::printf("  %-18s h=%-3lld params %lld  macs %lld  exps %lld  %.2f ms\n", name.c_str(),
                  static_cast<long long>(row["heads"].get<std::int64_t>()),
                  static_cast<long long>(row["parameters"].get<std::int64_t>()),
                  static_cast<long long>(row["macs"].get<std::int64_t>()),
                  static_cast<long long>(row["exponentials"].get<std::int64_t>()),
                  1e3 * row["median_seconds"].get<double>());
  for (const json& v : r["verdicts"])
    std::printf("%s: %s\n  %s\n", v["id"].get<std::string>().c_str(),
                v["verdict"].get<std::string>().c_str(), v["reason"].get<std::string>().c_str());
}

// cost-measured trains nothing: its own document and page (cost_measured.h).
void run_cost_measured_command(const ExperimentArgs& a) {
  HEADCOUNT_CHECK(a.stage.empty() && a.envelope.empty() && !a.seeds_given && !a.steps_given,
                  "cost-measured", "no --stage, --envelope, --seeds or --steps (it trains nothing)",
                  "some given");
  check_output("--out", a.out);
  check_output("--json-out", a.json_out);
  const json document = ex::run_cost_measured(
      {.quick = a.quick, .threads = 1, .source_dir = HEADCOUNT_SOURCE_DIR}, !a.quiet);
  const std::string page = a.out.empty() ? "" : ex::cost_measured_page(document);
  if (!a.json_out.empty()) io::write_file_atomically(a.json_out, document.dump(1) + "\n");
  if (!a.out.empty()) io::write_file_atomically(a.out, page);
  print_cost_measured(document, a.json);
}

// --from FILE: a result saved by --json-out, drawn again (the page) or summarised; runs nothing.
void render_saved(const ExperimentArgs& a) {
  HEADCOUNT_CHECK(a.name.empty() && a.json_out.empty() && !a.quick && !a.steps_given, "--from",
                  "no NAME, --json-out, --quick or --steps (it runs nothing)", "some given");
  check_output("--out", a.out);
  std::ifstream in(a.from, std::ios::binary);
  if (!in)
    fail("--from", concat("expected a readable result JSON, got \"", a.from, "\" (cannot open)"));
  std::ostringstream text;
  text << in.rdbuf();
  json document;
  try {
    document = json::parse(text.str());
  } catch (const json::parse_error& e) {
    fail("--from", concat("expected JSON in ", a.from, ", got a syntax error at byte ", e.byte));
  }
  if (document.is_object() && document.value("format", "") == ex::kCostMeasuredFormat) {
    if (!a.out.empty()) io::write_file_atomically(a.out, ex::cost_measured_page(document));
    print_cost_measured(document, a.json);
    return;
  }
  try {
    const std::string page = ex::experiment_page(document);
    if (!a.out.empty()) io::write_file_atomically(a.out, page);
    if (a.json)
      std::printf("%s\n", document.dump(1).c_str());
    else
      print_summary(document);
  } catch (const json::exception& e) {
    fail("--from", concat("expected a ", ex::kResultFormat, " document, got ", e.what()));
  }
}

json read_json_file(const std::string& option, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(option, concat("expected a readable JSON file, got \"", path, "\" (cannot open)"));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& e) {
    fail(option, concat("expected JSON in ", path, ", got a syntax error at byte ", e.byte));
  }
}

ex::Stage parse_stage(const std::string& stage) {
  if (stage.empty() || stage == "run") return ex::Stage::run;
  if (stage == "probe") return ex::Stage::probe;
  if (stage == "pilot") return ex::Stage::pilot;
  if (stage == "test") return ex::Stage::test;
  fail("--stage", concat("expected probe, pilot or test, got \"", stage, "\""));
}

// --stage probe: the step-time probe of R10, its JSON written or printed; nothing trains.
void run_probe_command(const ExperimentArgs& a, const ex::Experiment& experiment,
                       const ex::ExperimentOptions& options) {
  HEADCOUNT_CHECK(a.out.empty(), "--out", "none with --stage probe (it has no page)", a.out);
  const json probe = ex::run_probe(experiment, options, !a.quiet);
  const std::string text = probe.dump(1);
  if (!a.json_out.empty()) io::write_file_atomically(a.json_out, text + "\n");
  if (a.json) {
    std::printf("%s\n", text.c_str());
    return;
  }
  std::printf("experiment %s probe: load %.2f -> %.2f\n", experiment.name.c_str(),
              probe["load_average_before"].get<double>(),
              probe["load_average_after"].get<double>());
  for (const json& c : probe["cells"])
    std::printf("  %-16s %8.3f ms/step\n", c["id"].get<std::string>().c_str(),
                1e3 * c["median_step_seconds"].get<double>());
  std::printf("steps %lld (estimated %.0f s for the pilot and the test on 2 lanes)\n",
              static_cast<long long>(probe["steps"].get<std::int64_t>()),
              probe["estimated_seconds"].get<double>());
}

// --budget long runs NAME's long budget, registered as its own experiment NAME-long (its own
// pre-registration and JSON, so the default's result keeps reproducing); --budget default, NAME.
std::string long_budget_name(const std::vector<ex::ExperimentSpec>& specs,
                             const ExperimentArgs& a) {
  if (a.budget == "default") return a.name;
  HEADCOUNT_CHECK(a.budget == "long", "--budget", "default or long", concat("\"", a.budget, "\""));
  std::string with_long;
  for (const ex::ExperimentSpec& s : specs) {
    if (s.name == a.name + "-long") return s.name;
    if (s.name.ends_with("-long"))
      with_long += (with_long.empty() ? "" : ", ") + s.name.substr(0, s.name.size() - 5);
  }
  fail("--budget", concat("long only for an experiment with a registered long budget (", with_long,
                          "), got long for ", a.name));
}

void run_experiment_command(const ExperimentArgs& a) {
  if (a.list) {
    std::printf("%s\n", list_text().c_str());
    return;
  }
  if (!a.from.empty()) {
    render_saved(a);
    return;
  }
  HEADCOUNT_CHECK(!a.name.empty(), "NAME", "an experiment name (see --list)", "none");
  if (a.name == "cost-measured") {
    run_cost_measured_command(a);
    return;
  }
  const std::vector<ex::ExperimentSpec> specs = ex::experiment_specs();
  const ex::ExperimentSpec& spec = ex::find_experiment(specs, long_budget_name(specs, a));
  HEADCOUNT_CHECK(a.seeds >= 1 && a.seeds <= 1000, "--seeds", "in [1, 1000]", a.seeds);
  HEADCOUNT_CHECK(!a.steps_given || a.steps >= 1, "--steps", ">= 1", a.steps);
  HEADCOUNT_CHECK(a.threads >= 1 && a.threads <= 1024, "--threads", "in [1, 1024]", a.threads);
  check_output("--out", a.out);
  check_output("--json-out", a.json_out);
  HEADCOUNT_CHECK(a.out.empty() || a.out != a.json_out, "--json-out", "a path other than --out",
                  a.json_out);
  ex::ExperimentOptions options{.seeds = a.seeds,
                                .first_seed = a.first_seed,
                                .steps = a.steps,
                                .quick = a.quick,
                                .threads = a.threads,
                                .stage = parse_stage(a.stage),
                                .source_dir = HEADCOUNT_SOURCE_DIR};
  HEADCOUNT_CHECK(a.envelope.empty() || options.stage == ex::Stage::test, "--envelope",
                  "only with --stage test", concat("\"", a.envelope, "\""));
  HEADCOUNT_CHECK(
      a.compare_with.empty() || options.stage == ex::Stage::test || options.stage == ex::Stage::run,
      "--compare-with",
      "only with --stage test (or an experiment without stages, e.g. small-heads)",
      concat("\"", a.compare_with, "\""));
  HEADCOUNT_CHECK(options.stage != ex::Stage::pilot || a.first_seed == 1, "--first-seed",
                  "none with --stage pilot (the pilot seed is fixed, 101)", a.first_seed);
  // Read before the experiment is made, so that its factory can check it before any training.
  if (!a.compare_with.empty())
    options.compare_with = read_json_file("--compare-with", a.compare_with);
  const ex::Experiment experiment = spec.make(options);
  const bool staged = !experiment.lr_grid.empty();
  HEADCOUNT_CHECK(!staged || options.stage != ex::Stage::run || a.quick, "--stage",
                  concat("probe, pilot or test (", experiment.name,
                         " runs in the claims protocol's stages; --quick runs a smoke grid)"),
                  "none");
  HEADCOUNT_CHECK(!a.quick || options.stage == ex::Stage::run, "--quick",
                  "without --stage (a smoke run is not a stage)", a.stage);
  if (staged && a.quick && !a.seeds_given) options.seeds = 1;
  if (options.stage == ex::Stage::probe) {
    run_probe_command(a, experiment, options);
    return;
  }
  HEADCOUNT_CHECK(
      options.stage != ex::Stage::pilot || !a.seeds_given, "--seeds",
      concat("none with --stage pilot (one run per lr at seed ", experiment.pilot_seed, ")"),
      a.seeds);
  if (options.stage == ex::Stage::test) {
    HEADCOUNT_CHECK(!a.envelope.empty(), "--envelope",
                    "the pilot's result JSON (--stage test runs each cell at its pilot lr)",
                    "none");
    HEADCOUNT_CHECK(!a.seeds_given || a.seeds == experiment.evaluation_seeds, "--seeds",
                    concat(experiment.evaluation_seeds, " (fixed by ", experiment.prereg, ")"),
                    a.seeds);
    options.seeds = experiment.evaluation_seeds;
    options.pilot = read_json_file("--envelope", a.envelope);
  }
  Context ctx({.threads = a.threads});
  ex::Experiment grid;
  const ex::ExperimentResult result =
      options.stage == ex::Stage::pilot  ? ex::run_pilot(ctx, experiment, options, !a.quiet, grid)
      : options.stage == ex::Stage::test ? ex::run_test(ctx, experiment, options, !a.quiet, grid)
                                         : ex::run_experiment(ctx, experiment, options, !a.quiet);
  const json document = ex::result_json(result);
  // Both texts exist before either file is written, so a page error leaves no JSON behind.
  const std::string page = a.out.empty() ? "" : ex::experiment_page(document);
  const std::string text = document.dump(1);
  if (!a.json_out.empty()) io::write_file_atomically(a.json_out, text + "\n");
  if (!a.out.empty()) io::write_file_atomically(a.out, page);
  if (a.json)
    std::printf("%s\n", text.c_str());
  else
    print_summary(document);
}

}  // namespace

void register_experiment(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "experiment",
      "Run an experiment (a grid of training runs x seeds) and judge its claims by fixed rules");
  auto args = std::make_shared<ExperimentArgs>();
  cmd->add_option("NAME", args->name, "the experiment (see --list)");
  cmd->add_flag("--list", args->list, "list the experiments, one line each");
  cmd->add_option_function<int>(
      "--seeds", [args](int v) { args->seeds = v, args->seeds_given = true; },
      "seeds per cell (initialisation and data order; default 3, or the pre-registered n)");
  cmd->add_option("--first-seed", args->first_seed,
                  "the first seed (1: evaluation; 201...: a frozen re-run on fresh seeds)")
      ->capture_default_str();
  cmd->add_option("--stage", args->stage,
                  "probe | pilot | test: the claims protocol's stages (experiments with an lr "
                  "grid, e.g. esp-paper)");
  cmd->add_option("--compare-with", args->compare_with,
                  "--stage test: a result of the same design at another budget (head-sweep-budget "
                  "judges the gap's slope against it); small-heads: E-C's test result, whose "
                  "models it retrains (their test losses must be equal)");
  cmd->add_option("--envelope", args->envelope,
                  "--stage test: the pilot's result JSON (each cell's learning rate)");
  cmd->add_option("--budget", args->budget,
                  "default, or long: the experiment's registered long budget (NAME-long, e.g. "
                  "head-sweep-budget --budget long), its own pre-registration and JSON")
      ->capture_default_str();
  cmd->add_option_function<std::int64_t>(
      "--steps", [args](std::int64_t v) { args->steps = v, args->steps_given = true; },
      "training steps of every run (default: the experiment's)");
  cmd->add_option("--threads", args->threads,
                  "worker threads (results are reproducible per thread count)")
      ->capture_default_str();
  cmd->add_flag("--quick", args->quick, "a smoke-sized grid (< 60 s on 2 cores; not evidence)");
  cmd->add_option("--out", args->out, "write the self-contained HTML page to FILE");
  cmd->add_flag(
      "--json", args->json,
      "print the result JSON on stdout (runs, curves, aggregates, verdicts; timing apart)");
  cmd->add_option("--json-out", args->json_out, "write the result JSON to FILE");
  cmd->add_flag("--quiet", args->quiet, "no progress on stderr");
  cmd->add_option("--from", args->from,
                  "draw the page (--out) and the summary (or --json) from a result saved with "
                  "--json-out; runs nothing");
  cmd->footer(list_text());
  cmd->callback([args] { run_experiment_command(*args); });
}

}  // namespace headcount::cli
