// ClusterState's capacity-provider rooms (scheduler/cluster_state.h): each cluster's instances by provider (the
// candidates of a provider's tasks), the GPU memory each provider's tasks hold by team (the quotas), and the lines
// of the tasks waiting for a provider's capacity.
#include <algorithm>

#include "scheduler/cluster_state.h"

namespace gpupack {

const std::string* CapacityProviderOf(const ContainerInstance& instance) {
  const Attribute* a = instance.FindAttribute(kCapacityProviderAttribute);
  return a && a->value && !a->value->empty() ? &*a->value : nullptr;
}

std::string TeamOf(const std::vector<KeyValuePair>& tags) {
  for (const auto& tag : tags)
    if (tag.name == kTeamTag) return tag.value;
  return "";
}

MiB GpuMemoryOf(const Task& task, const ContainerInstance& instance) {
  MiB total = 0;
  for (const auto& r : task.gpu_reservations) {
    if (!r.dedicated) {
      total += r.memory_mib;
      continue;
    }
    for (const auto& gpu : instance.gpus)
      if (gpu.id == r.gpu_id) total += gpu.total_memory_mib;
  }
  return total;
}

// ---- instances by capacity provider ------------------------------------------------------------------------

void ClusterState::IndexProvider(const InstanceSlot& slot, bool insert) {
  const std::string* provider = CapacityProviderOf(*slot.instance);
  if (!provider) return;
  auto& by_provider = provider_entries_[slot.instance->cluster];
  std::vector<uint32_t>& positions = by_provider[*provider];
  auto at = std::lower_bound(positions.begin(), positions.end(), slot.seq);
  if (insert) {
    if (at == positions.end() || *at != slot.seq) positions.insert(at, slot.seq);
    return;
  }
  if (at != positions.end() && *at == slot.seq) positions.erase(at);
  if (positions.empty()) by_provider.erase(*provider);
}

const std::vector<uint32_t>& ClusterState::ProviderEntries(const std::string& cluster,
                                                           const std::string& provider) const {
  static const std::vector<uint32_t> kNone;
  auto c = provider_entries_.find(cluster);
  if (c == provider_entries_.end()) return kNone;
  auto p = c->second.find(provider);
  return p == c->second.end() ? kNone : p->second;
}

// ---- GPU memory held through each provider, by team ---------------------------------------------------------

void ClusterState::CountProviderUsage(const Task& task, const ContainerInstance& instance, int sign) {
  const MiB mib = sign * GpuMemoryOf(task, instance);
  ProviderUsage& usage = provider_usage_[task.capacity_provider_name];
  usage.total += mib;
  MiB& team = usage.by_team[TeamOf(task.tags)];
  team += mib;
  if (team == 0) usage.by_team.erase(TeamOf(task.tags));
}

const ClusterState::ProviderUsage& ClusterState::UsageOf(const std::string& provider) const {
  static const ProviderUsage kNone;
  auto it = provider_usage_.find(provider);
  return it == provider_usage_.end() ? kNone : it->second;
}

// ---- capacity providers and waiting tasks -------------------------------------------------------------------

const CapacityProvider* ClusterState::FindCapacityProvider(const std::string& name) const {
  auto it = capacity_providers_.find(name);
  return it == capacity_providers_.end() ? nullptr : &it->second;
}

void ClusterState::PutCapacityProvider(CapacityProvider provider) {
  std::string name = provider.name;
  capacity_providers_[name] = std::move(provider);
}

void ClusterState::IndexWaiting(const Task& task, bool insert) {
  WaitKey key{task.priority, task.wait_seq, task.arn};
  if (insert) {
    if (wait_lines_[task.cluster][task.capacity_provider_name].insert(std::move(key)).second) ++waiting_total_;
    wait_starts_.emplace(task.created_at, task.arn);
    return;
  }
  wait_starts_.erase({task.created_at, task.arn});
  auto cluster = wait_lines_.find(task.cluster);
  if (cluster == wait_lines_.end()) return;
  auto line = cluster->second.find(task.capacity_provider_name);
  if (line == cluster->second.end()) return;
  waiting_total_ -= line->second.erase(key);
  if (line->second.empty()) cluster->second.erase(line);
  if (cluster->second.empty()) wait_lines_.erase(cluster);
}

const std::map<std::string, ClusterState::WaitLine>& ClusterState::WaitLines(const std::string& cluster) const {
  static const std::map<std::string, WaitLine> kNone;
  auto it = wait_lines_.find(cluster);
  return it == wait_lines_.end() ? kNone : it->second;
}

size_t ClusterState::WaitingCount(const std::string& cluster) const {
  size_t n = 0;
  for (const auto& [_, line] : WaitLines(cluster)) n += line.size();
  return n;
}

Status ClusterState::AddWaitingTask(Task task) {
  if (tasks_.count(task.arn)) return Status::Conflict("task " + task.arn + " already exists");
  task.last_status = TaskStatus::kProvisioning;
  task.resources_released = true;  // it holds nothing until it is placed
  task.container_instance_arn.clear();
  last_wait_seq_ = std::max(last_wait_seq_, task.wait_seq);
  IndexWaiting(task, /*insert=*/true);
  std::string arn = task.arn;
  tasks_[arn] = std::make_shared<Task>(std::move(task));
  return Status::Ok();
}

Status ClusterState::PlaceWaitingTask(Task placed) {
  auto it = tasks_.find(placed.arn);
  if (it == tasks_.end() || it->second->last_status != TaskStatus::kProvisioning)
    return Status::Server("task " + placed.arn + " is not waiting for capacity");
  if (!FindInstance(placed.container_instance_arn))
    return Status::Server("task " + placed.arn + " placed on unknown instance " + placed.container_instance_arn);
  IndexWaiting(*it->second, /*insert=*/false);
  placed.resources_released = false;
  ApplyReservation(placed, +1);
  IndexServiceTask(placed, /*insert=*/true);
  superseded_.push_back(std::move(it->second));  // a view may still hold the waiting version
  it->second = std::make_shared<Task>(std::move(placed));
  FileStopped(it->first, it->second.get());
  return Status::Ok();
}

}  // namespace gpupack
