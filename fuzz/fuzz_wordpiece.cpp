// Fuzz target: vocab.txt and the WordPiece tokenizer on arbitrary bytes. Input: one byte of
// options (bit 0 lowercase, 1 strip_accents, 2 tokenize_chinese_chars, bits 3-7 max_length - 2),
// then a vocabulary part and a text part separated by the first NUL byte.
//   - from_vocab_file on the vocabulary part alone: an Error or a tokenizer;
//   - a tokenizer over the special tokens plus those lines (so the text always has one), then
//     normalize / tokenize / encode on the text: ids in range, [CLS] first, [SEP] last, at most
//     max_length of them, each piece a vocabulary token.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_input.h"
#include "headcount/error.h"
#include "headcount/tokenizer.h"

using headcount::fuzz::MemoryFile;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t flags = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t nul = rest.find('\0');
  const std::string_view vocab_text = rest.substr(0, nul);
  const std::string_view text =
      nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);

  headcount::TokenizerOptions options{
      .lowercase = (flags & 1) != 0,
      .strip_accents = (flags & 2) != 0,
      .tokenize_chinese_chars = (flags & 4) != 0,
      .max_length = 2 + (flags >> 3),
      .max_input_chars_per_word = 100,
  };

  {
    const MemoryFile file(vocab_text);
    try {
      const auto tokenizer = headcount::WordPieceTokenizer::from_vocab_file(file.path(), options);
      FUZZ_ASSERT(tokenizer.vocab_size() >= 4);
    } catch (const headcount::Error&) {
    }
  }

  std::vector<std::string> vocab{"[PAD]", "[UNK]", "[CLS]", "[SEP]"};
  for (std::string_view line : headcount::fuzz::split(vocab_text, "\n")) vocab.emplace_back(line);
  const headcount::WordPieceTokenizer tokenizer(std::move(vocab), options);
  (void)tokenizer.normalize(text);
  for (const std::string& piece : tokenizer.tokenize(text)) FUZZ_ASSERT(!piece.empty());
  const std::vector<std::int32_t> ids = tokenizer.encode(text);
  FUZZ_ASSERT(ids.size() >= 2 && static_cast<std::int64_t>(ids.size()) <= options.max_length);
  FUZZ_ASSERT(ids.front() == tokenizer.cls_id() && ids.back() == tokenizer.sep_id());
  for (std::int32_t id : ids) {
    FUZZ_ASSERT(id >= 0 && id < tokenizer.vocab_size());
    (void)tokenizer.is_punctuation_token(id);
  }
  return 0;
}
