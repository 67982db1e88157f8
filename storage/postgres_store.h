// PostgresStore: the Store in a PostgreSQL database, reached with libpq, so several gpupack servers can share
// one durable state (one of them the fenced leader: docs/ha.md).
//
// Schema (see kPgMigrations in postgres_store.cc): the same tables as SqliteStore (one per entity kind, key
// columns plus a `doc` TEXT column holding the entity as JSON, storage/serialize.h; instances and tasks carry a
// `seq` that upserts keep, so Load returns them in first-stored order), `gpupack_schema_version` with one row
// per applied migration, and `gpupack_leader_lease`, the one row that says which server leads (api/leadership.h).
// Open() applies the migrations the database lacks, each in its own transaction under a transaction-level
// advisory lock (two servers starting together migrate once), and refuses a schema newer than this binary.
//
// Commit runs the whole batch as one transaction in one round trip: BEGIN, a statement per entity kind (arrays
// as parameters, so a batch costs the same whatever its size), COMMIT, sent together in libpq's pipeline mode;
// ok only once COMMIT's answer came back. With a fence set (SetFence), the transaction's first statement locks
// the lease row and fails unless the lease is still held by this server under its epoch and not expired by the
// database's clock (clock_timestamp()); the database then skips the rest (COMMIT included), the transaction is
// rolled back and the Commit fails with Status::Conflict: a deposed leader never writes. The row lock orders
// the check against a takeover (which updates the same row): a commit that passed the check is durable before
// a new leader can take the lease.
//
// Every call has a deadline (Options::timeout): a database that does not answer (down, or cut off by the
// network) fails the call with Status::Server naming it, never hangs it; the connection is then dropped and
// the next call connects afresh, so the store resumes by itself when the database is back.
//
// Thread-safe: an internal mutex serializes every call on the one connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"
#include "storage/store.h"

namespace gpupack {

class PostgresStore : public Store {
 public:
  struct Options {
    std::chrono::milliseconds timeout{5000};  // the deadline of each call (connect, query, commit)
  };

  // Fence: the lease a commit must still hold (holder name and epoch; api/leadership.h takes it).
  struct Fence {
    std::string holder;
    int64_t epoch = 0;
  };

  // IsUri: whether `db` names a PostgreSQL database (postgres:// or postgresql://) rather than a SQLite file.
  static bool IsUri(const std::string& db);

  // Open connects to the database `uri` (a libpq connection URI) and brings its schema up to date. Errors
  // (Status::Server) name the database (without its password) and what to do.
  static Result<std::unique_ptr<PostgresStore>> Open(const std::string& uri, Options options);
  static Result<std::unique_ptr<PostgresStore>> Open(const std::string& uri) { return Open(uri, Options{}); }

  static int LatestSchemaVersion();

  // Redacted: `uri` with any password replaced by "***", for messages and banners.
  static std::string Redacted(const std::string& uri);

  ~PostgresStore() override;
  PostgresStore(const PostgresStore&) = delete;
  PostgresStore& operator=(const PostgresStore&) = delete;

  Result<Snapshot> Load() override;
  // on_task runs under the store's mutex, inside the read transaction: it must not call back into this store.
  Result<Snapshot> LoadStreaming(const TaskSink& on_task) override;
  Status Commit(const WriteBatch& batch) override;

  // SetFence: every later Commit checks the lease (see above); nullopt: commits are not fenced (one server).
  // A fenced commit also appends what it wrote to the change feed the standbys follow (storage/change_feed.h).
  void SetFence(std::optional<Fence> fence);

  // last_change_seq: the change-feed sequence of the last commit this store made or was told of (NoteChangeSeq:
  // the position a leader took over at); the leader returns it to clients for read-your-writes (docs/ha.md).
  uint64_t last_change_seq() const { return last_change_seq_.load(); }
  void NoteChangeSeq(uint64_t seq);

  // Query runs one SQL statement with text parameters and returns its rows (text values; NULL as ""), under
  // the same deadline and reconnect rules as Commit. For the leadership's lease statements and for tests.
  using Rows = std::vector<std::vector<std::string>>;
  Result<Rows> Query(const std::string& sql, const std::vector<std::string>& params = {});

  // Settings: what the database runs with; for the startup banner and tests.
  struct Settings {
    std::string server_version;
    std::string synchronous_commit;
    std::string synchronous_standby_names;
    int schema_version = 0;
  };
  Result<Settings> ReadSettings();

  const std::string& uri() const { return uri_; }

  class Conn;  // internal: the libpq connection with deadlines (postgres_store.cc)

 private:
  PostgresStore(std::string uri, Options options, std::unique_ptr<Conn> conn);
  Result<Snapshot> LoadImpl(const TaskSink* on_task);

  const std::string uri_;
  const Options options_;
  std::mutex mu_;
  std::unique_ptr<Conn> conn_;   // guarded by mu_
  std::optional<Fence> fence_;   // guarded by mu_
  std::atomic<uint64_t> last_change_seq_{0};
};

}  // namespace gpupack
