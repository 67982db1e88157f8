#include "storage/memory_store.h"

#include <algorithm>
#include <tuple>

namespace gpupack {

Result<Snapshot> MemoryStore::Load() {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot snap = SnapshotLocked(/*with_tasks=*/true);
  return snap;
}

Result<Snapshot> MemoryStore::LoadStreaming(const TaskSink& on_task) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [_, t] : tasks_.InOrder())
    if (Status s = on_task(Task(t)); !s.ok()) return s;
  return SnapshotLocked(/*with_tasks=*/false);
}

Snapshot MemoryStore::SnapshotLocked(bool with_tasks) const {
  Snapshot snap;
  snap.clusters = clusters_.Values();
  snap.task_definitions = task_definitions_.Values();
  snap.instances = instances_.Values();
  if (with_tasks) snap.tasks = tasks_.Values();
  snap.client_tokens = client_tokens_.Values();
  snap.services = services_.Values();
  snap.capacity_providers = capacity_providers_.Values();
  std::sort(snap.capacity_providers.begin(), snap.capacity_providers.end(),
            [](const CapacityProvider& a, const CapacityProvider& b) { return a.name < b.name; });
  std::sort(snap.services.begin(), snap.services.end(),
            [](const Service& a, const Service& b) { return a.arn < b.arn; });
  std::sort(snap.clusters.begin(), snap.clusters.end(),
            [](const Cluster& a, const Cluster& b) { return a.name < b.name; });
  std::sort(snap.task_definitions.begin(), snap.task_definitions.end(),
            [](const TaskDefinition& a, const TaskDefinition& b) {
              return std::tie(a.family, a.revision) < std::tie(b.family, b.revision);
            });
  std::sort(snap.client_tokens.begin(), snap.client_tokens.end(),
            [](const ClientTokenRecord& a, const ClientTokenRecord& b) {
              return std::tie(a.cluster, a.token) < std::tie(b.cluster, b.token);
            });
  return snap;
}

Status MemoryStore::Commit(const WriteBatch& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!commit_error_.ok()) {
    Status error = commit_error_;
    if (failures_left_ > 0 && --failures_left_ == 0) commit_error_ = Status::Ok();
    return error;
  }
  if (batch.empty()) return Status::Ok();
  if (batch.replaces_everything()) {
    clusters_ = {};
    task_definitions_ = {};
    instances_ = {};
    tasks_ = {};
    client_tokens_ = {};
    services_ = {};
    capacity_providers_ = {};
  }
  // A batch never puts and deletes one key, so the order of the two passes does not matter.
  for (const auto& v : batch.clusters()) clusters_.Put(v.name, v);
  for (const auto& v : batch.task_definitions()) task_definitions_.Put({v.family, v.revision}, v);
  for (const auto& v : batch.instances()) instances_.Put(v.arn, v);
  for (const auto& v : batch.tasks()) tasks_.Put(v.arn, v);
  for (const auto& v : batch.client_tokens()) client_tokens_.Put({v.cluster, v.token}, v);
  for (const auto& v : batch.services()) services_.Put(v.arn, v);
  for (const auto& v : batch.capacity_providers()) capacity_providers_.Put(v.name, v);
  for (const auto& arn : batch.deleted_tasks()) tasks_.Erase(arn);
  for (const auto& key : batch.deleted_client_tokens()) client_tokens_.Erase(key);
  for (const auto& arn : batch.deleted_instances()) instances_.Erase(arn);
  ++commit_count_;
  return Status::Ok();
}

void MemoryStore::FailCommits(Status error, uint64_t times) {
  std::lock_guard<std::mutex> lock(mu_);
  commit_error_ = std::move(error);
  failures_left_ = times;
}

uint64_t MemoryStore::commit_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commit_count_;
}

}  // namespace gpupack
