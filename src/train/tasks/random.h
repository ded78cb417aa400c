// The tasks' random numbers: a counter-based generator, so a batch is a pure function of
// (seed, stream, step, row) and needs no state carried from the batch before (a resumed run,
// a different batch size or thread count sees the same rows). The key is splitmix64's
// finaliser applied along the chain seed -> stream -> step -> row; the values are splitmix64's
// sequence from that key. Only integer operations whose results C++ fixes (unsigned wrap-
// around, shifts), no std:: distributions, whose outputs differ between standard libraries:
// the data order is the same on every platform.
#pragma once

#include <cstdint>

namespace headcount::train::tasks {

// splitmix64's output function (Steele, Lea, Flood 2014): a bijection on 64 bits whose every
// output bit depends on every input bit.
inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Streams keep the training data, the validation set and other uses apart (graph: the fixed
// graph of the esp task, drawn from its graph_seed).
enum class Stream : std::uint64_t { train = 1, validation = 2, graph = 3 };

class CounterRng {
 public:
  CounterRng(std::uint64_t seed, Stream stream, std::uint64_t step, std::uint64_t row) {
    constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull;
    std::uint64_t k = mix64(seed + kGolden);
    k = mix64(k ^ (static_cast<std::uint64_t>(stream) * kGolden));
    k = mix64(k ^ (step + kGolden));
    state_ = mix64(k ^ (row * kGolden + 1));
  }
  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ull;
    return mix64(state_);
  }
  // Uniform in [0, n) for n >= 1: the high word of next() * n (Lemire 2019 without the
  // rejection step; the bias is below n / 2^64, far under anything a training run can see).
  std::uint64_t below(std::uint64_t n) { return multiply_high(next(), n); }

  // The high 64 bits of the 128-bit product a * b, from 32-bit halves (portable C++).
  static std::uint64_t multiply_high(std::uint64_t a, std::uint64_t b) {
    const std::uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32, b_lo = b & 0xffffffffu,
                        b_hi = b >> 32;
    const std::uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi,
                        hi_hi = a_hi * b_hi;
    const std::uint64_t middle = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
    return hi_hi + (hi_lo >> 32) + (middle >> 32);
  }

 private:
  std::uint64_t state_;
};

// A hash of a token sequence, for the train / validation partition of synthetic tasks.
inline std::uint64_t hash_tokens(const std::int32_t* tokens, std::int64_t count) {
  std::uint64_t h = 0x243f6a8885a308d3ull ^ static_cast<std::uint64_t>(count);
  for (std::int64_t i = 0; i < count; ++i) h = mix64(h ^ static_cast<std::uint32_t>(tokens[i]));
  return h;
}

}  // namespace headcount::train::tasks
