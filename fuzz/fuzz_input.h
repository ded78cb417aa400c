// Helpers shared by the fuzz targets: the readers under test take paths, so an input becomes a
// file. MemoryFile puts the bytes in an anonymous memfd and names it /proc/self/fd/N (no disk,
// no name clash between parallel fuzzers); ScratchDir is a private directory for readers that
// want a directory of named files (the model directory).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace headcount::fuzz {

// A bug the fuzzer must report: libFuzzer treats abort() as a crash and saves the input.
#define FUZZ_ASSERT(cond)                                                                     \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz assertion failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

class MemoryFile {
 public:
  explicit MemoryFile(std::string_view bytes) {
    fd_ = ::memfd_create("fuzz", MFD_CLOEXEC);
    FUZZ_ASSERT(fd_ >= 0);
    const char* p = bytes.data();
    std::size_t left = bytes.size();
    while (left > 0) {
      const ::ssize_t n = ::write(fd_, p, left);
      FUZZ_ASSERT(n > 0);
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile() { ::close(fd_); }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// One directory per process under $TMPDIR (or /tmp), removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/headcount-fuzz-XXXXXX";
    FUZZ_ASSERT(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  // Writes `bytes` as `name` inside the directory (creating subdirectories).
  void put(const std::string& name, std::string_view bytes) const {
    const std::filesystem::path file = std::filesystem::path(path_) / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    FUZZ_ASSERT(out.good());
  }
  void remove(const std::string& name) const {
    std::error_code ec;
    std::filesystem::remove(std::filesystem::path(path_) / name, ec);
  }

 private:
  std::string path_;
};

// Splits `bytes` at every occurrence of `separator` (a byte string the dictionaries know).
inline std::vector<std::string_view> split(std::string_view bytes, std::string_view separator) {
  std::vector<std::string_view> parts;
  while (true) {
    const std::size_t at = bytes.find(separator);
    parts.push_back(bytes.substr(0, at));
    if (at == std::string_view::npos) return parts;
    bytes.remove_prefix(at + separator.size());
  }
}

}  // namespace headcount::fuzz
