// AtomicFile: temporary file beside the target, write loop that survives short writes and
// EINTR, then fsync + rename + directory fsync (see atomic_file.h for why each step).
#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "headcount/error.h"

namespace headcount::io {

using detail::concat;

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temporary_ = path_ + ".partial";
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path_, concat("cannot create ", temporary_, ": ", std::strerror(errno)));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temporary_.c_str());
  }
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ::ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path_, concat("cannot write ", temporary_, ": ", std::strerror(errno)));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0)
    fail(path_, concat("cannot fsync ", temporary_, ": ", std::strerror(errno)));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(temporary_.c_str());
    fail(path_, concat("cannot close ", temporary_, ": ", std::strerror(errno)));
  }
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary_.c_str());
    fail(path_, concat("cannot rename ", temporary_, " into place: ", std::strerror(error)));
  }
  // The rename lives in the directory: without this fsync a crash could undo it.
  std::filesystem::path directory = std::filesystem::path(path_).parent_path();
  if (directory.empty()) directory = std::filesystem::path(".");
  const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace headcount::io
