// The exclusive database lock and the write-ahead log check of SqliteStore::Open (storage/sqlite_open.h).
#include "storage/sqlite_open.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "storage/sqlite_store.h"

namespace gpupack::storage_internal {

Result<int> LockDatabase(const std::string& path) {
  const std::string lock_path = SqliteStore::LockPath(path);
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Server("cannot open its lock file '" + lock_path + "': " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK)
      return Status::Server("cannot lock '" + lock_path + "': " + std::strerror(err));
    std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return Status::Conflict("it is in use by another gpupack server" +
                            (holder.empty() ? std::string() : " (pid " + holder + ")") + ", which holds '" +
                            lock_path + "'; one database serves one server: stop the other one or choose another --db");
  }
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    // The pid is only for messages; the lock is what counts.
  }
  return fd;
}

WalCheck CheckWalFrames(const std::string& wal) {
  WalCheck out;
  if (wal.size() < 32) return out;
  const auto* b = reinterpret_cast<const unsigned char*>(wal.data());
  auto be32 = [b](size_t at) {
    return uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | uint32_t{b[at + 3]};
  };
  const uint32_t magic = be32(0);
  if (magic != 0x377f0682 && magic != 0x377f0683) return out;  // not a WAL: SQLite resets it
  const bool big_endian = (magic & 1) != 0;
  auto word = [&](size_t at) {
    return big_endian ? be32(at)
                      : uint32_t{b[at]} | uint32_t{b[at + 1]} << 8 | uint32_t{b[at + 2]} << 16 | uint32_t{b[at + 3]} << 24;
  };
  auto checksum = [&](size_t at, size_t n, uint32_t& s1, uint32_t& s2) {
    for (size_t i = at; i + 8 <= at + n; i += 8) {
      s1 += word(i) + s2;
      s2 += word(i + 4) + s1;
    }
  };
  const uint32_t page_size = be32(8);
  if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0) return out;
  const size_t frame = 24 + page_size;
  out.frames = static_cast<int64_t>((wal.size() - 32) / frame);
  const uint32_t salt1 = be32(16), salt2 = be32(20);
  uint32_t s1 = 0, s2 = 0;
  checksum(0, 24, s1, s2);
  bool replaying = s1 == be32(24) && s2 == be32(28);
  if (!replaying) {
    out.first_bad = 0;
    out.cut_at = 0;
  }
  uint32_t stored1 = be32(24), stored2 = be32(28);  // the predecessor's stored checksum
  for (int64_t i = 0; i < out.frames; ++i) {
    const size_t at = 32 + static_cast<size_t>(i) * frame;
    const bool current = be32(at + 8) == salt1 && be32(at + 12) == salt2;
    const bool commit = be32(at + 4) != 0;
    if (replaying) {  // SQLite's chain: seeded with the computed checksums
      uint32_t c1 = s1, c2 = s2;
      checksum(at, 8, c1, c2);
      checksum(at + 24, page_size, c1, c2);
      if (current && c1 == be32(at + 16) && c2 == be32(at + 20)) {
        s1 = c1;
        s2 = c2;
      } else {
        replaying = false;
        out.first_bad = i;
        out.cut_at = static_cast<int64_t>(at);
      }
    } else {  // after the stop: each frame on its own, seeded with its predecessor's stored checksum
      uint32_t c1 = stored1, c2 = stored2;
      checksum(at, 8, c1, c2);
      checksum(at + 24, page_size, c1, c2);
      if (current && commit && c1 == be32(at + 16) && c2 == be32(at + 20)) ++out.lost_commits;
    }
    stored1 = be32(at + 16);
    stored2 = be32(at + 20);
  }
  return out;
}

Status CheckWal(const std::string& path) {
  const std::string wal_path = path + "-wal";
  std::ifstream in(wal_path, std::ios::binary);
  if (!in) return Status::Ok();
  const std::string wal((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const WalCheck c = CheckWalFrames(wal);
  if (c.lost_commits == 0) return Status::Ok();
  return Status::Server("its write-ahead log '" + wal_path + "' is damaged: " +
                        (c.first_bad == 0 && c.cut_at == 0 ? std::string("its header")
                                                            : "frame " + std::to_string(c.first_bad) + " of " +
                                                                  std::to_string(c.frames)) +
                        " does not verify, and " + std::to_string(c.lost_commits) +
                        " commit(s) written after it would be dropped without a word if it were opened. Keep the "
                        "files as they are and restore a backup, or, to accept losing those commits, cut the log "
                        "there (truncate -s " + std::to_string(c.cut_at) + " '" + wal_path +
                        "') and start again (docs/reliability.md, \"Damaged storage\")");
}

}  // namespace gpupack::storage_internal
