#include "engine/core/transaction.h"

#include <algorithm>

namespace gpupack::api {

Transaction::Transaction(ClusterState& state, const ArnContext& arn, EpochMs now, std::mt19937_64& rng,
                         PlacementCounters& counters)
    : state_(state), arn_(arn), now_(now), rng_(rng), counters_(counters) {}

std::string Transaction::NewId() {
  static const char* kHex = "0123456789abcdef";
  std::string id(32, '0');
  uint64_t a = rng_(), b = rng_();
  for (int i = 0; i < 16; ++i) {
    id[i] = kHex[(a >> (i * 4)) & 15];
    id[16 + i] = kHex[(b >> (i * 4)) & 15];
  }
  return id;
}

uint64_t Transaction::NextSeed() { return rng_(); }

void Transaction::PutCluster(Cluster cluster) {
  clusters_.insert(cluster.name);
  state_.PutCluster(std::move(cluster));
}

void Transaction::PutTaskDefinition(TaskDefinition td) {
  task_definitions_.emplace(td.family, td.revision);
  state_.PutTaskDefinition(std::move(td));
}

void Transaction::PutInstance(ContainerInstance instance, bool rebuild) {
  const std::string arn = instance.arn;
  const bool known = instances_.count(arn) != 0;
  state_.PutInstance(std::move(instance));
  if (rebuild) state_.RebuildReservations();
  ContainerInstance* stored = state_.FindInstance(arn);
  if (!known) {
    instances_.insert(arn);
    ++stored->version;
  }
}

void Transaction::TouchInstance(ContainerInstance& instance) {
  if (instances_.insert(instance.arn).second) ++instance.version;
}

void Transaction::ViewInstance(const std::string& arn) {
  if (!arn.empty()) instance_views_.insert(arn);
}

void Transaction::UpdateInstance(const std::string& arn, const std::function<void(ContainerInstance&)>& change) {
  ContainerInstance* inst = state_.FindInstance(arn);
  if (!inst) return;
  change(*inst);
  state_.TouchInstance(arn);  // binpack(fragmentation)'s cached moves of it are recomputed
  TouchInstance(*inst);
}

void Transaction::TouchTask(Task& task) {
  if (tasks_.insert(task.arn).second) {
    task_order_.push_back(task.arn);
    ++task.version;
  }
}

Status Transaction::ReserveTask(Task task) {
  const std::string arn = task.arn, instance = task.container_instance_arn;
  if (Status s = state_.ReserveTask(std::move(task)); !s.ok()) return s;
  tasks_.insert(arn);  // a new task keeps version 1
  task_order_.push_back(arn);
  erased_tasks_.erase(arn);
  ViewInstance(instance);
  return Status::Ok();
}

Status Transaction::AddWaitingTask(Task task) {
  const std::string arn = task.arn;
  if (Status s = state_.AddWaitingTask(std::move(task)); !s.ok()) return s;
  tasks_.insert(arn);  // a new task keeps version 1
  task_order_.push_back(arn);
  erased_tasks_.erase(arn);
  return Status::Ok();
}

Status Transaction::PlaceWaitingTask(Task placed) {
  const std::string arn = placed.arn, instance = placed.container_instance_arn;
  const bool known = tasks_.count(arn) != 0;
  if (!known) ++placed.version;
  if (Status s = state_.PlaceWaitingTask(std::move(placed)); !s.ok()) return s;
  if (!known) {
    tasks_.insert(arn);
    task_order_.push_back(arn);
  }
  ViewInstance(instance);
  return Status::Ok();
}

void Transaction::PutCapacityProvider(CapacityProvider provider) {
  const std::string name = provider.name;
  if (capacity_providers_.insert(name).second)
    if (const CapacityProvider* old = state_.FindCapacityProvider(name)) provider.version = old->version + 1;
  state_.PutCapacityProvider(std::move(provider));
}

void Transaction::UpdateTask(const std::string& arn, const std::function<void(Task&)>& change) {
  Task* task = state_.FindTask(arn);
  if (!task) return;
  change(*task);
  state_.RefileStopped(arn);  // a change of a STOPPED task's stopped_at moves it in the purge's index
  TouchTask(*task);
}

void Transaction::SetTaskStatus(const std::string& arn, TaskStatus status) {
  Task* task = state_.FindTask(arn);
  if (!task) return;
  const bool held = !task->resources_released;
  state_.SetTaskLastStatus(arn, status);
  task = state_.FindTask(arn);  // SetTaskLastStatus may have copied it (copy on write)
  if (held && task->resources_released) released_tasks_.push_back(arn);
  TouchTask(*task);
  ViewInstance(task->container_instance_arn);
}

Status Transaction::EraseStoppedTask(const std::string& arn) {
  if (Status s = state_.EraseStoppedTask(arn); !s.ok()) return s;
  if (tasks_.erase(arn)) std::erase(task_order_, arn);
  erased_tasks_.insert(arn);
  return Status::Ok();
}

void Transaction::PutClientToken(ClientTokenRecord record) {
  deleted_client_tokens_.erase({record.cluster, record.token});
  client_tokens_.push_back(record);
  state_.PutClientToken(std::move(record));
}

void Transaction::DeleteClientToken(std::string cluster, std::string token) {
  if (!state_.EraseClientToken(cluster, token)) return;
  std::erase_if(client_tokens_,
                [&](const ClientTokenRecord& r) { return r.cluster == cluster && r.token == token; });
  deleted_client_tokens_.emplace(cluster, token);
}

void Transaction::PutService(Service service) {
  const std::string arn = service.arn;
  const bool known = services_.count(arn) != 0;
  state_.PutService(std::move(service));
  if (!known) {
    services_.insert(arn);
    if (const Service* stored = state_.FindService(arn); stored && stored->version > 0) {
      Service bumped = *stored;
      ++bumped.version;
      state_.PutService(std::move(bumped));
    }
  }
  marked_services_.insert(arn);
}

void Transaction::UpdateService(const std::string& arn, const std::function<void(Service&)>& change) {
  const Service* stored = state_.FindService(arn);
  if (!stored) return;
  Service copy = *stored;
  change(copy);
  if (services_.insert(arn).second) ++copy.version;
  state_.PutService(std::move(copy));
}

void Transaction::Push(const std::string& instance_arn, AgentPush push) {
  pushes_.emplace_back(instance_arn, std::move(push));
}

Transaction::Outcome Transaction::Finish() {
  Outcome out;
  out.write = write_;
  out.from_committed = from_committed_;
  for (const auto& name : clusters_)
    if (const Cluster* c = state_.FindCluster(name)) {
      out.batch.PutCluster(*c);
      out.delta.clusters.push_back(*c);
    }
  for (const auto& [family, revision] : task_definitions_)
    if (const TaskDefinition* td = state_.FindTaskDefinition(family, revision)) {
      out.batch.PutTaskDefinition(*td);
      out.delta.task_definitions.push_back(std::make_shared<const TaskDefinition>(*td));
    }
  std::set<std::string> viewed = instance_views_;
  viewed.insert(instances_.begin(), instances_.end());
  for (const auto& arn : instances_)
    if (const ContainerInstance* inst = state_.FindInstance(arn)) out.batch.PutInstance(*inst);
  for (const auto& arn : viewed)
    if (const ContainerInstance* inst = state_.FindInstance(arn)) {
      auto rec = std::make_shared<InstanceRecord>();
      rec->instance = *inst;
      const InstanceLoad& load = state_.LoadOf(*inst);
      rec->load.group_counts = load.group_counts;
      out.delta.instances.push_back(std::move(rec));
    }
  for (const auto& arn : task_order_)
    if (auto t = state_.SharedTask(arn)) {
      out.batch.PutTask(*t);
      out.delta.tasks.push_back(std::move(t));  // shared: the state copies it before changing it again
    }
  for (const auto& arn : erased_tasks_) {
    out.batch.DeleteTask(arn);
    out.delta.erased_tasks.push_back(arn);
  }
  for (auto& rec : client_tokens_) out.batch.PutClientToken(std::move(rec));
  for (const auto& [cluster, token] : deleted_client_tokens_) out.batch.DeleteClientToken(cluster, token);
  for (const auto& arn : services_)
    if (const Service* svc = state_.FindService(arn)) {
      out.batch.PutService(*svc);
      out.delta.services.push_back(std::make_shared<const Service>(*svc));
    }
  for (const auto& name : capacity_providers_)
    if (const CapacityProvider* p = state_.FindCapacityProvider(name)) {
      out.batch.PutCapacityProvider(*p);
      out.delta.capacity_providers.push_back(*p);
    }
  out.pushes = std::move(pushes_);
  return out;
}

void Transaction::RecordRefusal(PlacementRefusal refusal) {
  // The published counters may share the log: change a copy then (only this thread ever changes a log).
  if (counters_.refusals.use_count() != 1) counters_.refusals = std::make_shared<RefusalLog>(*counters_.refusals);
  counters_.refusals->Add(std::move(refusal));
  ++counters_.changes;
}

void Transaction::CountWaitEnded(const std::string& provider, EpochMs waited_ms) {
  WaitHistogram& h = counters_.waits[provider];
  const double seconds = static_cast<double>(std::max<EpochMs>(0, waited_ms)) / 1000.0;
  size_t b = 0;
  while (b < std::size(kWaitBucketsSeconds) && seconds > kWaitBucketsSeconds[b]) ++b;
  ++h.buckets[b];
  ++h.count;
  h.sum_seconds += seconds;
  ++counters_.changes;
}

void Transaction::CountWaiting() {
  if (state_.WaitingTotal() == 0 && counters_.waiting.empty()) return;
  std::map<std::pair<std::string, std::string>, uint64_t> now;
  for (const auto& [key, n] : counters_.waiting) now[key] = 0;
  for (const auto& [cluster, lines] : state_.AllWaitLines())
    for (const auto& [provider, line] : lines) now[{cluster, provider}] = line.size();
  if (now == counters_.waiting) return;
  counters_.waiting = std::move(now);
  ++counters_.changes;
}

}  // namespace gpupack::api
