// The byte-level BPE tokenizer.
//  - SmolLM2's, read from the real GGUF (skipped, naming the file, when scripts/setup.sh has not
//    fetched it): ids equal to the Hugging Face `tokenizers` reference on every line of
//    data/pride-and-prejudice.txt and on a hostile set (invalid UTF-8, control characters, long
//    runs, emoji, CJK, mixed scripts, special-token texts); decode equal to its decode; ChatML
//    equal to the file's jinja chat template. References: tests/testdata/gguf/tokenizer.json,
//    made by scripts/make_gguf_fixtures.sh.
//  - A hand-made vocabulary: the merge order, the pre-tokenizer's pieces, special tokens, and
//    the vocabularies the constructor must refuse.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "headcount/bpe.h"
#include "headcount/gguf.h"
#include "headcount/tokenizer.h"
#include "sanitized.h"
#include "sha256.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kTestdata = fs::path(HEADCOUNT_TESTDATA_DIR);
const fs::path kRoot = kTestdata / ".." / "..";
const fs::path kModel = kRoot / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// Invalid UTF-8 replaced as Rust's String::from_utf8_lossy does (the reference's decode).
std::string lossy(const std::string& bytes) {
  std::string out;
  for (char32_t c : decode_utf8_lossy(bytes)) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

std::string ids_string(const std::vector<std::int32_t>& ids) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  return out.str();
}

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(kModel)) return;
    tokenizer_ = new BpeTokenizer(BpeTokenizer::from_gguf(GgufFile::open(kModel.string())));
    std::ifstream in(kTestdata / "gguf" / "tokenizer.json");
    golden_ = new json(json::parse(in));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete golden_;
    tokenizer_ = nullptr;
    golden_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr)
      GTEST_SKIP() << kModel.lexically_normal().string()
                   << " not present (scripts/setup.sh fetches it)";
  }
  static BpeTokenizer* tokenizer_;
  static json* golden_;
};
BpeTokenizer* SmolLM2Tokenizer::tokenizer_ = nullptr;
json* SmolLM2Tokenizer::golden_ = nullptr;

TEST_F(SmolLM2Tokenizer, SpecialTokensFromTheFile) {
  const BpeTokenizer& t = *tokenizer_;
  EXPECT_EQ(t.vocab_size(), 49152);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_EQ(t.token(1), "<|im_start|>");
  EXPECT_EQ(t.token(2), "<|im_end|>");
  EXPECT_EQ(t.token_type(0), TokenType::control);
  EXPECT_EQ(t.token_type(17), TokenType::normal);
  EXPECT_EQ(t.encode("<|im_start|>"), (std::vector<std::int32_t>{1}));
  const auto plain = t.encode("<|im_start|>", {.parse_special = false});
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(t.decode(plain), "<|im_start|>");
  expect_error([&] { (void)t.decode({49152}); }, {"token id", "0..49151", "49152"});
  expect_error([&] { (void)t.token(-1); }, {"token id", "-1"});
}

TEST_F(SmolLM2Tokenizer, EveryBookLineMatchesTheReference) {
  const BpeTokenizer& t = *tokenizer_;
  const json& g = *golden_;
  std::ifstream in(kRoot / g["book"].get<std::string>(), std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), g["book_lines"].get<std::size_t>());
  const json& full = g["book_ids"];
  const json& hashes = g["book_ids_sha256_16"];
  // Under the sanitizers every 7th line; every line in the Release build.
  const std::size_t step = HEADCOUNT_TEST_SANITIZED ? 7 : 1;
  for (std::size_t i = 0; i < lines.size(); i += step) {
    const std::vector<std::int32_t> ids = t.encode(lines[i]);
    if (i < full.size())
      ASSERT_EQ(ids_string(ids), ids_string(full[i].get<std::vector<std::int32_t>>()))
          << "line " << i + 1;
    ASSERT_EQ(sha256_hex(ids.data(), ids.size() * 4).substr(0, 16), hashes[i].get<std::string>())
        << "line " << i + 1 << ": " << lines[i];
    ASSERT_EQ(t.decode(ids), lines[i]) << "line " << i + 1;
  }
}

TEST_F(SmolLM2Tokenizer, HostileTextMatchesTheReference) {
  const BpeTokenizer& t = *tokenizer_;
  int cases = 0;
  for (const json& c : (*golden_)["hostile"]) {
    const std::string text = from_hex(c["hex"]);
    SCOPED_TRACE(c["hex"].get<std::string>());
    const std::vector<std::int32_t> ids = t.encode(text);
    EXPECT_EQ(ids_string(ids), ids_string(c["ids"].get<std::vector<std::int32_t>>()));
    EXPECT_EQ(lossy(t.decode(ids)), from_hex(c["decoded_hex"]));
    // Valid UTF-8 round-trips byte for byte, invalid bytes come back as U+FFFD; except where a
    // byte has no token (the reference drops those too).
    if (from_hex(c["decoded_hex"]) == lossy(text)) EXPECT_EQ(t.decode(ids), lossy(text));
    ++cases;
  }
  EXPECT_GE(cases, 60);
}

TEST_F(SmolLM2Tokenizer, ChatMlMatchesTheFileTemplate) {
  const BpeTokenizer& t = *tokenizer_;
  for (const json& c : (*golden_)["chatml"]) {
    std::vector<ChatMessage> messages;
    for (const json& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    const std::string text =
        format_chatml(messages, {.default_system = std::string(kSmolLM2SystemPrompt),
                                 .add_generation_prompt = c["add_generation_prompt"]});
    EXPECT_EQ(text, c["text"].get<std::string>());
    EXPECT_EQ(ids_string(t.encode(text)), ids_string(c["ids"].get<std::vector<std::int32_t>>()));
  }
}

// --- a hand-made vocabulary -------------------------------------------------------------------

// GPT-2's stand-in of each byte (bytes_to_unicode), as UTF-8.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out;
  int next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int c = printable ? b : next++;
    std::string s;
    if (c < 0x80) {
      s.push_back(static_cast<char>(c));
    } else {
      s.push_back(static_cast<char>(0xC0 | (c >> 6)));
      s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    out.push_back(s);
  }
  return out;
}

BpeVocabulary tiny() {
  BpeVocabulary v;
  v.tokens = {"<|s|>"};
  for (const std::string& b : byte_tokens()) v.tokens.push_back(b);
  for (const char* t : {"ab", "bc", "abc",
                        "\xc4\xa0"
                        "a",
                        "\xc4\xa0\xc4\xa0", "aa"})
    v.tokens.push_back(t);
  v.token_types.assign(v.tokens.size(), TokenType::normal);
  v.token_types[0] = TokenType::control;
  v.merges = {"b c", "a b", "ab c", "\xc4\xa0 a", "\xc4\xa0 \xc4\xa0", "a a"};
  return v;
}

TEST(BpeTokenizer, MergesByRankThenPosition) {
  const BpeTokenizer t(tiny());
  const auto id = [&](const char* s) { return t.find(s); };
  // "abc": "b c" ranks before "a b", so a + bc; there is no "a bc" merge.
  EXPECT_EQ(t.encode("abc"), (std::vector<std::int32_t>{id("a"), id("bc")}));
  // "aaa": the leftmost pair merges first.
  EXPECT_EQ(t.encode("aaa"), (std::vector<std::int32_t>{id("aa"), id("a")}));
  // " a": the space joins the word; "  a": the first space is a piece of its own.
  EXPECT_EQ(t.encode(" a"), (std::vector<std::int32_t>{id("\xc4\xa0"
                                                          "a")}));
  EXPECT_EQ(t.encode("  a"), (std::vector<std::int32_t>{id("\xc4\xa0"), id("\xc4\xa0"
                                                                           "a")}));
  EXPECT_EQ(t.encode("   "), (std::vector<std::int32_t>{id("\xc4\xa0\xc4\xa0"), id("\xc4\xa0")}));
  // Digits are pieces of their own: "1 a" keeps " a" whole, "a 1" leaves the space alone.
  EXPECT_EQ(t.encode("a 1"), (std::vector<std::int32_t>{id("a"), id("\xc4\xa0"), id("1")}));
  EXPECT_EQ(t.encode("<|s|>ab<|s|"),
            (std::vector<std::int32_t>{0, id("ab"), id("<"), id("|"), id("s"), id("|")}));
  EXPECT_EQ(t.decode(t.encode("x\xffy")), "x\xef\xbf\xbdy");
  // A long run stays fast (the merge queue is O(n log n)).
  const std::string run(200000, 'a');
  EXPECT_EQ(t.encode(run).size(), 100000u);
}

TEST(BpeTokenizer, BytesWithoutATokenAreDropped) {
  BpeVocabulary v = tiny();
  v.tokens[1 + 'b'] = "<no b>";
  v.merges = {"a a"};
  const BpeTokenizer t(v);
  // "aba" is one piece; without its "b" the two a's meet and merge, as in `tokenizers`.
  EXPECT_EQ(t.encode("aba"), (std::vector<std::int32_t>{t.find("aa")}));
  EXPECT_EQ(t.encode("b"), (std::vector<std::int32_t>{}));
}

TEST(BpeTokenizer, PreTokenizerPieces) {
  const BpeTokenizer t(tiny());
  // With no merges across them, each piece's tokens are its bytes: count pieces by the ids of
  // the stand-ins. "don't": "don" + "'t"; "x!!": "x" + "!!"; "a\n\nb": "a" "\n" "\n" "b".
  const auto bytes_of = [&](const std::vector<std::int32_t>& ids) { return t.decode(ids); };
  EXPECT_EQ(bytes_of(t.encode("don't")), "don't");
  EXPECT_EQ(t.encode("1\xd9\xa1").size(), 3u);  // '1' and ARABIC-INDIC ONE (2 bytes)
}

TEST(BpeTokenizer, RefusesBrokenVocabularies) {
  BpeVocabulary merge = tiny();
  merge.merges.push_back("abc");
  expect_error([&] { BpeTokenizer{merge}; }, {"merges[6]", "two tokens, one space", "\"abc\""});
  BpeVocabulary unknown = tiny();
  unknown.merges.push_back("bc bc");
  expect_error([&] { BpeTokenizer{unknown}; },
               {"merges[6]", "tokens of the vocabulary", "\"bc bc\""});
  BpeVocabulary pre = tiny();
  pre.pre = "llama3";
  expect_error([&] { BpeTokenizer{pre}; }, {"pre-tokenizer", "smollm", "llama3"});
  BpeVocabulary types = tiny();
  types.token_types.pop_back();
  expect_error([&] { BpeTokenizer{types}; }, {"token_type", "one per token"});
  BpeVocabulary bos = tiny();
  bos.bos_id = 100000;
  expect_error([&] { BpeTokenizer{bos}; }, {"bos_token_id", "100000"});
}

TEST(ChatMl, FormatsTurns) {
  EXPECT_EQ(
      format_chatml({{"user", "Hi"}}, {.default_system = "S", .add_generation_prompt = true}),
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      format_chatml({{"system", "X"}}, {.default_system = "S", .add_generation_prompt = false}),
      "<|im_start|>system\nX<|im_end|>\n");
  EXPECT_EQ(format_chatml({}, {.default_system = "S", .add_generation_prompt = false}), "");
}

}  // namespace
}  // namespace headcount::testing
