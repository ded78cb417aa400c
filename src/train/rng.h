// The training code's random numbers: a seeded stream that gives the same values on every
// platform. std::normal_distribution is not used because each standard library implements it
// differently; here the bits come from xoshiro256** (seeded through splitmix64, as its authors
// recommend) and normals from the Box-Muller transform in double, rounded to float at the end.
// (std::log/std::sqrt/std::cos of glibc and other libms agree to the last double bit on the
// overwhelming majority of inputs; the float rounding hides the rare 1-ulp disagreement.)
#pragma once

#include <cmath>
#include <cstdint>

namespace headcount::train {

// splitmix64 (Steele, Lea, Flood 2014): expands one 64-bit seed into well-mixed words.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** 1.0 (Blackman, Vigna 2018).
class Xoshiro256 {
 public:
  explicit Xoshiro256(std::uint64_t seed) {
    for (std::uint64_t& word : s_) word = splitmix64(seed);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in (0, 1]: the top 53 bits, shifted off zero so log() below is finite.
  double uniform_open0() { return (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

// Standard normals by Box-Muller; each pair of uniforms gives two values, used in order.
class NormalSampler {
 public:
  explicit NormalSampler(std::uint64_t seed) : bits_(seed) {}
  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = bits_.uniform_open0(), u2 = bits_.uniform_open0();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586476925 * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  Xoshiro256 bits_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace headcount::train
