// .npy reading and writing: round trips through strided views, and one test per way a
// file can be malformed (each names the offending field in its error).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "headcount/error.h"
#include "headcount/npy.h"

namespace headcount {
namespace {

namespace fs = std::filesystem;

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("headcount_npy_") + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a file from a preamble built here: magic, version, length field, header, data.
  std::string write_raw(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }

  // A well-formed version-1.0 file around `header` followed by `data_bytes` zero bytes.
  static std::string npy_bytes(const std::string& header, std::size_t data_bytes, int major = 1) {
    std::string out = "\x93NUMPY";
    out += static_cast<char>(major);
    out += '\0';
    const std::size_t len = header.size();
    out += static_cast<char>(len & 0xff);
    out += static_cast<char>((len >> 8) & 0xff);
    if (major >= 2) out += std::string(2, '\0');
    out += header;
    out += std::string(data_bytes, '\0');
    return out;
  }

  static std::string dict(const std::string& descr, const std::string& fortran,
                          const std::string& shape) {
    return "{'descr': " + descr + ", 'fortran_order': " + fortran + ", 'shape': " + shape + ", }\n";
  }

  // Expects read_npy to throw an Error whose message starts with the path and names `field`.
  void expect_error(const std::string& file, const std::string& field,
                    const std::string& also = "") {
    try {
      read_npy(file);
      FAIL() << "expected an Error naming " << field;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(file + ": ", 0), 0u) << message;
      EXPECT_NE(message.find(field), std::string::npos) << message;
      if (!also.empty()) {
        EXPECT_NE(message.find(also), std::string::npos) << message;
      }
    }
  }

  fs::path dir_;
};

template <typename T>
Tensor iota_tensor(DType dtype, std::vector<std::int64_t> shape) {
  Tensor t(dtype, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = static_cast<T>(0.5 * i - 3.25);
  return t;
}

TEST_F(NpyTest, RoundTripRanks1To4) {
  const std::vector<std::vector<std::int64_t>> shapes = {
      {5}, {2, 3}, {2, 3, 4}, {2, 1, 3, 5}, {0, 3}};
  for (const auto& shape : shapes) {
    Tensor f32 = iota_tensor<float>(DType::f32, shape);
    Tensor f64 = iota_tensor<double>(DType::f64, shape);
    write_npy(path("a.npy"), f32.view());
    write_npy(path("b.npy"), f64.view());
    Tensor back32 = read_npy(path("a.npy"));
    Tensor back64 = read_npy(path("b.npy"));
    ASSERT_EQ(back32.dtype(), DType::f32);
    ASSERT_EQ(back64.dtype(), DType::f64);
    ASSERT_EQ(back32.shape(), shape);
    ASSERT_EQ(back64.shape(), shape);
    for (std::int64_t i = 0; i < f32.numel(); ++i) {
      EXPECT_EQ(back32.data<float>()[i], f32.data<float>()[i]);
      EXPECT_EQ(back64.data<double>()[i], f64.data<double>()[i]);
    }
    // numpy's own writers put the data at a multiple of 64 bytes; so do we.
    const auto header_len = fs::file_size(path("a.npy")) - f32.bytes();
    EXPECT_EQ(header_len % 64, 0u);
  }
}

TEST_F(NpyTest, ReadF32ConvertsF64) {
  Tensor f64(DType::f64, {3});
  f64.data<double>()[0] = 1.0 / 3.0;
  f64.data<double>()[1] = -2.5;
  f64.data<double>()[2] = 1e-40;  // a float32 subnormal
  write_npy(path("d.npy"), f64.view());
  Tensor f32 = read_npy_f32(path("d.npy"));
  ASSERT_EQ(f32.dtype(), DType::f32);
  EXPECT_EQ(f32.data<float>()[0], static_cast<float>(1.0 / 3.0));
  EXPECT_EQ(f32.data<float>()[1], -2.5f);
  EXPECT_EQ(f32.data<float>()[2], static_cast<float>(1e-40));
}

TEST_F(NpyTest, WritesStridedViewInCOrder) {
  // A [3, 4] column window (columns 1..2, every row) of a [3, 4] buffer, transposed to [2, 3].
  Tensor base = iota_tensor<float>(DType::f32, {3, 4});
  TensorView window = TensorView::strided(base.data<float>() + 1, DType::f32, {2, 3}, {1, 4});
  write_npy(path("s.npy"), window);
  Tensor back = read_npy(path("s.npy"));
  ASSERT_EQ(back.shape(), (std::vector<std::int64_t>{2, 3}));
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(back.data<float>()[i * 3 + j], base.data<float>()[j * 4 + 1 + i]) << i << "," << j;
}

TEST_F(NpyTest, WritesStridedRank4View) {
  // Every other element of the last dimension, plus a broadcast (stride 0) dimension.
  Tensor base = iota_tensor<double>(DType::f64, {2, 3, 8});
  TensorView view =
      TensorView::strided(base.data<double>(), DType::f64, {2, 2, 3, 4}, {24, 0, 8, 2});
  write_npy(path("r4.npy"), view);
  Tensor back = read_npy(path("r4.npy"));
  ASSERT_EQ(back.shape(), (std::vector<std::int64_t>{2, 2, 3, 4}));
  std::int64_t n = 0;
  for (std::int64_t a = 0; a < 2; ++a)
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t c = 0; c < 3; ++c)
        for (std::int64_t d = 0; d < 4; ++d)
          EXPECT_EQ(back.data<double>()[n++], base.data<double>()[a * 24 + c * 8 + d * 2]);
}

TEST_F(NpyTest, ReadsVersion2And3) {
  for (int major : {2, 3}) {
    std::string file = write_raw("v.npy", npy_bytes(dict("'<f4'", "False", "(2,)"), 8, major));
    Tensor t = read_npy(file);
    EXPECT_EQ(t.shape(), (std::vector<std::int64_t>{2}));
  }
}

TEST_F(NpyTest, WriteRejectsBf16AndLeavesNoFile) {
  Tensor base(DType::f32, {4});
  TensorView view = base.view();
  view.dtype = DType::bf16;
  EXPECT_THROW(write_npy(path("x.npy"), view), Error);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(NpyTest, FailedWriteLeavesNoFile) {
  // The target is a directory, so the final rename fails; the temp file must go too.
  fs::create_directories(dir_ / "taken.npy" / "child");
  Tensor t(DType::f32, {4});
  EXPECT_THROW(write_npy(path("taken.npy"), t.view()), Error);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 1u);  // just the directory
  EXPECT_THROW(write_npy(path("no/such/dir/x.npy"), t.view()), Error);
}

// ---- malformed files ----------------------------------------------------------------------

TEST_F(NpyTest, WrongMagic) {
  std::string bytes = npy_bytes(dict("'<f4'", "False", "(2,)"), 8);
  bytes[1] = 'X';
  expect_error(write_raw("m.npy", bytes), "magic");
  expect_error(write_raw("e.npy", ""), "magic");
}

TEST_F(NpyTest, UnsupportedVersion) {
  std::string bytes = npy_bytes(dict("'<f4'", "False", "(2,)"), 8);
  bytes[6] = 4;
  expect_error(write_raw("v.npy", bytes), "version", "got 4.0");
  bytes[6] = 1;
  bytes[7] = 1;
  expect_error(write_raw("v.npy", bytes), "version", "got 1.1");
}

TEST_F(NpyTest, TruncatedHeader) {
  // Ends inside the preamble: the header length field is incomplete.
  expect_error(write_raw("t.npy", std::string("\x93NUMPY\x01\x00\x10", 9)), "header length");
  // The dict is cut off before its closing brace.
  expect_error(write_raw("t.npy", npy_bytes("{'descr': '<f4', 'fortran_", 0)), "header");
}

TEST_F(NpyTest, HeaderLengthPastEnd) {
  std::string bytes = npy_bytes(dict("'<f4'", "False", "(2,)"), 0);
  bytes[8] = '\xff';
  bytes[9] = '\x7f';
  expect_error(write_raw("h.npy", bytes), "header length", "got 32767");
}

TEST_F(NpyTest, BadDescr) {
  for (const std::string descr : {"<f2", "<i4", "<i8", "|b1", "<c8", "|u1"}) {
    expect_error(write_raw("d.npy", npy_bytes(dict("'" + descr + "'", "False", "(2,)"), 16)),
                 "descr", "got '" + descr + "'");
  }
  // A structured dtype is a list of fields, not a string.
  expect_error(write_raw("d.npy", npy_bytes(dict("[('a', '<f4')]", "False", "(2,)"), 8)), "descr");
}

TEST_F(NpyTest, BigEndian) {
  expect_error(write_raw("b.npy", npy_bytes(dict("'>f4'", "False", "(2,)"), 8)), "descr",
               "got '>f4'");
  expect_error(write_raw("b.npy", npy_bytes(dict("'>f8'", "False", "(2,)"), 16)), "descr",
               "got '>f8'");
}

TEST_F(NpyTest, FortranOrder) {
  expect_error(write_raw("f.npy", npy_bytes(dict("'<f4'", "True", "(2, 2)"), 16)), "fortran_order",
               "expected False (C order), got True");
}

TEST_F(NpyTest, MissingKey) {
  expect_error(write_raw("k.npy", npy_bytes("{'descr': '<f4', 'shape': (2,), }\n", 8)), "header",
               "missing key 'fortran_order'");
  expect_error(write_raw("k.npy", npy_bytes("{'fortran_order': False, 'shape': (2,), }\n", 8)),
               "header", "missing key 'descr'");
  expect_error(write_raw("k.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False}\n", 8)),
               "header", "missing key 'shape'");
}

TEST_F(NpyTest, BadShapeSyntax) {
  expect_error(write_raw("s.npy", npy_bytes(dict("'<f4'", "False", "[2, 3]"), 24)), "shape");
  expect_error(write_raw("s.npy", npy_bytes(dict("'<f4'", "False", "(2; 3)"), 24)), "shape");
  expect_error(write_raw("s.npy", npy_bytes(dict("'<f4'", "False", "(2, x)"), 24)), "shape");
  expect_error(write_raw("s.npy", npy_bytes(dict("'<f4'", "False", "(2, -3)"), 24)), "shape",
               "non-negative");
}

TEST_F(NpyTest, RankZero) {
  expect_error(write_raw("r.npy", npy_bytes(dict("'<f4'", "False", "()"), 4)), "shape", "rank 0");
}

TEST_F(NpyTest, RankFive) {
  expect_error(write_raw("r.npy", npy_bytes(dict("'<f4'", "False", "(1, 1, 1, 1, 2)"), 8)), "shape",
               "rank 5");
}

TEST_F(NpyTest, ShortData) {
  expect_error(write_raw("d.npy", npy_bytes(dict("'<f8'", "False", "(2, 3)"), 40)), "data",
               "expected 48 bytes");
}

TEST_F(NpyTest, ExtraData) {
  expect_error(write_raw("d.npy", npy_bytes(dict("'<f4'", "False", "(2, 3)"), 25)), "data",
               "got 25");
}

TEST_F(NpyTest, FileMissing) { expect_error(path("does_not_exist.npy"), "file", "cannot open"); }

}  // namespace
}  // namespace headcount
