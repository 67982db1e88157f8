#include "storage/store.h"

namespace gpupack {

Store::~Store() = default;

Result<Snapshot> Store::LoadStreaming(const TaskSink& on_task) {
  auto snap = Load();
  if (!snap.ok()) return snap;
  for (Task& t : snap->tasks)
    if (Status s = on_task(std::move(t)); !s.ok()) return s;
  snap->tasks.clear();
  return snap;
}

void WriteBatch::PutCluster(Cluster cluster) {
  std::string key = cluster.name;
  clusters_.Put(std::move(key), std::move(cluster));
}

void WriteBatch::PutTaskDefinition(TaskDefinition td) {
  TaskDefinitionKey key{td.family, td.revision};
  task_definitions_.Put(std::move(key), std::move(td));
}

void WriteBatch::PutInstance(ContainerInstance instance) {
  deleted_instances_.erase(instance.arn);
  std::string key = instance.arn;
  instances_.Put(std::move(key), std::move(instance));
}

void WriteBatch::PutTask(Task task) {
  deleted_tasks_.erase(task.arn);
  std::string key = task.arn;
  tasks_.Put(std::move(key), std::move(task));
}

void WriteBatch::PutClientToken(ClientTokenRecord record) {
  ClientTokenKey key{record.cluster, record.token};
  deleted_client_tokens_.erase(key);
  client_tokens_.Put(std::move(key), std::move(record));
}

void WriteBatch::PutService(Service service) {
  std::string key = service.arn;
  services_.Put(std::move(key), std::move(service));
}

void WriteBatch::PutCapacityProvider(CapacityProvider provider) {
  std::string key = provider.name;
  capacity_providers_.Put(std::move(key), std::move(provider));
}

void WriteBatch::DeleteTask(const std::string& arn) {
  tasks_.Erase(arn);
  deleted_tasks_.insert(arn);
}

void WriteBatch::DeleteClientToken(const std::string& cluster, const std::string& token) {
  ClientTokenKey key{cluster, token};
  client_tokens_.Erase(key);
  deleted_client_tokens_.insert(std::move(key));
}

void WriteBatch::DeleteInstance(const std::string& arn) {
  instances_.Erase(arn);
  deleted_instances_.insert(arn);
}

void WriteBatch::Append(WriteBatch&& other) {
  if (empty() || other.replaces_everything_) {
    *this = std::move(other);
    return;
  }
  // Within `other` no key is both put and deleted, so the order between its puts and its deletes does not
  // matter; each cancels what this batch holds for the same key.
  for (auto& v : other.clusters_.TakeValues()) PutCluster(std::move(v));
  for (auto& v : other.task_definitions_.TakeValues()) PutTaskDefinition(std::move(v));
  for (auto& v : other.instances_.TakeValues()) PutInstance(std::move(v));
  for (auto& v : other.tasks_.TakeValues()) PutTask(std::move(v));
  for (auto& v : other.client_tokens_.TakeValues()) PutClientToken(std::move(v));
  for (auto& v : other.services_.TakeValues()) PutService(std::move(v));
  for (auto& v : other.capacity_providers_.TakeValues()) PutCapacityProvider(std::move(v));
  for (const auto& arn : other.deleted_tasks_) DeleteTask(arn);
  for (const auto& [cluster, token] : other.deleted_client_tokens_) DeleteClientToken(cluster, token);
  for (const auto& arn : other.deleted_instances_) DeleteInstance(arn);
  other = WriteBatch();
}

size_t WriteBatch::size() const {
  return clusters_.size() + task_definitions_.size() + instances_.size() + tasks_.size() +
         client_tokens_.size() + services_.size() + capacity_providers_.size() + deleted_tasks_.size() +
         deleted_client_tokens_.size() + deleted_instances_.size() + (replaces_everything_ ? 1 : 0);
}

}  // namespace gpupack
