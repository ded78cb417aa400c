// The safetensors loader: good files load exactly (F32, F16, BF16); every kind of broken file is
// an Error that names the file and the problem. Files are written here, in a temporary directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "headcount/error.h"
#include "headcount/safetensors.h"
#include "safetensors_writer.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headcount_safetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Expects open() (and then loading `tensor`, if given) to throw an Error containing `needle`.
  void expect_error(const std::string& file, const std::string& needle,
                    const std::string& tensor = "") {
    try {
      const SafetensorsFile f = SafetensorsFile::open(file);
      if (!tensor.empty()) f.load_f32(tensor);
      FAIL() << "expected an error containing '" << needle << "'";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(needle), std::string::npos) << message;
      EXPECT_NE(message.find(file), std::string::npos)
          << "the message should name the file: " << message;
    }
  }

  fs::path dir_;
};

std::vector<char> zeros(std::size_t n) { return std::vector<char>(n, 0); }

TEST_F(SafetensorsTest, LoadsF32WithShapesAndMetadata) {
  write_f32_safetensors(path("ok.safetensors"),
                        {{"a", {2, 3}, {1, 2, 3, 4, 5, 6}}, {"b", {1}, {-7.5f}}});
  const SafetensorsFile f = SafetensorsFile::open(path("ok.safetensors"));
  ASSERT_EQ(f.entries().size(), 2u);
  const Tensor a = f.load_f32("a", {2, 3});
  EXPECT_EQ(a.shape(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.data<float>()[5], 6.0f);
  EXPECT_EQ(f.load_f32("b").data<float>()[0], -7.5f);
  EXPECT_EQ(f.find("c"), nullptr);
}

TEST_F(SafetensorsTest, WidensF16AndBF16Exactly) {
  // F16: 1.0 (0x3c00), -2.0 (0xc000), 65504 (0x7bff), smallest subnormal 2^-24 (0x0001).
  // BF16: 1.0 (0x3f80), -0.5 (0xbf00), 3.140625 (0x4049).
  const std::vector<std::uint16_t> halfs = {0x3c00, 0xc000, 0x7bff, 0x0001};
  const std::vector<std::uint16_t> bfloats = {0x3f80, 0xbf00, 0x4049};
  std::vector<char> data;
  for (auto v : halfs)
    data.insert(data.end(), {static_cast<char>(v & 0xff), static_cast<char>(v >> 8)});
  for (auto v : bfloats)
    data.insert(data.end(), {static_cast<char>(v & 0xff), static_cast<char>(v >> 8)});
  write_raw_safetensors(
      path("half.safetensors"),
      R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},"__metadata__":{"format":"pt"}})",
      data);
  const SafetensorsFile f = SafetensorsFile::open(path("half.safetensors"));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const Tensor h = f.load_f32("h");
  EXPECT_EQ(h.data<float>()[0], 1.0f);
  EXPECT_EQ(h.data<float>()[1], -2.0f);
  EXPECT_EQ(h.data<float>()[2], 65504.0f);
  EXPECT_EQ(h.data<float>()[3], std::ldexp(1.0f, -24));
  const Tensor b = f.load_f32("b");
  EXPECT_EQ(b.data<float>()[0], 1.0f);
  EXPECT_EQ(b.data<float>()[1], -0.5f);
  EXPECT_EQ(b.data<float>()[2], 3.140625f);
}

TEST_F(SafetensorsTest, MissingFile) { expect_error(path("nope.safetensors"), "cannot open"); }

TEST_F(SafetensorsTest, ShorterThanTheLengthField) {
  write_raw_safetensors(path("short.safetensors"), "", {});
  fs::resize_file(path("short.safetensors"), 5);
  expect_error(path("short.safetensors"), "truncated");
}

TEST_F(SafetensorsTest, HeaderLengthPastTheEnd) {
  write_raw_safetensors(path("long.safetensors"),
                        R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", zeros(4),
                        1000);
  expect_error(path("long.safetensors"), "header length: expected at most");
}

TEST_F(SafetensorsTest, TruncatedData) {
  write_f32_safetensors(path("cut.safetensors"),
                        {{"a", {4}, {1, 2, 3, 4}}, {"b", {4}, {5, 6, 7, 8}}});
  fs::resize_file(path("cut.safetensors"), fs::file_size(path("cut.safetensors")) - 6);
  expect_error(path("cut.safetensors"), "tensor 'b' data_offsets: expected inside the data region");
}

TEST_F(SafetensorsTest, MalformedHeader) {
  write_raw_safetensors(path("json.safetensors"), R"({"a":{"dtype":"F32",)", zeros(4));
  expect_error(path("json.safetensors"), "malformed JSON");
  write_raw_safetensors(path("array.safetensors"), "[1, 2]", {});
  expect_error(path("array.safetensors"), "header: expected a JSON object");
}

TEST_F(SafetensorsTest, OverlappingRanges) {
  write_raw_safetensors(path("overlap.safetensors"),
                        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        zeros(12));
  expect_error(path("overlap.safetensors"), "overlap");
}

TEST_F(SafetensorsTest, OutOfRangeOffsets) {
  write_raw_safetensors(path("range.safetensors"),
                        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", zeros(8));
  expect_error(path("range.safetensors"), "expected inside the data region of 8 bytes");
}

TEST_F(SafetensorsTest, HoleInTheDataRegion) {
  write_raw_safetensors(path("hole.safetensors"),
                        R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", zeros(8));
  expect_error(path("hole.safetensors"), "hole");
}

TEST_F(SafetensorsTest, SizeDisagreesWithShape) {
  write_raw_safetensors(path("size.safetensors"),
                        R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", zeros(8));
  expect_error(path("size.safetensors"), "expected 12 bytes ([3] x F32)");
}

TEST_F(SafetensorsTest, UnknownDtype) {
  write_raw_safetensors(path("dtype.safetensors"),
                        R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", zeros(4));
  expect_error(path("dtype.safetensors"), "dtype: expected one of");
}

TEST_F(SafetensorsTest, WrongDtypeForF32) {
  write_raw_safetensors(path("i64.safetensors"),
                        R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", zeros(16));
  EXPECT_NO_THROW(SafetensorsFile::open(path("i64.safetensors")));  // valid file...
  expect_error(path("i64.safetensors"), "dtype: expected F32, F16 or BF16, got I64",
               "ids");  // ...not loadable as f32
}

TEST_F(SafetensorsTest, WrongShapeAndMissingTensorNameThemselves) {
  write_f32_safetensors(path("shape.safetensors"), {{"w", {2, 3}, {1, 2, 3, 4, 5, 6}}});
  const SafetensorsFile f = SafetensorsFile::open(path("shape.safetensors"));
  try {
    f.load_f32("w", {3, 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'w' shape: expected [3, 2], got [2, 3]"),
              std::string::npos)
        << e.what();
  }
  try {
    f.load_f32("v", {4});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'v': missing (expected shape [4])"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(SafetensorsTest, BadFieldTypes) {
  write_raw_safetensors(path("neg.safetensors"),
                        R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", zeros(4));
  expect_error(path("neg.safetensors"), "shape: expected non-negative integer sizes");
  write_raw_safetensors(path("offs.safetensors"),
                        R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", zeros(4));
  expect_error(path("offs.safetensors"), "data_offsets: expected [begin, end]");
}

}  // namespace
}  // namespace headcount::testing
