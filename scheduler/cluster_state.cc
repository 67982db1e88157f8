#include "scheduler/cluster_state.h"
#include "scheduler/holdings.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "scheduler/fragmentation.h"

namespace gpupack {

// ---- clusters ----------------------------------------------------------------------------------------------

const Cluster* ClusterState::FindCluster(const std::string& name) const {
  auto it = clusters_.find(name);
  return it == clusters_.end() ? nullptr : &it->second;
}

void ClusterState::PutCluster(Cluster cluster) {
  std::string name = cluster.name;
  clusters_[name] = std::move(cluster);
  MutableFragments(name);
}

std::vector<const Cluster*> ClusterState::Clusters() const {
  std::vector<const Cluster*> out;
  out.reserve(clusters_.size());
  for (const auto& [_, c] : clusters_) out.push_back(&c);
  return out;
}

// ---- task definitions --------------------------------------------------------------------------------------

const TaskDefinition* ClusterState::FindTaskDefinition(const std::string& family, int revision) const {
  auto f = task_definitions_.find(family);
  if (f == task_definitions_.end()) return nullptr;
  auto r = f->second.find(revision);
  return r == f->second.end() ? nullptr : &r->second;
}

const TaskDefinition* ClusterState::LatestActiveRevision(const std::string& family) const {
  auto f = task_definitions_.find(family);
  if (f == task_definitions_.end()) return nullptr;
  for (auto it = f->second.rbegin(); it != f->second.rend(); ++it)
    if (it->second.status == LifecycleStatus::kActive) return &it->second;
  return nullptr;
}

int ClusterState::LatestRevision(const std::string& family) const {
  auto f = task_definitions_.find(family);
  if (f == task_definitions_.end() || f->second.empty()) return 0;
  return f->second.rbegin()->first;
}

void ClusterState::PutTaskDefinition(TaskDefinition td) {
  auto& revs = task_definitions_[td.family];
  int rev = td.revision;
  revs[rev] = std::move(td);
}

// ---- container instances -----------------------------------------------------------------------------------

ContainerInstance* ClusterState::FindInstance(const std::string& arn) {
  auto it = instances_.find(arn);
  return it == instances_.end() ? nullptr : it->second.instance.get();
}

const ContainerInstance* ClusterState::FindInstance(const std::string& arn) const {
  auto it = instances_.find(arn);
  return it == instances_.end() ? nullptr : it->second.instance.get();
}

void ClusterState::PutInstance(ContainerInstance instance) {
  auto it = instances_.find(instance.arn);
  if (it != instances_.end()) {
    IndexInstance(it->second, /*insert=*/false);
    IndexProvider(it->second, /*insert=*/false);
    *it->second.instance = std::move(instance);
    IndexInstance(it->second, /*insert=*/true);
    IndexProvider(it->second, /*insert=*/true);
    Touch(it->second);
    return;
  }
  std::string arn = instance.arn;
  std::string cluster = instance.cluster;
  auto& slot = instances_[arn];
  slot.instance = std::make_unique<ContainerInstance>(std::move(instance));
  auto& list = by_cluster_[cluster];
  slot.seq = static_cast<uint32_t>(list.size());
  list.push_back(slot.instance.get());
  entries_by_cluster_[cluster].push_back({slot.instance.get(), &slot.load});
  by_pointer_[slot.instance.get()] = &slot;
  IndexInstance(slot, /*insert=*/true);
  IndexProvider(slot, /*insert=*/true);
  Touch(slot);
}

void ClusterState::IndexInstance(const InstanceSlot& slot, bool insert) {
  IndexGpus(slot, insert);
  IndexHost(slot, insert);
}

void ClusterState::IndexHost(const InstanceSlot& slot, bool insert) {
  auto& index = host_index_[slot.instance->cluster];
  const HostSlot cpu{slot.instance->remaining.cpu, slot.seq, slot.instance.get()};
  const HostSlot memory{slot.instance->remaining.memory, slot.seq, slot.instance.get()};
  if (insert) {
    index.cpu.insert(cpu);
    index.memory.insert(memory);
  } else {
    index.cpu.erase(cpu);
    index.memory.erase(memory);
  }
}

void ClusterState::IndexGpus(const InstanceSlot& slot, bool insert) {
  auto& index = gpu_index_[slot.instance->cluster];
  for (uint32_t i = 0; i < slot.instance->gpus.size(); ++i) {
    GpuSlot key{slot.instance->gpus[i].remaining_memory_mib, slot.seq, i, slot.instance.get()};
    if (insert) index.insert(key);
    else index.erase(key);
  }
}

const std::set<GpuSlot>& ClusterState::GpuIndex(const std::string& cluster) const {
  static const std::set<GpuSlot> kNone;
  auto it = gpu_index_.find(cluster);
  return it == gpu_index_.end() ? kNone : it->second;
}

const std::set<HostSlot>& ClusterState::HostIndex(const std::string& cluster, HostResource resource) const {
  static const std::set<HostSlot> kNone;
  auto it = host_index_.find(cluster);
  if (it == host_index_.end()) return kNone;
  return resource == HostResource::kCpu ? it->second.cpu : it->second.memory;
}

const GroupMembers& ClusterState::GroupIndex(const std::string& cluster, uint32_t group_id) const {
  static const GroupMembers kNone;
  auto it = group_index_.find(cluster);
  if (it == group_index_.end()) return kNone;
  auto by_group = it->second.find(group_id);
  return by_group == it->second.end() ? kNone : by_group->second;
}

const InstanceLoad& ClusterState::LoadOf(const ContainerInstance& instance) const {
  static const InstanceLoad kEmpty;
  auto it = by_pointer_.find(&instance);
  return it == by_pointer_.end() ? kEmpty : it->second->load;
}

const std::vector<ContainerInstance*>& ClusterState::InstancesOf(const std::string& cluster) const {
  static const std::vector<ContainerInstance*> kNone;
  auto it = by_cluster_.find(cluster);
  return it == by_cluster_.end() ? kNone : it->second;
}

const std::vector<InstanceEntry>& ClusterState::EntriesOf(const std::string& cluster) const {
  static const std::vector<InstanceEntry> kNone;
  auto it = entries_by_cluster_.find(cluster);
  return it == entries_by_cluster_.end() ? kNone : it->second;
}

uint32_t ClusterState::GroupId(const std::string& group) const {
  auto it = group_ids_.find(group);
  return it == group_ids_.end() ? kNoGroupId : it->second;
}

size_t ClusterState::GroupIndexEntries() const {
  size_t n = 0;
  for (const auto& [_, groups] : group_index_) n += groups.size();
  return n;
}

uint32_t ClusterState::HoldGroup(const std::string& group) {
  auto [it, inserted] = group_ids_.try_emplace(group, 0);
  if (inserted) {
    if (!free_group_ids_.empty()) {
      it->second = free_group_ids_.back();
      free_group_ids_.pop_back();
    } else {
      it->second = static_cast<uint32_t>(group_holders_.size());
      group_holders_.push_back(0);
    }
  }
  ++group_holders_[it->second];
  return it->second;
}

void ClusterState::UnholdGroup(const std::string& group, uint32_t id) {
  if (id >= group_holders_.size() || --group_holders_[id] > 0) return;
  group_holders_[id] = 0;
  group_ids_.erase(group);
  free_group_ids_.push_back(id);
}

const InstanceLoad& ClusterState::LoadOf(const std::string& instance_arn) const {
  static const InstanceLoad kEmpty;
  auto it = instances_.find(instance_arn);
  return it == instances_.end() ? kEmpty : it->second.load;
}

// ---- tasks -------------------------------------------------------------------------------------------------

Task& ClusterState::Own(std::shared_ptr<Task>& task) {
  if (task.use_count() > 1) {
    auto copy = std::make_shared<Task>(*task);
    superseded_.push_back(std::move(task));
    task = std::move(copy);
  } else {
    // Only this state holds it. Another thread may just have let go of its reference: see its reads of the
    // task before writing it.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return *task;
}

Task* ClusterState::FindTask(const std::string& arn) {
  auto it = tasks_.find(arn);
  return it == tasks_.end() ? nullptr : &Own(it->second);
}

const Task* ClusterState::FindTask(const std::string& arn) const {
  auto it = tasks_.find(arn);
  return it == tasks_.end() ? nullptr : it->second.get();
}

std::shared_ptr<const Task> ClusterState::SharedTask(const std::string& arn) const {
  auto it = tasks_.find(arn);
  return it == tasks_.end() ? nullptr : std::shared_ptr<const Task>(it->second);
}

void ClusterState::PutTask(Task task) {
  std::string arn = task.arn;
  if (!task.resources_released) IndexServiceTask(task, /*insert=*/true);
  last_wait_seq_ = std::max(last_wait_seq_, task.wait_seq);
  if (auto old = tasks_.find(arn); old != tasks_.end() && old->second->last_status == TaskStatus::kProvisioning)
    IndexWaiting(*old->second, /*insert=*/false);
  if (task.last_status == TaskStatus::kProvisioning) IndexWaiting(task, /*insert=*/true);
  auto& slot = tasks_[arn];
  slot = std::make_shared<Task>(std::move(task));
  FileStopped(arn, slot.get());
}

Status ClusterState::EraseStoppedTask(const std::string& arn) {
  auto it = tasks_.find(arn);
  if (it == tasks_.end()) return Status::Ok();
  if (!it->second->resources_released)
    return Status::Server("task " + arn + " still holds resources and cannot be purged");
  FileStopped(arn, nullptr);  // before the erase: `arn` may be the task's own string
  tasks_.erase(it);
  return Status::Ok();
}

void ClusterState::RefileStopped(const std::string& arn) {
  auto it = tasks_.find(arn);
  FileStopped(arn, it == tasks_.end() ? nullptr : it->second.get());
}

void ClusterState::FileStopped(const std::string& arn, const Task* task) {
  const bool stopped = task && task->last_status == TaskStatus::kStopped && task->stopped_at != 0;
  auto filed = stopped_filed_.find(arn);
  if (filed == stopped_filed_.end()) {
    if (!stopped) return;
    auto entry = stopped_.emplace(task->stopped_at, arn).first;
    stopped_filed_.emplace(entry->second, task->stopped_at);
    return;
  }
  if (stopped && filed->second == task->stopped_at) return;  // filed already, under its stopped_at
  // The entry's node moves to the new time or goes: nothing reads `arn` once it is out, so `arn` may be the
  // entry's own string (an ARN taken from StoppedTasks).
  auto node = stopped_.extract(stopped_.find({filed->second, arn}));
  stopped_filed_.erase(filed);
  if (!stopped) return;
  node.value().first = task->stopped_at;
  auto entry = stopped_.insert(std::move(node)).position;
  stopped_filed_.emplace(entry->second, task->stopped_at);
}

// ApplyReservation adds (sign = +1) or returns (sign = -1) a task's holdings on its instance and GPUs.
// GPU mode follows the holdings: a GPU with no containers left goes back to IDLE.
void ClusterState::ApplyReservation(const Task& task, int sign) {
  auto it = instances_.find(task.container_instance_arn);
  if (it == instances_.end()) return;
  ContainerInstance& inst = *it->second.instance;
  InstanceLoad& load = it->second.load;
  IndexInstance(it->second, /*insert=*/false);
  inst.remaining.cpu -= sign * task.reserved.cpu;
  inst.remaining.memory -= sign * task.reserved.memory;
  for (const auto& r : task.gpu_reservations) {
    for (auto& gpu : inst.gpus) {
      if (gpu.id != r.gpu_id) continue;
      gpu.container_count += sign * r.containers;
      if (r.dedicated) {
        gpu.remaining_memory_mib = sign > 0 ? 0 : gpu.total_memory_mib;
        gpu.mode = sign > 0 ? GpuMode::kDedicated : GpuMode::kIdle;
      } else {
        gpu.remaining_memory_mib -= sign * r.memory_mib;
        gpu.compute_used_percent += sign * r.compute_percent;
        gpu.mode = gpu.container_count > 0 ? GpuMode::kMps : GpuMode::kIdle;
      }
      if (gpu.container_count <= 0) {
        gpu.container_count = 0;
        gpu.mode = GpuMode::kIdle;
        gpu.remaining_memory_mib = gpu.total_memory_mib;
        gpu.compute_used_percent = 0;
      }
    }
  }
  IndexInstance(it->second, /*insert=*/true);
  Touch(it->second);
  if (!task.capacity_provider_name.empty()) CountProviderUsage(task, inst, sign);
  if (sign > 0) {
    ++load.group_counts[task.group];
    load.task_arns.push_back(task.arn);
    if (task.last_status == TaskStatus::kRunning) ++inst.running_tasks_count; else ++inst.pending_tasks_count;
  } else {
    if (--load.group_counts[task.group] <= 0) load.group_counts.erase(task.group);
    std::erase(load.task_arns, task.arn);
    if (task.last_status == TaskStatus::kRunning) --inst.running_tasks_count; else --inst.pending_tasks_count;
    inst.running_tasks_count = std::max(0, inst.running_tasks_count);
    inst.pending_tasks_count = std::max(0, inst.pending_tasks_count);
  }
  // A reservation holds its group's id; a release gives it back (the id is freed with the group's last task).
  const uint32_t group_id = sign > 0 ? HoldGroup(task.group) : GroupId(task.group);
  if (group_id == kNoGroupId) return;  // a release of a task whose reservation was never applied
  auto by_id = std::find_if(load.group_id_counts.begin(), load.group_id_counts.end(),
                            [&](const auto& e) { return e.first == group_id; });
  const int old_count = by_id == load.group_id_counts.end() ? 0 : by_id->second;
  const uint32_t seq = it->second.seq;
  auto& cluster_groups = group_index_[inst.cluster];
  GroupMembers& members = cluster_groups[group_id];
  if (old_count > 0) members.by_count.erase({old_count, seq});
  if (sign > 0) {
    if (by_id == load.group_id_counts.end()) load.group_id_counts.emplace_back(group_id, 1);
    else ++by_id->second;
  } else if (by_id != load.group_id_counts.end() && --by_id->second <= 0) {
    load.group_id_counts.erase(by_id);
  }
  const int new_count = load.CountOfGroupId(group_id);
  if (new_count > 0) members.by_count.insert({new_count, seq});
  if (members.present.size() <= seq / 64) members.present.resize(seq / 64 + 1, 0);
  const uint64_t bit = uint64_t{1} << (seq % 64);
  members.present[seq / 64] = new_count > 0 ? members.present[seq / 64] | bit : members.present[seq / 64] & ~bit;
  if (sign < 0) {
    if (members.by_count.empty()) {  // no instance of the cluster holds a task of the group any more
      cluster_groups.erase(group_id);
      if (cluster_groups.empty()) group_index_.erase(inst.cluster);
    }
    UnholdGroup(task.group, group_id);
  }
}

Status ClusterState::ReserveTask(Task task) {
  if (tasks_.count(task.arn)) return Status::Conflict("task " + task.arn + " already exists");
  if (!FindInstance(task.container_instance_arn))
    return Status::Server("task " + task.arn + " placed on unknown instance " + task.container_instance_arn);
  task.resources_released = false;
  ApplyReservation(task, +1);
  IndexServiceTask(task, /*insert=*/true);
  std::string arn = task.arn;
  auto& slot = tasks_[arn];
  slot = std::make_shared<Task>(std::move(task));
  FileStopped(arn, slot.get());
  return Status::Ok();
}

bool ClusterState::ReleaseTask(const std::string& task_arn) {
  auto it = tasks_.find(task_arn);
  if (it == tasks_.end() || it->second->resources_released) return false;
  ApplyReservation(*it->second, -1);
  IndexServiceTask(*it->second, /*insert=*/false);
  Own(it->second).resources_released = true;
  return true;
}

// ---- services ----------------------------------------------------------------------------------------------

const Service* ClusterState::FindService(const std::string& arn) const {
  auto it = services_.find(arn);
  return it == services_.end() ? nullptr : &it->second;
}

void ClusterState::PutService(Service service) {
  std::string arn = service.arn;
  if (auto old = services_.find(arn); old != services_.end()) {
    starved_services_[old->second.cluster].erase(arn);
    daemon_services_[old->second.cluster].erase(arn);
    service_wakes_.erase({old->second.next_launch_at, arn});
  }
  if (service.starved && service.status != ServiceStatus::kInactive) starved_services_[service.cluster].insert(arn);
  if (service.daemon && service.status != ServiceStatus::kInactive) daemon_services_[service.cluster].insert(arn);
  if (service.next_launch_at > 0 && service.status != ServiceStatus::kInactive)
    service_wakes_.emplace(service.next_launch_at, arn);
  services_[arn] = std::move(service);
}

const std::set<std::string>& ClusterState::StarvedServices(const std::string& cluster) const {
  static const std::set<std::string> kNone;
  auto it = starved_services_.find(cluster);
  return it == starved_services_.end() ? kNone : it->second;
}

const std::set<std::string>& ClusterState::DaemonServices(const std::string& cluster) const {
  static const std::set<std::string> kNone;
  auto it = daemon_services_.find(cluster);
  return it == daemon_services_.end() ? kNone : it->second;
}

const std::set<std::string>& ClusterState::ServiceTasks(const std::string& cluster, const std::string& group) const {
  static const std::set<std::string> kNone;
  auto it = service_tasks_.find({cluster, group});
  return it == service_tasks_.end() ? kNone : it->second;
}

void ClusterState::IndexServiceTask(const Task& task, bool insert) {
  if (task.group.rfind("service:", 0) != 0) return;
  if (insert) {
    service_tasks_[{task.cluster, task.group}].insert(task.arn);
    return;
  }
  auto it = service_tasks_.find({task.cluster, task.group});
  if (it == service_tasks_.end()) return;
  it->second.erase(task.arn);
  if (it->second.empty()) service_tasks_.erase(it);
}

void ClusterState::SetTaskLastStatus(const std::string& task_arn, TaskStatus last_status) {
  Task* task = FindTask(task_arn);
  if (!task || task->last_status == last_status) return;
  if (task->last_status == TaskStatus::kProvisioning) {  // it leaves its line (only STOPPED may follow here)
    IndexWaiting(*task, /*insert=*/false);
  } else if (last_status == TaskStatus::kStopped) {
    ReleaseTask(task_arn);
  } else if (ContainerInstance* inst =
                 task->resources_released ? nullptr : FindInstance(task->container_instance_arn)) {
    bool was_running = task->last_status == TaskStatus::kRunning, now_running = last_status == TaskStatus::kRunning;
    if (was_running != now_running) {
      inst->running_tasks_count += now_running ? 1 : -1;
      inst->pending_tasks_count += now_running ? -1 : 1;
    }
  }
  task->last_status = last_status;
  FileStopped(task_arn, task);
}

void ResetHoldings(ContainerInstance& inst) {
  inst.remaining = inst.registered;
  inst.running_tasks_count = inst.pending_tasks_count = 0;
  for (auto& gpu : inst.gpus) {
    gpu.remaining_memory_mib = gpu.total_memory_mib;
    gpu.mode = GpuMode::kIdle;
    gpu.container_count = 0;
    gpu.compute_used_percent = 0;
  }
}

void ClusterState::RebuildReservations() {
  for (auto& [_, slot] : instances_) {
    ResetHoldings(*slot.instance);
    slot.load = InstanceLoad{};
  }
  for (auto& [_, index] : gpu_index_) index.clear();
  for (auto& [_, index] : host_index_) index = HostIndexes{};
  group_index_.clear();
  group_ids_.clear();
  group_holders_.clear();
  free_group_ids_.clear();
  provider_usage_.clear();
  for (auto& [_, slot] : instances_) {
    IndexInstance(slot, /*insert=*/true);
    Touch(slot);
  }
  for (const auto& [_, task] : tasks_)
    if (!task->resources_released) ApplyReservation(*task, +1);
}

// ---- fragmentation -----------------------------------------------------------------------------------------

void ClusterState::Touch(InstanceSlot& slot) {
  slot.load.stamp = ++stamps_;
  auto& stamps = stamps_by_cluster_[slot.instance->cluster];
  if (stamps.size() <= slot.seq) stamps.resize(slot.seq + 1, 0);
  stamps[slot.seq] = slot.load.stamp;
}

void ClusterState::TouchInstance(const std::string& arn) {
  auto it = instances_.find(arn);
  if (it != instances_.end()) Touch(it->second);
}

const std::vector<uint64_t>& ClusterState::StampsOf(const std::string& cluster) const {
  static const std::vector<uint64_t> kNone;
  auto it = stamps_by_cluster_.find(cluster);
  return it == stamps_by_cluster_.end() ? kNone : it->second;
}

const ClusterFragments* ClusterState::FragmentsOf(const std::string& cluster) const {
  auto it = fragments_.find(cluster);
  return it == fragments_.end() ? nullptr : it->second.get();
}

ClusterFragments& ClusterState::MutableFragments(const std::string& cluster) {
  auto& f = fragments_[cluster];
  if (!f) {
    f = std::make_shared<ClusterFragments>();
    auto all = fragments_.find("");  // the workload SetTargetWorkload gave every cluster
    if (all != fragments_.end() && all->second) f->operator_workload = all->second->operator_workload;
  }
  return *f;
}

void ClusterState::SetTargetWorkload(const std::string& cluster, std::shared_ptr<const TargetWorkload> workload) {
  if (cluster.empty())
    for (auto& [_, f] : fragments_)
      if (f) f->operator_workload = workload;
  MutableFragments(cluster).operator_workload = std::move(workload);
}

void ClusterState::RecordDemand(const std::string& cluster, const WorkloadShape& shape) {
  MutableFragments(cluster).window.Record(shape);
}

// ---- client tokens -----------------------------------------------------------------------------------------

const ClientTokenRecord* ClusterState::FindClientToken(const std::string& cluster, const std::string& token) const {
  auto it = client_tokens_.find({cluster, token});
  return it == client_tokens_.end() ? nullptr : &it->second;
}

void ClusterState::PutClientToken(ClientTokenRecord record) {
  auto [it, inserted] = client_tokens_.try_emplace({record.cluster, record.token});
  if (!inserted) tokens_by_age_.erase(&it->second);  // before the record changes: its entry is ordered by it
  it->second = std::move(record);
  tokens_by_age_.insert(&it->second);
}

bool ClusterState::EraseClientToken(const std::string& cluster, const std::string& token) {
  auto it = client_tokens_.find({cluster, token});
  if (it == client_tokens_.end()) return false;
  tokens_by_age_.erase(&it->second);
  client_tokens_.erase(it);
  return true;
}

// ---- demand ------------------------------------------------------------------------------------------------

const ContainerOverride* OverrideFor(const TaskOverride& overrides, const std::string& name) {
  const ContainerOverride* o = nullptr;
  for (const auto& co : overrides.container_overrides)
    if (co.name == name) o = &co;  // the last one wins, as everywhere else
  return o;
}

std::vector<ResourceRequirement> EffectiveRequirements(const ContainerDefinition& c, const ContainerOverride* o) {
  if (o == nullptr || o->resource_requirements.empty()) return c.resource_requirements;
  std::vector<ResourceRequirement> out;
  for (const auto& r : c.resource_requirements) {
    bool replaced = std::any_of(o->resource_requirements.begin(), o->resource_requirements.end(),
                                [&](const ResourceRequirement& x) { return x.type == r.type; });
    if (!replaced) out.push_back(r);
  }
  out.insert(out.end(), o->resource_requirements.begin(), o->resource_requirements.end());
  return out;
}

TaskDemand DemandOf(const TaskDefinition& td, const TaskOverride& overrides) {
  TaskDemand d;
  int64_t cpu_sum = 0;
  int64_t mem_sum = 0;
  for (const auto& c : td.containers) {
    const ContainerOverride* o = OverrideFor(overrides, c.name);
    int64_t cpu = o && o->cpu ? *o->cpu : c.cpu;
    std::optional<int64_t> mem = o && o->memory ? o->memory : c.memory;
    std::optional<int64_t> res = o && o->memory_reservation ? o->memory_reservation : c.memory_reservation;
    cpu_sum += cpu;
    // ECS reserves the soft limit when given, else the hard limit.
    mem_sum += res ? *res : mem.value_or(0);
    for (const auto& r : EffectiveRequirements(c, o)) {
      if (r.type != "GPU") continue;
      if (r.mps) {
        d.gpu_kind = GpuKind::kShared;
        d.gpu_memory += r.mps->memory_mib;
        d.gpu_compute += r.mps->EffectiveComputePercent();
      } else if (r.value) {
        int64_t n = 0;
        auto [p, ec] = std::from_chars(r.value->data(), r.value->data() + r.value->size(), n);
        if (ec == std::errc() && n > 0) {
          d.gpu_kind = GpuKind::kDedicated;
          d.gpu_count += static_cast<int>(n);
        }
      }
    }
  }
  std::optional<int64_t> task_cpu = overrides.cpu ? ParseTaskCpu(*overrides.cpu)
                                    : td.cpu    ? ParseTaskCpu(*td.cpu)
                                                : std::nullopt;
  std::optional<int64_t> task_mem = overrides.memory ? ParseTaskMemory(*overrides.memory)
                                    : td.memory      ? ParseTaskMemory(*td.memory)
                                                     : std::nullopt;
  d.cpu = task_cpu.value_or(cpu_sum);
  d.memory = task_mem.value_or(mem_sum);
  return d;
}

namespace {

std::string Lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Parses "<number> <unit>" where unit is one of `units` (lower-case) with its multiplier; a bare integer uses
// `bare_multiplier`. Returns nullopt on anything else or on non-positive or absurd values.
std::optional<int64_t> ParseQuantity(const std::string& text, int64_t bare_multiplier,
                                     std::initializer_list<std::pair<const char*, int64_t>> units) {
  std::string t = Lower(Trim(text));
  if (t.empty() || t.size() > 32) return std::nullopt;
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  std::string num = t.substr(0, i);
  std::string unit = Trim(t.substr(i));
  if (num.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !(v > 0) || v > 1e12) return std::nullopt;
  if (unit.empty()) {
    if (num.find('.') != std::string::npos) return std::nullopt;
    return static_cast<int64_t>(v) * bare_multiplier;
  }
  for (const auto& [name, mult] : units)
    if (unit == name) return static_cast<int64_t>(std::llround(v * static_cast<double>(mult)));
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> ParseTaskCpu(const std::string& text) {
  return ParseQuantity(text, 1, {{"vcpu", 1024}});
}

std::optional<int64_t> ParseTaskMemory(const std::string& text) {
  return ParseQuantity(text, 1, {{"gb", 1024}, {"gib", 1024}, {"mb", 1}, {"mib", 1}});
}

}  // namespace gpupack
