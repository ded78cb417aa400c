// Character classes and UTF-8 output shared by the tokenizers (wordpiece.cpp, bpe.cpp).
#pragma once

#include <utf8proc.h>

#include <string>

namespace headcount::text {

// The Unicode White_Space property: Rust's char::is_whitespace (the WordPiece cleaning) and,
// character for character, Oniguruma's \s in Unicode mode (9-13, U+0085 and the Zs, Zl, Zp
// categories: the byte-level BPE's GPT-2 regex in the `tokenizers` crate).
inline bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

inline void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buffer[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<std::size_t>(n));
}

}  // namespace headcount::text
