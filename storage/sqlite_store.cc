#include "storage/sqlite_store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>

#include "storage/invariants.h"
#include "storage/serialize.h"
#include "storage/sqlite_open.h"

namespace gpupack {
namespace {

using storage_internal::CheckWal;
using storage_internal::FromDoc;
using storage_internal::LockDatabase;
using storage_internal::ToDoc;

// kMigrations[i] brings the schema from version i to version i + 1; each runs in one transaction together with
// the schema_version row that records it. Append only: never edit a script that has shipped.
//
// Instances and tasks carry `seq`, an INTEGER PRIMARY KEY (stable under VACUUM) that upserts keep, so Load
// returns them in the order they were first stored (ClusterState's per-cluster registration order).
constexpr std::array<std::string_view, 3> kMigrations = {
    // 0 -> 1: the initial schema.
    R"sql(
CREATE TABLE clusters (
  name TEXT PRIMARY KEY NOT NULL,
  doc  TEXT NOT NULL
);
CREATE TABLE task_definitions (
  family   TEXT NOT NULL,
  revision INTEGER NOT NULL,
  doc      TEXT NOT NULL,
  PRIMARY KEY (family, revision)
);
CREATE TABLE container_instances (
  seq INTEGER PRIMARY KEY,
  arn TEXT NOT NULL UNIQUE,
  doc TEXT NOT NULL
);
CREATE TABLE tasks (
  seq INTEGER PRIMARY KEY,
  arn TEXT NOT NULL UNIQUE,
  doc TEXT NOT NULL
);
CREATE TABLE client_tokens (
  cluster TEXT NOT NULL,
  token   TEXT NOT NULL,
  doc     TEXT NOT NULL,
  PRIMARY KEY (cluster, token)
);
)sql",
    // 1 -> 2: services.
    R"sql(
CREATE TABLE services (
  arn TEXT PRIMARY KEY NOT NULL,
  doc TEXT NOT NULL
);
)sql",
    // 2 -> 3: capacity providers (tasks waiting for capacity are rows of tasks).
    R"sql(
CREATE TABLE capacity_providers (
  name TEXT PRIMARY KEY NOT NULL,
  doc  TEXT NOT NULL
);
)sql",
};

constexpr int kBusyTimeoutMs = 5000;

struct ConnCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

std::string ErrMsg(sqlite3* db) { return sqlite3_errmsg(db); }

Status Exec(sqlite3* db, const char* sql, const std::string& what) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string msg = err != nullptr ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return Status::Server(what + ": " + msg);
}

// QueryInt runs a statement that yields one integer in its first row.
Status QueryInt(sqlite3* db, const char* sql, int64_t* out) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  StmtPtr stmt(raw);
  if (rc != SQLITE_OK) return Status::Server(ErrMsg(db));
  rc = sqlite3_step(raw);
  if (rc != SQLITE_ROW) return Status::Server(rc == SQLITE_DONE ? "no row" : ErrMsg(db));
  *out = sqlite3_column_int64(raw, 0);
  return Status::Ok();
}

// QueryText runs a statement that yields one text in its first row; returns the SQLite result code.
int QueryText(sqlite3* db, const char* sql, std::string* out) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &raw, nullptr);
  StmtPtr stmt(raw);
  if (rc != SQLITE_OK) return rc;
  rc = sqlite3_step(raw);
  if (rc != SQLITE_ROW) return rc == SQLITE_DONE ? SQLITE_ERROR : rc;
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
  *out = text != nullptr ? text : "";
  return SQLITE_OK;
}

// Use is one use of a cached prepared statement: bind, step, and on destruction reset it and clear its
// bindings, so the statement is ready for its next use whatever happened.
class Use {
 public:
  explicit Use(sqlite3_stmt* s) : s_(s) {}
  ~Use() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;

  // The bound text must outlive the step (SQLITE_STATIC): callers bind locals of the same scope.
  Use& Text(int i, const std::string& v) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_text64(s_, i, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
    return *this;
  }
  Use& Int(int i, int64_t v) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  // Run steps a statement that returns no rows; true on success.
  bool Run() {
    if (rc_ != SQLITE_OK) return false;
    rc_ = sqlite3_step(s_);
    return rc_ == SQLITE_DONE;
  }
  // Next steps a query: SQLITE_ROW, SQLITE_DONE or an error code.
  int Next() { return rc_ = sqlite3_step(s_); }
  sqlite3_stmt* stmt() const { return s_; }

 private:
  sqlite3_stmt* s_;
  int rc_ = SQLITE_OK;
};

std::string ColumnText(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  return p != nullptr ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s, i))) : std::string();
}

std::string Quote(const std::string& key) { return "'" + key + "'"; }

Status Migrate(sqlite3* db) {
  const int latest = static_cast<int>(kMigrations.size());
  if (auto s = Exec(db,
                    "CREATE TABLE IF NOT EXISTS schema_version ("
                    "version INTEGER PRIMARY KEY NOT NULL, applied_at INTEGER NOT NULL)",
                    "cannot create the schema_version table");
      !s.ok())
    return s;
  for (;;) {
    // BEGIN IMMEDIATE, then read the version: two processes opening one new file migrate it once.
    if (auto s = Exec(db, "BEGIN IMMEDIATE", "cannot begin the schema migration"); !s.ok()) return s;
    auto fail = [&](Status s) {
      if (sqlite3_get_autocommit(db) == 0) (void)Exec(db, "ROLLBACK", "rollback");
      return s;
    };
    int64_t current = 0;
    if (auto s = QueryInt(db, "SELECT COALESCE(MAX(version), 0) FROM schema_version", &current); !s.ok())
      return fail(Status::Server("cannot read the schema version: " + s.message()));
    if (current > latest) {
      return fail(Status::Server("the database schema version is " + std::to_string(current) +
                                 ", newer than this gpupack binary understands (up to " + std::to_string(latest) +
                                 "); run a newer gpupack, or point --db at another file"));
    }
    if (current == latest) return fail(Status::Ok());
    if (current == 0) {
      // A SQLite file of some other application: refuse rather than add our tables beside its own.
      int64_t others = 0;
      if (auto s = QueryInt(db,
                            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                            "name <> 'schema_version' AND name NOT LIKE 'sqlite_%'",
                            &others);
          !s.ok())
        return fail(Status::Server("cannot read the database's tables: " + s.message()));
      if (others > 0)
        return fail(Status::Server(
            "the file is a SQLite database of something else (it has tables but no gpupack schema); "
            "point --db at a new file or at a gpupack database"));
    }
    const std::string step = "migrating the database schema from version " + std::to_string(current) + " to " +
                             std::to_string(current + 1) + " failed";
    const std::string script(kMigrations[static_cast<size_t>(current)]);
    if (auto s = Exec(db, script.c_str(), step); !s.ok()) return fail(s);
    const std::string record = "INSERT INTO schema_version (version, applied_at) VALUES (" +
                               std::to_string(current + 1) + ", CAST(strftime('%s', 'now') AS INTEGER))";
    if (auto s = Exec(db, record.c_str(), step); !s.ok()) return fail(s);
    if (auto s = Exec(db, "COMMIT", step); !s.ok()) return fail(s);
  }
}

}  // namespace

// The connection and its cached prepared statements; `conn` is declared first so it is closed last.
struct SqliteStore::Db {
  std::unique_ptr<sqlite3, ConnCloser> conn;
  StmtPtr begin_write, begin_read, commit, rollback;
  StmtPtr put_cluster, put_task_definition, put_instance, put_task, put_client_token, put_service,
      put_capacity_provider;
  StmtPtr delete_task, delete_client_token, delete_instance;
  StmtPtr select_clusters, select_task_definitions, select_instances, select_tasks, select_client_tokens,
      select_services, select_capacity_providers;

  Status PrepareAll() {
    const std::pair<StmtPtr*, const char*> all[] = {
        {&begin_write, "BEGIN IMMEDIATE"},
        {&begin_read, "BEGIN"},
        {&commit, "COMMIT"},
        {&rollback, "ROLLBACK"},
        {&put_cluster,
         "INSERT INTO clusters (name, doc) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET doc = excluded.doc"},
        {&put_task_definition,
         "INSERT INTO task_definitions (family, revision, doc) VALUES (?1, ?2, ?3) "
         "ON CONFLICT (family, revision) DO UPDATE SET doc = excluded.doc"},
        {&put_instance,
         "INSERT INTO container_instances (arn, doc) VALUES (?1, ?2) "
         "ON CONFLICT (arn) DO UPDATE SET doc = excluded.doc"},
        {&put_task,
         "INSERT INTO tasks (arn, doc) VALUES (?1, ?2) ON CONFLICT (arn) DO UPDATE SET doc = excluded.doc"},
        {&put_client_token,
         "INSERT INTO client_tokens (cluster, token, doc) VALUES (?1, ?2, ?3) "
         "ON CONFLICT (cluster, token) DO UPDATE SET doc = excluded.doc"},
        {&put_service,
         "INSERT INTO services (arn, doc) VALUES (?1, ?2) ON CONFLICT (arn) DO UPDATE SET doc = excluded.doc"},
        {&put_capacity_provider,
         "INSERT INTO capacity_providers (name, doc) VALUES (?1, ?2) "
         "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc"},
        {&delete_task, "DELETE FROM tasks WHERE arn = ?1"},
        {&delete_client_token, "DELETE FROM client_tokens WHERE cluster = ?1 AND token = ?2"},
        {&delete_instance, "DELETE FROM container_instances WHERE arn = ?1"},
        {&select_clusters, "SELECT name, doc FROM clusters ORDER BY name"},
        {&select_task_definitions,
         "SELECT family, revision, doc FROM task_definitions ORDER BY family, revision"},
        {&select_instances, "SELECT arn, doc FROM container_instances ORDER BY seq"},
        {&select_tasks, "SELECT arn, doc FROM tasks ORDER BY seq"},
        {&select_client_tokens, "SELECT cluster, token, doc FROM client_tokens ORDER BY cluster, token"},
        {&select_services, "SELECT arn, doc FROM services ORDER BY arn"},
        {&select_capacity_providers, "SELECT name, doc FROM capacity_providers ORDER BY name"},
    };
    for (const auto& [slot, sql] : all) {
      sqlite3_stmt* raw = nullptr;
      const int rc = sqlite3_prepare_v3(conn.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
      slot->reset(raw);
      if (rc != SQLITE_OK) return Status::Server("cannot prepare '" + std::string(sql) + "': " + ErrMsg(conn.get()));
    }
    return Status::Ok();
  }

  // Rollback ends the open transaction, if any; an error here has nothing left to undo.
  void Rollback() {
    if (sqlite3_get_autocommit(conn.get()) == 0) Use(rollback.get()).Run();
  }
};

SqliteStore::SqliteStore(std::string path, int lock_fd, std::unique_ptr<Db> db)
    : path_(std::move(path)), lock_fd_(lock_fd), db_(std::move(db)) {}

SqliteStore::~SqliteStore() {
  db_.reset();  // the connection is closed (and the WAL checkpointed) while the lock is still held
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

int SqliteStore::LatestSchemaVersion() { return static_cast<int>(kMigrations.size()); }

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  auto error = [&](const std::string& what) { return Status::Server("cannot open database '" + path + "': " + what); };
  if (path.empty()) return error("the path is empty; pass --db PATH");
  const bool in_memory = path == ":memory:";
  if (!in_memory) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path dir = fs::path(path).parent_path();
    if (dir.empty()) dir = ".";
    if (!fs::exists(dir, ec))
      return error("directory '" + dir.string() + "' does not exist; create it or choose another --db");
    if (!fs::is_directory(dir, ec)) return error("'" + dir.string() + "' is not a directory");
    if (fs::is_directory(path, ec)) return error("it is a directory; --db names a database file");
  }

  // The lock comes first: a database another server holds is not even opened.
  int lock_fd = -1;
  if (!in_memory) {
    auto locked = LockDatabase(path);
    if (!locked.ok())
      return Status(locked.status().code(), "cannot open database '" + path + "': " + locked.status().message());
    lock_fd = *locked;
  }
  struct LockCloser {  // releases the lock on every failed path below
    int& fd;
    ~LockCloser() {
      if (fd >= 0) ::close(fd);
    }
  } lock_closer{lock_fd};
  // Before SQLite replays (and then checkpoints away) a WAL a crash left: a damaged one is refused, not served.
  if (!in_memory)
    if (Status s = CheckWal(path); !s.ok()) return error(s.message());

  auto db = std::make_unique<Db>();
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  db->conn.reset(raw);  // closed on every path, including a failed open
  if (rc != SQLITE_OK) {
    return error(raw != nullptr ? ErrMsg(raw) : std::string(sqlite3_errstr(rc)));
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, kBusyTimeoutMs);

  // journal_mode is the first statement that reads the file, so a file that is not a database fails here.
  std::string mode;
  rc = QueryText(raw, "PRAGMA journal_mode = WAL", &mode);
  if ((rc & 0xff) == SQLITE_NOTADB)
    return error("the file is not a SQLite database (or it is encrypted or damaged); check --db");
  if (rc != SQLITE_OK) return error("cannot set WAL journal mode: " + ErrMsg(raw));
  if (mode != "wal" && !(in_memory && mode == "memory"))
    return error("cannot switch to WAL journal mode (it stays '" + mode +
                 "'); put the database on a local file system");
  if (auto s = Exec(raw, "PRAGMA synchronous = FULL", "cannot set synchronous=FULL"); !s.ok())
    return error(s.message());
  if (auto s = Migrate(raw); !s.ok()) return error(s.message());
  if (auto s = db->PrepareAll(); !s.ok()) return error(s.message());
  const int held = std::exchange(lock_fd, -1);  // the store owns the lock from here
  return std::unique_ptr<SqliteStore>(new SqliteStore(path, held, std::move(db)));
}

Result<SqliteStore::Settings> SqliteStore::ReadSettings() {
  std::lock_guard<std::mutex> lock(mu_);
  sqlite3* conn = db_->conn.get();
  Settings out;
  if (QueryText(conn, "PRAGMA journal_mode", &out.journal_mode) != SQLITE_OK)
    return Status::Server("cannot read journal_mode: " + ErrMsg(conn));
  int64_t v = 0;
  if (auto s = QueryInt(conn, "PRAGMA synchronous", &v); !s.ok())
    return Status::Server("cannot read synchronous: " + s.message());
  out.synchronous = static_cast<int>(v);
  if (auto s = QueryInt(conn, "PRAGMA busy_timeout", &v); !s.ok())
    return Status::Server("cannot read busy_timeout: " + s.message());
  out.busy_timeout_ms = static_cast<int>(v);
  if (auto s = QueryInt(conn, "SELECT COALESCE(MAX(version), 0) FROM schema_version", &v); !s.ok())
    return Status::Server("cannot read the schema version: " + s.message());
  out.schema_version = static_cast<int>(v);
  return out;
}

namespace {

// ReadTable decodes every row of one SELECT and hands each entity to `sink` (a Status(T&&)); a record that
// cannot be decoded, or whose doc holds another key than its row, is a Status naming the table and key, and a
// non-ok Status from `sink` stops the read and is returned as is.
template <typename T, typename KeyOf, typename RowKey, typename Sink>
Status ReadTableInto(sqlite3* conn, sqlite3_stmt* select, const char* table, int doc_column, RowKey row_key,
                     KeyOf key_of, Sink&& sink) {
  Use use(select);
  for (;;) {
    const int rc = use.Next();
    if (rc == SQLITE_DONE) return Status::Ok();
    if (rc != SQLITE_ROW) return Status::Server(std::string("cannot read table ") + table + ": " + ErrMsg(conn));
    const std::string key = row_key(select);
    const auto* doc = static_cast<const char*>(sqlite3_column_blob(select, doc_column));
    const auto size = static_cast<size_t>(sqlite3_column_bytes(select, doc_column));
    T value;
    if (auto s = FromDoc(std::string_view(doc != nullptr ? doc : "", size), &value); !s.ok())
      return Status::Server(std::string("corrupt record in table ") + table + ", key " + key + ": " + s.message());
    if (const std::string held = key_of(value); held != key)
      return Status::Server(std::string("corrupt record in table ") + table + ", key " + key +
                            ": its doc holds key " + held);
    if (Status s = sink(std::move(value)); !s.ok()) return s;
  }
}

// ReadTable is ReadTableInto collecting the entities into *out.
template <typename T, typename KeyOf, typename RowKey>
Status ReadTable(sqlite3* conn, sqlite3_stmt* select, const char* table, int doc_column, RowKey row_key,
                 KeyOf key_of, std::vector<T>* out) {
  return ReadTableInto<T>(conn, select, table, doc_column, row_key, key_of, [out](T&& value) {
    out->push_back(std::move(value));
    return Status::Ok();
  });
}

}  // namespace

Result<Snapshot> SqliteStore::Load() { return LoadImpl(nullptr); }

Result<Snapshot> SqliteStore::LoadStreaming(const TaskSink& on_task) { return LoadImpl(&on_task); }

Result<Snapshot> SqliteStore::LoadImpl(const TaskSink* on_task) {
  std::lock_guard<std::mutex> lock(mu_);
  Db& d = *db_;
  sqlite3* conn = d.conn.get();
  {
    Use begin(d.begin_read.get());
    if (!begin.Run()) return Status::Server("storage load failed: cannot begin a read transaction: " + ErrMsg(conn));
  }
  Snapshot snap;
  auto one_text = [](sqlite3_stmt* s) { return Quote(ColumnText(s, 0)); };
  auto two_texts = [](sqlite3_stmt* s) { return "(" + Quote(ColumnText(s, 0)) + ", " + Quote(ColumnText(s, 1)) + ")"; };
  Status s = ReadTable(
      conn, d.select_clusters.get(), "clusters", 1, one_text, [](const Cluster& c) { return Quote(c.name); },
      &snap.clusters);
  if (s.ok())
    s = ReadTable(
        conn, d.select_task_definitions.get(), "task_definitions", 2,
        [](sqlite3_stmt* st) {
          return "(" + Quote(ColumnText(st, 0)) + ", " + std::to_string(sqlite3_column_int64(st, 1)) + ")";
        },
        [](const TaskDefinition& td) { return "(" + Quote(td.family) + ", " + std::to_string(td.revision) + ")"; },
        &snap.task_definitions);
  if (s.ok())
    s = ReadTable(
        conn, d.select_instances.get(), "container_instances", 1, one_text,
        [](const ContainerInstance& i) { return Quote(i.arn); }, &snap.instances);
  if (s.ok()) {
    auto task_key = [](const Task& t) { return Quote(t.arn); };
    if (on_task != nullptr) {
      // A sink's own error is returned as it is, not as a storage failure.
      Status sink_error;
      s = ReadTableInto<Task>(conn, d.select_tasks.get(), "tasks", 1, one_text, task_key, [&](Task&& t) {
        sink_error = (*on_task)(std::move(t));
        return sink_error;
      });
      if (!sink_error.ok()) {
        d.Rollback();
        return sink_error;
      }
    } else {
      s = ReadTable(conn, d.select_tasks.get(), "tasks", 1, one_text, task_key, &snap.tasks);
    }
  }
  if (s.ok())
    s = ReadTable(
        conn, d.select_client_tokens.get(), "client_tokens", 2, two_texts,
        [](const ClientTokenRecord& r) { return "(" + Quote(r.cluster) + ", " + Quote(r.token) + ")"; },
        &snap.client_tokens);
  if (s.ok())
    s = ReadTable(
        conn, d.select_services.get(), "services", 1, one_text, [](const Service& v) { return Quote(v.arn); },
        &snap.services);
  if (s.ok())
    s = ReadTable(
        conn, d.select_capacity_providers.get(), "capacity_providers", 1, one_text,
        [](const CapacityProvider& v) { return Quote(v.name); }, &snap.capacity_providers);
  if (!s.ok()) {
    d.Rollback();
    return Status::Server("storage load failed: " + s.message());
  }
  if (!Use(d.commit.get()).Run()) {
    const std::string msg = ErrMsg(conn);
    d.Rollback();
    return Status::Server("storage load failed: cannot end the read transaction: " + msg);
  }
  return snap;
}

Status SqliteStore::Commit(const WriteBatch& batch) {
  if (batch.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  Db& d = *db_;
  sqlite3* conn = d.conn.get();
  if (!Use(d.begin_write.get()).Run())
    return Status::Server("storage commit failed: cannot begin a write transaction: " + ErrMsg(conn));

  // fail rolls the transaction back and names the operation that failed.
  auto fail = [&](const std::string& what) {
    const std::string msg = ErrMsg(conn);  // before the rollback replaces it
    d.Rollback();
    return Status::Server("storage commit failed while " + what + ": " + msg + "; nothing of the batch was applied");
  };

  if (batch.replaces_everything() &&
      sqlite3_exec(conn,
                   "DELETE FROM clusters; DELETE FROM task_definitions; DELETE FROM container_instances; "
                   "DELETE FROM tasks; DELETE FROM client_tokens; DELETE FROM services; "
                   "DELETE FROM capacity_providers;",
                   nullptr, nullptr, nullptr) != SQLITE_OK)
    return fail("emptying every table");
  for (const auto& c : batch.clusters()) {
    const std::string doc = ToDoc(c);
    if (!Use(d.put_cluster.get()).Text(1, c.name).Text(2, doc).Run())
      return fail("writing clusters " + Quote(c.name));
  }
  for (const auto& td : batch.task_definitions()) {
    const std::string doc = ToDoc(td);
    if (!Use(d.put_task_definition.get()).Text(1, td.family).Int(2, td.revision).Text(3, doc).Run())
      return fail("writing task_definitions (" + Quote(td.family) + ", " + std::to_string(td.revision) + ")");
  }
  for (const auto& i : batch.instances()) {
    const std::string doc = ToDoc(i);
    if (!Use(d.put_instance.get()).Text(1, i.arn).Text(2, doc).Run())
      return fail("writing container_instances " + Quote(i.arn));
  }
  for (const auto& t : batch.tasks()) {
    const std::string doc = ToDoc(t);
    if (!Use(d.put_task.get()).Text(1, t.arn).Text(2, doc).Run()) return fail("writing tasks " + Quote(t.arn));
  }
  for (const auto& r : batch.client_tokens()) {
    const std::string doc = ToDoc(r);
    if (!Use(d.put_client_token.get()).Text(1, r.cluster).Text(2, r.token).Text(3, doc).Run())
      return fail("writing client_tokens (" + Quote(r.cluster) + ", " + Quote(r.token) + ")");
  }
  for (const auto& v : batch.services()) {
    const std::string doc = ToDoc(v);
    if (!Use(d.put_service.get()).Text(1, v.arn).Text(2, doc).Run()) return fail("writing services " + Quote(v.arn));
  }
  for (const auto& v : batch.capacity_providers()) {
    const std::string doc = ToDoc(v);
    if (!Use(d.put_capacity_provider.get()).Text(1, v.name).Text(2, doc).Run())
      return fail("writing capacity_providers " + Quote(v.name));
  }
  for (const auto& arn : batch.deleted_tasks()) {
    if (!Use(d.delete_task.get()).Text(1, arn).Run()) return fail("deleting tasks " + Quote(arn));
  }
  for (const auto& [cluster, token] : batch.deleted_client_tokens()) {
    if (!Use(d.delete_client_token.get()).Text(1, cluster).Text(2, token).Run())
      return fail("deleting client_tokens (" + Quote(cluster) + ", " + Quote(token) + ")");
  }
  for (const auto& arn : batch.deleted_instances()) {
    if (!Use(d.delete_instance.get()).Text(1, arn).Run()) return fail("deleting container_instances " + Quote(arn));
  }
  if (!Use(d.commit.get()).Run()) return fail("committing");
  return Status::Ok();
}

Status SqliteStore::Backup(const std::string& from, const std::string& to, size_t* tasks) {
  namespace fs = std::filesystem;
  auto error = [&](const std::string& what) {
    return Status::Server("cannot back up '" + from + "' to '" + to + "': " + what);
  };
  std::error_code ec;
  if (!fs::is_regular_file(from, ec)) return error("'" + from + "' is not a database file");
  if (fs::exists(to, ec)) return error("'" + to + "' exists; choose a new file");
  auto remove_copy = [&] {
    for (const char* suffix : {"", "-wal", "-shm", "-journal", ".lock"}) fs::remove(to + suffix, ec);
  };
  {
    // No SQLITE_OPEN_CREATE: a missing source is an error, never a new empty database.
    sqlite3* raw_src = nullptr;
    const int src_rc = sqlite3_open_v2(from.c_str(), &raw_src, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
    std::unique_ptr<sqlite3, ConnCloser> src(raw_src);
    if (src_rc != SQLITE_OK)
      return error(raw_src != nullptr ? ErrMsg(raw_src) : std::string(sqlite3_errstr(src_rc)));
    sqlite3_busy_timeout(raw_src, kBusyTimeoutMs);
    sqlite3* raw_dst = nullptr;
    const int dst_rc = sqlite3_open_v2(to.c_str(), &raw_dst,
                                       SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    std::unique_ptr<sqlite3, ConnCloser> dst(raw_dst);
    if (dst_rc != SQLITE_OK) {
      const std::string msg = raw_dst != nullptr ? ErrMsg(raw_dst) : std::string(sqlite3_errstr(dst_rc));
      dst.reset();
      remove_copy();
      return error(msg);
    }
    // One step copies every page inside one read transaction of the source: a consistent copy, and in WAL mode
    // the server's commits go on meanwhile (they land after the copy's snapshot).
    sqlite3_backup* backup = sqlite3_backup_init(raw_dst, "main", raw_src, "main");
    if (backup == nullptr) {
      const std::string msg = ErrMsg(raw_dst);
      dst.reset();
      remove_copy();
      return error(msg);
    }
    int rc = SQLITE_OK;
    for (int attempt = 0; attempt < 100; ++attempt) {  // bounded: busy only while a checkpoint holds the source
      rc = sqlite3_backup_step(backup, -1);
      if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) break;
      sqlite3_sleep(50);
    }
    sqlite3_backup_finish(backup);
    if (rc != SQLITE_DONE) {
      const std::string msg = std::string(sqlite3_errstr(rc)) + ": " + ErrMsg(raw_dst);
      dst.reset();
      remove_copy();
      return error("the copy failed: " + msg);
    }
  }
  // The copy must serve: it opens, every record decodes and the records agree with each other.
  auto copy = Open(to);
  if (!copy.ok()) {
    remove_copy();
    return error("the copy does not open: " + copy.status().message());
  }
  ClusterState state;
  auto snap = (*copy)->LoadStreaming([&state](Task&& t) {
    state.PutTask(std::move(t));
    return Status::Ok();
  });
  Status checked = snap.ok() ? Status::Ok() : snap.status();
  if (checked.ok()) {
    for (auto& c : snap->clusters) state.PutCluster(std::move(c));
    for (auto& i : snap->instances) state.PutInstance(std::move(i));
    state.RebuildReservations();
    checked = CheckInvariants(state);
  }
  const size_t task_count = state.TaskCount();
  copy->reset();
  if (!checked.ok()) {
    remove_copy();
    return error("the copy does not load: " + checked.message());
  }
  fs::remove(LockPath(to), ec);  // the copy is a plain file; its next user takes its own lock
  if (tasks != nullptr) *tasks = task_count;
  return Status::Ok();
}

}  // namespace gpupack
