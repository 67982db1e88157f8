// The capacity-provider queue: a task launched through a capacity provider that no instance of the provider can
// take now is acknowledged PROVISIONING (RunTask, tasks.cc) and waits in its provider's line in its cluster
// (ClusterState::WaitLines: higher kPriorityTag first, then first come, first served by Task::wait_seq). After
// every write, in the same transaction, PlaceWaitingTasks serves the lines of the clusters where the write may
// have freed capacity:
//   - a task returned its reservations (it stopped, whoever stopped it);
//   - an instance record changed (it registered, turned ACTIVE again, its attributes changed, its agent came
//     back).
// A line is served in two steps (docs/operations.md, "The order of the line"):
//   1. the head, then the next head, while each is placed;
//   2. backfill: the head does not fit (or waits on a quota), so the tasks behind it are tried in order, at most
//      kBackfillWindow of them and kBackfillTries failed tries, one try per shape (a task of a shape that just
//      failed would fail the same way). Once the head has waited policy.reservation_after_ms, the instance where
//      it will fit soonest (HeldInstance) is held for it: no backfill, and no other placement through the
//      provider, goes there, so what frees on it stays free until the head fits.
// A write that frees nothing looks at nothing, and a pass costs at most 1 + kBackfillTries failed placement
// attempts per line, however long the line is.
//
// Quotas (kQuotaTag on the provider): a task placed through a provider must keep the GPU memory its provider's
// tasks hold, and its team's (kTeamTag), within the provider's quotas; one that would not waits (or, for a
// service's task, is not placed). A task waiting on a quota holds no reservation and never blocks the line.
// A task placed from the line is committed together with the write that freed its room: after a crash both are
// durable or neither, so nothing starts twice and nothing waiting is lost.
#include <charconv>
#include <set>
#include <vector>

#include "engine/operations/operations.h"
#include "scheduler/task_builder.h"

namespace gpupack::api {

namespace {

constexpr int kMaxPriority = 1000;
constexpr size_t kBackfillWindow = 256;  // tasks behind a line's head that one pass looks at
constexpr size_t kBackfillTries = 16;    // failed placement attempts one pass spends on them

// StopWaiting: a waiting task that can never be placed as recorded (its cluster or definition is gone) stops.
void StopWaiting(const std::string& task_arn, const std::string& reason, Transaction& txn) {
  StopTaskRecord(task_arn, stop_codes::kTaskFailedToStart, reason, txn);
}

const TaskDefinition* DefinitionOf(const ClusterState& state, const ArnContext& arn, const Task& t) {
  auto ref = TaskDefinitionRefFrom(arn, t.task_definition_arn);
  return ref.ok() ? state.FindTaskDefinition(ref->family, ref->revision) : nullptr;
}

enum class Tried { kPlaced, kNoRoom, kQuota, kGone };

// TryPlace places the waiting task `arn` if an instance of its provider other than `held` can take it now
// within the provider's quotas. `shape` (when not null) is set to what decides whether the task fits: its
// demand, group, team and constraints.
Tried TryPlace(const std::string& arn, const std::string& held, Transaction& txn, const PlacementPolicy& policy,
               std::string* shape = nullptr) {
  const ClusterState& state = txn.state();
  const Task* t = state.FindTask(arn);
  if (!t || t->last_status != TaskStatus::kProvisioning) return Tried::kGone;
  const Cluster* cluster = state.FindCluster(t->cluster);
  const TaskDefinition* td = DefinitionOf(state, txn.arn(), *t);
  if (!cluster || !td) {
    StopWaiting(arn, "The task's cluster or task definition no longer exists", txn);
    return Tried::kGone;
  }
  auto placer = Placer::Create(PlacementRequestFor(*cluster, *td, t->overrides, t->placement_constraints,
                                                   t->placement_strategy, t->group, txn.NextSeed(), policy,
                                                   t->capacity_provider_name, held));
  if (!placer.ok()) {
    StopWaiting(arn, "The task's placement can no longer be evaluated: " + placer.status().message(), txn);
    return Tried::kGone;
  }
  if (shape) *shape = ShapeKey(*t, (*placer)->request().demand);
  const Placement p = (*placer)->PlaceOne(state, 0);
  if (!p.placed()) return Tried::kNoRoom;
  Task placed = BuildPlacedTask(*t, *td, (*placer)->request().demand, *p.instance, p.gpu_indices);
  if (!QuotaExcess(state, placed.capacity_provider_name, TeamOf(placed.tags), GpuMemoryOf(placed, *p.instance))
           .empty())
    return Tried::kQuota;
  const std::string instance_arn = placed.container_instance_arn, provider = placed.capacity_provider_name;
  const EpochMs waited = txn.now() - placed.created_at;
  if (!txn.PlaceWaitingTask(std::move(placed)).ok()) return Tried::kNoRoom;
  txn.CountPlacement();
  txn.CountWaitEnded(provider, waited);
  txn.Push(instance_arn, protocol::Assign{0, AssignmentFor(*state.FindTask(arn), state, txn.arn())});
  return Tried::kPlaced;
}

// ServeLine: the two steps of the file comment for the line of `provider` in `cluster`.
void ServeLine(const std::string& cluster, const std::string& provider, Transaction& txn,
               const PlacementPolicy& policy) {
  const ClusterState& state = txn.state();
  auto line_of = [&]() -> const ClusterState::WaitLine* {
    const auto& lines = state.WaitLines(cluster);
    const auto line = lines.find(provider);
    return line == lines.end() || line->second.empty() ? nullptr : &line->second;
  };
  std::set<std::string> failed;  // shapes that did not fit in this pass
  for (;;) {  // 1. the head, while it is placed
    const ClusterState::WaitLine* line = line_of();
    if (!line) return;
    const std::string head = line->begin()->arn;
    std::string shape;
    const Tried tried = TryPlace(head, "", txn, policy, &shape);
    if (tried == Tried::kNoRoom || tried == Tried::kQuota) {
      failed.insert(shape);  // the same shape behind it would fail the same way (the team is part of the shape)
      break;
    }
    const Task* after = state.FindTask(head);
    if (after && after->last_status == TaskStatus::kProvisioning) return;  // never spin on a head that stayed
  }
  const ClusterState::WaitLine* line = line_of();  // 2. backfill behind the head
  if (!line) return;
  const std::string held = HeldInstance(state, txn.arn(), cluster, provider, txn.now(), policy);
  std::vector<std::string> behind;
  for (auto it = std::next(line->begin()); it != line->end() && behind.size() < kBackfillWindow; ++it)
    behind.push_back(it->arn);
  size_t tries = 0;
  for (const auto& arn : behind) {
    const Task* t = state.FindTask(arn);
    if (!t || t->last_status != TaskStatus::kProvisioning) continue;
    if (const TaskDefinition* td = DefinitionOf(state, txn.arn(), *t))
      if (failed.count(ShapeKey(*t, DemandOf(*td, t->overrides)))) continue;
    std::string shape;
    const Tried tried = TryPlace(arn, held, txn, policy, &shape);
    if (tried != Tried::kNoRoom && tried != Tried::kQuota) continue;
    failed.insert(shape);
    if (++tries >= kBackfillTries) break;
  }
}

}  // namespace

std::string ShapeKey(const Task& task, const TaskDemand& demand) {
  std::string key = task.task_definition_arn + '|' + std::to_string(demand.cpu) + ',' +
                    std::to_string(demand.memory) + ',' + std::to_string(static_cast<int>(demand.gpu_kind)) + ',' +
                    std::to_string(demand.gpu_memory) + ',' + std::to_string(demand.gpu_count) + ',' +
                    std::to_string(demand.gpu_compute) + '|' + task.group + '|' + TeamOf(task.tags);
  for (const auto& c : task.placement_constraints) key += '|' + c.type + ':' + c.expression;
  return key;
}

Result<MiB> QuotaOf(const KeyValuePair& tag) {
  MiB v = 0;
  const char* end = tag.value.data() + tag.value.size();
  auto [ptr, ec] = std::from_chars(tag.value.data(), end, v);
  if (tag.value.empty() || ec != std::errc() || ptr != end || v < 0)
    return Status::InvalidParameter("tag " + tag.name.substr(0, 128) +
                                    " must be a whole number of MiB of GPU memory (0 or more), got '" +
                                    tag.value.substr(0, 50) + "'");
  return v;
}

std::string QuotaExcessOf(const CapacityProvider& provider, const ClusterState::ProviderUsage& usage,
                          const std::string& team, MiB more) {
  if (more <= 0) return "";
  const std::string team_tag = std::string(kQuotaTag) + ":" + team;
  for (const auto& tag : provider.tags) {
    const bool whole = tag.name == kQuotaTag, of_team = !team.empty() && tag.name == team_tag;
    if (!whole && !of_team) continue;
    auto limit = QuotaOf(tag);
    if (!limit.ok()) continue;  // checked when the provider was created
    const MiB used = whole ? usage.total : usage.Team(team);
    if (used + more <= *limit) continue;
    return (whole ? "capacity provider " + provider.name + "'s GPU memory quota" : "team " + team + "'s GPU memory quota") +
           " (" + tag.name + "): its tasks hold " + FormatMiB(used) + " of " + FormatMiB(*limit) +
           "; this task needs " + FormatMiB(more) + " more";
  }
  return "";
}

std::string QuotaExcess(const ClusterState& state, const std::string& provider, const std::string& team, MiB more) {
  const CapacityProvider* p = state.FindCapacityProvider(provider);
  return p ? QuotaExcessOf(*p, state.UsageOf(provider), team, more) : "";
}

int64_t SoonestFitScore(const ContainerInstance& inst, const TaskDemand& d, bool place_on_disconnected) {
  if (inst.status != InstanceStatus::kActive || inst.impaired || (!inst.agent_connected && !place_on_disconnected))
    return -1;
  if (inst.registered.cpu < d.cpu || inst.registered.memory < d.memory) return -1;
  int64_t score = -1;
  int usable = 0, idle = 0;
  for (const auto& g : inst.gpus) {
    if (g.held) continue;
    ++usable;
    idle += g.mode == GpuMode::kIdle;
    if (d.gpu_kind == GpuKind::kShared && g.total_memory_mib >= d.gpu_memory)
      score = std::max<int64_t>(score, g.mode == GpuMode::kDedicated ? 0 : g.remaining_memory_mib);
  }
  if (d.gpu_kind == GpuKind::kDedicated) score = usable >= d.gpu_count ? idle : -1;
  if (d.gpu_kind == GpuKind::kNone) score = inst.remaining.memory;
  return score;
}

std::string HeldInstance(const ClusterState& state, const ArnContext& arn, const std::string& cluster,
                         const std::string& provider, EpochMs now, const PlacementPolicy& policy) {
  const auto& lines = state.WaitLines(cluster);
  const auto line = lines.find(provider);
  if (line == lines.end() || line->second.empty()) return "";
  const Task* head = state.FindTask(line->second.begin()->arn);
  if (!head || now - head->created_at < policy.reservation_after_ms) return "";
  const TaskDefinition* td = DefinitionOf(state, arn, *head);
  if (!td) return "";
  const TaskDemand d = DemandOf(*td, head->overrides);
  if (!QuotaExcess(state, provider, TeamOf(head->tags), d.gpu_kind == GpuKind::kShared ? d.gpu_memory : 1).empty())
    return "";
  // The instance where the head will fit soonest (SoonestFitScore); ties to the one registered first.
  const auto& entries = state.EntriesOf(cluster);
  const ContainerInstance* best = nullptr;
  int64_t best_score = -1;
  for (uint32_t pos : state.ProviderEntries(cluster, provider)) {
    const int64_t score = SoonestFitScore(*entries[pos].instance, d, policy.place_on_disconnected);
    if (score > best_score) {
      best = entries[pos].instance;
      best_score = score;
    }
  }
  return best ? best->arn : "";
}

Result<int> PriorityOf(const std::vector<KeyValuePair>& tags) {
  for (const auto& tag : tags) {
    if (tag.name != kPriorityTag) continue;
    int v = 0;
    const char* end = tag.value.data() + tag.value.size();
    auto [ptr, ec] = std::from_chars(tag.value.data(), end, v);
    if (ec != std::errc() || ptr != end || v < -kMaxPriority || v > kMaxPriority)
      return Status::InvalidParameter(std::string("tag ") + kPriorityTag +
                                      " must be an integer from -1000 to 1000, got '" + tag.value.substr(0, 50) + "'");
    return v;
  }
  return 0;
}

std::vector<std::string> ProvidersForTasks(const std::vector<CapacityProviderStrategyItem>& strategy, int64_t count) {
  std::vector<std::string> out;
  if (strategy.empty() || count <= 0) return out;
  for (const auto& item : strategy)
    for (int64_t k = 0; k < item.base && static_cast<int64_t>(out.size()) < count; ++k) out.push_back(item.provider);
  int64_t total = 0;
  for (const auto& item : strategy) total += item.weight;
  if (total == 0) {  // only a base was given: the rest go to the provider with the base (StrategyFor checks one has)
    const std::string rest = out.empty() ? strategy.front().provider : out.back();
    while (static_cast<int64_t>(out.size()) < count) out.push_back(rest);
    return out;
  }
  // Smooth weighted round robin: each round every provider gains its weight, the one with the most goes next and
  // gives back the total. Over `total` rounds each provider is chosen exactly `weight` times, interleaved.
  std::vector<int64_t> current(strategy.size(), 0);
  while (static_cast<int64_t>(out.size()) < count) {
    size_t pick = 0;
    for (size_t i = 0; i < strategy.size(); ++i) {
      current[i] += strategy[i].weight;
      if (current[i] > current[pick]) pick = i;
    }
    current[pick] -= total;
    out.push_back(strategy[pick].provider);
  }
  return out;
}

void PlaceWaitingTasks(Transaction& txn, const PlacementPolicy& policy) {
  const ClusterState& state = txn.state();
  if (state.WaitingTotal() == 0) return;
  std::set<std::string> clusters;
  for (const auto& arn : txn.released_tasks())
    if (const Task* t = state.FindTask(arn)) clusters.insert(t->cluster);
  for (const auto& arn : txn.persisted_instances())
    if (const ContainerInstance* inst = state.FindInstance(arn)) clusters.insert(inst->cluster);
  for (const auto& cluster : clusters) {
    std::vector<std::string> providers;
    for (const auto& [provider, line] : state.WaitLines(cluster)) providers.push_back(provider);
    for (const auto& provider : providers) ServeLine(cluster, provider, txn, policy);
  }
}

void ExpireWaitingTasks(Transaction& txn, const PlacementPolicy& policy) {
  std::vector<std::string> due;
  for (const auto& [created_at, arn] : txn.state().WaitStarts()) {
    if (created_at + policy.provisioning_timeout_ms > txn.now()) break;
    due.push_back(arn);
  }
  const std::string minutes = std::to_string(policy.provisioning_timeout_ms / 60'000);
  for (const auto& arn : due) {
    const Task* t = txn.state().FindTask(arn);
    if (!t) continue;
    StopWaiting(arn,
                "Timeout waiting for capacity: no container instance of capacity provider " +
                    t->capacity_provider_name + " could take the task within " +
                    (policy.provisioning_timeout_ms % 60'000 == 0
                         ? minutes + " minutes"
                         : std::to_string(policy.provisioning_timeout_ms / 1000) + " seconds"),
                txn);
  }
}

}  // namespace gpupack::api
