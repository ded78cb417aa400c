// Runs the built `headcount` binary (HEADCOUNT_CLI_PATH, set by CMake for the test target)
// and captures what it did, so CLI tests can assert on exit codes and both streams.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#ifndef HEADCOUNT_CLI_PATH
#error "HEADCOUNT_CLI_PATH must name the headcount binary"
#endif

struct CliResult {
  int exit_code = -1;  // the process's exit status; -1 if it did not exit normally
  std::string out, err;
};

namespace cli_runner_detail {
inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace cli_runner_detail

// `args` goes to the shell as written after the binary's path, so quote anything with
// spaces or shell characters. Streams go to temporary files rather than pipes so a large
// stdout cannot block while we wait on stderr.
inline CliResult run_cli(const std::string& args) {
  namespace fs = std::filesystem;
  static std::atomic<int> counter{0};
  const std::string stem =
      "headcount_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1));
  const fs::path out_path = fs::temp_directory_path() / (stem + ".out");
  const fs::path err_path = fs::temp_directory_path() / (stem + ".err");
  const std::string command = "'" HEADCOUNT_CLI_PATH "' " + args + " >'" + out_path.string() +
                              "' 2>'" + err_path.string() + "' </dev/null";
  const int status = std::system(command.c_str());

  CliResult result;
  result.exit_code = (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  result.out = cli_runner_detail::slurp(out_path);
  result.err = cli_runner_detail::slurp(err_path);
  std::error_code ignored;
  fs::remove(out_path, ignored);
  fs::remove(err_path, ignored);
  return result;
}
