// WordPiece, step by step as in the header. Character classes follow the Hugging Face
// `tokenizers` crate (normalizers/bert.rs, pre_tokenizers/bert.rs, models/wordpiece), which is
// what sentence-transformers runs; where it differs from Google's original Python (the CJK
// ranges, the control and whitespace classes), the crate wins, because the golden ids come
// from it. Unicode data (categories, NFD, lower case) come from utf8proc.
#include <utf8proc.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <numeric>
#include <unordered_map>

#include "headcount/error.h"
#include "headcount/tokenizer.h"
#include "text/unicode_text.h"

namespace headcount {

using detail::concat;
using text::append_utf8;
using text::is_whitespace;

namespace {

utf8proc_category_t category(char32_t c) {
  return static_cast<utf8proc_category_t>(utf8proc_category(static_cast<utf8proc_int32_t>(c)));
}

// Characters BERT's cleaning drops: "other" categories except unassigned (Cn), which the
// crate keeps; tab, LF and CR count as whitespace instead.
bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
         cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS;
}

// The `tokenizers` crate's CJK ranges. Note 0x2B920 (not 0x2B820, as in Google's BERT):
// U+2B820..U+2B91F are not spaced out, and we match the ids the crate produces.
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126))
    return true;
  const auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

std::string to_utf8(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

std::u32string decode_utf8_lossy(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned char b0 = *p;
    if (b0 < 0x80) {
      out.push_back(b0);
      ++p;
      continue;
    }
    // Length and the valid range of the second byte (the rest are 80..BF), per Table 3-7 of
    // the Unicode standard; a lead byte outside it is a one-byte ill-formed subpart.
    int need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    char32_t cp = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 1;
      cp = b0 & 0x1F;
    } else if (b0 == 0xE0) {
      need = 2;
      lo = 0xA0;
      cp = 0;
    } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
      need = 2;
      cp = b0 & 0x0F;
    } else if (b0 == 0xED) {
      need = 2;
      hi = 0x9F;
      cp = 0x0D;
    } else if (b0 == 0xF0) {
      need = 3;
      lo = 0x90;
      cp = 0;
    } else if (b0 >= 0xF1 && b0 <= 0xF3) {
      need = 3;
      cp = b0 & 0x07;
    } else if (b0 == 0xF4) {
      need = 3;
      hi = 0x8F;
      cp = 4;
    }
    int taken = 1;
    bool ok = need > 0;
    for (int i = 0; ok && i < need; ++i) {
      const unsigned char* q = p + 1 + i;
      const unsigned char first = i == 0 ? lo : 0x80, last = i == 0 ? hi : 0xBF;
      if (q >= end || *q < first || *q > last) {
        ok = false;
      } else {
        cp = (cp << 6) | (*q & 0x3F);
        ++taken;
      }
    }
    out.push_back(ok ? cp : U'\uFFFD');
    p += taken;
  }
  return out;
}

struct WordPieceTokenizer::Impl {
  TokenizerOptions options;
  std::vector<std::string> vocab;
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> ids;
  std::int32_t cls = 0, sep = 0, pad = 0, unk = 0;

  std::int32_t special(const char* name) const {
    auto it = ids.find(std::string_view(name));
    if (it == ids.end()) fail("vocab", concat("expected a token ", name, ", got none"));
    return it->second;
  }

  // Steps 1-5.
  std::u32string normalize(std::string_view text) const {
    // 1-3. Decode, clean, space out CJK.
    std::u32string cleaned;
    cleaned.reserve(text.size());
    bool ascii = true;
    for (char32_t c : decode_utf8_lossy(text)) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) c = ' ';
      ascii = ascii && c < 0x80;
      if (options.tokenize_chinese_chars && is_chinese_char(c)) {
        cleaned += U' ';
        cleaned += c;
        cleaned += U' ';
      } else {
        cleaned += c;
      }
    }
    // 4. NFD and drop nonspacing marks (ASCII is its own NFD and has no marks).
    std::u32string stripped;
    if (options.strip_accents && !ascii) {
      const std::string utf8 = to_utf8(cleaned);
      const auto options_nfd = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_STABLE);
      const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(utf8.data());
      const auto length = static_cast<utf8proc_ssize_t>(utf8.size());
      std::vector<utf8proc_int32_t> buffer(utf8.size() + 8);
      utf8proc_ssize_t n = utf8proc_decompose(
          bytes, length, buffer.data(), static_cast<utf8proc_ssize_t>(buffer.size()), options_nfd);
      if (n > static_cast<utf8proc_ssize_t>(buffer.size())) {
        buffer.resize(static_cast<std::size_t>(n));
        n = utf8proc_decompose(bytes, length, buffer.data(), n, options_nfd);
      }
      if (n < 0)
        fail("text",
             concat("cannot normalise: ", utf8proc_errmsg(n)));  // not reached: input is valid
      stripped.reserve(static_cast<std::size_t>(n));
      for (utf8proc_ssize_t i = 0; i < n; ++i) {
        const auto c = static_cast<char32_t>(buffer[static_cast<std::size_t>(i)]);
        if (category(c) != UTF8PROC_CATEGORY_MN) stripped += c;
      }
    } else {
      stripped = std::move(cleaned);
    }
    // 5. Lower case, one character at a time (the crate does not apply the final-sigma rule).
    if (options.lowercase)
      for (char32_t& c : stripped)
        if (c >= 0x80 || (c >= 'A' && c <= 'Z'))
          c = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
    return stripped;
  }

  // Step 7 for one word, appending ids (or the pieces, when `pieces` is given).
  void word_piece(const std::u32string& word, std::vector<std::int32_t>& out) const {
    if (static_cast<std::int64_t>(word.size()) > options.max_input_chars_per_word) {
      out.push_back(unk);
      return;
    }
    // Byte offset of every character boundary in the UTF-8 form.
    std::string utf8;
    std::vector<std::size_t> offsets{0};
    for (char32_t c : word) {
      append_utf8(utf8, c);
      offsets.push_back(utf8.size());
    }
    const std::size_t mark = out.size();
    std::string candidate;
    std::size_t start = 0;
    while (start < word.size()) {
      std::size_t end = word.size();
      std::int32_t found = -1;
      for (; end > start; --end) {
        candidate.assign(start > 0 ? "##" : "");
        candidate.append(utf8, offsets[start], offsets[end] - offsets[start]);
        auto it = ids.find(std::string_view(candidate));
        if (it != ids.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) {  // the word cannot be covered: all of it is [UNK]
        out.resize(mark);
        out.push_back(unk);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }

  // Steps 6-7.
  std::vector<std::int32_t> pieces(std::string_view text) const {
    const std::u32string normalized = normalize(text);
    std::vector<std::int32_t> out;
    std::u32string word;
    auto flush = [&] {
      if (!word.empty()) word_piece(word, out);
      word.clear();
    };
    for (char32_t c : normalized) {
      if (is_whitespace(c)) {
        flush();
      } else if (is_punctuation(c)) {
        flush();
        word = c;
        flush();
      } else {
        word += c;
      }
    }
    flush();
    return out;
  }
};

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, TokenizerOptions options)
    : impl_(std::make_unique<Impl>()) {
  check(options.max_length >= 2, "max_length", ">= 2 (room for [CLS] and [SEP])",
        options.max_length);
  check(options.max_input_chars_per_word >= 1, "max_input_chars_per_word", ">= 1",
        options.max_input_chars_per_word);
  impl_->options = options;
  impl_->vocab = std::move(vocab);
  impl_->ids.reserve(impl_->vocab.size());
  for (std::size_t i = 0; i < impl_->vocab.size(); ++i)
    impl_->ids.emplace(impl_->vocab[i], static_cast<std::int32_t>(i));  // first occurrence wins
  impl_->cls = impl_->special("[CLS]");
  impl_->sep = impl_->special("[SEP]");
  impl_->pad = impl_->special("[PAD]");
  impl_->unk = impl_->special("[UNK]");
}

WordPieceTokenizer::~WordPieceTokenizer() = default;
WordPieceTokenizer::WordPieceTokenizer(WordPieceTokenizer&&) noexcept = default;
WordPieceTokenizer& WordPieceTokenizer::operator=(WordPieceTokenizer&&) noexcept = default;

WordPieceTokenizer WordPieceTokenizer::from_vocab_file(const std::string& path,
                                                       TokenizerOptions options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the vocabulary");
  std::vector<std::string> vocab;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    vocab.push_back(line);
  }
  check(vocab.size() >= 4 && vocab.size() < (1u << 31), path + ": vocabulary",
        "at least [PAD], [UNK], [CLS] and [SEP], one token per line",
        concat(vocab.size(), " lines"));
  try {
    return WordPieceTokenizer(std::move(vocab), options);
  } catch (const Error& e) {
    throw Error(concat(path, ": ", e.what()));
  }
}

const TokenizerOptions& WordPieceTokenizer::options() const { return impl_->options; }
std::int64_t WordPieceTokenizer::vocab_size() const {
  return static_cast<std::int64_t>(impl_->vocab.size());
}
const std::string& WordPieceTokenizer::token(std::int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id", concat("in [0, ", vocab_size(), ")"), id);
  return impl_->vocab[static_cast<std::size_t>(id)];
}
bool WordPieceTokenizer::is_punctuation_token(std::int32_t id) const {
  const std::u32string text = decode_utf8_lossy(token(id));
  return !text.empty() && std::all_of(text.begin(), text.end(), is_punctuation);
}
std::int32_t WordPieceTokenizer::cls_id() const { return impl_->cls; }
std::int32_t WordPieceTokenizer::sep_id() const { return impl_->sep; }
std::int32_t WordPieceTokenizer::pad_id() const { return impl_->pad; }
std::int32_t WordPieceTokenizer::unk_id() const { return impl_->unk; }

std::string WordPieceTokenizer::normalize(std::string_view text) const {
  return to_utf8(impl_->normalize(text));
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (std::int32_t id : impl_->pieces(text)) out.push_back(token(id));
  return out;
}

std::vector<std::int32_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> body = impl_->pieces(text);
  const auto room = static_cast<std::size_t>(impl_->options.max_length - 2);
  if (body.size() > room) body.resize(room);
  std::vector<std::int32_t> ids;
  ids.reserve(body.size() + 2);
  ids.push_back(impl_->cls);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.push_back(impl_->sep);
  return ids;
}

TokenBatch pad_batch(const std::vector<std::vector<std::int32_t>>& sequences, std::int32_t pad_id) {
  TokenBatch batch;
  batch.batch = static_cast<std::int64_t>(sequences.size());
  for (const auto& s : sequences)
    batch.seq_len = std::max(batch.seq_len, static_cast<std::int64_t>(s.size()));
  batch.ids.assign(static_cast<std::size_t>(batch.batch * batch.seq_len), pad_id);
  for (std::size_t b = 0; b < sequences.size(); ++b) {
    std::copy(sequences[b].begin(), sequences[b].end(),
              batch.ids.begin() +
                  static_cast<std::ptrdiff_t>(b * static_cast<std::size_t>(batch.seq_len)));
    batch.lengths.push_back(static_cast<std::int64_t>(sequences[b].size()));
  }
  return batch;
}

std::vector<LengthBatch> batch_by_length(const std::vector<std::vector<std::int32_t>>& sequences,
                                         std::int64_t batch_size, std::int32_t pad_id) {
  check(batch_size >= 1, "batch size", ">= 1", batch_size);
  std::vector<std::size_t> order(sequences.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return sequences[a].size() < sequences[b].size();
  });
  std::vector<LengthBatch> batches;
  std::vector<std::vector<std::int32_t>> chunk;
  for (std::size_t start = 0; start < order.size(); start += static_cast<std::size_t>(batch_size)) {
    const std::size_t end = std::min(order.size(), start + static_cast<std::size_t>(batch_size));
    chunk.clear();
    for (std::size_t j = start; j < end; ++j) chunk.push_back(sequences[order[j]]);
    batches.push_back({pad_batch(chunk, pad_id),
                       {order.begin() + static_cast<std::ptrdiff_t>(start),
                        order.begin() + static_cast<std::ptrdiff_t>(end)}});
  }
  return batches;
}

}  // namespace headcount
