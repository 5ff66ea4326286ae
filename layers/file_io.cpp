// Checkpoint file I/O on POSIX descriptors: fstat-checked, memory-checked reads, and writes through
// an exclusively created temporary file with an unpredictable name, fsync'd, then renamed.
#include "layers/file_io.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include "core/error.h"

namespace tgrad::file_io {

namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

// What a non-regular file is, in words.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// Closes a descriptor on every path out of a scope.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now, reporting the error (close can report a failed delayed write).
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// 16 hex digits from the kernel's random source: a name nobody can predict and plant.
std::string random_suffix(const std::string& fn) {
  uint64_t bits = 0;
  auto* p = reinterpret_cast<unsigned char*>(&bits);
  size_t got = 0;
  while (got < sizeof bits) {
    const ssize_t n = ::getrandom(p + got, sizeof bits - got, 0);
    if (n < 0 && errno == EINTR) continue;
    TGRAD_CHECK(n > 0, fn, ": getrandom failed: ", errno_text(errno));
    got += static_cast<size_t>(n);
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

// RAM + swap in bytes: a file larger than this cannot be read into memory, so it is refused
// before allocating (an allocator may abort rather than throw, as AddressSanitizer's does).
uint64_t memory_bytes() {
  struct sysinfo info {};
  if (::sysinfo(&info) != 0) return std::numeric_limits<uint64_t>::max();
  return (static_cast<uint64_t>(info.totalram) + info.totalswap) * info.mem_unit;
}

std::string parent_directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes all of `size` bytes, retrying short writes and EINTR; returns 0 or an errno value.
int write_all(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

std::string read_regular_file(const std::string& path, const std::string& fn) {
  // O_NONBLOCK so that opening a FIFO with no writer returns at once (and is then refused)
  // instead of hanging; it changes nothing for a regular file.
  Descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  TGRAD_CHECK(fd.get() >= 0, fn, ": cannot open '", path, "' for reading: ", errno_text(errno));
  struct stat st {};
  TGRAD_CHECK(::fstat(fd.get(), &st) == 0, fn, ": cannot stat '", path, "': ", errno_text(errno));
  TGRAD_CHECK(S_ISREG(st.st_mode), fn, ": '", path, "' is ", file_kind(st.st_mode),
              ", not a safetensors file");
  const uint64_t memory = memory_bytes();
  TGRAD_CHECK(static_cast<uint64_t>(st.st_size) <= memory, fn, ": '", path, "' is ", st.st_size,
              " bytes, more than the machine's ", memory, " bytes of RAM + swap");
  std::string bytes;
  try {
    bytes.reserve(static_cast<size_t>(st.st_size));
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      TGRAD_CHECK(n >= 0, fn, ": error reading '", path, "': ", errno_text(errno));
      if (n == 0) break;
      bytes.append(buffer, static_cast<size_t>(n));
    }
  } catch (const std::bad_alloc&) {
    TGRAD_FAIL(fn, ": '", path, "' (", st.st_size, " bytes) does not fit in memory");
  } catch (const std::length_error&) {
    TGRAD_FAIL(fn, ": '", path, "' (", st.st_size, " bytes) does not fit in memory");
  }
  return bytes;
}

void write_atomically(const std::string& path, const std::vector<Chunk>& chunks,
                      const std::string& fn) {
  // O_EXCL refuses any existing name, a symlink included, and O_NOFOLLOW says so twice; a
  // collision with another writer's random name is retried with a fresh one.
  std::string tmp;
  int raw_fd = -1;
  for (int attempt = 0; attempt < 16 && raw_fd < 0; ++attempt) {
    tmp = path + ".tmp-" + random_suffix(fn);
    raw_fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (raw_fd < 0 && errno != EEXIST) break;
  }
  TGRAD_CHECK(raw_fd >= 0, fn, ": cannot open a temporary file '", tmp,
              "' for writing: ", errno_text(errno));
  Descriptor fd(raw_fd);
  auto fail = [&](const std::string& what, int err) {
    fd.close();
    ::unlink(tmp.c_str());
    TGRAD_FAIL(fn, ": ", what, " '", tmp, "' failed: ", errno_text(err),
               err == ENOSPC || err == EFBIG || err == EDQUOT ? " (disk full?)" : "");
  };
  for (const Chunk& c : chunks) {
    if (const int err = write_all(fd.get(), c.data, c.size)) fail("writing", err);
  }
  // The data must be on disk before the rename makes it the checkpoint, or a power loss can
  // leave the new name pointing at an empty or partial file.
  if (::fsync(fd.get()) != 0) fail("syncing", errno);
  if (fd.close() != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TGRAD_FAIL(fn, ": closing '", tmp, "' failed: ", errno_text(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TGRAD_FAIL(fn, ": renaming '", tmp, "' to '", path, "' failed: ", errno_text(err));
  }
  // Makes the rename itself durable. The new file is in place whatever happens here.
  const std::string dir = parent_directory(path);
  Descriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  TGRAD_CHECK(dir_fd.get() >= 0, fn, ": the file is saved, but opening its directory '", dir,
              "' to sync the rename failed: ", errno_text(errno));
  // EINVAL: a file system (or /proc-like directory) that cannot sync directories.
  TGRAD_CHECK(::fsync(dir_fd.get()) == 0 || errno == EINVAL, fn,
              ": the file is saved, but syncing its directory '", dir,
              "' failed: ", errno_text(errno));
}

}  // namespace tgrad::file_io
