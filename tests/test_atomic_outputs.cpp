// Outputs that survive a kill: every file headcount writes goes through io::AtomicFile
// (`<path>.partial`, fsync, rename). Here a writer is SIGKILLed in the middle of a large write,
// once in the library (write_npy in a forked child) and once through the CLI (`headcount
// attention --probs`), and the previous file under the final name must be intact, byte for byte.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "cli_runner.h"
#include "headcount/npy.h"
#include "headcount/tensor.h"

namespace fs = std::filesystem;
using namespace headcount;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The largest file in `dir` whose name starts with `stem` and is not `stem` itself.
std::uintmax_t partial_bytes(const fs::path& dir, const std::string& stem) {
  std::uintmax_t most = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > stem.size() && name.starts_with(stem))
      most = std::max(most, entry.file_size(ec));
  }
  return most;
}

// Waits until a temporary of `stem` holds at least `bytes`, then SIGKILLs `child`. Returns false
// if the child finished first (the write was too fast to catch) or 60 s passed.
bool kill_mid_write(pid_t child, const fs::path& dir, const std::string& stem,
                    std::uintmax_t bytes) {
  // Only a safety net: under ASan on a loaded 2-core host the CLI's reference kernel alone took
  // more than 60 s before its first byte of probs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(600);
  while (std::chrono::steady_clock::now() < deadline) {
    if (partial_bytes(dir, stem) >= bytes) {
      ::kill(child, SIGKILL);
      int status = 0;
      ::waitpid(child, &status, 0);
      return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    }
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  return false;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST(AtomicOutputs, NpyKilledMidWriteLeavesThePreviousFile) {
  const fs::path dir = fresh_dir("headcount_kill_npy");
  const fs::path path = dir / "x.npy";
  Tensor previous(DType::f32, {3, 2});
  for (int i = 0; i < 6; ++i) previous.data<float>()[i] = static_cast<float>(i);
  write_npy(path.string(), previous.view());
  const std::string before = slurp(path);

  // 256 MiB of one repeated value: a stride-0 view over one float, so the child needs no memory.
  float one = 1.0f;
  const TensorView big = TensorView::strided(&one, DType::f32, {1 << 16, 1 << 10}, {0, 0});
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    write_npy(path.string(), big);
    ::_exit(0);
  }
  ASSERT_TRUE(kill_mid_write(child, dir, "x.npy", 4u << 20))
      << "the write finished (or had not begun after 600 s) before the kill";
  EXPECT_EQ(slurp(path), before) << "the previous file changed";
  const Tensor read = read_npy(path.string());
  EXPECT_EQ(read.shape(), previous.shape());

  // The next writer reuses the stale temporary and leaves none behind.
  write_npy(path.string(), previous.view());
  EXPECT_EQ(slurp(path), before);
  EXPECT_FALSE(fs::exists(dir / "x.npy.partial"));
  fs::remove_all(dir);
}

TEST(AtomicOutputs, CliKilledMidWriteLeavesThePreviousOutputs) {
  const fs::path dir = fresh_dir("headcount_kill_cli");
  // q, k, v [1, 8192, 1, 4]: the reference kernel's probs [1, 1, 8192, 8192] are 256 MiB.
  Tensor x(DType::f32, {1, 8192, 1, 4});
  for (std::int64_t i = 0; i < x.numel(); ++i)
    x.data<float>()[i] = static_cast<float>(i % 7) * 0.1f;
  for (const char* name : {"q.npy", "k.npy", "v.npy"}) write_npy((dir / name).string(), x.view());
  Tensor small(DType::f32, {2});
  write_npy((dir / "out.npy").string(), small.view());
  write_npy((dir / "probs.npy").string(), small.view());
  const std::string out_before = slurp(dir / "out.npy"), probs_before = slurp(dir / "probs.npy");

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string q = (dir / "q.npy").string(), k = (dir / "k.npy").string(),
                      v = (dir / "v.npy").string(), out = (dir / "out.npy").string(),
                      probs = (dir / "probs.npy").string();
    ::execl(HEADCOUNT_CLI_PATH, HEADCOUNT_CLI_PATH, "attention", "--q", q.c_str(), "--k", k.c_str(),
            "--v", v.c_str(), "--out", out.c_str(), "--probs", probs.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_TRUE(kill_mid_write(child, dir, "probs.npy", 4u << 20))
      << "the CLI finished (or had written nothing after 600 s) before the kill";
  EXPECT_EQ(slurp(dir / "out.npy"), out_before);
  EXPECT_EQ(slurp(dir / "probs.npy"), probs_before);
  fs::remove_all(dir);
}
