// `headcount embed`, `similarity` and `sts` end to end: outputs in input order, and bad input
// (missing model, empty file, malformed STS line, npy without --out) as one line and exit code 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_runner.h"
#include "headcount/npy.h"
#include "minilm_golden.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

class EncoderCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headcount_encoder_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return "'" + (dir_ / name).string() + "'";
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

void expect_one_line_error(const CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// --dtype bf16 on an instruction set without AVX512_BF16 says that it is no faster than fp32
// (one line on stderr, exit 0); fp32 says nothing. HEADCOUNT_ISA=avx2 stands for such a CPU.
TEST_F(EncoderCli, Bf16WithoutAvx512Bf16SaysItIsNoFaster) {
  HEADCOUNT_REQUIRE_MINILM();
  const std::string input = file("in.txt", "One sentence.\n");
  const char* cap = std::getenv("HEADCOUNT_ISA");
  const std::string previous = cap == nullptr ? "" : cap;
  ::setenv("HEADCOUNT_ISA", "avx2", 1);
  const CliResult bf16 = run_cli("embed --dtype bf16 " + input);
  const CliResult fp32 = run_cli("embed " + input);
  if (cap == nullptr)
    ::unsetenv("HEADCOUNT_ISA");
  else
    ::setenv("HEADCOUNT_ISA", previous.c_str(), 1);
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_NE(bf16.err.find("no AVX512_BF16, so --dtype bf16 widens its weights to fp32 and runs no "
                          "faster than fp32"),
            std::string::npos)
      << bf16.err;
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  EXPECT_EQ(fp32.err.find("AVX512_BF16"), std::string::npos) << fp32.err;
}

TEST_F(EncoderCli, EmbedJsonlInInputOrder) {
  HEADCOUNT_REQUIRE_MINILM();
  const std::vector<std::string> lines = {
      "A much longer sentence, with several words in it, comes first.", "", "Short one.",
      "caf\xc3\xa9 \"quoted"};
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  const CliResult r = run_cli("embed --batch 2 " + file("in.txt", text));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream out(r.out);
  std::string line;
  std::size_t i = 0;
  while (std::getline(out, line)) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_LT(i, lines.size());
    EXPECT_EQ(j.at("text"), lines[i]);
    EXPECT_EQ(j.at("embedding").size(), 384u);
    ++i;
  }
  EXPECT_EQ(i, lines.size());
}

TEST_F(EncoderCli, EmbedNpyAndTsvAgree) {
  HEADCOUNT_REQUIRE_MINILM();
  const std::string in = file("in.txt", "one\ntwo\nthree");
  // One thread for the npy run, two for the tsv run: the projections run on the packed GEMM,
  // whose rows do not depend on the thread count (on OpenBLAS's row bands they did, in the 8th
  // digit, with OPENBLAS_CORETYPE=Haswell as AMD hosts set), so the two formats must agree.
  ASSERT_EQ(run_cli("embed --format npy --threads 1 --out '" + path("e.npy") + "' " + in).exit_code,
            0);
  const Tensor e = read_npy_f32(path("e.npy"));
  EXPECT_EQ(e.shape(), (std::vector<std::int64_t>{3, 384}));
  const CliResult tsv = run_cli("embed --format tsv --threads 2 " + in);
  ASSERT_EQ(tsv.exit_code, 0) << tsv.err;
  std::istringstream rows(tsv.out);
  std::string row;
  std::getline(rows, row);
  std::getline(rows, row);  // the second sentence
  EXPECT_FLOAT_EQ(std::stof(row.substr(0, row.find('\t'))), e.data<float>()[384]);
}

TEST_F(EncoderCli, EmbedStdin) {
  HEADCOUNT_REQUIRE_MINILM();
  // run_cli feeds /dev/null to stdin, so pipe by hand here.
  const std::string command =
      "printf 'hello world\\nbye\\n' | '" HEADCOUNT_CLI_PATH "' embed - >'" + path("out") + "'";
  ASSERT_EQ(std::system(command.c_str()), 0);
  std::ifstream out(path("out"));
  std::string first, second, third;
  std::getline(out, first);
  std::getline(out, second);
  EXPECT_EQ(nlohmann::json::parse(first).at("text"), "hello world");
  EXPECT_EQ(nlohmann::json::parse(second).at("text"), "bye");
  EXPECT_FALSE(std::getline(out, third));
}

TEST_F(EncoderCli, EmbedBadInput) {
  expect_one_line_error(run_cli("embed " + file("empty.txt", "")),
                        "expected at least one line of text, got an empty input");
  expect_one_line_error(run_cli("embed --format npy " + file("x.txt", "a\n")),
                        "--out: expected a file path for --format npy");
  expect_one_line_error(run_cli("embed --format xml " + file("x.txt", "a\n")),
                        "--format: expected jsonl, npy or tsv, got xml");
  expect_one_line_error(run_cli("embed '" + path("missing.txt") + "'"),
                        "cannot open the input file");
}

TEST_F(EncoderCli, MissingModelSaysWhereItLooked) {
  const CliResult r = run_cli("similarity --model '" + path("nope") + "' a b");
  expect_one_line_error(
      r, "model: expected a directory with model.safetensors, config.json, vocab.txt, got " +
             path("nope"));
  EXPECT_NE(r.err.find("from --model"), std::string::npos) << r.err;
  const CliResult from_env = run_cli("similarity a b");  // default model: fine if set up
  if (!minilm_present()) expect_one_line_error(from_env, "run scripts/setup.sh");
}

TEST_F(EncoderCli, ModelFromEnvironment) {
  const std::string cli =
      std::string("HEADCOUNT_MODEL='") + path("nowhere") + "' '" HEADCOUNT_CLI_PATH "'";
  const int status = std::system((cli + " similarity a b 2>'" + path("err") + "'").c_str());
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::ifstream err(path("err"));
  std::string message((std::istreambuf_iterator<char>(err)), {});
  EXPECT_NE(message.find("(from $HEADCOUNT_MODEL)"), std::string::npos) << message;
}

TEST_F(EncoderCli, Similarity) {
  HEADCOUNT_REQUIRE_MINILM();
  const CliResult same = run_cli("similarity 'A cat sits.' 'A cat sits.'");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NEAR(std::stod(same.out), 1.0, 1e-6);
  const CliResult r =
      run_cli("similarity --json 'A girl is styling her hair.' 'A girl is brushing her hair.'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(nlohmann::json::parse(r.out).at("cosine").get<double>(), 0.805222, 1e-5);
}

TEST_F(EncoderCli, StsJson) {
  HEADCOUNT_REQUIRE_MINILM();
  // Extra trailing fields are ignored; a lone quote is text.
  const std::string sts =
      "main-captions\tMSRvid\t2012test\t0001\t5.000\tA man is playing a flute.\tA man is playing a "
      "flute.\textra\tfields\n"
      "main-captions\tMSRvid\t2012test\t0002\t0.000\tA woman is slicing an onion.\tThe stock "
      "market fell \"sharply.\n"
      "main-captions\tMSRvid\t2012test\t0003\t3.2\tA dog runs in a field.\tA dog is running on "
      "grass.\n";
  const CliResult r = run_cli("sts --json " + file("sts.tsv", sts));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("pairs"), 3);
  EXPECT_NEAR(j.at("spearman").get<double>(), 100.0, 1e-9);
  EXPECT_TRUE(j.contains("pearson"));
}

TEST_F(EncoderCli, StsBadInput) {
  expect_one_line_error(run_cli("sts " + file("empty.tsv", "")),
                        "expected at least one sentence pair, got an empty file");
  expect_one_line_error(run_cli("sts " + file("short.tsv", "a\tb\tc\td\t1.0\tonly one sentence\n")),
                        "short.tsv:1: expected 7 TAB-separated fields");
  expect_one_line_error(run_cli("sts " + file("score.tsv", "g\tf\ty\ti\tfive\ts1\ts2\n")),
                        "score.tsv:1: score (field 5): expected a number, got \"five\"");
}

TEST_F(EncoderCli, HeadsJsonAndReport) {
  HEADCOUNT_REQUIRE_MINILM();
  const std::string corpus = file(
      "corpus.txt", "The cat sat on the mat.\nIt rained all day, so we stayed in.\nShe reads.\n");
  const CliResult r = run_cli("heads --corpus " + corpus + " --text 'A dog barks.' --json --out '" +
                              path("r.html") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("sentences"), 3);
  ASSERT_EQ(j.at("heads").size(), 72u);
  int total = 0;
  for (const auto& [role, count] : j.at("role_counts").items()) total += count.get<int>();
  EXPECT_EQ(total, 72);
  for (const auto& h : j.at("heads")) {
    EXPECT_NEAR(h.at("mass").get<double>(), 1.0, 1e-5);
    EXPECT_FALSE(h.contains("importance"));  // no --ablate
    EXPECT_GE(h.at("normalized_entropy").get<double>(), 0.0);
  }
  std::ifstream in(path("r.html"));
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t heatmaps = 0;
  for (std::size_t at = html.find("class=\"heatmap\""); at != std::string::npos;
       at = html.find("class=\"heatmap\"", at + 1))
    ++heatmaps;
  EXPECT_EQ(heatmaps, 72u);
  EXPECT_NE(html.find("id=\"role-grid\""), std::string::npos);
  EXPECT_NE(html.find("run <code>headcount heads --ablate</code>"), std::string::npos);
  EXPECT_EQ(html.find("http"), std::string::npos) << "the report must not fetch anything";
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().string().find(".partial."), std::string::npos) << entry.path();
}

TEST_F(EncoderCli, HeadsBadInput) {
  const std::string corpus = file("c.txt", "One sentence.\n");
  expect_one_line_error(run_cli("heads --corpus " + corpus),
                        "--out: expected a file for the HTML report (or --json");
  expect_one_line_error(run_cli("heads --json --stats-kernel fast --corpus " + corpus),
                        "--stats-kernel: expected streaming or reference, got fast");
  expect_one_line_error(
      run_cli("heads --corpus " + corpus + " --out '" + path("no/such/dir/r.html") + "'"),
      "cannot create");
  expect_one_line_error(run_cli("heads --json --corpus '" + path("missing.txt") + "'"),
                        "cannot open the input file");
  expect_one_line_error(run_cli("heads --json --max-pairs -1 --corpus " + corpus),
                        "--max-pairs: expected >= 0");
  if (minilm_present()) {
    std::string words;
    for (int i = 0; i < 70; ++i) words += "word ";
    expect_one_line_error(run_cli("heads --corpus " + corpus + " --text '" + words + "' --out '" +
                                  path("r.html") + "'"),
                          "--text: expected at most 64 tokens with [CLS] and [SEP]");
    EXPECT_FALSE(fs::exists(path("r.html"))) << "no report after an error";
    for (const auto& entry : fs::directory_iterator(dir_))
      EXPECT_EQ(entry.path().string().find(".partial."), std::string::npos) << entry.path();
  }
}

}  // namespace
}  // namespace headcount::testing
