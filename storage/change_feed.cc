#include "storage/change_feed.h"

#include <libpq-fe.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>


#include <nlohmann/json.hpp>

#include "storage/postgres_store.h"
#include "storage/serialize.h"

namespace gpupack {
namespace {

using storage_internal::FromDoc;
using storage_internal::ToDoc;

template <typename T>
std::vector<std::string> Docs(const std::vector<T>& values) {
  std::vector<std::string> out;
  out.reserve(values.size());
  for (const T& v : values) out.push_back(ToDoc(v));
  return out;
}

void Lines(std::string& out, std::string_view kind, const std::vector<std::string>& docs) {
  for (const std::string& d : docs) {
    out.append(kind);
    out += ' ';
    out += d;
    out += '\n';
  }
}

template <typename T>
Status Decoded(std::string_view payload, std::string_view kind, T* out) {
  if (Status s = FromDoc(payload, out); !s.ok())
    return Status::Server("change feed: a '" + std::string(kind) + "' line cannot be read: " + s.message());
  return Status::Ok();
}

}  // namespace

BatchDocs DocsOf(const WriteBatch& b) {
  return {Docs(b.clusters()), Docs(b.task_definitions()), Docs(b.instances()),        Docs(b.tasks()),
          Docs(b.client_tokens()), Docs(b.services()),     Docs(b.capacity_providers())};
}

std::string EncodeChange(const WriteBatch& b, const BatchDocs& docs) {
  std::string out;
  if (b.replaces_everything()) out += "all\n";
  Lines(out, "c", docs.clusters);
  Lines(out, "d", docs.task_definitions);
  Lines(out, "i", docs.instances);
  Lines(out, "t", docs.tasks);
  Lines(out, "k", docs.client_tokens);
  Lines(out, "s", docs.services);
  Lines(out, "p", docs.capacity_providers);
  for (const auto& arn : b.deleted_tasks()) out += "-t " + nlohmann::json(arn).dump() + "\n";
  for (const auto& [cluster, token] : b.deleted_client_tokens())
    out += "-k " + nlohmann::json::array({cluster, token}).dump() + "\n";
  for (const auto& arn : b.deleted_instances()) out += "-i " + nlohmann::json(arn).dump() + "\n";
  return out;
}

Result<WriteBatch> DecodeChange(std::string_view text) {
  WriteBatch b;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::string_view kind = line.substr(0, space);
    const std::string_view payload = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    Status s;
    if (kind == "all") {
      b.ReplaceEverything();
    } else if (kind == "c") {
      Cluster v;
      if ((s = Decoded(payload, kind, &v)).ok()) b.PutCluster(std::move(v));
    } else if (kind == "d") {
      TaskDefinition v;
      if ((s = Decoded(payload, kind, &v)).ok()) b.PutTaskDefinition(std::move(v));
    } else if (kind == "i") {
      ContainerInstance v;
      if ((s = Decoded(payload, kind, &v)).ok()) b.PutInstance(std::move(v));
    } else if (kind == "t") {
      Task v;
      if ((s = Decoded(payload, kind, &v)).ok()) b.PutTask(std::move(v));
    } else if (kind == "k") {
      ClientTokenRecord v;
      if ((s = Decoded(payload, kind, &v)).ok()) b.PutClientToken(std::move(v));
    } else if (kind == "s") {
      Service v;
      if ((s = Decoded(payload, kind, &v)).ok()) b.PutService(std::move(v));
    } else if (kind == "p") {
      CapacityProvider v;
      if ((s = Decoded(payload, kind, &v)).ok()) b.PutCapacityProvider(std::move(v));
    } else if (kind == "-t" || kind == "-i" || kind == "-k") {
      const nlohmann::json key = nlohmann::json::parse(payload, nullptr, false);
      if (kind == "-k" && key.is_array() && key.size() == 2 && key[0].is_string() && key[1].is_string()) {
        b.DeleteClientToken(key[0].get<std::string>(), key[1].get<std::string>());
      } else if (kind != "-k" && key.is_string()) {
        if (kind == "-t") b.DeleteTask(key.get<std::string>());
        else b.DeleteInstance(key.get<std::string>());
      } else {
        s = Status::Server("change feed: a '" + std::string(kind) + "' line holds no key");
      }
    } else {
      s = Status::Server("change feed: unknown line kind '" + std::string(kind.substr(0, 16)) +
                         "' (written by a newer gpupack?)");
    }
    if (!s.ok()) return s;
  }
  return b;
}

Result<ChangePage> ReadChanges(PostgresStore& db, uint64_t after, size_t limit) {
  ChangePage page;
  auto latest = db.Query("SELECT change_seq FROM gpupack_leader_lease WHERE id = 1");
  if (!latest.ok()) return latest.status();
  if (latest->empty()) return Status::Server("the lease row is missing from gpupack_leader_lease");
  page.latest = std::stoull((*latest)[0][0]);
  page.reload = page.latest < after;  // the feed went back: a restored database
  if (page.latest <= after) return page;
  auto rows = db.Query("SELECT seq, doc FROM gpupack_changes WHERE seq > $1 ORDER BY seq LIMIT $2",
                       {std::to_string(after), std::to_string(limit)});
  if (!rows.ok()) return rows.status();
  uint64_t expect = after + 1;
  for (auto& row : *rows) {
    const uint64_t seq = std::stoull(row[0]);
    if (seq != expect) {
      page.reload = true;
      return page;
    }
    auto batch = DecodeChange(row[1]);
    if (!batch.ok()) return Status::Server("change " + row[0] + ": " + batch.status().message());
    page.changes.emplace_back(seq, std::move(*batch));
    ++expect;
  }
  page.reload = page.changes.empty();  // the latest is ahead, yet no row follows `after`: they were pruned
  return page;
}

// ---- ChangeListener -----------------------------------------------------------------------------------------

struct ChangeListener::Conn {
  PGconn* pg = nullptr;
  ~Conn() {
    if (pg != nullptr) PQfinish(pg);
  }
};

ChangeListener::ChangeListener(std::string uri) : uri_(std::move(uri)), wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

ChangeListener::~ChangeListener() {
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void ChangeListener::Interrupt() {
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
}

bool ChangeListener::Connect() {
  conn_.reset();
  const char* keys[] = {"dbname", "connect_timeout", nullptr};
  const char* values[] = {uri_.c_str(), "3", nullptr};
  auto c = std::make_unique<Conn>();
  c->pg = PQconnectdbParams(keys, values, 1);
  if (c->pg == nullptr || PQstatus(c->pg) != CONNECTION_OK) return false;
  PGresult* r = PQexec(c->pg, (std::string("LISTEN ") + kChangeChannel).c_str());
  const bool ok = r != nullptr && PQresultStatus(r) == PGRES_COMMAND_OK;
  PQclear(r);
  if (!ok) return false;
  conn_ = std::move(c);
  return true;
}

bool ChangeListener::Wait(std::chrono::milliseconds timeout) {
  const bool connected = conn_ || Connect();
  pollfd p[2] = {{wake_fd_, POLLIN, 0}, {connected ? PQsocket(conn_->pg) : -1, POLLIN, 0}};
  if (::poll(p, 2, static_cast<int>(timeout.count())) < 0) return false;
  if (p[0].revents & POLLIN) {
    uint64_t n = 0;
    (void)!::read(wake_fd_, &n, sizeof n);
  }
  if (!connected || !(p[1].revents & (POLLIN | POLLHUP | POLLERR))) return false;
  if (PQconsumeInput(conn_->pg) == 0) {
    conn_.reset();  // re-made on the next Wait
    return false;
  }
  bool notified = false;
  while (PGnotify* n = PQnotifies(conn_->pg)) {
    notified = true;
    PQfreemem(n);
  }
  return notified;
}

}  // namespace gpupack
