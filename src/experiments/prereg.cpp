// prereg.h: SHA-1 (FIPS 180-4, the 80-round compression on 512-bit blocks), git's blob name,
// and the record the result JSON carries.
#include "experiments/prereg.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace headcount::experiments {

namespace {

std::uint32_t rotl(std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

}  // namespace

std::string sha1_hex(std::string_view bytes) {
  std::array<std::uint32_t, 5> h = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u,
                                    0xC3D2E1F0u};
  // The message, a 0x80 byte, zeros to 56 mod 64, the bit length as 64-bit big-endian.
  std::string m(bytes);
  const std::uint64_t bits = static_cast<std::uint64_t>(bytes.size()) * 8;
  m.push_back(static_cast<char>(0x80));
  while (m.size() % 64 != 56) m.push_back('\0');
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  for (std::size_t block = 0; block < m.size(); block += 64) {
    std::array<std::uint32_t, 80> w{};
    for (int t = 0; t < 16; ++t)
      for (int k = 0; k < 4; ++k)
        w[t] = (w[t] << 8) | static_cast<unsigned char>(m[block + 4 * t + k]);
    for (int t = 16; t < 80; ++t) w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int t = 0; t < 80; ++t) {
      std::uint32_t f, k;
      if (t < 20) {
        f = (b & c) | (~b & d), k = 0x5A827999u;
      } else if (t < 40) {
        f = b ^ c ^ d, k = 0x6ED9EBA1u;
      } else if (t < 60) {
        f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDCu;
      } else {
        f = b ^ c ^ d, k = 0xCA62C1D6u;
      }
      const std::uint32_t temp = rotl(a, 5) + f + e + k + w[t];
      e = d, d = c, c = rotl(b, 30), b = a, a = temp;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  }
  std::string hex;
  char digits[9];
  for (std::uint32_t word : h) {
    std::snprintf(digits, sizeof digits, "%08x", word);
    hex += digits;
  }
  return hex;
}

std::string git_blob_hash(std::string_view content) {
  std::string object = "blob " + std::to_string(content.size());
  object.push_back('\0');
  object.append(content);
  return sha1_hex(object);
}

nlohmann::json prereg_record(const std::string& source_dir, const std::string& relative) {
  nlohmann::json record{{"path", relative}, {"blob", nullptr}, {"preregistered", false}};
  if (relative.empty()) {
    record["why"] = "this experiment has no pre-registration (an earlier design)";
    return record;
  }
  const std::filesystem::path file = std::filesystem::path(source_dir) / relative;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    record["why"] = "the file is not in this source tree";
    return record;
  }
  std::ostringstream text;
  text << in.rdbuf();
  record["blob"] = git_blob_hash(text.str());
  record["preregistered"] = true;
  return record;
}

}  // namespace headcount::experiments
