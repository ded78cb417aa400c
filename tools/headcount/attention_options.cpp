// Parsing of `headcount attention`'s --scale and --key-lengths (see attention_options.h).
#include "attention_options.h"

#include <charconv>
#include <cmath>

#include "headcount/error.h"

namespace headcount::cli {

std::optional<float> parse_scale(const std::string& text) {
  if (text.empty()) return std::nullopt;
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool parsed = ec == std::errc() && end == text.data() + text.size();
  check(parsed && std::isfinite(value) && std::isfinite(static_cast<float>(value)), "--scale",
        "a finite number", text);
  return static_cast<float>(value);
}

std::vector<std::int64_t> parse_key_lengths(const std::string& text) {
  std::vector<std::int64_t> lengths;
  if (text.empty()) return lengths;
  const char* p = text.data();
  const char* end = p + text.size();
  while (true) {
    std::int64_t value = 0;
    auto [next, ec] = std::from_chars(p, end, value);
    check(ec == std::errc() && next != p, "--key-lengths", "comma-separated integers", text);
    lengths.push_back(value);
    if (next == end) break;
    check(*next == ',', "--key-lengths", "comma-separated integers", text);
    p = next + 1;
  }
  return lengths;
}

}  // namespace headcount::cli
