// `headcount gguf-info`: the real SmolLM2 file's table and JSON (skipped, naming the file, when
// scripts/setup.sh has not fetched it), and crafted bad files: exit 2, one line on stderr.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "gguf_builder.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kModel =
    fs::path(HEADCOUNT_TESTDATA_DIR) / ".." / ".." / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";

std::size_t lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

TEST(CliGgufInfo, PrintsTheSmolLM2Table) {
  if (!fs::exists(kModel))
    GTEST_SKIP() << kModel.lexically_normal().string()
                 << " not present (scripts/setup.sh fetches it)";
  const CliResult text = run_cli("gguf-info '" + kModel.string() + "'");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("GGUF v3, 33 metadata keys, 272 tensors, alignment 32"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("\"llama.attention.head_count_kv\""), std::string::npos);
  EXPECT_NE(text.out.find("array of string [49152]"), std::string::npos);
  EXPECT_NE(text.out.find("\"blk.0.attn_k.weight\""), std::string::npos);
  EXPECT_NE(text.out.find("[192, 576]"), std::string::npos);  // row-major shape of ne {576, 192}

  const CliResult js = run_cli("gguf-info --json '" + kModel.string() + "'");
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const nlohmann::json j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["tensors"].size(), 272u);
  EXPECT_EQ(j["metadata"]["llama.attention.head_count"]["value"], 9);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.merges"]["count"], 48900);
  EXPECT_EQ(j["tensors"][0]["type"], "Q8_0");
  EXPECT_EQ(j["tensors"][0]["shape"], (std::vector<std::int64_t>{49152, 576}));
}

TEST(CliGgufInfo, BadFilesExitTwoWithOneLine) {
  const fs::path dir =
      fs::temp_directory_path() / ("headcount_cli_gguf_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  GgufBuilder truncated;
  truncated.header(1, 1).kv_u32("general.alignment", 32).str("w").u32(2).u64(32);
  GgufBuilder huge;
  huge.header(1, 0)
      .tensor("w", {1ull << 30, 1ull << 30}, 0, 0)
      .pad()
      .raw(std::string(64, '\0').data(), 64);
  GgufBuilder type;
  type.header(1, 0).tensor("w", {32}, 99, 0).pad().raw(std::string(64, '\0').data(), 64);
  struct Case {
    const char* name;
    const GgufBuilder& file;
    const char* expected;
  };
  for (const Case& c :
       {Case{"truncated", truncated, "truncated"}, Case{"huge", huge, "tensor 'w' size"},
        Case{"type", type, "unknown type 99"}}) {
    const std::string path = (dir / (std::string(c.name) + ".gguf")).string();
    c.file.write(path);
    for (const char* flags : {"", "--json "}) {
      const CliResult r = run_cli(std::string("gguf-info ") + flags + "'" + path + "'");
      EXPECT_EQ(r.exit_code, 2) << c.name;
      EXPECT_EQ(lines(r.err), 1u) << r.err;
      EXPECT_EQ(r.err.rfind("headcount: error: ", 0), 0u) << r.err;
      EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
    }
  }
  const CliResult missing = run_cli("gguf-info '" + (dir / "absent.gguf").string() + "'");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("cannot open"), std::string::npos) << missing.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace headcount::testing
