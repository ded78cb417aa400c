#include "text_stream.h"

#include <algorithm>

namespace headcount::serve {

TextStream::TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) longest_stop_ = std::max(longest_stop_, s.size());
}

bool TextStream::append(std::string_view bytes) {
  if (stopped_) return true;
  const std::size_t before = text_.size();
  text_.append(bytes);
  // A stop string that ends in the new bytes starts at most longest_stop_ - 1 bytes before them.
  const std::size_t from = before >= longest_stop_ ? before - longest_stop_ + 1 : 0;
  std::size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, text_.find(s, from));
  if (cut == std::string::npos) return false;
  text_.resize(cut);
  stopped_ = true;
  return true;
}

std::string TextStream::take(bool finished) {
  std::size_t end = text_.size();
  if (!finished && !stopped_) {
    // Hold back the longest tail that is a proper prefix of some stop string.
    std::size_t hold = 0;
    for (const std::string& s : stops_)
      for (std::size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k)
        if (std::string_view(text_).substr(text_.size() - k) == std::string_view(s).substr(0, k)) {
          hold = k;
          break;
        }
    // (A held tail never reaches into taken bytes: its shorter prefix was held before.)
    end = std::max(taken_, text_.size() - hold);
    end = taken_ + complete_utf8_prefix(std::string_view(text_).substr(taken_, end - taken_));
  }
  if (end <= taken_) return {};
  std::string piece = text_.substr(taken_, end - taken_);
  taken_ = end;
  return piece;
}

std::size_t complete_utf8_prefix(std::string_view bytes) {
  // Look back at most 3 bytes for the lead byte of the last character.
  const std::size_t n = bytes.size();
  for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(bytes[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for the lead
    const std::size_t length = c < 0x80             ? 1
                               : (c & 0xE0) == 0xC0 ? 2
                               : (c & 0xF0) == 0xE0 ? 3
                               : (c & 0xF8) == 0xF0 ? 4
                                                    : 1;  // invalid: as is
    return length > back ? n - back : n;
  }
  return n;  // only continuation bytes: not ours to fix (the JSON writer replaces them)
}

}  // namespace headcount::serve
