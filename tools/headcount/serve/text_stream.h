// The text of a completion as its tokens arrive, cut at the first stop string, and released to
// a stream only when it is final: bytes that could still be the start of a stop string, or the
// first bytes of a UTF-8 character whose rest comes with the next token (BPE tokens are bytes,
// and a character may span two), are held back until the next token settles them. So a
// streamed completion's pieces, joined, are exactly the non-streamed completion's text, and no
// piece shows text that a stop string later removes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace headcount::serve {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops);

  // Appends a token's bytes. Returns true when a stop string now occurs: the text is then cut
  // before its first occurrence, and later appends are ignored.
  bool append(std::string_view bytes);
  bool stopped() const { return stopped_; }

  // The bytes that became final since the last take: `finished` releases everything left (the
  // completion has ended: a held-back partial stop string or character is text after all).
  std::string take(bool finished);

  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stops_;
  std::size_t longest_stop_ = 0;
  std::string text_;
  std::size_t taken_ = 0;
  bool stopped_ = false;
};

// The length of the longest prefix of `bytes` that ends on a UTF-8 character boundary: a
// trailing lead byte with fewer continuation bytes after it than it announces is left out.
std::size_t complete_utf8_prefix(std::string_view bytes);

}  // namespace headcount::serve
