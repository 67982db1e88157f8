// SqliteStore: the Store in one SQLite file, in WAL mode with synchronous=FULL, so a Commit that returned ok
// survives a crash of the process or of the machine.
//
// Schema (version 1; see kMigrations in sqlite_store.cc): one table per entity kind with its key columns and
// a `doc` TEXT column holding the entity as JSON (storage/serialize.h), plus `schema_version`, one row per
// applied migration. Open() applies the migrations the file lacks, each in its own transaction, and refuses a
// file whose schema is newer than this binary knows.
//
// One process at a time: Open takes an advisory lock (flock, exclusive) on `PATH.lock` beside the database and
// holds it until the store is destroyed, so a second server on the same file refuses to start instead of
// placing on GPUs the first one also places on. SQLite's own locks only serialize transactions; they do not stop
// two processes from each deciding on a stale copy in memory. Readers that do not go through Open (sqlite3's
// `.backup`, `gpupack backup`) are not locked out.
//
// Thread-safe: an internal mutex serializes Load, Commit and ReadSettings. In the server the GroupCommitter's
// thread is the only caller of Commit, so the mutex is uncontended.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "storage/store.h"

namespace gpupack {

class SqliteStore : public Store {
 public:
  // What the connection actually runs with; for the startup banner, /healthz and tests.
  struct Settings {
    std::string journal_mode;  // "wal" ("memory" for ":memory:")
    int synchronous = 0;       // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA
    int busy_timeout_ms = 0;
    int schema_version = 0;
  };

  // Open opens (creating if missing) the database at `path` and brings its schema up to date. ":memory:" gives
  // a private in-memory database (not durable; for tests). Errors (Status::Server) say what to do: a missing
  // directory, a file that is not a SQLite database, a schema newer than this binary, a failed migration. A
  // database another process (or another SqliteStore of this one) holds is Status::Conflict, naming the lock
  // file and the holder's pid; nothing is created or changed then.
  static Result<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  // LockPath: the lock file Open takes for `path`.
  static std::string LockPath(const std::string& path) { return path + ".lock"; }

  // The schema version this binary creates and understands.
  static int LatestSchemaVersion();

  // Backup copies the database at `from` into a new file `to` with SQLite's online backup API, as one read
  // transaction: a server may keep serving (and writing) `from` meanwhile; the copy is the state of one commit.
  // It does not take `from`'s lock. `to` must not exist; on failure nothing is left at `to`. The copy is then
  // opened and loaded as a server would (records decode, CheckInvariants holds); `*tasks` (if given) receives
  // how many tasks it holds.
  static Status Backup(const std::string& from, const std::string& to, size_t* tasks = nullptr);

  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  Result<Snapshot> Load() override;
  // on_task runs under the store's mutex, inside the read transaction: it must not call back into this store.
  Result<Snapshot> LoadStreaming(const TaskSink& on_task) override;
  Status Commit(const WriteBatch& batch) override;

  Result<Settings> ReadSettings();
  const std::string& path() const { return path_; }

 private:
  struct Db;  // the connection and its cached prepared statements

  SqliteStore(std::string path, int lock_fd, std::unique_ptr<Db> db);
  Result<Snapshot> LoadImpl(const TaskSink* on_task);  // tasks into the snapshot when on_task is null

  const std::string path_;
  const int lock_fd_;  // holds the exclusive lock on LockPath(path_); -1 for ":memory:"; closed after db_
  std::mutex mu_;
  std::unique_ptr<Db> db_;  // guarded by mu_
};

}  // namespace gpupack
