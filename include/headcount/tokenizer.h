// BERT's WordPiece tokenizer (uncased), the Hugging Face `tokenizers` pipeline exactly:
//
//   1. Decode UTF-8. Invalid bytes never throw: each maximal ill-formed subsequence becomes one
//      U+FFFD (the Unicode "substitution of maximal subparts" rule, which is also what Python's
//      bytes.decode("utf-8", "replace") does). Step 2 then drops U+FFFD, so invalid bytes simply
//      vanish: "ab\xffcd" tokenizes as "abcd".
//   2. Clean: drop U+0000, U+FFFD and control characters (categories Cc, Cf, Co, Cs, except tab,
//      LF and CR); map every White_Space character to a space.
//   3. CJK: put spaces around CJK ideographs (the `tokenizers` crate's ranges, listed in the .cpp).
//   4. Strip accents: NFD (utf8proc), then drop nonspacing marks (category Mn).
//   5. Lower-case each character (utf8proc's Unicode lower-case mapping).
//   6. Pre-tokenize: split on White_Space; every punctuation character is a word of its own
//      (BERT's punctuation: ASCII 33-47, 58-64, 91-96, 123-126, and Unicode categories P*).
//   7. WordPiece: greedy longest match first, continuation pieces prefixed "##"; a word longer
//      than max_input_chars_per_word characters, or one that cannot be covered, is [UNK].
//   8. [CLS] pieces [SEP], truncated to max_length ids in all.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace headcount {

struct TokenizerOptions {
  bool lowercase = true;      // tokenizer_config.json do_lower_case
  bool strip_accents = true;  // tokenizer_config.json strip_accents (null: = lowercase)
  bool tokenize_chinese_chars = true;
  std::int64_t max_length = 256;  // ids per sequence including [CLS] and [SEP]; >= 2
  std::int64_t max_input_chars_per_word = 100;
};

// Decodes UTF-8 as step 1 above: code points, with U+FFFD for each maximal ill-formed subpart.
std::u32string decode_utf8_lossy(std::string_view text);

class WordPieceTokenizer {
 public:
  // `vocab[i]` is the token of id i; it must hold [CLS], [SEP], [PAD] and [UNK].
  WordPieceTokenizer(std::vector<std::string> vocab, TokenizerOptions options);
  ~WordPieceTokenizer();
  WordPieceTokenizer(WordPieceTokenizer&&) noexcept;
  WordPieceTokenizer& operator=(WordPieceTokenizer&&) noexcept;

  // vocab.txt: one token per line, the line number (from 0) is the id.
  static WordPieceTokenizer from_vocab_file(const std::string& path, TokenizerOptions options);

  const TokenizerOptions& options() const;
  std::int64_t vocab_size() const;
  const std::string& token(std::int32_t id) const;
  // True for a token made only of BERT punctuation (step 6's definition): ".", ",", "“", "--"...
  bool is_punctuation_token(std::int32_t id) const;
  std::int32_t cls_id() const;
  std::int32_t sep_id() const;
  std::int32_t pad_id() const;
  std::int32_t unk_id() const;

  // Steps 1-5: the normalized text, as UTF-8.
  std::string normalize(std::string_view text) const;
  // Steps 1-7: the pieces, without special tokens and without truncation.
  std::vector<std::string> tokenize(std::string_view text) const;
  // Steps 1-8: [CLS] ids [SEP], at most max_length ids.
  std::vector<std::int32_t> encode(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A padded batch: ids [batch, seq_len] row-major (padding = pad_id) and the valid length of
// each row. seq_len is the longest sequence.
struct TokenBatch {
  std::int64_t batch = 0, seq_len = 0;
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> lengths;
};
TokenBatch pad_batch(const std::vector<std::vector<std::int32_t>>& sequences, std::int32_t pad_id);

// Dynamic batching: the sequences sorted by length (stable, so equal lengths keep input order),
// `batch_size` neighbours per padded batch; rows[r] is the input index of batch row r. Padding
// then costs little, and every caller that batches this way runs the same batches.
struct LengthBatch {
  TokenBatch tokens;
  std::vector<std::size_t> rows;
};
std::vector<LengthBatch> batch_by_length(const std::vector<std::vector<std::int32_t>>& sequences,
                                         std::int64_t batch_size, std::int32_t pad_id);

}  // namespace headcount
