// Replays fuzz inputs through the fuzz harnesses themselves (fuzz/fuzz_<target>.cpp, built into
// this binary under the names below): every committed seed (fuzz/corpus/<target>/) and every
// input a fuzzer once crashed on (tests/testdata/fuzz-regressions/<target>-<what>), which must
// now be handled: an Error or a result, and no sanitizer report in the ASan build. A harness
// aborts (FUZZ_ASSERT) when an invariant it checks fails, which fails this test binary loudly.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

namespace fs = std::filesystem;

extern "C" int fuzz_safetensors_one_input(const std::uint8_t*, std::size_t);
extern "C" int fuzz_npy_one_input(const std::uint8_t*, std::size_t);
extern "C" int fuzz_encoder_config_one_input(const std::uint8_t*, std::size_t);
extern "C" int fuzz_wordpiece_one_input(const std::uint8_t*, std::size_t);
extern "C" int fuzz_sts_one_input(const std::uint8_t*, std::size_t);
extern "C" int fuzz_attention_options_one_input(const std::uint8_t*, std::size_t);
extern "C" int fuzz_gguf_one_input(const std::uint8_t*, std::size_t);
extern "C" int fuzz_bpe_one_input(const std::uint8_t*, std::size_t);
extern "C" int fuzz_serve_request_one_input(const std::uint8_t*, std::size_t);

namespace {
using Harness = int (*)(const std::uint8_t*, std::size_t);
const std::map<std::string, Harness>& harnesses() {
  static const std::map<std::string, Harness> table = {
      {"safetensors", fuzz_safetensors_one_input},
      {"npy", fuzz_npy_one_input},
      {"encoder_config", fuzz_encoder_config_one_input},
      {"wordpiece", fuzz_wordpiece_one_input},
      {"sts", fuzz_sts_one_input},
      {"attention_options", fuzz_attention_options_one_input},
      {"gguf", fuzz_gguf_one_input},
      {"bpe", fuzz_bpe_one_input},
      {"serve_request", fuzz_serve_request_one_input}};
  return table;
}

int replay(Harness harness, const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return harness(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}
}  // namespace

TEST(FuzzRegressions, EveryCrashInputIsHandled) {
  const fs::path dir = fs::path(HEADCOUNT_TESTDATA_DIR) / "fuzz-regressions";
  int replayed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "README.md") continue;
    const auto it = harnesses().find(name.substr(0, name.find('-')));
    ASSERT_NE(it, harnesses().end()) << name << ": expected <target>-<what>, a target of fuzz/";
    EXPECT_EQ(replay(it->second, entry.path()), 0) << name;
    ++replayed;
  }
  EXPECT_GE(replayed, 1);
}

TEST(FuzzRegressions, EverySeedPassesItsHarness) {
  for (const auto& [target, harness] : harnesses()) {
    int seeds = 0;
    for (const auto& entry :
         fs::directory_iterator(fs::path(HEADCOUNT_FUZZ_DIR) / "corpus" / target)) {
      EXPECT_EQ(replay(harness, entry.path()), 0) << entry.path();
      ++seeds;
    }
    EXPECT_GE(seeds, 3) << target;
  }
}
