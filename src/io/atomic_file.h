// A file that appears under its final name whole or not at all: bytes go to `<path>.partial`
// in the same directory, commit() fsyncs them, renames the temporary over `path` (atomic on
// POSIX within one file system) and fsyncs the directory so the rename itself survives a crash.
// Destroyed without commit() (an error, an exception), it unlinks the temporary. A process
// killed mid-write leaves at most a stale `<path>.partial`, which the next writer truncates.
// One writer per path at a time.
#pragma once

#include <cstddef>
#include <string>

namespace headcount::io {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // creates/truncates the temporary; Error naming `path`
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* data, std::size_t bytes);  // all of it, or Error naming `path`
  void commit();                                    // fsync, rename, fsync the directory

  const std::string& path() const { return path_; }

 private:
  std::string path_, temporary_;
  int fd_ = -1;
};

// The whole of `text` as `path`, atomically.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace headcount::io
