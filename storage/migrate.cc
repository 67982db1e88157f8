#include "storage/migrate.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/cluster_state.h"
#include "storage/invariants.h"
#include "storage/postgres_store.h"
#include "storage/serialize.h"
#include "storage/sqlite_store.h"

namespace gpupack {
namespace {

std::string Plural(size_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// CheckRecords: what a server checks before it serves a loaded state (records that agree with each other).
Status CheckRecords(const Snapshot& snap) {
  ClusterState state;
  for (const Cluster& c : snap.clusters) state.PutCluster(c);
  for (const ContainerInstance& i : snap.instances) state.PutInstance(i);
  for (const Task& t : snap.tasks) state.PutTask(t);
  state.RebuildReservations();
  return CheckInvariants(state);
}

// Docs: the records of one kind as the stores write them; sorted unless `in_order` (instances and tasks keep
// their first-stored order; the other kinds are sorted by key, which two engines may collate differently).
template <typename T>
std::vector<std::string> Docs(const std::vector<T>& values, bool in_order) {
  std::vector<std::string> out;
  out.reserve(values.size());
  for (const T& v : values) out.push_back(storage_internal::ToDoc(v));
  if (!in_order) std::sort(out.begin(), out.end());
  return out;
}

// SameRecords: "" when `a` and `b` hold the same records, else the first kind that differs.
std::string FirstDifference(const Snapshot& a, const Snapshot& b) {
  if (Docs(a.clusters, false) != Docs(b.clusters, false)) return "clusters";
  if (Docs(a.task_definitions, false) != Docs(b.task_definitions, false)) return "task_definitions";
  if (Docs(a.instances, true) != Docs(b.instances, true)) return "container_instances";
  if (Docs(a.tasks, true) != Docs(b.tasks, true)) return "tasks";
  if (Docs(a.client_tokens, false) != Docs(b.client_tokens, false)) return "client_tokens";
  if (Docs(a.services, false) != Docs(b.services, false)) return "services";
  if (Docs(a.capacity_providers, false) != Docs(b.capacity_providers, false)) return "capacity_providers";
  return "";
}

// LeaseHolder: the server that holds a PostgreSQL target's leader lease now ("" when none does, or when the
// target is not PostgreSQL).
Result<std::string> LeaseHolder(Store& to) {
  auto* pg = dynamic_cast<PostgresStore*>(&to);
  if (pg == nullptr) return std::string();
  auto rows = pg->Query(
      "SELECT holder, advertise FROM gpupack_leader_lease WHERE id = 1 AND holder <> '' AND "
      "expires_at > clock_timestamp()");
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::string();
  return (*rows)[0][0] + " (" + (*rows)[0][1] + ")";
}

}  // namespace

std::string StateCounts::Describe() const {
  return Plural(clusters, "cluster", "clusters") + ", " +
         Plural(task_definitions, "task definition", "task definitions") + ", " +
         Plural(instances, "container instance", "container instances") + ", " + Plural(tasks, "task", "tasks") +
         ", " + Plural(client_tokens, "client token", "client tokens") + ", " +
         Plural(services, "service", "services");
}

StateCounts CountsOf(const Snapshot& s) {
  return {s.clusters.size(),      s.task_definitions.size(), s.instances.size(),
          s.tasks.size(),         s.client_tokens.size(),    s.services.size()};
}

Result<std::unique_ptr<Store>> OpenStore(const std::string& db) {
  if (PostgresStore::IsUri(db)) {
    auto pg = PostgresStore::Open(db);
    if (!pg.ok()) return pg.status();
    return std::unique_ptr<Store>(std::move(*pg));
  }
  auto lite = SqliteStore::Open(db);
  if (!lite.ok()) return lite.status();
  return std::unique_ptr<Store>(std::move(*lite));
}

Result<StateCounts> MigrateState(Store& from, Store& to, const MigrateOptions& options) {
  auto source = from.Load();
  if (!source.ok()) return Status::Server("the source does not load: " + source.status().message());
  if (Status s = CheckRecords(*source); !s.ok())
    return Status::Server("the source's records contradict each other, so no server could serve them: " +
                          s.message());
  auto target = to.Load();
  if (!target.ok()) return Status::Server("the target does not load: " + target.status().message());
  const StateCounts held = CountsOf(*target);
  if (!held.empty() && !options.replace)
    return Status::Conflict("the target already holds " + held.Describe() +
                            "; nothing was written (pass --force to replace all it holds with the source)");
  auto holder = LeaseHolder(to);
  if (!holder.ok()) return Status::Server("cannot read the target's leader lease: " + holder.status().message());
  if (!holder->empty())
    return Status::Conflict("a gpupack server leads the target now: " + *holder +
                            "; stop every server on it first (nothing was written)");

  WriteBatch batch;
  if (!held.empty()) batch.ReplaceEverything();
  for (const Cluster& v : source->clusters) batch.PutCluster(v);
  for (const TaskDefinition& v : source->task_definitions) batch.PutTaskDefinition(v);
  for (const ContainerInstance& v : source->instances) batch.PutInstance(v);
  for (const Task& v : source->tasks) batch.PutTask(v);
  for (const ClientTokenRecord& v : source->client_tokens) batch.PutClientToken(v);
  for (const Service& v : source->services) batch.PutService(v);
  for (const CapacityProvider& v : source->capacity_providers) batch.PutCapacityProvider(v);
  if (Status s = to.Commit(batch); !s.ok()) return Status::Server("writing the target failed: " + s.message());

  auto copied = to.Load();
  if (!copied.ok()) return Status::Server("the target does not load after the copy: " + copied.status().message());
  if (const std::string kind = FirstDifference(*source, *copied); !kind.empty())
    return Status::Server("the target's " + kind + " differ from the source's after the copy");
  return CountsOf(*source);
}

}  // namespace gpupack
