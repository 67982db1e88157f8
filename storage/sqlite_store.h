// SqliteStore: the Store in one SQLite file, in WAL mode with synchronous=FULL, so a Commit that returned ok
// survives a crash of the process or of the machine.
//
// Schema (version 1; see kMigrations in sqlite_store.cc): one table per entity kind with its key columns and
// a `doc` TEXT column holding the entity as JSON (storage/serialize.h), plus `schema_version`, one row per
// applied migration. Open() applies the migrations the file lacks, each in its own transaction, and refuses a
// file whose schema is newer than this binary knows.
//
// Thread-safe: an internal mutex serializes Load, Commit and ReadSettings. In the server the GroupCommitter's
// thread is the only caller of Commit, so the mutex is uncontended.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "scheduler/status.h"
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
  // directory, a file that is not a SQLite database, a schema newer than this binary, a failed migration.
  static Result<std::unique_ptr<SqliteStore>> Open(const std::string& path);

  // The schema version this binary creates and understands.
  static int LatestSchemaVersion();

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

  SqliteStore(std::string path, std::unique_ptr<Db> db);
  Result<Snapshot> LoadImpl(const TaskSink* on_task);  // tasks into the snapshot when on_task is null

  const std::string path_;
  std::mutex mu_;
  std::unique_ptr<Db> db_;  // guarded by mu_
};

}  // namespace gpupack
