// `headcount attention` on bad input: exit code 2, exactly one line on stderr, and no
// output file (nor a leftover temporary) in the output directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "headcount/attention.h"
#include "headcount/attention_backward.h"
#include "headcount/npy.h"

namespace headcount {
namespace {

namespace fs = std::filesystem;

class CliAttentionTest : public ::testing::Test {
 public:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("headcount_cli_attention_") +
                                        std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A valid GQA problem: batch 1, q_len 3, kv_len 4, heads 4, kv_heads 2, head_dim 8.
    save("q.npy", {1, 3, 4, 8});
    save("k.npy", {1, 4, 2, 8});
    save("v.npy", {1, 4, 2, 8});
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  void save(const std::string& name, std::vector<std::int64_t> shape, float poison = 0.0f) {
    Tensor t(DType::f32, std::move(shape));
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = std::sin(0.1f * static_cast<float>(i));
    if (poison != 0.0f || std::isnan(poison)) t.data<float>()[t.numel() / 2] = poison;
    write_npy(path(name), t.view());
  }

  std::string args(const std::string& q, const std::string& k, const std::string& v,
                   const std::string& extra = "") const {
    return "attention --q '" + path(q) + "' --k '" + path(k) + "' --v '" + path(v) + "' --out '" +
           path("out.npy") + "' --lse '" + path("lse.npy") + "' " + extra;
  }

  // Runs the CLI and checks the failure contract; returns stderr for further checks.
  std::string expect_failure(const std::string& cli_args) {
    std::set<std::string> before = entries();
    CliResult r = run_cli(cli_args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_FALSE(r.err.empty());
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.back(), '\n');
    EXPECT_EQ(entries(), before) << "the command left a file behind";
    EXPECT_FALSE(fs::exists(path("out.npy")));
    return r.err;
  }

  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_))
      names.insert(entry.path().filename().string());
    return names;
  }

  fs::path dir_;
};

TEST_F(CliAttentionTest, ValidInputSucceeds) {
  // The baseline the failure tests perturb: it must work, or they prove nothing.
  CliResult r = run_cli(args("q.npy", "k.npy", "v.npy"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty());
  EXPECT_NE(r.out.find("[1, 3, 4, 8]"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(path("out.npy")));
  EXPECT_TRUE(fs::exists(path("lse.npy")));
  EXPECT_EQ(read_npy(path("out.npy")).shape(), (std::vector<std::int64_t>{1, 3, 4, 8}));
}

TEST_F(CliAttentionTest, MissingFile) {
  std::string err = expect_failure(args("nope.npy", "k.npy", "v.npy"));
  EXPECT_NE(err.find("nope.npy"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, MalformedNpy) {
  std::ofstream(path("bad.npy"), std::ios::binary) << "\x93NUMPY\x01\x00garbage";
  std::string err = expect_failure(args("q.npy", "bad.npy", "v.npy"));
  EXPECT_NE(err.find("bad.npy"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, HeadDimMismatch) {
  save("k6.npy", {1, 4, 2, 6});
  std::string err = expect_failure(args("q.npy", "k6.npy", "v.npy"));
  EXPECT_NE(err.find("head_dim"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, HeadsNotDivisibleByKvHeads) {
  save("k3.npy", {1, 4, 3, 8});
  save("v3.npy", {1, 4, 3, 8});
  std::string err = expect_failure(args("q.npy", "k3.npy", "v3.npy"));
  EXPECT_NE(err.find("heads"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, NanInQ) {
  save("qnan.npy", {1, 3, 4, 8}, NAN);
  std::string err = expect_failure(args("qnan.npy", "k.npy", "v.npy"));
  EXPECT_NE(err.find("qnan.npy"), std::string::npos) << err;
  EXPECT_NE(err.find("nan"), std::string::npos) << err;
  EXPECT_NE(err.find("[0, 1, 2, 0]"), std::string::npos) << err;  // flat index 48 of [1, 3, 4, 8]
}

TEST_F(CliAttentionTest, ScaleNan) {
  std::string err = expect_failure(args("q.npy", "k.npy", "v.npy", "--scale nan"));
  EXPECT_NE(err.find("scale"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, KernelBogus) {
  std::string err = expect_failure(args("q.npy", "k.npy", "v.npy", "--kernel bogus"));
  EXPECT_NE(err.find("bogus"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, ProbsWithStreaming) {
  std::string err = expect_failure(
      args("q.npy", "k.npy", "v.npy", "--kernel streaming --probs '" + path("probs.npy") + "'"));
  EXPECT_NE(err.find("--probs"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, UnwritableSecondOutputLeavesNoFirstOutput) {
  // out.npy could be written, but the lse directory does not exist: neither may appear.
  std::string cli = "attention --q '" + path("q.npy") + "' --k '" + path("k.npy") + "' --v '" +
                    path("v.npy") + "' --out '" + path("out.npy") + "' --lse '" +
                    path("missing/lse.npy") + "'";
  std::string err = expect_failure(cli);
  EXPECT_NE(err.find("missing/lse.npy"), std::string::npos) << err;
}

// ---- gradients (--grad-out ...) ----------------------------------------------------------

// The gradient flags for a run: G from `g`, the gradients into dq/dk/dv.npy.
std::string grad_flags(const CliAttentionTest& t, const std::string& g = "g.npy") {
  return "--grad-out '" + t.path(g) + "' --grad-q '" + t.path("dq.npy") + "' --grad-k '" +
         t.path("dk.npy") + "' --grad-v '" + t.path("dv.npy") + "'";
}

TEST_F(CliAttentionTest, GradientsMatchTheLibrary) {
  save("g.npy", {1, 3, 4, 8});
  save("bias.npy", {1, 4, 3, 4});
  for (const char* kernel : {"reference", "streaming"}) {
    CliResult r = run_cli(args("q.npy", "k.npy", "v.npy",
                               grad_flags(*this) + " --bias '" + path("bias.npy") +
                                   "' --grad-bias '" + path("db.npy") +
                                   "' --causal --key-lengths 3 --threads 2 --kernel " + kernel));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Tensor q = read_npy(path("q.npy")), k = read_npy(path("k.npy")),
                 v = read_npy(path("v.npy"));
    const Tensor g = read_npy(path("g.npy")), bias = read_npy(path("bias.npy"));
    Tensor out(DType::f32, {1, 3, 4, 8}), lse(DType::f32, {1, 4, 3});
    Tensor dq(DType::f32, q.shape()), dk(DType::f32, k.shape()), dv(DType::f32, v.shape()),
        db(DType::f32, bias.shape());
    const std::vector<std::int64_t> lengths{3};
    AttentionParams p{.q = q.view(),
                      .k = k.view(),
                      .v = v.view(),
                      .out = out.view(),
                      .lse = lse.view(),
                      .causal = true,
                      .key_lengths = lengths,
                      .bias = bias.view()};
    Context ctx({.threads = 2});
    const Kernel which = parse_kernel(kernel);
    attention(ctx, which, p);
    attention_backward(ctx, which, p,
                       {.d_out = g.view(),
                        .d_q = dq.view(),
                        .d_k = dk.view(),
                        .d_v = dv.view(),
                        .d_bias = db.view()});
    for (const auto& [file, want] : {std::pair{"dq.npy", &dq}, std::pair{"dk.npy", &dk},
                                     std::pair{"dv.npy", &dv}, std::pair{"db.npy", &db}}) {
      const Tensor got = read_npy(path(file));
      ASSERT_EQ(got.shape(), want->shape()) << file;
      EXPECT_EQ(std::memcmp(got.data<float>(), want->data<float>(), want->bytes()), 0)
          << kernel << " " << file;
    }
    // Keys 3 (padding) see no query: their gradients are exactly 0.
    EXPECT_EQ(read_npy(path("dk.npy")).data<float>()[3 * 2 * 8], 0.0f);
  }
}

TEST_F(CliAttentionTest, GradQWithoutGradOut) {
  std::string err =
      expect_failure(args("q.npy", "k.npy", "v.npy", "--grad-q '" + path("dq.npy") + "'"));
  EXPECT_NE(err.find("--grad-q: expected --grad-out too"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, GradOutWithoutGradK) {
  save("g.npy", {1, 3, 4, 8});
  std::string err =
      expect_failure(args("q.npy", "k.npy", "v.npy",
                          "--grad-out '" + path("g.npy") + "' --grad-q '" + path("dq.npy") +
                              "' --grad-v '" + path("dv.npy") + "'"));
  EXPECT_NE(err.find("--grad-k: expected a path"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(path("dq.npy")));
}

TEST_F(CliAttentionTest, GradOutWrongShape) {
  save("g5.npy", {1, 3, 4, 5});
  std::string err = expect_failure(args("q.npy", "k.npy", "v.npy", grad_flags(*this, "g5.npy")));
  EXPECT_NE(err.find("g5.npy: shape: expected [1, 3, 4, 8]"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, GradOutNan) {
  save("gnan.npy", {1, 3, 4, 8}, NAN);
  std::string err = expect_failure(args("q.npy", "k.npy", "v.npy", grad_flags(*this, "gnan.npy")));
  EXPECT_NE(err.find("gnan.npy"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, GradBiasWithoutBias) {
  save("g.npy", {1, 3, 4, 8});
  std::string err = expect_failure(
      args("q.npy", "k.npy", "v.npy", grad_flags(*this) + " --grad-bias '" + path("db.npy") + "'"));
  EXPECT_NE(err.find("--grad-bias: expected --bias too"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, GradientPathTwice) {
  save("g.npy", {1, 3, 4, 8});
  std::string err = expect_failure(
      "attention --q '" + path("q.npy") + "' --k '" + path("k.npy") + "' --v '" + path("v.npy") +
      "' --out '" + path("out.npy") + "' --grad-out '" + path("g.npy") + "' --grad-q '" +
      path("dq.npy") + "' --grad-k '" + path("dq.npy") + "' --grad-v '" + path("dv.npy") + "'");
  EXPECT_NE(err.find("outputs: expected distinct paths"), std::string::npos) << err;
}

TEST_F(CliAttentionTest, UnwritableGradientLeavesNoOutputAtAll) {
  // out, lse, dq and dk could be written, but dv's directory does not exist: none may appear.
  save("g.npy", {1, 3, 4, 8});
  std::string err = expect_failure(args("q.npy", "k.npy", "v.npy",
                                        "--grad-out '" + path("g.npy") + "' --grad-q '" +
                                            path("dq.npy") + "' --grad-k '" + path("dk.npy") +
                                            "' --grad-v '" + path("missing/dv.npy") + "'"));
  EXPECT_NE(err.find("missing/dv.npy"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(path("dq.npy")));
  EXPECT_FALSE(fs::exists(path("dk.npy")));
}

}  // namespace
}  // namespace headcount
