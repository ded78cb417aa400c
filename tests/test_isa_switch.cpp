// HEADCOUNT_ISA, the one switch that forces the kernels' instruction set down (isa.h). It is read
// once per process, so one test states what must hold under whatever cap this process runs with
// (CI runs the kernel tests under avx2 and generic with it), and another re-runs that test in
// child processes with the cap set to each target this CPU has, and to a name that is not one.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "headcount/context.h"
#include "headcount/error.h"
#include "headcount/isa.h"

using namespace headcount;

namespace {
const Isa kTargets[] = {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx_bf16};

// Runs this test binary on one test with HEADCOUNT_ISA=value; returns its exit code and output.
std::pair<int, std::string> run_self(const std::string& value, const std::string& filter) {
  char self[PATH_MAX];
  const ::ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return {-1, "cannot read /proc/self/exe"};
  self[n] = '\0';
  const std::string command =
      "HEADCOUNT_ISA='" + value + "' '" + self + "' --gtest_filter=" + filter + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  char buffer[4096];
  while (std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, got);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}
}  // namespace

TEST(IsaSwitch, CapsWhatCountsAsSupported) {
  const char* env = std::getenv("HEADCOUNT_ISA");
  const Isa ceiling = isa_ceiling();  // throws for an unknown name: the child test below checks it
  EXPECT_EQ(ceiling, env == nullptr || *env == '\0' ? Isa::best : parse_isa(env));
  const Context ctx;
  EXPECT_EQ(ctx.isa(), best_isa());
  for (Isa isa : kTargets) {
    const bool above = ceiling != Isa::best && static_cast<int>(isa) > static_cast<int>(ceiling);
    if (above) {
      EXPECT_FALSE(isa_supported(isa)) << isa_name(isa);
      EXPECT_THROW(Context(ContextOptions{.isa = isa}), Error) << isa_name(isa);
    }
    if (isa_supported(isa))
      EXPECT_LE(static_cast<int>(isa), static_cast<int>(ctx.isa())) << isa_name(isa);
  }
  EXPECT_TRUE(isa_supported(Isa::generic));  // the floor every x86-64 CPU runs
}

TEST(IsaSwitch, ForcesEachTargetInAChildProcess) {
  for (Isa isa : kTargets) {
    if (!isa_supported(isa)) continue;
    const auto [code, output] = run_self(isa_name(isa), "IsaSwitch.CapsWhatCountsAsSupported");
    EXPECT_EQ(code, 0) << isa_name(isa) << ":\n" << output;
    EXPECT_NE(output.find("[  PASSED  ] 1 test"), std::string::npos) << output;
  }
  const auto [code, output] = run_self("avx1024", "IsaSwitch.CapsWhatCountsAsSupported");
  EXPECT_NE(code, 0);
  EXPECT_NE(
      output.find("HEADCOUNT_ISA: expected best, generic, avx2, avx512, avx512_bf16 or amx_bf16, "
                  "got avx1024"),
      std::string::npos)
      << output;
}
