// The capacity-provider queue: a task launched through a capacity provider that no instance of the provider can
// take now is acknowledged PROVISIONING (RunTask, tasks.cc) and waits in its provider's line in its cluster
// (ClusterState::WaitLines: higher kPriorityTag first, then first come, first served by Task::wait_seq). After
// every write, in the same transaction, PlaceWaitingTasks looks at the lines of the clusters where the write may
// have freed capacity:
//   - a task returned its reservations (it stopped, whoever stopped it);
//   - an instance record changed (it registered, turned ACTIVE again, its attributes changed, its agent came
//     back).
// It tries each such line's head; placed, the next one; not placed, the line waits for the next change. A write
// that frees nothing looks at nothing, and a line costs one placement attempt per write that freed capacity in
// its cluster, however long it is.
//
// Order within a line is strict: a smaller task behind a head that does not fit waits too (no backfill yet, so
// the head can never starve). A task placed from the line is committed together with the write that freed its
// room: after a crash both are durable or neither, so nothing starts twice and nothing waiting is lost.
#include <charconv>
#include <vector>

#include "engine/operations/operations.h"
#include "scheduler/task_builder.h"

namespace gpupack::api {

namespace {

constexpr int kMaxPriority = 1000;

// StopWaiting: a waiting task that can never be placed as recorded (its cluster or definition is gone) stops.
void StopWaiting(const std::string& task_arn, const std::string& reason, Transaction& txn) {
  StopTaskRecord(task_arn, stop_codes::kTaskFailedToStart, reason, txn);
}

// TryPlace places the waiting task `arn` if an instance of its provider can take it now; false when none can.
bool TryPlace(const std::string& arn, Transaction& txn, const PlacementPolicy& policy) {
  const ClusterState& state = txn.state();
  const Task* t = state.FindTask(arn);
  if (!t || t->last_status != TaskStatus::kProvisioning) return true;  // nothing to hold the line for
  const Cluster* cluster = state.FindCluster(t->cluster);
  auto ref = TaskDefinitionRefFrom(txn.arn(), t->task_definition_arn);
  const TaskDefinition* td = ref.ok() ? state.FindTaskDefinition(ref->family, ref->revision) : nullptr;
  if (!cluster || !td) {
    StopWaiting(arn, "The task's cluster or task definition no longer exists", txn);
    return true;
  }
  std::vector<PlacementConstraint> constraints = t->placement_constraints;
  constraints.push_back(ProviderConstraint(t->capacity_provider_name));
  auto placer = Placer::Create(PlacementRequestFor(*cluster, *td, t->overrides, constraints, t->placement_strategy,
                                                   t->group, txn.NextSeed(), policy));
  if (!placer.ok()) {
    StopWaiting(arn, "The task's placement can no longer be evaluated: " + placer.status().message(), txn);
    return true;
  }
  const Placement p = (*placer)->PlaceOne(state, 0);
  if (!p.placed()) return false;

  NewTaskFields fields;
  fields.id = t->id;
  fields.arn = t->arn;
  fields.cluster = t->cluster;
  fields.group = t->group;
  fields.started_by = t->started_by;
  fields.client_token = t->client_token;
  fields.created_at = t->created_at;
  fields.overrides = t->overrides;
  fields.tags = t->tags;
  std::map<std::string, std::string> container_arns;
  for (const auto& c : t->containers) container_arns[c.name] = c.container_arn;
  fields.container_arn = [&container_arns](const std::string& name) { return container_arns[name]; };
  Task placed = BuildTask(std::move(fields), *td, (*placer)->request().demand, *p.instance, p.gpu_indices);
  placed.capacity_provider_name = t->capacity_provider_name;
  placed.wait_seq = t->wait_seq;
  placed.priority = t->priority;
  placed.placement_constraints = t->placement_constraints;
  placed.placement_strategy = t->placement_strategy;
  placed.version = t->version;
  const std::string instance_arn = placed.container_instance_arn;
  if (!txn.PlaceWaitingTask(std::move(placed)).ok()) return false;
  txn.CountPlacement();
  txn.Push(instance_arn, protocol::Assign{0, AssignmentFor(*state.FindTask(arn), state, txn.arn())});
  return true;
}

}  // namespace

PlacementConstraint ProviderConstraint(const std::string& provider) {
  return {"memberOf", std::string("attribute:") + kCapacityProviderAttribute + " == " + provider};
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
    for (const auto& provider : providers) {
      for (;;) {
        const auto& lines = state.WaitLines(cluster);
        const auto line = lines.find(provider);
        if (line == lines.end() || line->second.empty()) break;
        const std::string head = line->second.begin()->arn;
        if (!TryPlace(head, txn, policy)) break;  // the head does not fit: the line waits
        const Task* after = state.FindTask(head);
        if (after && after->last_status == TaskStatus::kProvisioning) break;  // never spin on a head that stayed
      }
    }
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
