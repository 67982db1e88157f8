#include "storage/invariants.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace gpupack {
namespace {

std::string Instance(const std::string& arn) { return "container_instances '" + arn + "'"; }
std::string TaskRecord(const std::string& arn) { return "tasks '" + arn + "'"; }

// Violations collects what is broken, keeping the first kShown messages and counting the rest.
class Violations {
 public:
  void Add(std::string what) {
    if (shown_.size() < kShown) shown_.push_back(std::move(what));
    ++count_;
  }
  Status ToStatus() const {
    if (count_ == 0) return Status::Ok();
    std::string m = "the stored state is inconsistent (" + std::to_string(count_) + " problem" +
                    (count_ == 1 ? "" : "s") + "): ";
    for (size_t i = 0; i < shown_.size(); ++i) m += (i ? "; " : "") + shown_[i];
    if (count_ > shown_.size()) m += "; and " + std::to_string(count_ - shown_.size()) + " more";
    m += ". The database is damaged, was edited by hand or was written by two servers at once; the server "
         "refuses to serve it. Restore a backup (docs/reliability.md, \"Damaged storage\")";
    return Status::Server(m);
  }

 private:
  static constexpr size_t kShown = 10;
  std::vector<std::string> shown_;
  size_t count_ = 0;
};

void CheckInstance(const ClusterState& state, const ContainerInstance& inst, Violations& v) {
  if (!state.FindCluster(inst.cluster))
    v.Add(Instance(inst.arn) + " belongs to cluster '" + inst.cluster + "', which is not stored");
  if (inst.registered.cpu < 0 || inst.registered.memory < 0)
    v.Add(Instance(inst.arn) + " registers negative resources (CPU " + std::to_string(inst.registered.cpu) +
          ", memory " + std::to_string(inst.registered.memory) + " MiB)");
  // After the rebuild, remaining = registered - what the tasks holding resources reserved.
  if (inst.remaining.cpu < 0)
    v.Add(Instance(inst.arn) + ": its tasks reserve " + std::to_string(inst.registered.cpu - inst.remaining.cpu) +
          " CPU units of the " + std::to_string(inst.registered.cpu) + " it registers");
  if (inst.remaining.memory < 0)
    v.Add(Instance(inst.arn) + ": its tasks reserve " +
          std::to_string(inst.registered.memory - inst.remaining.memory) + " MiB of memory of the " +
          std::to_string(inst.registered.memory) + " it registers");
  std::set<std::string> ids;
  for (const Gpu& g : inst.gpus) {
    if (!ids.insert(g.id).second) v.Add(Instance(inst.arn) + " lists GPU " + g.id + " twice");
    if (g.total_memory_mib < 0)
      v.Add(Instance(inst.arn) + ": GPU " + g.id + " has " + std::to_string(g.total_memory_mib) + " MiB");
    if (g.remaining_memory_mib < 0)
      v.Add(Instance(inst.arn) + ": its tasks declare " + std::to_string(g.total_memory_mib - g.remaining_memory_mib) +
            " MiB on GPU " + g.id + " of " + std::to_string(g.total_memory_mib) + " MiB");
  }
}

// GpuHolders: per (instance, GPU), the tasks holding it, and which of them hold it whole.
using GpuKey = std::pair<std::string, std::string>;
struct Holders {
  std::vector<std::string> dedicated, shared;
};

void CheckTask(const ClusterState& state, const Task& t, std::map<GpuKey, Holders>& holders, Violations& v) {
  if (t.resources_released) return;  // only what still holds resources has to fit
  const ContainerInstance* inst = state.FindInstance(t.container_instance_arn);
  if (!inst) {
    v.Add(TaskRecord(t.arn) + " holds resources on container instance '" + t.container_instance_arn +
          "', which is not stored");
    return;
  }
  if (inst->cluster != t.cluster)
    v.Add(TaskRecord(t.arn) + " of cluster '" + t.cluster + "' holds resources on " + Instance(inst->arn) +
          " of cluster '" + inst->cluster + "'");
  if (t.reserved.cpu < 0 || t.reserved.memory < 0)
    v.Add(TaskRecord(t.arn) + " reserves negative resources (CPU " + std::to_string(t.reserved.cpu) + ", memory " +
          std::to_string(t.reserved.memory) + " MiB)");
  std::set<std::string> reserved_gpus;
  for (const GpuReservation& r : t.gpu_reservations) {
    if (!reserved_gpus.insert(r.gpu_id).second) v.Add(TaskRecord(t.arn) + " reserves GPU " + r.gpu_id + " twice");
    const Gpu* gpu = nullptr;
    for (const Gpu& g : inst->gpus)
      if (g.id == r.gpu_id) gpu = &g;
    if (!gpu) {
      v.Add(TaskRecord(t.arn) + " reserves GPU " + r.gpu_id + ", which " + Instance(inst->arn) + " does not have");
      continue;
    }
    if (!r.dedicated && (r.memory_mib < 0 || r.memory_mib > gpu->total_memory_mib))
      v.Add(TaskRecord(t.arn) + " reserves " + std::to_string(r.memory_mib) + " MiB on GPU " + r.gpu_id + " of " +
            Instance(inst->arn) + ", which has " + std::to_string(gpu->total_memory_mib) + " MiB");
    Holders& h = holders[{inst->arn, r.gpu_id}];
    (r.dedicated ? h.dedicated : h.shared).push_back(t.arn);
  }
}

}  // namespace

Status CheckInvariants(const ClusterState& state) {
  Violations v;
  state.ForEachInstance([&](const ContainerInstance& inst) { CheckInstance(state, inst, v); });
  std::map<GpuKey, Holders> holders;
  state.ForEachTask([&](const Task& t) { CheckTask(state, t, holders, v); });
  for (auto& [key, h] : holders) {
    if (h.dedicated.empty() || h.dedicated.size() + h.shared.size() == 1) continue;
    std::sort(h.dedicated.begin(), h.dedicated.end());  // tasks come in no particular order: name them sorted
    std::sort(h.shared.begin(), h.shared.end());
    std::string others;
    for (size_t i = 1; i < h.dedicated.size(); ++i) others += (others.empty() ? "" : ", ") + h.dedicated[i];
    for (const auto& arn : h.shared) others += (others.empty() ? "" : ", ") + arn;
    v.Add(TaskRecord(h.dedicated[0]) + " holds GPU " + key.second + " of " + Instance(key.first) +
          " whole, yet tasks " + others + " hold it too");
  }
  return v.ToStatus();
}

}  // namespace gpupack
