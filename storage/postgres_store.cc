#include "storage/postgres_store.h"

#include <libpq-fe.h>
#include <poll.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/fd_wait.h"
#include "storage/change_feed.h"
#include "storage/postgres_schema.h"
#include "storage/serialize.h"

namespace gpupack {
namespace {

using storage_internal::FromDoc;
using Clock = std::chrono::steady_clock;

// kMigrationLock: the advisory lock key under which servers migrate (any constant of ours; "gpupack" in ASCII).
constexpr const char* kMigrationLock = "SELECT pg_advisory_xact_lock(7453807506661739)";

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// ArrayLiteral: a PostgreSQL text[] literal of `values` ({"a","b\"c"}), for one array parameter.
template <typename Range, typename Get>
std::string ArrayLiteral(const Range& values, Get get) {
  std::string out = "{";
  bool first = true;
  for (const auto& v : values) {
    if (!first) out += ',';
    first = false;
    out += '"';
    const auto& text = get(v);  // may be a temporary: bound here so it outlives the loop
    for (char c : std::string_view(text)) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

std::string Quote(const std::string& key) { return "'" + key + "'"; }

const std::string& Same(const std::string& s) { return s; }

void IgnoreNotice(void*, const char*) {}

// OneLine: libpq's multi-line messages as one line (newlines and tabs become spaces, runs of them one).
std::string OneLine(std::string msg) {
  std::string out;
  for (char c : msg) {
    const bool space = c == '\n' || c == '\t' || c == '\r' || c == ' ';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

// Conn: one libpq connection whose every wait has a deadline. Connect() (re)connects; Run() sends one statement
// (several without parameters) and hands each result to a callback. When the database does not answer in time
// or the connection breaks, the connection is dropped (closing it ends any open transaction on the server) and
// the call fails; the next call connects afresh. Not thread-safe: PostgresStore's mutex guards it.
class PostgresStore::Conn {
 public:
  Conn(std::string uri, std::chrono::milliseconds timeout) : uri_(std::move(uri)), timeout_(timeout) {}
  ~Conn() { Drop(); }

  bool connected() const { return pg_ != nullptr; }

  Status Connect() {
    Drop();
    const auto deadline = Clock::now() + timeout_;
    pg_ = PQconnectStart(uri_.c_str());
    if (pg_ == nullptr) return Status::Server("out of memory connecting to the database");
    if (PQstatus(pg_) == CONNECTION_BAD) return Fail("cannot connect: ");
    PostgresPollingStatusType poll = PGRES_POLLING_WRITING;
    for (;;) {
      if (poll == PGRES_POLLING_OK) break;
      if (poll == PGRES_POLLING_FAILED) return Fail("cannot connect: ");
      if (!Wait(poll == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline))
        return Timeout("connecting");
      poll = PQconnectPoll(pg_);
    }
    PQsetNoticeProcessor(pg_, IgnoreNotice, nullptr);
    if (PQsetnonblocking(pg_, 1) != 0) return Fail("cannot use the connection: ");
    return Status::Ok();
  }

  // OnResult receives each result of the statement (in single-row mode one per row, then an empty one); a
  // non-ok Status stops the callbacks (the statement still runs to its end) and is returned as is.
  using OnResult = std::function<Status(PGresult*)>;

  Status Run(const std::string& sql, const std::vector<std::string>& params, bool single_row,
             const OnResult& on_result) {
    if (pg_ == nullptr || PQstatus(pg_) != CONNECTION_OK) {
      if (Status s = Connect(); !s.ok()) return s;
    }
    const std::vector<const char*> values = CStrings(params);
    const int sent = params.empty() ? PQsendQuery(pg_, sql.c_str())
                                    : PQsendQueryParams(pg_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                                                        values.data(), nullptr, nullptr, 0);
    if (sent == 0) return Fail("cannot send a statement: ");
    if (single_row) PQsetSingleRowMode(pg_);
    auto deadline = Clock::now() + timeout_;
    if (Status s = Flush(deadline); !s.ok()) return s;
    Status first_error;
    Status sink_error;
    for (;;) {
      if (Status s = AwaitResult(deadline); !s.ok()) return s;
      ResultPtr r(PQgetResult(pg_));
      if (!r) break;
      const ExecStatusType st = PQresultStatus(r.get());
      if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_SINGLE_TUPLE) {
        if (sink_error.ok() && first_error.ok()) sink_error = on_result(r.get());
      } else if (first_error.ok()) {
        first_error = ResultError(r.get());
      }
    }
    if (PQstatus(pg_) != CONNECTION_OK) {
      Drop();
      return first_error.ok() ? Status::Server("the connection to the database broke") : first_error;
    }
    if (!first_error.ok()) return first_error;
    return sink_error;
  }

  // Statement: one SQL statement of a pipeline, its text parameters, and what it does (for messages).
  struct Statement {
    std::string what;
    std::string sql;
    std::vector<std::string> params;
  };

  // Pipeline sends `statements` at once in libpq's pipeline mode, followed by one sync, and reads their results:
  // one round trip to the database for all of them. on_result gets each ok result with its statement's index.
  // When a statement fails the database skips the ones after it up to the sync (an explicit transaction is then
  // left aborted: the caller rolls it back); *failed is set to the failed statement's index, *failed_state (when
  // given) to its SQLSTATE, and its error is returned. A connection that broke while idle (the database
  // restarted since the last call) is re-made first, before anything is sent. Returns with the connection out of pipeline mode (or dropped).
  using OnIndexedResult = std::function<Status(size_t, PGresult*)>;
  Status Pipeline(const std::vector<Statement>& statements, const OnIndexedResult& on_result, size_t* failed,
                  std::string* failed_state = nullptr) {
    *failed = statements.size();
    if (!Alive()) {
      if (Status s = Connect(); !s.ok()) return s;
    }
    if (PQenterPipelineMode(pg_) == 0) return Fail("cannot enter pipeline mode: ");
    for (const auto& st : statements) {
      const std::vector<const char*> values = CStrings(st.params);
      if (PQsendQueryParams(pg_, st.sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr,
                            nullptr, 0) == 0)
        return Fail("cannot send a statement: ");
    }
    if (PQpipelineSync(pg_) == 0) return Fail("cannot send a statement: ");
    auto deadline = Clock::now() + timeout_;
    if (Status s = Flush(deadline); !s.ok()) return s;
    Status first_error;
    Status sink_error;
    size_t index = 0;  // the statement whose results come next
    for (;;) {
      if (Status s = AwaitResult(deadline); !s.ok()) return s;
      ResultPtr r(PQgetResult(pg_));
      if (!r) {  // the end of one statement's results
        if (PQstatus(pg_) != CONNECTION_OK) return Fail("the connection broke: ");
        ++index;
        continue;
      }
      const ExecStatusType st = PQresultStatus(r.get());
      if (st == PGRES_PIPELINE_SYNC) break;
      if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        if (sink_error.ok() && first_error.ok() && index < statements.size()) sink_error = on_result(index, r.get());
      } else if (st != PGRES_PIPELINE_ABORTED && first_error.ok()) {
        first_error = ResultError(r.get());
        *failed = index;
        const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
        if (failed_state != nullptr && state != nullptr) *failed_state = state;
      }
    }
    if (PQexitPipelineMode(pg_) == 0) return Fail("cannot leave pipeline mode: ");
    if (!first_error.ok()) return first_error;
    return sink_error;
  }

  // Begin starts a transaction. A connection that broke while idle (the database restarted since the last
  // call) is only noticed here; nothing of the transaction ran yet, so it is re-made once and BEGIN sent again.
  Status Begin(const std::string& sql) {
    timed_out_ = false;
    Status s = Exec(sql);
    if (!s.ok() && pg_ == nullptr && !timed_out_) s = Exec(sql);  // a silent database is not asked twice
    return s;
  }

  // Exec runs a statement whose rows (if any) are not needed.
  Status Exec(const std::string& sql, const std::vector<std::string>& params = {}) {
    return Run(sql, params, false, [](PGresult*) { return Status::Ok(); });
  }

  // Rollback ends an open transaction, if any; an error here has nothing left to undo (the connection is dropped).
  void Rollback() {
    if (pg_ == nullptr) return;
    if (PQtransactionStatus(pg_) == PQTRANS_IDLE) return;
    if (!Exec("ROLLBACK").ok()) Drop();
  }

  void Drop() {
    if (pg_ != nullptr) PQfinish(pg_);
    pg_ = nullptr;
  }

 private:
  // ResultError: a failed result's message on one line, with its SQLSTATE.
  static Status ResultError(const PGresult* r) {
    const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    std::string msg = OneLine(PQresultErrorMessage(r));
    if (state != nullptr) msg += std::string(" (SQLSTATE ") + state + ")";
    return Status::Server(msg);
  }

  // Alive: whether the connection is usable as far as can be told without sending. An idle connection has
  // nothing to read unless the database is ending it (a restart or a terminated backend leaves its FATAL
  // message, then the end of the stream): then, or when in doubt, it is dropped so the caller connects afresh
  // before anything of a transaction was sent.
  bool Alive() {
    if (pg_ == nullptr || PQstatus(pg_) != CONNECTION_OK) return false;
    pollfd p{PQsocket(pg_), POLLIN, 0};
    if (p.fd < 0 || ::poll(&p, 1, 0) == 0) return p.fd >= 0;
    Drop();
    return false;
  }

  // Wait polls the socket for `events` until the deadline (base/fd_wait.h); false on timeout or a broken socket.
  bool Wait(short events, Clock::time_point deadline) {
    const int fd = PQsocket(pg_);
    return fd >= 0 && WaitFd(fd, events, deadline);
  }

  // CStrings: the text parameters as libpq takes them (pointers into `params`, which must outlive them).
  static std::vector<const char*> CStrings(const std::vector<std::string>& params) {
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const auto& p : params) values.push_back(p.c_str());
    return values;
  }

  // Flush sends everything libpq holds for the database before `deadline`, reading meanwhile (so neither side's
  // buffers fill up).
  Status Flush(Clock::time_point deadline) {
    for (;;) {
      const int f = PQflush(pg_);
      if (f == 0) return Status::Ok();
      if (f < 0) return Fail("cannot send a statement: ");
      if (!Wait(POLLOUT | POLLIN, deadline)) return Timeout("sending a statement");
      if (PQconsumeInput(pg_) == 0) return Fail("the connection broke: ");
    }
  }

  // AwaitResult waits until libpq can hand out the next result without blocking; every piece of answer that
  // arrives moves `deadline` on (an answer that keeps coming is not a silent database).
  Status AwaitResult(Clock::time_point& deadline) {
    while (PQisBusy(pg_) != 0) {
      if (!Wait(POLLIN, deadline)) return Timeout("waiting for its answer");
      if (PQconsumeInput(pg_) == 0) return Fail("the connection broke: ");
      deadline = Clock::now() + timeout_;
    }
    return Status::Ok();
  }

  Status Fail(const std::string& what) {
    const std::string msg = OneLine(pg_ != nullptr ? PQerrorMessage(pg_) : "");
    Drop();
    return Status::Server(what + (msg.empty() ? "unknown error" : msg));
  }

  Status Timeout(const std::string& what) {
    timed_out_ = true;
    Drop();
    return Status::Server("the database did not answer within " + std::to_string(timeout_.count()) + " ms (" +
                          what + "); it is down or unreachable");
  }

  const std::string uri_;
  const std::chrono::milliseconds timeout_;
  PGconn* pg_ = nullptr;
  bool timed_out_ = false;  // the last failure was a deadline passing
};

bool PostgresStore::IsUri(const std::string& db) {
  return db.rfind("postgres://", 0) == 0 || db.rfind("postgresql://", 0) == 0;
}

std::string PostgresStore::Redacted(const std::string& uri) {
  // postgres://user:password@host/... -> postgres://user:***@host/...; password=... in the query string too.
  std::string out = std::regex_replace(uri, std::regex(R"(^(postgres(ql)?://[^:/@?]*:)[^@/?]*@)"), "$1***@");
  return std::regex_replace(out, std::regex(R"(([?&]password=)[^&]*)"), "$1***");
}

int PostgresStore::LatestSchemaVersion() { return static_cast<int>(storage_internal::PgMigrations().size()); }

PostgresStore::PostgresStore(std::string uri, Options options, std::unique_ptr<Conn> conn)
    : uri_(std::move(uri)), options_(options), conn_(std::move(conn)) {}

PostgresStore::~PostgresStore() = default;

Result<std::unique_ptr<PostgresStore>> PostgresStore::Open(const std::string& uri, Options options) {
  auto error = [&](const std::string& what) {
    return Status::Server("cannot open database '" + Redacted(uri) + "': " + what);
  };
  if (!IsUri(uri)) return error("not a postgres:// or postgresql:// URI");
  auto conn = std::make_unique<Conn>(uri, options.timeout);
  if (Status s = conn->Connect(); !s.ok()) return error(s.message());

  const int latest = LatestSchemaVersion();
  for (;;) {
    auto fail = [&](const Status& s) {
      conn->Rollback();
      return error(s.message());
    };
    if (Status s = conn->Exec("BEGIN"); !s.ok()) return fail(s);
    if (Status s = conn->Exec(kMigrationLock); !s.ok()) return fail(s);
    if (Status s = conn->Exec("CREATE TABLE IF NOT EXISTS gpupack_schema_version ("
                              "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())");
        !s.ok())
      return fail(Status::Server("cannot create the gpupack_schema_version table: " + s.message()));
    int64_t current = 0;
    Status read = conn->Run("SELECT COALESCE(MAX(version), 0) FROM gpupack_schema_version", {}, false,
                            [&](PGresult* r) {
                              if (PQntuples(r) > 0) current = std::stoll(PQgetvalue(r, 0, 0));
                              return Status::Ok();
                            });
    if (!read.ok()) return fail(Status::Server("cannot read the schema version: " + read.message()));
    if (current > latest)
      return fail(Status::Server("the database schema version is " + std::to_string(current) +
                                 ", newer than this gpupack binary understands (up to " + std::to_string(latest) +
                                 "); run a newer gpupack, or point --db at another database"));
    if (current == latest) {
      if (Status s = conn->Exec("COMMIT"); !s.ok()) return fail(s);
      break;
    }
    const std::string step = "migrating the database schema from version " + std::to_string(current) + " to " +
                             std::to_string(current + 1) + " failed: ";
    if (Status s = conn->Exec(std::string(storage_internal::PgMigrations()[static_cast<size_t>(current)])); !s.ok())
      return fail(Status::Server(step + s.message()));
    if (Status s = conn->Exec("INSERT INTO gpupack_schema_version (version) VALUES ($1)",
                              {std::to_string(current + 1)});
        !s.ok())
      return fail(Status::Server(step + s.message()));
    if (Status s = conn->Exec("COMMIT"); !s.ok()) return fail(Status::Server(step + s.message()));
  }
  return std::unique_ptr<PostgresStore>(new PostgresStore(uri, options, std::move(conn)));
}

void PostgresStore::SetFence(std::optional<Fence> fence) {
  std::lock_guard lock(mu_);
  fence_ = std::move(fence);
}

Result<PostgresStore::Rows> PostgresStore::Query(const std::string& sql, const std::vector<std::string>& params) {
  std::lock_guard lock(mu_);
  Rows rows;
  Status s = conn_->Run(sql, params, false, [&](PGresult* r) {
    for (int i = 0; i < PQntuples(r); ++i) {
      std::vector<std::string> row;
      for (int j = 0; j < PQnfields(r); ++j) row.emplace_back(PQgetvalue(r, i, j), PQgetlength(r, i, j));
      rows.push_back(std::move(row));
    }
    return Status::Ok();
  });
  if (!s.ok()) {
    conn_->Rollback();
    return s;
  }
  return rows;
}

Result<PostgresStore::Settings> PostgresStore::ReadSettings() {
  auto rows = Query(
      "SELECT current_setting('server_version'), current_setting('synchronous_commit'), "
      "current_setting('synchronous_standby_names'), (SELECT COALESCE(MAX(version), 0) FROM gpupack_schema_version)");
  if (!rows.ok()) return rows.status();
  if (rows->size() != 1 || (*rows)[0].size() != 4) return Status::Server("unexpected answer reading the settings");
  const auto& r = (*rows)[0];
  return Settings{r[0], r[1], r[2], std::stoi(r[3])};
}

namespace {

// ReadRows runs `select` in single-row mode and decodes each row's doc (column `doc_column`) into a T handed to
// `sink`; a record that cannot be decoded, or whose doc holds another key than its row, is a Status naming the
// table and key. A non-ok Status from `sink` stops the decoding and is returned as is.
template <typename T, typename RowKey, typename KeyOf, typename Sink>
Status ReadRows(PostgresStore::Conn& conn, const char* select, const char* table, int doc_column, RowKey row_key,
                KeyOf key_of, Sink&& sink) {
  Status decode_error;
  Status s = conn.Run(select, {}, true, [&](PGresult* r) -> Status {
    for (int i = 0; i < PQntuples(r); ++i) {
      const std::string key = row_key(r, i);
      T value;
      const std::string_view doc(PQgetvalue(r, i, doc_column), static_cast<size_t>(PQgetlength(r, i, doc_column)));
      if (Status d = FromDoc(doc, &value); !d.ok()) {
        decode_error = Status::Server(std::string("corrupt record in table ") + table + ", key " + key + ": " +
                                      d.message());
        return decode_error;
      }
      if (const std::string held = key_of(value); held != key) {
        decode_error = Status::Server(std::string("corrupt record in table ") + table + ", key " + key +
                                      ": its doc holds key " + held);
        return decode_error;
      }
      if (Status k = sink(std::move(value)); !k.ok()) return k;
    }
    return Status::Ok();
  });
  if (!s.ok() && decode_error.ok() && s.code() == ErrorCode::kServer)
    return Status::Server(std::string("cannot read table ") + table + ": " + s.message());
  return s;
}

template <typename T, typename RowKey, typename KeyOf>
Status ReadAll(PostgresStore::Conn& conn, const char* select, const char* table, int doc_column, RowKey row_key,
               KeyOf key_of, std::vector<T>* out) {
  return ReadRows<T>(conn, select, table, doc_column, row_key, key_of, [out](T&& v) {
    out->push_back(std::move(v));
    return Status::Ok();
  });
}

std::string Text(PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), static_cast<size_t>(PQgetlength(r, row, col)));
}

}  // namespace

Result<Snapshot> PostgresStore::Load() { return LoadImpl(nullptr); }

Result<Snapshot> PostgresStore::LoadStreaming(const TaskSink& on_task) { return LoadImpl(&on_task); }

Result<Snapshot> PostgresStore::LoadImpl(const TaskSink* on_task) {
  std::lock_guard lock(mu_);
  Conn& c = *conn_;
  if (Status s = c.Begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); !s.ok())
    return Status::Server("storage load failed: cannot begin a read transaction: " + s.message());
  Snapshot snap;
  // The change feed's position at this snapshot: a standby follows the rows after it (storage/change_feed.h).
  if (Status seq = c.Run("SELECT change_seq FROM gpupack_leader_lease WHERE id = 1", {}, false,
                         [&](PGresult* r) {
                           if (PQntuples(r) > 0) snap.change_seq = std::stoull(PQgetvalue(r, 0, 0));
                           return Status::Ok();
                         });
      !seq.ok()) {
    c.Rollback();
    return Status::Server("storage load failed: cannot read the change sequence: " + seq.message());
  }
  auto one_text = [](PGresult* r, int i) { return Quote(Text(r, i, 0)); };
  auto two_texts = [](PGresult* r, int i) { return "(" + Quote(Text(r, i, 0)) + ", " + Quote(Text(r, i, 1)) + ")"; };
  Status s = ReadAll(c, "SELECT name, doc FROM clusters ORDER BY name", "clusters", 1, one_text,
                     [](const Cluster& x) { return Quote(x.name); }, &snap.clusters);
  if (s.ok())
    s = ReadAll(
        c, "SELECT family, revision, doc FROM task_definitions ORDER BY family, revision", "task_definitions", 2,
        [](PGresult* r, int i) { return "(" + Quote(Text(r, i, 0)) + ", " + Text(r, i, 1) + ")"; },
        [](const TaskDefinition& td) { return "(" + Quote(td.family) + ", " + std::to_string(td.revision) + ")"; },
        &snap.task_definitions);
  if (s.ok())
    s = ReadAll(c, "SELECT arn, doc FROM container_instances ORDER BY seq", "container_instances", 1, one_text,
                [](const ContainerInstance& x) { return Quote(x.arn); }, &snap.instances);
  if (s.ok()) {
    auto task_key = [](const Task& t) { return Quote(t.arn); };
    const char* select = "SELECT arn, doc FROM tasks ORDER BY seq";
    if (on_task != nullptr) {
      Status sink_error;  // a sink's own error is returned as it is, not as a storage failure
      s = ReadRows<Task>(c, select, "tasks", 1, one_text, task_key, [&](Task&& t) {
        sink_error = (*on_task)(std::move(t));
        return sink_error;
      });
      if (!sink_error.ok()) {
        c.Rollback();
        return sink_error;
      }
    } else {
      s = ReadAll(c, select, "tasks", 1, one_text, task_key, &snap.tasks);
    }
  }
  if (s.ok())
    s = ReadAll(c, "SELECT cluster, token, doc FROM client_tokens ORDER BY cluster, token", "client_tokens", 2,
                two_texts,
                [](const ClientTokenRecord& x) { return "(" + Quote(x.cluster) + ", " + Quote(x.token) + ")"; },
                &snap.client_tokens);
  if (s.ok())
    s = ReadAll(c, "SELECT arn, doc FROM services ORDER BY arn", "services", 1, one_text,
                [](const Service& x) { return Quote(x.arn); }, &snap.services);
  if (s.ok())
    s = ReadAll(c, "SELECT name, doc FROM capacity_providers ORDER BY name", "capacity_providers", 1, one_text,
                [](const CapacityProvider& x) { return Quote(x.name); }, &snap.capacity_providers);
  if (!s.ok()) {
    c.Rollback();
    return Status::Server("storage load failed: " + s.message());
  }
  if (Status end = c.Exec("COMMIT"); !end.ok()) {
    c.Rollback();
    return Status::Server("storage load failed: cannot end the read transaction: " + end.message());
  }
  return snap;
}

namespace {

// kFenceCheck: the lease check of a fenced commit, the first statement of its transaction. It locks the lease row
// and yields 1 when this server still holds the lease under its epoch and the lease has not expired by the
// database's clock; otherwise it fails (a text that is no integer: SQLSTATE 22P02, kFenceLost, with a message
// the database's log shows as it is), so the database skips the rest of the pipelined transaction. An error and
// not an empty answer, because the statements after it are already on their way.
constexpr const char* kFenceCheck =
    "SELECT CASE WHEN count(*) = 1 THEN 1 "
    "ELSE ('gpupack: this server no longer holds the leader lease; rows: ' || count(*))::integer END "
    "FROM (SELECT 1 FROM gpupack_leader_lease WHERE id = 1 AND holder = $1 AND epoch = $2 "
    "AND expires_at > clock_timestamp() FOR UPDATE) AS held";
constexpr const char* kFenceLost = "22P02";

// kAppendChange: a fenced commit's change-feed row (storage/change_feed.h), numbered by the lease row's counter
// (the fence already holds that row's lock, so numbers follow commit order and a rolled-back commit leaves no
// gap), and the NOTIFY that wakes the standbys once the transaction commits.
constexpr const char* kAppendChange =
    "WITH s AS (UPDATE gpupack_leader_lease SET change_seq = change_seq + 1 WHERE id = 1 RETURNING change_seq) "
    "INSERT INTO gpupack_changes (seq, doc) SELECT change_seq, $1 FROM s RETURNING seq";

// WriteStatements: the statements that write `batch`, one per kind of entity it holds (arrays as parameters).
std::vector<PostgresStore::Conn::Statement> WriteStatements(const WriteBatch& batch, const BatchDocs& docs);

}  // namespace

Status PostgresStore::Commit(const WriteBatch& batch) {
  if (batch.empty()) return Status::Ok();
  std::lock_guard lock(mu_);
  Conn& c = *conn_;
  // The whole transaction goes in one pipeline: BEGIN, the fence check, the writes, COMMIT, and one sync: one
  // round trip. The database runs them in order and stops at the first failure, so with the fence check failing
  // nothing after it runs (COMMIT included); the answer is read only once COMMIT's result came back.
  std::vector<Conn::Statement> statements;
  statements.push_back({"beginning a write transaction", "BEGIN", {}});
  size_t fence_index = 0;
  if (fence_) {
    fence_index = statements.size();
    statements.push_back({"checking the leader lease", kFenceCheck, {fence_->holder, std::to_string(fence_->epoch)}});
  }
  const BatchDocs docs = DocsOf(batch);
  for (auto& st : WriteStatements(batch, docs)) statements.push_back(std::move(st));
  size_t change_index = statements.size() + 1;  // none
  if (fence_) {  // several servers: the standbys follow the commits
    change_index = statements.size();
    statements.push_back({"appending to the change feed", kAppendChange, {EncodeChange(batch, docs)}});
    statements.push_back({"notifying the standbys", std::string("SELECT pg_notify('") + kChangeChannel + "', '')", {}});
  }
  const size_t commit_index = statements.size();
  statements.push_back({"committing", "COMMIT", {}});

  // COMMIT's answer is what makes the batch durable (as the database's synchronous_commit says). A connection
  // lost while waiting for it leaves the outcome unknown: it is reported as a failure (the applier then stops
  // acknowledging) and the next leader's load shows what the database kept.
  // An aborted transaction "commits" as ROLLBACK without an error: only the COMMIT tag counts.
  bool committed = false;
  uint64_t change_seq = 0;
  size_t failed = statements.size();
  std::string failed_state;  // the failed statement's SQLSTATE
  Status s = c.Pipeline(
      statements,
      [&](size_t i, PGresult* r) {
        if (i == commit_index) committed = std::string_view(PQcmdStatus(r)) == "COMMIT";
        if (i == change_index && PQntuples(r) == 1) change_seq = std::stoull(PQgetvalue(r, 0, 0));
        return Status::Ok();
      },
      &failed, &failed_state);
  auto fail = [&](const std::string& what, const Status& why) {
    c.Rollback();
    return Status::Server("storage commit failed while " + what + ": " + why.message() +
                          "; nothing of the batch was applied");
  };
  if (!s.ok()) {
    if (fence_ && failed == fence_index && failed_state == kFenceLost) {
      c.Rollback();
      return Status::Conflict("this server no longer holds the leader lease (epoch " + std::to_string(fence_->epoch) +
                              "): nothing of the batch was applied");
    }
    return fail(failed < statements.size() ? statements[failed].what : "sending the transaction", s);
  }
  if (!committed) return fail("committing", Status::Server("the database rolled the transaction back"));
  if (change_seq > last_change_seq_.load()) last_change_seq_.store(change_seq);
  return Status::Ok();
}

void PostgresStore::NoteChangeSeq(uint64_t seq) {
  uint64_t held = last_change_seq_.load();
  while (seq > held && !last_change_seq_.compare_exchange_weak(held, seq)) {
  }
}

namespace {

// UpsertByArn: the statement that writes `rows` of `table` (container_instances or tasks: keyed by ARN, with a
// seq) in batch order, so a new key's seq follows the order it was first put.
template <typename T>
PostgresStore::Conn::Statement UpsertByArn(const std::string& table, const std::vector<T>& rows,
                                           const std::vector<std::string>& docs) {
  return {"writing " + table,
          "INSERT INTO " + table + " (arn, doc) SELECT a, d FROM "
          "unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(a, d, o) ORDER BY o "
          "ON CONFLICT (arn) DO UPDATE SET doc = excluded.doc",
          {ArrayLiteral(rows, [](const T& x) { return x.arn; }), ArrayLiteral(docs, Same)}};
}

// DeleteByArn: the statement that deletes the rows of `table` (container_instances or tasks) whose ARN is in
// `arns`.
PostgresStore::Conn::Statement DeleteByArn(const std::string& table, const std::set<std::string>& arns) {
  return {"deleting " + table, "DELETE FROM " + table + " WHERE arn = ANY($1::text[])",
          {ArrayLiteral(arns, [](const std::string& x) { return x; })}};
}

std::vector<PostgresStore::Conn::Statement> WriteStatements(const WriteBatch& batch, const BatchDocs& docs) {
  std::vector<PostgresStore::Conn::Statement> out;
  if (batch.replaces_everything())
    out.push_back({"emptying every table",
                   "TRUNCATE clusters, task_definitions, container_instances, tasks, client_tokens, services, "
                   "capacity_providers", {}});
  if (!batch.clusters().empty())
    out.push_back({"writing clusters",
                   "INSERT INTO clusters (name, doc) SELECT * FROM unnest($1::text[], $2::text[]) "
                   "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
                   {ArrayLiteral(batch.clusters(), [](const Cluster& x) { return x.name; }),
                    ArrayLiteral(docs.clusters, Same)}});
  if (!batch.task_definitions().empty())
    out.push_back({"writing task_definitions",
                   "INSERT INTO task_definitions (family, revision, doc) "
                   "SELECT * FROM unnest($1::text[], $2::integer[], $3::text[]) "
                   "ON CONFLICT (family, revision) DO UPDATE SET doc = excluded.doc",
                   {ArrayLiteral(batch.task_definitions(), [](const TaskDefinition& x) { return x.family; }),
                    ArrayLiteral(batch.task_definitions(),
                                 [](const TaskDefinition& x) { return std::to_string(x.revision); }),
                    ArrayLiteral(docs.task_definitions, Same)}});
  if (!batch.instances().empty()) out.push_back(UpsertByArn("container_instances", batch.instances(), docs.instances));
  if (!batch.tasks().empty()) out.push_back(UpsertByArn("tasks", batch.tasks(), docs.tasks));
  if (!batch.services().empty()) out.push_back(UpsertByArn("services", batch.services(), docs.services));
  if (!batch.capacity_providers().empty())
    out.push_back({"writing capacity_providers",
                   "INSERT INTO capacity_providers (name, doc) SELECT * FROM unnest($1::text[], $2::text[]) "
                   "ON CONFLICT (name) DO UPDATE SET doc = excluded.doc",
                   {ArrayLiteral(batch.capacity_providers(), [](const CapacityProvider& x) { return x.name; }),
                    ArrayLiteral(docs.capacity_providers, Same)}});
  if (!batch.client_tokens().empty())
    out.push_back({"writing client_tokens",
                   "INSERT INTO client_tokens (cluster, token, doc) "
                   "SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) "
                   "ON CONFLICT (cluster, token) DO UPDATE SET doc = excluded.doc",
                   {ArrayLiteral(batch.client_tokens(), [](const ClientTokenRecord& x) { return x.cluster; }),
                    ArrayLiteral(batch.client_tokens(), [](const ClientTokenRecord& x) { return x.token; }),
                    ArrayLiteral(docs.client_tokens, Same)}});
  if (!batch.deleted_tasks().empty()) out.push_back(DeleteByArn("tasks", batch.deleted_tasks()));
  if (!batch.deleted_client_tokens().empty())
    out.push_back({"deleting client_tokens",
                   "DELETE FROM client_tokens c USING unnest($1::text[], $2::text[]) AS u(cl, tok) "
                   "WHERE c.cluster = u.cl AND c.token = u.tok",
                   {ArrayLiteral(batch.deleted_client_tokens(), [](const ClientTokenKey& k) { return k.first; }),
                    ArrayLiteral(batch.deleted_client_tokens(), [](const ClientTokenKey& k) { return k.second; })}});
  if (!batch.deleted_instances().empty())
    out.push_back(DeleteByArn("container_instances", batch.deleted_instances()));
  return out;
}

}  // namespace

}  // namespace gpupack
