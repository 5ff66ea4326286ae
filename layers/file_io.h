// Whole-file reads and crash-safe, race-safe whole-file writes for checkpoints: reading refuses
// anything but a regular file, and writing goes through a uniquely named temporary file beside
// the target (created exclusively, never through a symlink, fsync'd) that is renamed over it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tgrad::file_io {

struct Chunk {
  const void* data;
  size_t size;
};

// The bytes of the regular file `path`. Throws tgrad::Error starting with `fn` when it cannot be
// opened or read, or when it is a directory, FIFO, socket or device (named as such).
std::string read_regular_file(const std::string& path, const std::string& fn);

// Writes the concatenated `chunks` to `path` atomically: a reader (or a crash) sees the old file
// or the whole new one. The temporary file is `<path>.tmp-<random>` in the same directory,
// created with O_CREAT|O_EXCL|O_NOFOLLOW and mode 0666 minus the umask; it is fsync'd, renamed
// over `path`, and the directory is fsync'd. Concurrent writers to one path each rename a whole
// file (the last rename wins). On error the temporary file is removed and tgrad::Error thrown;
// only a process killed mid-write leaves its temporary file behind. A failure to sync the
// directory after the rename throws too, saying that the new file is in place.
void write_atomically(const std::string& path, const std::vector<Chunk>& chunks,
                      const std::string& fn);

}  // namespace tgrad::file_io
