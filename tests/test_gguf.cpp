// The GGUF reader and ggml dequantization.
//  - On the real SmolLM2-135M file (scripts/setup.sh fetches it; skipped, naming the file, when
//    absent): metadata and tensor table equal the `gguf` package's reading of the same file, and
//    every tensor dequantizes bit-identically to gguf.quants.dequantize (sha256 of the fp32 bytes;
//    the first rows element by element). tests/testdata/gguf/ holds those references, made by
//    scripts/make_gguf_fixtures.sh.
//  - Hand-made blocks: the Q8_0 / Q4_1 layouts against values computed by hand.
//  - Crafted bad files: each is one Error naming the file and the field, never a crash; every
//    truncation of a valid file is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "expect_error.h"
#include "gguf_builder.h"
#include "headcount/error.h"
#include "headcount/gguf.h"
#include "headcount/npy.h"
#include "sanitized.h"
#include "sha256.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = fs::path(HEADCOUNT_TESTDATA_DIR) / "gguf";
const fs::path kModel =
    fs::path(HEADCOUNT_TESTDATA_DIR) / ".." / ".." / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

#define REQUIRE_MODEL()    \
  if (!fs::exists(kModel)) \
  GTEST_SKIP() << kModel.lexically_normal().string() << " not present (scripts/setup.sh fetches it)"

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// --- the real file ----------------------------------------------------------------------------

TEST(GgufModel, MetadataAndTensorTableMatchTheGgufPackage) {
  REQUIRE_MODEL();
  const json ref = read_json(kFixtures / "reader.json");
  const GgufFile f = GgufFile::open(kModel.string());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), ref["alignment"].get<std::uint64_t>());
  EXPECT_EQ(f.data_offset(), ref["data_offset"].get<std::uint64_t>());
  EXPECT_EQ(f.file_size(), 98362432u);

  ASSERT_EQ(f.metadata().size(), ref["metadata"].size());
  for (const auto& [key, expected] : ref["metadata"].items()) {
    SCOPED_TRACE(key);
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr);
    const std::string type = expected["type"];
    EXPECT_EQ(gguf_value_type_name(static_cast<std::uint32_t>(v->type)),
              type == "bool" ? "bool" : type);
    if (type == "string") {
      EXPECT_EQ(f.get_string(key), expected["value"].get<std::string>());
    } else if (type == "float32" || type == "float64") {
      EXPECT_EQ(f.get_float(key), expected["value"].get<double>());
    } else if (type == "bool") {
      EXPECT_EQ(f.get_bool(key), expected["value"].get<int>() != 0);
    } else if (type == "array") {
      EXPECT_EQ(v->count, expected["count"].get<std::uint64_t>());
      const std::string element = expected["element_type"];
      EXPECT_EQ(gguf_value_type_name(static_cast<std::uint32_t>(v->element_type)), element);
      const json& first = expected["first"];
      if (element == "string") {
        const auto& strings = f.get_string_array(key);
        for (std::size_t i = 0; i < first.size(); ++i)
          EXPECT_EQ(strings.at(i), first[i].get<std::string>());
      } else {
        const auto ints = f.get_int_array(key);
        ASSERT_EQ(ints.size(), v->count);
        for (std::size_t i = 0; i < first.size(); ++i)
          EXPECT_EQ(ints[i], first[i].get<std::int64_t>());
      }
    } else {
      EXPECT_EQ(f.get_uint(key), expected["value"].get<std::uint64_t>());
    }
  }

  const json& tensors = ref["tensors"];
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, tensors[i]["name"].get<std::string>());
    EXPECT_EQ(ggml_type_name(t.type), tensors[i]["type"].get<std::string>());
    EXPECT_EQ(t.ne, tensors[i]["ne"].get<std::vector<std::int64_t>>());
    EXPECT_EQ(t.offset, tensors[i]["offset"].get<std::uint64_t>());
  }
}

TEST(GgufModel, ShapesAreNeReversed) {
  REQUIRE_MODEL();
  const GgufFile f = GgufFile::open(kModel.string());
  // PyTorch's k_proj.weight is [kv_heads * head_dim, d_model] = [192, 576]: GGUF ne {576, 192}.
  const GgufTensorInfo* k = f.find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->ne, (std::vector<std::int64_t>{576, 192}));
  EXPECT_EQ(k->shape(), (std::vector<std::int64_t>{192, 576}));
  EXPECT_EQ(k->rows(), 192);
  EXPECT_EQ(k->cols(), 576);
  EXPECT_EQ(k->type, GgmlType::q4_1);
  EXPECT_EQ(k->bytes, 192u * 576 / 32 * 20);
  EXPECT_EQ(f.view(*k).bytes.size(), k->bytes);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied embeddings
  EXPECT_EQ(f.get_uint("llama.attention.head_count_kv"), 3u);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.rope.freq_base")), 100000.0f);
  expect_error([&] { f.load_f32("output.weight"); }, {"output.weight", "missing"});
  expect_error(
      [&] {
        f.load_f32("blk.0.attn_k.weight", {576, 192});
      },
      {"shape", "[576, 192]", "[192, 576]"});
  expect_error([&] { (void)f.get_uint("general.name"); },
               {"general.name", "unsigned integer", "string"});
  expect_error([&] { (void)f.get_string("no.such.key"); }, {"no.such.key", "missing"});
  expect_error([&] { (void)f.get_float_array("tokenizer.ggml.token_type"); },
               {"array of floats", "array of int32"});
}

TEST(GgufModel, EveryTensorDequantizesBitIdenticallyToTheGgufPackage) {
  REQUIRE_MODEL();
  const json ref = read_json(kFixtures / "dequant.json");
  const GgufFile f = GgufFile::open(kModel.string());
  const json& hashes = ref["tensor_sha256"];
  ASSERT_EQ(hashes.size(), f.tensors().size());
  // Under the sanitizers a sample (every 9th tensor, the Q8_0 embedding among them); all 272 in
  // the Release build.
  std::size_t checked = 0;
  for (std::size_t i = 0; i < f.tensors().size(); ++i) {
    if (HEADCOUNT_TEST_SANITIZED && i % 9 != 0) continue;
    const GgufTensorInfo& t = f.tensors()[i];
    const Tensor x = f.load_f32(t.name, t.shape());
    EXPECT_EQ(sha256_hex(x.data<float>(), x.bytes()), hashes.at(t.name).get<std::string>())
        << t.name;
    ++checked;
  }
  EXPECT_GE(checked, 30u);

  for (const auto& [name, file] : ref["rows"].items()) {
    SCOPED_TRACE(name);
    const Tensor rows = read_npy_f32((kFixtures / file.get<std::string>()).string());
    const Tensor x = f.load_f32(name);
    ASSERT_LE(rows.numel(), x.numel());
    for (std::int64_t i = 0; i < rows.numel(); ++i) {
      std::uint32_t a, b;
      std::memcpy(&a, x.data<float>() + i, 4);
      std::memcpy(&b, rows.data<float>() + i, 4);
      ASSERT_EQ(a, b) << "element " << i << ": headcount " << x.data<float>()[i] << ", gguf "
                      << rows.data<float>()[i];
    }
  }
}

// llama.cpp's converter permutes the rows of each Q and K head so that RoPE rotates adjacent
// pairs: Hugging Face row h * head_dim/2 + i of a head (h = 0, 1; i < head_dim/2) is GGUF row
// 2i + h of that head. Undoing it gives transformers' q_proj / k_proj bit for bit.
TEST(GgufModel, UndoingTheQkRowPermutationGivesTransformersRows) {
  REQUIRE_MODEL();
  const json ref = read_json(kFixtures / "dequant.json")["hf_layer0"];
  const GgufFile f = GgufFile::open(kModel.string());
  const std::int64_t head_dim = 64, half = head_dim / 2;
  for (const auto& [hf_name, gguf_name] :
       {std::pair{"q_proj", "blk.0.attn_q.weight"}, std::pair{"k_proj", "blk.0.attn_k.weight"}}) {
    SCOPED_TRACE(hf_name);
    const Tensor w = f.load_f32(gguf_name);
    const std::int64_t cols = w.size(1);
    const Tensor hf = read_npy_f32((kFixtures / ref[hf_name]["file"].get<std::string>()).string());
    const auto rows = ref[hf_name]["rows"].get<std::vector<std::int64_t>>();
    ASSERT_EQ(hf.size(0), static_cast<std::int64_t>(rows.size()));
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const std::int64_t head = rows[k] / head_dim, within = rows[k] % head_dim;
      const std::int64_t gguf_row = head * head_dim + 2 * (within % half) + within / half;
      EXPECT_EQ(std::memcmp(w.data<float>() + gguf_row * cols,
                            hf.data<float>() + static_cast<std::int64_t>(k) * cols,
                            static_cast<std::size_t>(cols) * 4),
                0)
          << "HF row " << rows[k] << " should be GGUF row " << gguf_row;
      if (gguf_row != rows[k])  // rows the permutation moves (not 0, 63 of a head)
        EXPECT_NE(std::memcmp(w.data<float>() + rows[k] * cols,
                              hf.data<float>() + static_cast<std::int64_t>(k) * cols,
                              static_cast<std::size_t>(cols) * 4),
                  0)
            << "row " << rows[k] << " unpermuted";
    }
  }
}

// --- hand-made blocks -------------------------------------------------------------------------

std::vector<std::byte> as_bytes(const std::string& s) {
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

TEST(GgmlDequantize, Q8_0IsScaleTimesSignedBytes) {
  GgufBuilder b;
  b.u16(0x3800);  // d = 0.5
  for (int i = 0; i < 32; ++i)
    b.u8(static_cast<std::uint8_t>(static_cast<std::int8_t>(i * 8 - 128)));
  const auto bytes = as_bytes(b.bytes);
  std::vector<float> out(32);
  dequantize(GgmlType::q8_0, bytes, 32, out.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * static_cast<float>(i * 8 - 128)) << i;
}

TEST(GgmlDequantize, Q4_1LowNibblesFirstThenHigh) {
  GgufBuilder b;
  b.u16(0x3800).u16(0xBC00);  // d = 0.5, m = -1
  for (int j = 0; j < 16; ++j) b.u8(static_cast<std::uint8_t>(j | ((15 - j) << 4)));
  b.u16(0x0001).u16(0x7BFF);  // d = 2^-24 (smallest subnormal), m = 65504 (largest fp16)
  for (int j = 0; j < 16; ++j) b.u8(0xF0);
  const auto bytes = as_bytes(b.bytes);
  std::vector<float> out(64);
  dequantize(GgmlType::q4_1, bytes, 64, out.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * j - 1.0f) << j;
    EXPECT_EQ(out[j + 16], 0.5f * (15 - j) - 1.0f) << j;
    EXPECT_EQ(out[32 + j], 65504.0f) << j;                           // low nibble 0
    EXPECT_EQ(out[48 + j], std::ldexp(15.0f, -24) + 65504.0f) << j;  // rounds to 65504
  }
}

TEST(GgmlDequantize, F16AndF32) {
  GgufBuilder b;
  b.u16(0x3C00).u16(0xC000).u16(0x0001).u16(0x7C00).u16(0x8000);
  const auto bytes = as_bytes(b.bytes);
  std::vector<float> out(5);
  dequantize(GgmlType::f16, bytes, 5, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(out[3]));
  EXPECT_TRUE(std::signbit(out[4]));
  GgufBuilder c;
  c.f32(1.5f).f32(-0.25f);
  const auto fbytes = as_bytes(c.bytes);
  dequantize(GgmlType::f32, fbytes, 2, out.data());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -0.25f);
}

TEST(GgmlDequantize, RefusesWhatItCannotRead) {
  std::vector<std::byte> bytes(40);
  std::vector<float> out(64);
  expect_error([&] { dequantize(GgmlType::q4_0, bytes, 32, out.data()); }, {"type", "Q4_0"});
  expect_error([&] { dequantize(GgmlType::q4_1, bytes, 33, out.data()); },
               {"Q4_1 count", "multiple of 32", "33"});
  expect_error([&] { dequantize(GgmlType::q4_1, bytes, 96, out.data()); },
               {"Q4_1 bytes", "60 (3 blocks of 20)", "got 40"});
  expect_error([&] { dequantize(GgmlType::q8_0, bytes, 32, out.data()); },
               {"Q8_0 bytes", "34", "40"});
  EXPECT_EQ(ggml_type_name(31), "unknown type 31");
  EXPECT_EQ(ggml_type_traits(GgmlType::q4_1).block_bytes, 20);
}

// --- crafted files ----------------------------------------------------------------------------

class GgufFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headcount_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string put(const GgufBuilder& b, const std::string& name = "t.gguf") const {
    const std::string path = (dir_ / name).string();
    b.write(path);
    return path;
  }
  // open() must throw one Error naming the file and containing every part.
  void expect_bad(const GgufBuilder& b, std::initializer_list<const char*> parts) const {
    const std::string path = put(b);
    try {
      (void)GgufFile::open(path);
      ADD_FAILURE() << "no Error thrown";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      EXPECT_NE(message.find(path), std::string::npos) << message;
      for (const char* part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  }

  // A valid file: 3 metadata values (a string, an array of strings, an int32 array), two tensors.
  static GgufBuilder valid() {
    GgufBuilder b;
    b.header(2, 3).kv_str("general.name", "tiny");
    b.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("a").str("\xc4\xa0");
    b.str("tokenizer.ggml.token_type").u32(9).u32(5).u64(2).u32(1).u32(3);
    b.tensor("w", {32, 2}, 3, 0);  // Q4_1 [2, 32]: 2 blocks, 40 bytes
    b.tensor("n", {4}, 0, 64);     // F32 [4]
    b.pad();
    for (int i = 0; i < 2; ++i) b.u16(0x3C00).u16(0x0000).raw(std::string(16, '\x21').data(), 16);
    b.raw(std::string(24, '\0').data(), 24);
    b.f32(1).f32(2).f32(3).f32(4);
    return b;
  }

  fs::path dir_;
};

TEST_F(GgufFileTest, ReadsAValidFile) {
  const GgufFile f = GgufFile::open(put(valid()));
  EXPECT_EQ(f.get_string("general.name"), "tiny");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"a", "\xc4\xa0"}));
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type"), (std::vector<std::int64_t>{1, 3}));
  ASSERT_EQ(f.tensors().size(), 2u);
  const Tensor w = f.load_f32("w", {2, 32});
  EXPECT_EQ(w.data<float>()[0], 1.0f);   // d = 1, m = 0, nibble 1
  EXPECT_EQ(w.data<float>()[16], 2.0f);  // high nibble 2
  const Tensor n = f.load_f32("n", {4});
  EXPECT_EQ(n.data<float>()[3], 4.0f);
  EXPECT_EQ(f.data_offset() % 32, 0u);
}

TEST_F(GgufFileTest, EveryTruncationIsOneError) {
  const GgufBuilder good = valid();
  for (std::size_t n = 0; n < good.bytes.size(); ++n) {
    GgufBuilder cut;
    cut.bytes = good.bytes.substr(0, n);
    const std::string path = put(cut);
    EXPECT_THROW((void)GgufFile::open(path), Error) << n << " bytes";
  }
}

TEST_F(GgufFileTest, BadHeaders) {
  GgufBuilder magic;
  magic.bytes = "GGML" + std::string(20, '\0');
  expect_bad(magic, {"magic", "GGUF", "47 47 4d 4c"});
  GgufBuilder v1;
  v1.header(0, 0, 1);
  expect_bad(v1, {"version", "2 or 3", "got 1"});
  GgufBuilder kvs;
  kvs.header(0, 1ull << 60);
  expect_bad(kvs, {"kv_count", "at most 0", "1152921504606846976"});
  GgufBuilder tensors;
  tensors.header(1000, 0).raw(std::string(100, '\0').data(), 100);
  expect_bad(tensors, {"tensor_count", "at most 3", "got 1000"});
}

TEST_F(GgufFileTest, BadStringsAndValues) {
  GgufBuilder key;
  key.header(0, 1).u64(1ull << 40).raw("abc", 3).raw(std::string(20, '\0').data(), 20);
  expect_bad(key, {"metadata key 0 length", "at most 23", "1099511627776"});
  GgufBuilder value;
  value.header(0, 1).str("k").u32(8).u64(99).raw("short", 5);
  expect_bad(value, {"metadata 'k' length", "at most 5", "got 99"});
  GgufBuilder type;
  type.header(0, 1).str("k").u32(13).u32(0);
  expect_bad(type, {"metadata 'k' type", "0..12", "got 13"});
  GgufBuilder nested;
  nested.header(0, 1).str("k").u32(9).u32(9).u64(1).u32(4).u64(0);
  expect_bad(nested, {"element type", "arrays of arrays", "array"});
  GgufBuilder count;
  count.header(0, 1).str("k").u32(9).u32(8).u64(1ull << 59).raw(std::string(32, '\0').data(), 32);
  expect_bad(count, {"metadata 'k' count", "at most 4 strings", "576460752303423488"});
  GgufBuilder numbers;
  numbers.header(0, 1).str("k").u32(9).u32(6).u64(1000).f32(1);
  expect_bad(numbers, {"metadata 'k' count", "at most 1 float32", "got 1000"});
  GgufBuilder boolean;
  boolean.header(0, 1).str("k").u32(7).u8(2);
  expect_bad(boolean, {"metadata 'k'", "0 or 1", "got 2"});
  GgufBuilder twice;
  twice.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
  expect_bad(twice, {"metadata key 'k' appears twice"});
  GgufBuilder hostile_key;  // a newline and 200 bytes: escaped and cut, the message stays one line
  const std::string long_key = "a\nb" + std::string(197, 'k');
  hostile_key.header(0, 2).kv_u32(long_key, 1).kv_u32(long_key, 2);
  expect_bad(hostile_key, {"metadata key 'a\\x0abkkk", "... (200 bytes)' appears twice"});
  GgufBuilder align;
  align.header(0, 1).kv_u32("general.alignment", 24);
  expect_bad(align, {"general.alignment", "power of two", "24"});
  GgufBuilder align_type;
  align_type.header(0, 1).kv_str("general.alignment", "32");
  expect_bad(align_type, {"general.alignment' type", "uint32", "string"});
}

TEST_F(GgufFileTest, BadTensorInfos) {
  const auto one = [](std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset,
                      std::size_t data) {
    GgufBuilder b;
    b.header(1, 0).tensor("x", std::move(ne), type, offset).pad();
    b.raw(std::string(data, '\0').data(), data);
    return b;
  };
  expect_bad(one({4}, 31, 0, 64), {"tensor 'x' type", "ggml type", "unknown type 31"});
  expect_bad(one({1ull << 40, 1ull << 40}, 0, 0, 64),
             {"tensor 'x' ne[1]", "2^62", "1099511627776"});
  expect_bad(one({1ull << 20, 1ull << 20}, 0, 0, 64),
             {"tensor 'x' size", "at most 64 bytes", "1099511627776 blocks of 4"});
  expect_bad(one({33}, 3, 0, 64), {"tensor 'x' ne[0]", "multiple of 32", "Q4_1", "got 33"});
  expect_bad(one({4}, 0, 8, 64), {"tensor 'x' offset", "multiple of 32", "got 8"});
  expect_bad(one({16}, 0, 32, 64),
             {"tensor 'x' offset", "inside the data region of 64 bytes", "[32, 96)"});
  GgufBuilder dims;
  dims.header(1, 0).str("x").u32(5).raw(std::string(64, '\0').data(), 64);
  expect_bad(dims, {"tensor 'x' n_dims", "1..4", "got 5"});
  GgufBuilder zero_dims;
  zero_dims.header(1, 0).str("x").u32(0).raw(std::string(64, '\0').data(), 64);
  expect_bad(zero_dims, {"tensor 'x' n_dims", "got 0"});
  GgufBuilder overlap;
  overlap.header(2, 0)
      .tensor("a", {16}, 0, 0)
      .tensor("b", {8}, 0, 32)
      .pad()
      .raw(std::string(64, '\0').data(), 64);
  expect_bad(overlap, {"tensor 'b' bytes [32, 64) overlap tensor 'a' bytes [0, 64)"});
  GgufBuilder past_end;  // a zero-byte tensor, the file ending before the padding
  past_end.header(1, 0).tensor("e", {0}, 0, 0);
  expect_bad(past_end, {"data region", "to start inside the file of 57 bytes", "byte 64"});
  GgufBuilder twice;
  twice.header(2, 0)
      .tensor("a", {8}, 0, 0)
      .tensor("a", {8}, 0, 32)
      .pad()
      .raw(std::string(64, '\0').data(), 64);
  expect_bad(twice, {"tensor 'a' appears twice"});
}

TEST_F(GgufFileTest, KnownButUnreadableTypesAreViewedNotLoaded) {
  GgufBuilder b;
  b.header(1, 0).tensor("q", {256}, 12, 0).pad().raw(std::string(144, '\0').data(), 144);  // Q4_K
  const GgufFile f = GgufFile::open(put(b));
  EXPECT_EQ(f.view("q").bytes.size(), 144u);
  expect_error([&] { f.load_f32("q"); }, {"tensor 'q' type", "F32, F16, Q8_0 or Q4_1", "Q4_K"});
}

}  // namespace
}  // namespace headcount::testing
