// Errors raised at the public edge. Every message names the parameter and says
// "expected X, got Y", so the CLI can print it as one line and exit with code 2.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace headcount {

// Thrown for bad user input (shapes, sizes, files). Internal invariants use assert.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Throws Error("<param>: expected <expected>, got <got>") unless `ok`.
template <typename Expected, typename Got>
void check(bool ok, std::string_view param, const Expected& expected, const Got& got) {
  if (!ok) throw Error(detail::concat(param, ": expected ", expected, ", got ", got));
}

// The same as check(), but the message parts are only evaluated when `ok` is false: use it
// where building the message would allocate on a hot path.
#define HEADCOUNT_CHECK(ok, param, expected, got)                     \
  do {                                                                \
    if (!(ok)) ::headcount::check(false, (param), (expected), (got)); \
  } while (0)

// Throws Error("<param>: <what>") for errors that are not a simple comparison.
[[noreturn]] inline void fail(std::string_view param, std::string_view what) {
  throw Error(detail::concat(param, ": ", what));
}

}  // namespace headcount
