#include "api/console/waiting.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "engine/operations/operations.h"
#include "scheduler/placement.h"

namespace gpupack::api {

namespace {

struct Line {
  std::vector<const Task*> tasks;  // in line order once sorted
  ClusterState::ProviderUsage usage;
};

// MostFree: the most GPU memory free on one GPU that can share, among the provider's instances that take tasks.
MiB MostFree(const std::vector<const ContainerInstance*>& instances, bool place_on_disconnected) {
  MiB most = 0;
  for (const ContainerInstance* inst : instances) {
    if (inst->status != InstanceStatus::kActive || inst->impaired || (!inst->agent_connected && !place_on_disconnected))
      continue;
    for (const auto& g : inst->gpus)
      if (!g.held && g.mode != GpuMode::kDedicated) most = std::max(most, g.remaining_memory_mib);
  }
  return most;
}

}  // namespace

nlohmann::json WaitingLines(const ReadView& view, const ArnContext& arn, const std::string& cluster, size_t shown,
                            EpochMs now, const PlacementPolicy& policy) {
  std::map<std::pair<std::string, std::string>, Line> lines;  // (cluster, provider)
  std::map<std::string, ClusterState::ProviderUsage> usage;   // provider -> GPU memory its placed tasks hold
  view.ForEachTask([&](const Task& t) {
    if (t.capacity_provider_name.empty()) return;
    if (t.last_status == TaskStatus::kProvisioning) {
      if (cluster.empty() || t.cluster == cluster) lines[{t.cluster, t.capacity_provider_name}].tasks.push_back(&t);
    } else if (!t.resources_released) {
      if (const ContainerInstance* inst = view.FindInstance(t.container_instance_arn)) {
        const MiB mib = GpuMemoryOf(t, *inst);
        ClusterState::ProviderUsage& u = usage[t.capacity_provider_name];
        u.total += mib;
        u.by_team[TeamOf(t.tags)] += mib;
      }
    }
  });
  nlohmann::json out = nlohmann::json::array();
  for (auto& [key, line] : lines) {
    const auto& [cluster_name, provider] = key;
    std::sort(line.tasks.begin(), line.tasks.end(), [](const Task* a, const Task* b) {
      return std::tie(b->priority, a->wait_seq) < std::tie(a->priority, b->wait_seq);
    });
    std::vector<const ContainerInstance*> members;
    for (const InstanceRecord* r : view.InstancesOf(cluster_name)) {
      const std::string* p = CapacityProviderOf(r->instance);
      if (p && *p == provider) members.push_back(&r->instance);
    }
    const CapacityProvider* record = view.FindCapacityProvider(provider);
    const ClusterState::ProviderUsage& used = usage[provider];
    const MiB most_free = MostFree(members, policy.place_on_disconnected);
    std::string held;  // the instance held for the head (HeldInstance's rule), its id
    nlohmann::json tasks = nlohmann::json::array();
    for (size_t i = 0; i < line.tasks.size() && i < shown; ++i) {
      const Task& t = *line.tasks[i];
      auto ref = TaskDefinitionRefFrom(arn, t.task_definition_arn);
      const TaskDefinition* td = ref.ok() ? view.FindTaskDefinition(ref->family, ref->revision) : nullptr;
      const TaskDemand d = td ? DemandOf(*td, t.overrides) : TaskDemand{};
      const MiB need = d.gpu_kind == GpuKind::kShared ? d.gpu_memory : 0;
      const std::string team = TeamOf(t.tags);
      std::string why =
          record ? QuotaExcessOf(*record, used, team, d.gpu_kind == GpuKind::kShared ? d.gpu_memory : 1) : "";
      if (!why.empty()) {
        why = "over a quota: " + why;
      } else if (i == 0) {
        why = members.empty() ? "no container instance of capacity provider " + provider + " is in the cluster"
                               : "no instance of capacity provider " + provider + " has room: the most free on one GPU "
                                 "is " + FormatMiB(most_free) + (need ? "; it needs " + FormatMiB(need) : "");
        if (now - t.created_at >= policy.reservation_after_ms) {
          const ContainerInstance* best = nullptr;
          int64_t best_score = -1;
          for (const ContainerInstance* inst : members) {
            const int64_t score = SoonestFitScore(*inst, d, policy.place_on_disconnected);
            if (score > best_score) {
              best = inst;
              best_score = score;
            }
          }
          if (best) {
            held = best->id;
            why += "; instance " + held + " is held for it (where it fits soonest)";
          }
        }
      } else {
        why = "behind the head of the line; no instance had room for it when the line was last served" +
              (held.empty() ? std::string() : " (instance " + held + " is held for the head)");
      }
      tasks.push_back({{"arn", t.arn},
                       {"id", t.id},
                       {"taskDefinition", td ? td->family + ":" + std::to_string(td->revision) : t.task_definition_arn},
                       {"priority", t.priority},
                       {"team", team},
                       {"waitingSince", t.created_at},
                       {"gpuMemory", need},
                       {"position", i + 1},
                       {"why", why}});
    }
    out.push_back({{"cluster", cluster_name},
                   {"provider", provider},
                   {"length", line.tasks.size()},
                   {"heldInstance", held},
                   {"gpuMemoryHeld", used.total},
                   {"tasks", std::move(tasks)}});
  }
  return out;
}

}  // namespace gpupack::api
