#include "engine/core/read_view.h"

#include <algorithm>

namespace gpupack::api {

size_t ReadView::ShardOf(const std::string& key) { return std::hash<std::string>{}(key) % kShards; }

std::shared_ptr<const ReadView> ReadView::FromState(const ClusterState& state) {
  auto view = std::make_shared<ReadView>();
  auto clusters = std::make_shared<std::map<std::string, Cluster>>();
  for (const Cluster* c : state.Clusters()) clusters->emplace(c->name, *c);
  view->clusters_ = std::move(clusters);

  auto tds = std::make_shared<std::map<std::string, std::shared_ptr<const TaskDefinitionFamily>>>();
  for (const auto& [family, revisions] : state.TaskDefinitions()) {
    auto f = std::make_shared<TaskDefinitionFamily>();
    for (const auto& [rev, td] : revisions) f->emplace(rev, std::make_shared<const TaskDefinition>(td));
    tds->emplace(family, std::move(f));
  }
  view->task_definitions_ = std::move(tds);

  std::array<InstanceShard, kShards> instance_shards;
  auto by_cluster = std::make_shared<std::map<std::string, std::vector<std::string>>>();
  for (const Cluster* c : state.Clusters())
    for (const ContainerInstance* inst : state.InstancesOf(c->name)) {
      auto rec = std::make_shared<InstanceRecord>();
      rec->instance = *inst;
      rec->load.group_counts = state.LoadOf(*inst).group_counts;
      instance_shards[ShardOf(inst->arn)].emplace(inst->arn, std::move(rec));
      (*by_cluster)[c->name].push_back(inst->arn);
    }
  for (size_t i = 0; i < kShards; ++i)
    view->instances_[i] = std::make_shared<const InstanceShard>(std::move(instance_shards[i]));
  view->instances_by_cluster_ = std::move(by_cluster);

  std::array<TaskShard, kShards> task_shards;
  state.ForEachTask([&](const Task& t) {
    std::shared_ptr<const Task> shared = state.SharedTask(t.arn);
    const std::string_view key = shared->arn;  // held by the entry's own task
    task_shards[ShardOf(t.arn)].emplace(key, std::move(shared));
  });
  for (size_t i = 0; i < kShards; ++i) view->tasks_[i] = std::make_shared<const TaskShard>(std::move(task_shards[i]));
  view->task_count_ = state.TaskCount();

  std::map<std::pair<std::string, bool>, std::vector<TaskKey>> keys;  // (cluster, stopped) -> keys
  state.ForEachTask([&](const Task& t) {
    keys[{t.cluster, t.desired_status == TaskStatus::kStopped}].push_back({t.created_at, t.arn});
  });
  auto orders = std::make_shared<std::map<std::string, ClusterTaskOrders>>();
  for (auto& [where, list] : keys) {
    auto order = std::make_shared<const TaskOrder>(TaskOrder::Of(std::move(list)));
    (where.second ? (*orders)[where.first].stopped : (*orders)[where.first].running) = std::move(order);
  }
  view->task_orders_ = std::move(orders);
  std::array<ServiceShard, kServiceShards> service_shards;
  auto service_arns = std::make_shared<std::set<std::string>>();
  state.ForEachService([&](const Service& svc) {
    service_shards[ShardOf(svc.arn) % kServiceShards].emplace(svc.arn, std::make_shared<const Service>(svc));
    service_arns->insert(svc.arn);
  });
  for (size_t i = 0; i < kServiceShards; ++i)
    view->services_[i] = std::make_shared<const ServiceShard>(std::move(service_shards[i]));
  view->service_arns_ = std::move(service_arns);
  auto providers = std::make_shared<std::map<std::string, CapacityProvider>>();
  state.ForEachCapacityProvider([&](const CapacityProvider& p) { (*providers)[p.name] = p; });
  view->capacity_providers_ = std::move(providers);
  return view;
}

const CapacityProvider* ReadView::FindCapacityProvider(const std::string& name) const {
  auto it = capacity_providers_->find(name);
  return it == capacity_providers_->end() ? nullptr : &it->second;
}

std::shared_ptr<const Service> ReadView::FindService(const std::string& arn) const {
  const ServiceShard* shard = services_[ShardOf(arn) % kServiceShards].get();
  if (!shard) return nullptr;
  auto it = shard->find(arn);
  return it == shard->end() ? nullptr : it->second;
}

std::shared_ptr<const ReadView> ReadView::Apply(const ReadView& base, ViewDelta delta) {
  auto view = std::make_shared<ReadView>(base);  // shares every shard and map with `base`
  view->sequence_ = base.sequence_ + 1;

  if (!delta.clusters.empty()) {
    auto clusters = std::make_shared<std::map<std::string, Cluster>>(*base.clusters_);
    for (auto& c : delta.clusters) (*clusters)[c.name] = std::move(c);
    view->clusters_ = std::move(clusters);
  }

  if (!delta.capacity_providers.empty()) {
    auto providers = std::make_shared<std::map<std::string, CapacityProvider>>(*base.capacity_providers_);
    for (auto& p : delta.capacity_providers) (*providers)[p.name] = std::move(p);
    view->capacity_providers_ = std::move(providers);
  }

  // Services: copy on write per shard, like tasks below; the sorted ARNs only when a service is new.
  if (!delta.services.empty()) {
    std::array<std::shared_ptr<ServiceShard>, kServiceShards> copies;
    std::shared_ptr<std::set<std::string>> arns;
    for (auto& svc : delta.services) {
      const size_t s = ShardOf(svc->arn) % kServiceShards;
      if (!copies[s])
        copies[s] = base.services_[s] ? std::make_shared<ServiceShard>(*base.services_[s]) : std::make_shared<ServiceShard>();
      auto [it, inserted] = copies[s]->try_emplace(svc->arn, svc);
      if (!inserted) {
        it->second = std::move(svc);
        continue;
      }
      if (!arns) arns = std::make_shared<std::set<std::string>>(*base.service_arns_);
      arns->insert(it->first);
    }
    for (size_t s = 0; s < kServiceShards; ++s)
      if (copies[s]) view->services_[s] = std::move(copies[s]);
    if (arns) view->service_arns_ = std::move(arns);
  }

  if (!delta.task_definitions.empty()) {
    auto tds = std::make_shared<std::map<std::string, std::shared_ptr<const TaskDefinitionFamily>>>(*base.task_definitions_);
    for (auto& td : delta.task_definitions) {
      auto it = tds->find(td->family);
      auto family = it == tds->end() ? std::make_shared<TaskDefinitionFamily>()
                                     : std::make_shared<TaskDefinitionFamily>(*it->second);
      (*family)[td->revision] = td;
      (*tds)[td->family] = std::move(family);
    }
    view->task_definitions_ = std::move(tds);
  }

  // Copy on write per shard: the first change to a shard in this delta copies it.
  std::array<std::shared_ptr<InstanceShard>, kShards> instance_copies;
  std::shared_ptr<std::map<std::string, std::vector<std::string>>> by_cluster;
  for (auto& rec : delta.instances) {
    const std::string& arn = rec->instance.arn;
    const size_t s = ShardOf(arn);
    if (!instance_copies[s]) instance_copies[s] = std::make_shared<InstanceShard>(*base.instances_[s]);
    auto [it, inserted] = instance_copies[s]->try_emplace(arn, rec);
    if (!inserted) {
      it->second = rec;
    } else {
      if (!by_cluster) by_cluster = std::make_shared<std::map<std::string, std::vector<std::string>>>(*base.instances_by_cluster_);
      (*by_cluster)[rec->instance.cluster].push_back(arn);
    }
  }
  for (size_t s = 0; s < kShards; ++s)
    if (instance_copies[s]) view->instances_[s] = std::move(instance_copies[s]);
  if (by_cluster) view->instances_by_cluster_ = std::move(by_cluster);

  ApplyTaskOrders(base, delta, *view);

  std::array<std::shared_ptr<TaskShard>, kShards> task_copies;
  auto task_shard = [&](const std::string& arn) -> TaskShard& {
    const size_t s = ShardOf(arn);
    if (!task_copies[s]) task_copies[s] = std::make_shared<TaskShard>(*base.tasks_[s]);
    return *task_copies[s];
  };
  for (auto& t : delta.tasks) {
    TaskShard& shard = task_shard(t->arn);
    // The key views the ARN inside the entry's task: a replaced entry gets the key of its new task.
    if (shard.erase(t->arn) == 0) ++view->task_count_;
    const std::string_view key = t->arn;
    shard.emplace(key, t);
  }
  for (const auto& arn : delta.erased_tasks)
    if (task_shard(arn).erase(arn) != 0) --view->task_count_;
  for (size_t s = 0; s < kShards; ++s)
    if (task_copies[s]) view->tasks_[s] = std::move(task_copies[s]);
  return view;
}

// ApplyTaskOrders moves the tasks of `delta` in the ListTasks orders of `view` (a copy of `base`): a new task
// joins its cluster's order, one whose desired status changed moves to the other, an erased one leaves. A delta
// merges a whole commit group, so one task may come several times (a StopTask and the agent's report, two
// reports): each task moves once, from where `base` has it to where its last change puts it (nowhere when it
// was erased), so no order ever holds a task twice or keeps one the tasks map no longer has.
void ReadView::ApplyTaskOrders(const ReadView& base, const ViewDelta& delta, ReadView& view) {
  struct Change {
    std::vector<TaskKey> insert, erase;
  };
  std::unordered_map<std::string_view, const Task*> last;  // arn -> its last change; nullptr: erased
  for (const auto& t : delta.tasks) last[t->arn] = t.get();
  for (const auto& arn : delta.erased_tasks) last[arn] = nullptr;  // Apply erases after it updates
  std::map<std::pair<std::string, bool>, Change> changes;  // (cluster, stopped) -> change
  auto where = [](const Task& t) { return std::make_pair(t.cluster, t.desired_status == TaskStatus::kStopped); };
  for (const auto& [arn, t] : last) {
    const Task* old = base.FindTask(std::string(arn));
    if (old && t && where(*old) == where(*t)) continue;
    if (old) changes[where(*old)].erase.push_back({old->created_at, old->arn});
    if (t) changes[where(*t)].insert.push_back({t->created_at, t->arn});
  }
  if (changes.empty()) return;
  static const TaskOrder kEmpty;
  auto orders = std::make_shared<std::map<std::string, ClusterTaskOrders>>(*base.task_orders_);
  for (auto& [key, change] : changes) {
    auto& slot = key.second ? (*orders)[key.first].stopped : (*orders)[key.first].running;
    const TaskOrder& before = slot ? *slot : kEmpty;
    slot = std::make_shared<const TaskOrder>(before.With(std::move(change.insert), std::move(change.erase)));
  }
  view.task_orders_ = std::move(orders);
}

const TaskOrder& ReadView::TaskOrderOf(const std::string& cluster, bool stopped) const {
  static const TaskOrder kNone;
  auto it = task_orders_->find(cluster);
  if (it == task_orders_->end()) return kNone;
  const auto& order = stopped ? it->second.stopped : it->second.running;
  return order ? *order : kNone;
}

const Cluster* ReadView::FindCluster(const std::string& name) const {
  auto it = clusters_->find(name);
  return it == clusters_->end() ? nullptr : &it->second;
}

std::vector<const Cluster*> ReadView::Clusters() const {
  std::vector<const Cluster*> out;
  for (const auto& [_, c] : *clusters_) out.push_back(&c);
  return out;
}

ClusterCounts ReadView::CountsOf(const std::string& cluster) const {
  ClusterCounts counts;
  for (const InstanceRecord* rec : InstancesOf(cluster)) {
    if (rec->instance.status == InstanceStatus::kInactive) continue;
    ++counts.registered_instances;
    counts.running_tasks += rec->instance.running_tasks_count;
    counts.pending_tasks += rec->instance.pending_tasks_count;
  }
  for (const auto& shard : services_)
    for (const auto& [arn, svc] : *shard) {
      if (svc->cluster != cluster) continue;
      counts.active_services += svc->status == ServiceStatus::kActive;
      counts.draining_services += svc->status == ServiceStatus::kDraining;
    }
  return counts;
}

const TaskDefinition* ReadView::FindTaskDefinition(const std::string& family, int revision) const {
  auto f = task_definitions_->find(family);
  if (f == task_definitions_->end()) return nullptr;
  auto r = f->second->find(revision);
  return r == f->second->end() ? nullptr : r->second.get();
}

const TaskDefinition* ReadView::LatestActiveRevision(const std::string& family) const {
  auto f = task_definitions_->find(family);
  if (f == task_definitions_->end()) return nullptr;
  for (auto it = f->second->rbegin(); it != f->second->rend(); ++it)
    if (it->second->status == LifecycleStatus::kActive) return it->second.get();
  return nullptr;
}

const InstanceRecord* ReadView::FindInstanceRecord(const std::string& arn) const {
  const InstanceShard& shard = *instances_[ShardOf(arn)];
  auto it = shard.find(arn);
  return it == shard.end() ? nullptr : it->second.get();
}

const ContainerInstance* ReadView::FindInstance(const std::string& arn) const {
  const InstanceRecord* rec = FindInstanceRecord(arn);
  return rec ? &rec->instance : nullptr;
}

std::vector<const InstanceRecord*> ReadView::InstancesOf(const std::string& cluster) const {
  std::vector<const InstanceRecord*> out;
  auto it = instances_by_cluster_->find(cluster);
  if (it == instances_by_cluster_->end()) return out;
  out.reserve(it->second.size());
  for (const auto& arn : it->second)
    if (const InstanceRecord* rec = FindInstanceRecord(arn)) out.push_back(rec);
  return out;
}

std::shared_ptr<const ContainerInstance> ReadView::InstancePtr(const std::string& arn) const {
  const InstanceShard& shard = *instances_[ShardOf(arn)];
  auto it = shard.find(arn);
  if (it == shard.end()) return nullptr;
  return std::shared_ptr<const ContainerInstance>(it->second, &it->second->instance);
}

std::shared_ptr<const Task> ReadView::TaskPtr(const std::string& arn) const {
  const TaskShard& shard = *tasks_[ShardOf(arn)];
  auto it = shard.find(arn);
  return it == shard.end() ? nullptr : it->second;
}

const Task* ReadView::FindTask(const std::string& arn) const {
  const TaskShard& shard = *tasks_[ShardOf(arn)];
  auto it = shard.find(arn);
  return it == shard.end() ? nullptr : it->second.get();
}

}  // namespace gpupack::api
