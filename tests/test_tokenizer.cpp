// WordPiece: token ids identical to the Hugging Face tokenizer on every golden case, plus the
// rules one at a time on a small vocabulary.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "headcount/encoder.h"
#include "headcount/error.h"
#include "headcount/tokenizer.h"
#include "minilm_golden.h"

namespace headcount::testing {
namespace {

WordPieceTokenizer minilm_tokenizer() {
  const EncoderConfig config = read_encoder_config(default_model_dir());
  return WordPieceTokenizer::from_vocab_file(default_model_dir() + "/vocab.txt", config.tokenizer);
}

TEST(TokenizerGolden, IdsIdenticalToHuggingFace) {
  HEADCOUNT_REQUIRE_MINILM();
  const WordPieceTokenizer tok = minilm_tokenizer();
  EXPECT_EQ(tok.options().max_length, 256)
      << "sentence-transformers truncates at max_seq_length 256, not 128";
  const auto cases = load_golden_cases();
  ASSERT_GE(cases.size(), 100u);
  int truncated = 0;
  for (const GoldenCase& c : cases) {
    EXPECT_EQ(tok.encode(c.text), c.ids) << c.source;
    truncated += c.ids.size() == 256;
  }
  EXPECT_GE(truncated, 2) << "the fixtures should include inputs past 256 tokens";
}

TEST(TokenizerGolden, NormalisationExamples) {
  HEADCOUNT_REQUIRE_MINILM();
  const WordPieceTokenizer tok = minilm_tokenizer();
  EXPECT_EQ(tok.normalize("Héllo\tWÖRLD\x01"), "hello world");
  EXPECT_EQ(tok.normalize("漢字"), " 漢  字 ");
  EXPECT_EQ(tok.tokenize("unaffable!!"),
            (std::vector<std::string>{"una", "##ffa", "##ble", "!", "!"}));
  EXPECT_EQ(tok.encode(""), (std::vector<std::int32_t>{tok.cls_id(), tok.sep_id()}));
  EXPECT_EQ(tok.encode(" \t\n "), (std::vector<std::int32_t>{tok.cls_id(), tok.sep_id()}));
}

// A vocabulary small enough to reason about.
WordPieceTokenizer tiny(TokenizerOptions options = {}) {
  return WordPieceTokenizer(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "a", "##b", "!", "x", "é"},
      options);
}

TEST(Tokenizer, GreedyLongestMatchFirst) {
  const WordPieceTokenizer t = tiny();
  EXPECT_EQ(t.tokenize("unaffable"), (std::vector<std::string>{"un", "##aff", "##able"}));
  EXPECT_EQ(t.tokenize("ab ab!"), (std::vector<std::string>{"a", "##b", "a", "##b", "!"}));
  EXPECT_EQ(t.tokenize("unq x"), (std::vector<std::string>{"[UNK]", "x"}))
      << "an uncoverable word is one [UNK]";
}

TEST(Tokenizer, LongWordsAreUnknown) {
  TokenizerOptions o;
  o.max_input_chars_per_word = 4;
  const WordPieceTokenizer t = tiny(o);
  EXPECT_EQ(t.tokenize("abbb"), (std::vector<std::string>{"a", "##b", "##b", "##b"}));
  EXPECT_EQ(t.tokenize("abbbb"), (std::vector<std::string>{"[UNK]"}));
}

TEST(Tokenizer, TruncatesToMaxLengthIncludingSpecials) {
  TokenizerOptions o;
  o.max_length = 5;
  const WordPieceTokenizer t = tiny(o);
  const auto ids = t.encode("x x x x x x x");
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(ids.front(), t.cls_id());
  EXPECT_EQ(ids.back(), t.sep_id());
}

TEST(Tokenizer, CasingAndAccentsFollowTheOptions) {
  EXPECT_EQ(tiny().normalize("ÉA"), "ea");
  TokenizerOptions cased;
  cased.lowercase = false;
  cased.strip_accents = false;
  EXPECT_EQ(tiny(cased).normalize("ÉA"), "ÉA");
}

TEST(Tokenizer, InvalidUtf8IsReplacedThenDropped) {
  // Maximal subparts: E2 82 (a truncated 3-byte sequence) is one U+FFFD; C0 and AF are one each.
  EXPECT_EQ(decode_utf8_lossy("a\xe2\x82z"), U"a\uFFFDz");
  EXPECT_EQ(decode_utf8_lossy("\xc0\xaf"), U"\uFFFD\uFFFD");
  EXPECT_EQ(decode_utf8_lossy("\xed\xa0\x80"), U"\uFFFD\uFFFD\uFFFD");  // a UTF-16 surrogate
  EXPECT_EQ(decode_utf8_lossy("\xf0\x9f\x98\x80"), U"\U0001F600");
  // Cleaning drops U+FFFD, so the bytes vanish: "ab\xffx" tokenizes as "abx".
  const WordPieceTokenizer t = tiny();
  EXPECT_EQ(t.tokenize("ab\xff"
                       "b"),
            t.tokenize("abb"));
}

TEST(Tokenizer, ArbitraryBytesNeverCrash) {
  const WordPieceTokenizer t = tiny();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes(rng() % 64, '\0');
    for (char& b : bytes) b = static_cast<char>(rng());
    const auto ids = t.encode(bytes);
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(t.encode(bytes), ids) << "deterministic";
  }
}

TEST(Tokenizer, VocabularyNeedsSpecialTokens) {
  EXPECT_THROW(WordPieceTokenizer({"a", "b"}, {}), Error);
  EXPECT_THROW(WordPieceTokenizer::from_vocab_file("/nonexistent/vocab.txt", {}), Error);
}

TEST(Tokenizer, PadBatch) {
  const TokenBatch b = pad_batch({{2, 5, 3}, {2, 3}}, 0);
  EXPECT_EQ(b.batch, 2);
  EXPECT_EQ(b.seq_len, 3);
  EXPECT_EQ(b.ids, (std::vector<std::int32_t>{2, 5, 3, 2, 3, 0}));
  EXPECT_EQ(b.lengths, (std::vector<std::int64_t>{3, 2}));
}

}  // namespace
}  // namespace headcount::testing
