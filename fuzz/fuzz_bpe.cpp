// Fuzz target: the byte-level BPE tokenizer on arbitrary vocabularies and text. Input: a
// vocabulary part and a text part separated by the first NUL byte; the vocabulary part's lines
// are extra tokens (a line starting with '<' is a special token when it is printable ASCII,
// which stands for itself at the byte level) and, for lines holding a space, merges (whose
// result joins the vocabulary too). Repeated token texts are added once. The 256 byte tokens always
// come first, so the tokenizer can be built unless a merge names a token that is not there (an
// Error).
//   - encode (special tokens parsed and not): ids in range;
//   - decode(encode(text)) is the text with invalid UTF-8 replaced by U+FFFD (the round trip
//     byte-level BPE guarantees whatever the merges).
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_input.h"
#include "headcount/bpe.h"
#include "headcount/error.h"
#include "headcount/tokenizer.h"

namespace {

std::string utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    } else if (c < 0x10000) {
      out += {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
              static_cast<char>(0x80 | (c & 0x3F))};
    } else {
      out += {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
              static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    }
  }
  return out;
}

std::vector<std::string> byte_tokens() {
  std::vector<std::string> out;
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    out.push_back(utf8(std::u32string(1, printable ? static_cast<char32_t>(b) : next++)));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = all.find('\0');
  const std::string_view vocab_text = all.substr(0, nul);
  const std::string_view text =
      nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);

  headcount::BpeVocabulary v;
  v.tokens = byte_tokens();
  v.token_types.assign(v.tokens.size(), headcount::TokenType::normal);
  std::set<std::string> seen(v.tokens.begin(), v.tokens.end());
  for (std::string_view line : headcount::fuzz::split(vocab_text, "\n")) {
    if (line.empty()) continue;
    const std::string s(line);
    const bool printable_ascii =
        std::all_of(s.begin(), s.end(), [](char c) { return c >= 33 && c <= 126; });
    if (s.find(' ') != std::string::npos) {
      v.merges.push_back(s);
      // Its result as a token, so most merges are usable.
      std::string joined = s;
      joined.erase(joined.find(' '), 1);
      if (seen.insert(joined).second) {
        v.tokens.push_back(joined);
        v.token_types.push_back(headcount::TokenType::normal);
      }
    } else if (seen.insert(s).second) {
      v.tokens.push_back(s);
      v.token_types.push_back(s[0] == '<' && printable_ascii ? headcount::TokenType::control
                                                             : headcount::TokenType::normal);
    }
  }
  try {
    const headcount::BpeTokenizer tok(std::move(v));
    const std::string expected = utf8(headcount::decode_utf8_lossy(text));
    for (bool special : {true, false}) {
      const std::vector<std::int32_t> ids = tok.encode(text, {.parse_special = special});
      for (std::int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < tok.vocab_size());
      FUZZ_ASSERT(tok.decode(ids) == expected);
    }
  } catch (const headcount::Error&) {
    // A merge that names no token of the vocabulary.
  }
  return 0;
}
