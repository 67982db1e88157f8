// The checks SqliteStore::Open (sqlite_store.cc) makes before SQLite touches a database file: the exclusive
// advisory lock that keeps a second server off the file (LockDatabase), and the check of a write-ahead log that
// a crash left, which refuses a log SQLite would replay only in part (CheckWal, CheckWalFrames). Internal to
// storage/; the lock's contract for users is in sqlite_store.h. Stateless functions: safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace gpupack::storage_internal {

// LockDatabase takes the exclusive advisory lock on SqliteStore::LockPath(path) without waiting and returns the
// descriptor that holds it (close-on-exec, so no child process keeps it). The holder's pid is written into the
// file for the message of whoever tries next. flock, not fcntl: its locks belong to the open file, so a second
// store in the same process is refused too, and closing this descriptor never drops SQLite's own fcntl locks.
Result<int> LockDatabase(const std::string& path);

// WalCheck: what SQLite's recovery would make of a write-ahead log, read before SQLite opens it.
struct WalCheck {
  int64_t frames = 0;         // whole frames in the file
  int64_t first_bad = -1;     // the first frame SQLite's replay stops at (-1: none; 0 also when the header fails)
  int64_t cut_at = 0;         // the file offset of that frame: what a cut there keeps is what SQLite replays
  int64_t lost_commits = 0;   // commit frames after it that verify on their own: commits SQLite would drop
};

// CheckWalFrames reads `wal` (the bytes of a WAL file) as SQLite's recovery does: frames carry the header's salts
// and a checksum chained from the previous frame's (the header's for the first), and the replay stops at the
// first frame that does not verify. Then it verifies every later frame against its predecessor's stored checksum:
// a later commit frame that verifies so was written whole, after the damage, and the replay would drop it. A
// torn tail (a crash in the middle of writing a commit) has no such frame; frames of an older generation of the
// file carry other salts and are not counted.
WalCheck CheckWalFrames(const std::string& wal);

// CheckWal refuses to open a database whose WAL SQLite would replay only in part, dropping commits that were
// written whole after a damaged frame (SQLite itself drops them without an error). A WAL that only ends in a
// torn frame (a crash while a commit was being written, never acknowledged) is not refused.
Status CheckWal(const std::string& path);

}  // namespace gpupack::storage_internal
