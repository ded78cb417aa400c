// Checkpoints: a bitwise round trip (odd floats included), restore by name with shape checks, a
// truncated or corrupted file is an Error naming the file, and a writer SIGKILLed at random
// moments leaves a checkpoint that loads whole (the previous one or the new one, never a mix)
// and no partial file under the final name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include "expect_error.h"
#include "headcount/safetensors.h"
#include "headcount/train/checkpoint.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;
using train::LoadedCheckpoint;
using train::NamedTensor;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headcount_checkpoint_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

std::vector<char> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Float bit patterns a lossy path would change: -0, the smallest subnormal, infinities, a NaN
// with a payload, and plain values.
Tensor odd_tensor(std::vector<std::int64_t> shape, std::uint32_t salt) {
  Tensor t(DType::f32, std::move(shape));
  const std::uint32_t specials[] = {0x80000000u, 0x00000001u, 0x7f800000u, 0xff800000u,
                                    0x7fc12345u};
  auto* bits = t.data<std::uint32_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    bits[i] = i < 5 ? specials[i] : (static_cast<std::uint32_t>(i) * 2654435761u) ^ salt;
  return t;
}

TEST_F(CheckpointTest, RoundTripIsBitwiseAndKeepsFileOrderAndState) {
  const Tensor a = odd_tensor({3, 5}, 1), b = odd_tensor({7}, 2), c = odd_tensor({2, 3, 4, 1}, 3);
  const nlohmann::json state = {{"step", 17}, {"loss", {3.25, 2.5}}, {"config", {{"layers", 4}}}};
  // Not in name order: the file keeps the order given.
  train::save_checkpoint(dir(), "ckpt",
                         {{"zeta", a.view()}, {"alpha", b.view()}, {"mid", c.view()}}, state);

  const LoadedCheckpoint loaded = train::load_checkpoint(dir(), "ckpt");
  EXPECT_EQ(loaded.state, state);
  ASSERT_EQ(loaded.tensors.size(), 3u);
  const std::pair<const char*, const Tensor*> expected[] = {
      {"zeta", &a}, {"alpha", &b}, {"mid", &c}};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(loaded.tensors[i].first, expected[i].first);
    const Tensor& got = loaded.tensors[i].second;
    ASSERT_EQ(got.shape(), expected[i].second->shape());
    EXPECT_EQ(std::memcmp(got.data<float>(), expected[i].second->data<float>(), got.bytes()), 0)
        << expected[i].first;
  }
  // The JSON copy beside it says the same, and no temporary is left behind.
  std::ifstream json_file(train::checkpoint_state_path(dir(), "ckpt"));
  EXPECT_EQ(nlohmann::json::parse(json_file), state);
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().string().find(".partial"), std::string::npos) << entry.path();
  // Any safetensors reader can open it: the data starts 8-byte aligned after a padded header.
  const SafetensorsFile file = SafetensorsFile::open(train::checkpoint_tensors_path(dir(), "ckpt"));
  EXPECT_EQ(file.entries().size(), 3u);
  const auto bytes = read_bytes(train::checkpoint_tensors_path(dir(), "ckpt"));
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  EXPECT_EQ((8 + header_length) % 8, 0u);
}

TEST_F(CheckpointTest, SavingAgainReplacesTheCheckpoint) {
  const Tensor a = odd_tensor({4}, 1), b = odd_tensor({4}, 9);
  train::save_checkpoint(dir(), "ckpt", {{"w", a.view()}}, {{"step", 1}});
  train::save_checkpoint(dir(), "ckpt", {{"w", b.view()}}, {{"step", 2}});
  const LoadedCheckpoint loaded = train::load_checkpoint(dir(), "ckpt");
  EXPECT_EQ(loaded.state["step"], 2);
  EXPECT_EQ(std::memcmp(loaded.tensors[0].second.data<float>(), b.data<float>(), b.bytes()), 0);
}

TEST_F(CheckpointTest, RestoreCopiesByNameAndChecksShapes) {
  const Tensor a = odd_tensor({2, 3}, 4), b = odd_tensor({5}, 5);
  train::save_checkpoint(dir(), "ckpt", {{"a", a.view()}, {"b", b.view()}},
                         nlohmann::json::object());
  const LoadedCheckpoint loaded = train::load_checkpoint(dir(), "ckpt");

  Tensor into_b(DType::f32, {5});
  train::restore_tensors(loaded, {{"b", into_b.view()}});  // a subset is fine
  EXPECT_EQ(std::memcmp(into_b.data<float>(), b.data<float>(), b.bytes()), 0);

  Tensor wrong(DType::f32, {3, 2});
  expect_error(
      [&] {
        train::restore_tensors(loaded, {{"a", wrong.view()}});
      },
      {"'a'", "[2, 3]", "[3, 2]"});
  expect_error([&] { train::restore_tensors(loaded, {{"c", into_b.view()}}); }, {"'c'", "missing"});
  // A failed restore writes nothing.
  Tensor untouched(DType::f32, {5});
  expect_error(
      [&] {
        train::restore_tensors(loaded, {{"b", untouched.view()}, {"c", into_b.view()}});
      },
      {"'c'"});
  EXPECT_EQ(untouched.data<float>()[3], 0.0f);
}

TEST_F(CheckpointTest, BadTensorsAreErrorsAndWriteNothing) {
  const Tensor a = odd_tensor({4}, 1);
  Tensor d(DType::f64, {4});
  expect_error(
      [&] {
        train::save_checkpoint(dir(), "ckpt", {{"a", a.view()}, {"a", a.view()}}, {});
      },
      {"'a'", "duplicate"});
  expect_error(
      [&] {
        train::save_checkpoint(dir(), "ckpt", {{"d", d.view()}}, {});
      },
      {"'d'", "f32", "f64"});
  Tensor m(DType::f32, {4, 4});
  const TensorView column = TensorView::strided(m.data<float>(), DType::f32, {4}, {4});
  expect_error(
      [&] {
        train::save_checkpoint(dir(), "ckpt", {{"col", column}}, {});
      },
      {"'col'", "contiguous"});
  EXPECT_FALSE(fs::exists(train::checkpoint_tensors_path(dir(), "ckpt")));
  expect_error([&] { train::load_checkpoint(dir(), "ckpt"); }, {"ckpt.safetensors", "cannot open"});
}

TEST_F(CheckpointTest, TruncatedOrCorruptedFilesAreErrorsNamingTheFile) {
  const Tensor a = odd_tensor({64}, 1), b = odd_tensor({3, 7}, 2);
  train::save_checkpoint(dir(), "ckpt", {{"a", a.view()}, {"b", b.view()}}, {{"step", 3}});
  const fs::path path = train::checkpoint_tensors_path(dir(), "ckpt");
  const std::vector<char> good = read_bytes(path);
  const auto expect_bad = [&](const std::vector<char>& bytes, const std::string& what) {
    write_bytes(path, bytes);
    try {
      train::load_checkpoint(dir(), "ckpt");
      ADD_FAILURE() << what << ": loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos)
          << what << ": " << e.what();
    }
  };
  // Every truncation point a killed non-atomic writer could leave, in steps through the file.
  for (std::size_t length = 0; length < good.size(); length += 1 + good.size() / 97)
    expect_bad({good.begin(), good.begin() + static_cast<std::ptrdiff_t>(length)},
               "truncated to " + std::to_string(length));
  // One flipped bit in the data region (no reader's structure check can see it: the checksum must).
  for (std::size_t from_end : {1u, 100u, 300u}) {
    std::vector<char> bad = good;
    bad[bad.size() - from_end] ^= 0x10;
    expect_bad(bad, "data bit flipped " + std::to_string(from_end) + " bytes from the end");
  }
  // A changed digit in the state inside the header: still valid JSON, a different meaning.
  std::vector<char> bad = good;
  const std::string text(good.begin(), good.end());
  const std::size_t at = text.find("step\\\":3");
  ASSERT_NE(at, std::string::npos) << text.substr(0, 400);
  bad[at + 7] = '4';
  expect_bad(bad, "state changed");
  write_bytes(path, good);
  EXPECT_EQ(train::load_checkpoint(dir(), "ckpt").state["step"], 3);
}

// The child saves a large checkpoint in a loop, every tensor filled with the iteration number,
// which the state also records; the parent kills it at a random moment and checks that what
// is there loads whole and agrees with itself.
TEST_F(CheckpointTest, KillMidWriteLeavesAWholeCheckpoint) {
  constexpr std::int64_t kFloats =
      4 << 20;  // 16 MiB per tensor, two tensors: each save takes tens of ms
  std::random_device device;
  const unsigned seed = device();
  std::mt19937 random(seed);
  SCOPED_TRACE("random seed " + std::to_string(seed));
  for (int round = 0; round < 4; ++round) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(ready[0]);
      Tensor a(DType::f32, {kFloats}), b(DType::f32, {kFloats / 2, 2});
      for (int iteration = 1;; ++iteration) {
        std::fill_n(a.data<float>(), kFloats, static_cast<float>(iteration));
        std::fill_n(b.data<float>(), kFloats, static_cast<float>(-iteration));
        try {
          train::save_checkpoint(dir(), "ckpt", {{"a", a.view()}, {"b", b.view()}},
                                 {{"iteration", iteration}});
        } catch (...) {
          ::_exit(3);
        }
        if (iteration == 1 && ::write(ready[1], "x", 1) != 1) ::_exit(4);
      }
    }
    ::close(ready[1]);
    char byte = 0;
    ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the writer never finished its first checkpoint";
    // (Round > 0: that first save went over the previous round's stale temporary.)
    ::close(ready[0]);
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, 300000)(random)));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited on its own with status " << status;

    const LoadedCheckpoint loaded = train::load_checkpoint(dir(), "ckpt");
    const int iteration = loaded.state.at("iteration").get<int>();
    ASSERT_GE(iteration, 1);
    ASSERT_EQ(loaded.tensors.size(), 2u);
    const float* a = loaded.tensors[0].second.data<float>();
    const float* b = loaded.tensors[1].second.data<float>();
    for (std::int64_t i = 0; i < kFloats; i += 4099) {
      ASSERT_EQ(a[i], static_cast<float>(iteration)) << "round " << round << " index " << i;
      ASSERT_EQ(b[i], static_cast<float>(-iteration)) << "round " << round << " index " << i;
    }
    ASSERT_EQ(a[kFloats - 1], static_cast<float>(iteration));
    // The JSON copy is this checkpoint's state or the one before (killed between the renames).
    std::ifstream json_file(train::checkpoint_state_path(dir(), "ckpt"));
    const int copy = nlohmann::json::parse(json_file).at("iteration").get<int>();
    EXPECT_TRUE(copy == iteration || copy == iteration - 1) << copy << " vs " << iteration;
    // A stale temporary may remain: the next save (the next round's child) writes over it.
  }
}

}  // namespace
}  // namespace headcount::testing
