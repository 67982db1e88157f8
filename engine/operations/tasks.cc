// Tasks: RunTask, StartTask, StopTask, DescribeTasks, ListTasks, ExplainPlacement, and the retention purge.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>

#include "engine/operations/operations.h"
#include "engine/operations/resolve.h"
#include "scheduler/fragmentation.h"
#include "scheduler/task_builder.h"
#include "scheduler/validation.h"

namespace gpupack::api {

PlacementRequest PlacementRequestFor(const Cluster& cluster, const TaskDefinition& td, const TaskOverride& overrides,
                                     const std::vector<PlacementConstraint>& constraints,
                                     const std::vector<PlacementStrategy>& strategies,
                                     const std::optional<std::string>& group, uint64_t seed,
                                     const PlacementPolicy& policy, const std::string& capacity_provider,
                                     const std::string& held_instance) {
  PlacementRequest req;
  req.cluster = cluster.name;
  req.demand = DemandOf(td, overrides);
  req.group = group.value_or("family:" + td.family);
  req.constraints = constraints;
  req.constraints.insert(req.constraints.end(), td.placement_constraints.begin(), td.placement_constraints.end());
  req.strategies = strategies;
  // A task that shares a GPU and names no strategy is packed (the server's default, binpack on gpuMemory):
  // gpupack's purpose, and a deliberate difference from ECS, which places at random. Others stay random.
  if (req.strategies.empty() && req.demand.gpu_kind == GpuKind::kShared) req.strategies = policy.shared_gpu_default;
  req.seed = seed;
  req.compute_aware = cluster.settings.compute_aware_placement;
  req.place_on_disconnected = policy.place_on_disconnected;
  req.capacity_provider = capacity_provider;
  req.held_instance = held_instance;
  return req;
}

namespace {

// NeverFits: why no instance of the cluster could ever take the task, however empty (its GPU memory exceeds
// every GPU's, or it wants more GPUs than any instance has); nullopt when some instance could.
std::optional<std::string> NeverFits(const ClusterState& state, const std::string& cluster, const TaskDemand& d) {
  if (d.gpu_kind == GpuKind::kNone) return std::nullopt;
  const Gpu* biggest = nullptr;
  const ContainerInstance* biggest_on = nullptr;
  size_t most_gpus = 0;
  for (const ContainerInstance* inst : state.InstancesOf(cluster)) {
    if (inst->status == InstanceStatus::kInactive) continue;
    most_gpus = std::max(most_gpus, inst->gpus.size());
    for (const Gpu& g : inst->gpus)
      if (!biggest || g.total_memory_mib > biggest->total_memory_mib) {
        biggest = &g;
        biggest_on = inst;
      }
  }
  if (!biggest) return "it can never be placed in this cluster as registered: no container instance has a GPU";
  if (d.gpu_kind == GpuKind::kShared && biggest->total_memory_mib < d.gpu_memory)
    return "it can never be placed in this cluster as registered: it needs " + FormatMiB(d.gpu_memory) +
           " on one GPU and the largest GPU, " + biggest->id + " on container instance " + biggest_on->id + ", has " +
           FormatMiB(biggest->total_memory_mib) + " in all (lower nvidiaMps.memory or register a larger GPU)";
  if (d.gpu_kind == GpuKind::kDedicated && most_gpus < static_cast<size_t>(d.gpu_count))
    return "it can never be placed in this cluster as registered: it needs " + std::to_string(d.gpu_count) +
           " GPUs on one instance and no instance has more than " + std::to_string(most_gpus);
  return std::nullopt;
}

// NotPlacedReason: the one reason a task was not placed, for gpupack_placement_failures_total: the reason most
// instances refused it for (the first of those tied), or GPU memory (shared) / GPU (dedicated) when no instance
// was there to refuse it.
std::string NotPlacedReason(const TaskDemand& demand, const std::vector<PlacementFailure>& refused) {
  std::map<std::string, int> votes;
  std::string best;
  for (const auto& f : refused)
    if (++votes[f.reason] > (best.empty() ? 0 : votes[best])) best = f.reason;
  if (!best.empty()) return best;
  return demand.gpu_kind == GpuKind::kShared ? reason::kGpuMemory : reason::kGpu;
}

// NotPlacedSummary: RunTask's own failure entry (arn: the cluster) when tasks of the request were not placed
// and the per-instance failures alone would not say it: how many of `count` were left out, and whether the
// task can ever fit. Not counted in the metrics (the tasks it stands for and the per-instance entries are).
std::optional<Failure> NotPlacedSummary(const ClusterState& state, const Cluster& cluster, const ArnContext& arn,
                                        const TaskDemand& demand, int64_t count, int64_t placed,
                                        const std::vector<PlacementFailure>& refused) {
  if (placed >= count) return std::nullopt;
  const std::optional<std::string> never = NeverFits(state, cluster.name, demand);
  if (count == 1 && !never) return std::nullopt;
  std::string detail;
  if (count > 1) {
    const int64_t left = count - placed;
    detail = std::to_string(left) + " of " + std::to_string(count) + " tasks were not placed (" +
             std::to_string(placed) + " placed)";
  }
  if (never) {
    detail += detail.empty() ? *never : ": " + *never;
  } else {
    detail += ": no instance could take task " + std::to_string(placed + 1) +
              " (the other failures say why, per instance); later tasks were not tried";
  }
  std::string reason = !refused.empty() ? refused.front().reason
                       : demand.gpu_kind == GpuKind::kShared ? reason::kGpuMemory
                                                              : reason::kGpu;
  if (never) reason = demand.gpu_kind == GpuKind::kShared ? reason::kGpuMemory : reason::kGpu;
  return Failure{arn.ClusterArn(cluster.name), reason, detail};
}

// PlaceTasks is RunTask and StartTask: validate, place each task in turn against the live state (reserving as
// it goes, so task 2 sees task 1), answer tasks and failures. The transaction persists every placed task and
// pushes each to its agent once durable.
Status PlaceTasks(const PlaceTasksRequest& in, Transaction& txn, TasksResult& out, bool start_task) {
  const ClusterState& state = txn.state();
  GP_ASSIGN(cluster, ActiveCluster(state, txn.arn(), in.cluster));
  GP_TRY(ValidatePlacement(in.constraints, in.strategies));
  GP_ASSIGN(td, ResolveTaskDefinition(state, txn.arn(), in.task_definition));
  if (td->status != LifecycleStatus::kActive && in.task_definition.find(':') == std::string::npos)
    return Status::Client("task definition " + td->family + " has no ACTIVE revision");
  GP_TRY(ValidateOverrides(*td, in.overrides));

  int64_t count = in.count;
  std::vector<std::string> only;
  if (start_task) {
    if (in.container_instances.empty() || in.container_instances.size() > 10)
      return Status::InvalidParameter("containerInstances must name 1 to 10 container instances");
    for (const auto& ref : in.container_instances) {
      GP_ASSIGN(inst, ResolveInstance(state, txn.arn(), cluster->name, ref));
      only.push_back(inst->arn);
    }
    count = static_cast<int64_t>(only.size());
  }

  // Idempotency: the same token and request give the same tasks; a different request is a conflict. A token
  // is remembered for kClientTokenRetentionMs (a record older than that, not purged yet, counts as gone). A task
  // of the token that was stopped and then purged is answered as a MISSING failure, never placed again.
  const bool has_token = in.client_token && !in.client_token->empty();
  if (has_token) {
    const ClientTokenRecord* rec = state.FindClientToken(cluster->name, *in.client_token);
    if (rec && txn.now() - rec->created_at <= kClientTokenRetentionMs) {
      if (rec->request_fingerprint != in.fingerprint)
        return Status::Conflict("clientToken '" + *in.client_token + "' was used with a different request");
      // A first answer that is durable is given again from the committed view, without waiting on the commits
      // in flight (which, after a failed commit, never come): a retry only ever sees committed tasks.
      if (rec->write_seq <= txn.durable_through() && txn.committed()) {
        for (const auto& arn : rec->task_arns) {
          if (auto t = txn.committed()->TaskPtr(arn)) {
            out.tasks.push_back(std::move(t));
          } else {
            out.failures.push_back({arn, "MISSING",
                                    "the task this clientToken started has stopped and its record expired; "
                                    "use a new clientToken to start another"});
          }
        }
        txn.AnsweredFromCommitted();
        return Status::Ok();
      }
      // The first request is still being committed: answer behind it (MarkWrite), from the working state.
      for (const auto& arn : rec->task_arns) {
        if (auto t = state.SharedTask(arn)) {
          out.tasks.push_back(std::move(t));
        } else {
          out.failures.push_back({arn, "MISSING",
                                  "the task this clientToken started has stopped and its record expired; "
                                  "use a new clientToken to start another"});
        }
      }
      txn.MarkWrite();
      return Status::Ok();
    }
  }

  // Capacity providers (RunTask only): each task's provider, from the request's strategy or the cluster's default.
  // A request that could leave more tasks waiting than the cluster may hold is refused whole, before anything is
  // placed.
  std::vector<std::string> providers;
  int priority = 0;
  if (!start_task) {
    GP_ASSIGN(strategy, StrategyFor(state, *cluster, in.capacity_provider_strategy, in.launch_type_given));
    if (!strategy.empty()) {
      providers = ProvidersForTasks(strategy, count);
      GP_ASSIGN(p, PriorityOf(in.tags));
      priority = p;
      const size_t waiting = state.WaitingCount(cluster->name), limit = in.policy.max_provisioning_per_cluster;
      if (in.queue && waiting + static_cast<size_t>(count) > limit)
        return Status::LimitExceeded("The cluster " + cluster->name + " has " + std::to_string(waiting) +
                                     " tasks in the PROVISIONING state and may hold at most " +
                                     std::to_string(limit) + "; this request could add " + std::to_string(count) +
                                     ". Wait for waiting tasks to start, or stop some.");
    }
  }

  PlacementRequest req = PlacementRequestFor(*cluster, *td, in.overrides, in.constraints, in.strategies, in.group,
                                             txn.NextSeed(), in.policy);
  req.only_instances = only;
  GP_ASSIGN(placer, Placer::Create(std::move(req)));
  // Every task asked for is one demand of the cluster's recent workload (binpack(fragmentation)'s target).
  const WorkloadShape shape = WorkloadShapeOf(placer->request().demand, placer->request().constraints);
  for (int64_t i = 0; i < count; ++i) txn.RecordDemand(cluster->name, shape);

  const ArnContext& arn = txn.arn();
  auto new_fields = [&] {
    NewTaskFields fields;
    fields.id = txn.NewId();
    fields.arn = arn.TaskArn(cluster->name, fields.id);
    fields.cluster = cluster->name;
    fields.group = placer->request().group;
    fields.started_by = in.started_by.value_or("");
    fields.client_token = in.client_token.value_or("");
    fields.created_at = txn.now();
    fields.overrides = in.overrides;
    fields.tags = in.tags;
    fields.container_arn = [&arn, cluster_name = cluster->name, task_id = fields.id](const std::string& name) {
      return arn.ContainerArn(cluster_name, task_id, name);
    };
    return fields;
  };
  std::map<std::string, std::unique_ptr<Placer>> provider_placers;  // provider -> its placer
  std::vector<std::string> placed_arns;
  uint64_t not_placed = 0;  // what CountTasksNotPlaced counted for this request
  for (int i = 0; i < count; ++i) {
    if (start_task) {  // one task per named instance
      PlacementRequest one = placer->request();
      one.only_instances = {only[i]};
      GP_ASSIGN(p1, Placer::Create(std::move(one)));
      placer = std::move(p1);
    }
    const std::string provider = providers.empty() ? "" : providers[i];
    const Placer* use = placer.get();
    if (!provider.empty()) {
      // A provider's task goes to the provider's instances; one behind a waiting head of its priority or higher
      // backfills (capacity_queue.cc): it may start first, but never on the instance held for the head.
      std::unique_ptr<Placer>& pp = provider_placers[provider];
      if (!pp) {
        const auto& lines = state.WaitLines(cluster->name);
        const auto line = lines.find(provider);
        const bool outranks = line == lines.end() || line->second.empty() || line->second.begin()->priority < priority;
        PlacementRequest r = placer->request();
        r.capacity_provider = provider;
        if (!outranks) r.held_instance = HeldInstance(state, txn.arn(), cluster->name, provider, txn.now(), in.policy);
        GP_ASSIGN(made, Placer::Create(std::move(r)));
        pp = std::move(made);
      }
      use = pp.get();
    }
    Placement p = use->PlaceOne(state, i);
    std::optional<NewTaskFields> fields;  // made once, when the task is placed or waits (it takes an id)
    auto fields_once = [&] {
      if (!fields) fields = new_fields();
      return *fields;
    };
    std::optional<Task> t;
    std::string over_quota;
    if (p.placed()) {
      t = BuildTask(fields_once(), *td, placer->request().demand, *p.instance, p.gpu_indices);
      t->capacity_provider_name = provider;
      if (!provider.empty()) over_quota = QuotaExcess(state, provider, TeamOf(in.tags), GpuMemoryOf(*t, *p.instance));
    }
    if ((!p.placed() || !over_quota.empty()) && !provider.empty() && in.queue) {
      // Acknowledged PROVISIONING: it waits at the end of its provider's line (capacity_queue.cc places it).
      Task w = BuildWaitingTask(fields_once(), *td);
      w.capacity_provider_name = provider;
      w.wait_seq = txn.NextWaitSeq();
      w.priority = priority;
      w.placement_constraints = in.constraints;
      w.placement_strategy = in.strategies;
      const std::string task_arn = w.arn;
      GP_TRY(txn.AddWaitingTask(std::move(w)));
      placed_arns.push_back(task_arn);
      out.tasks.push_back(state.SharedTask(task_arn));
      continue;
    }
    if (!over_quota.empty()) p = Placement{nullptr, {}, {{p.instance->arn, kQuotaReason, over_quota}}};
    if (!p.placed()) {
      for (auto& f : p.failures) {
        if (f.arn.empty()) f.arn = txn.arn().ClusterArn(cluster->name);
        txn.CountInstanceRefusal(cluster->name, f.reason);
        out.failures.push_back({f.arn, f.reason, f.detail});
      }
      // StartTask: this one task; RunTask: this task and every later one of the request (they are not tried).
      const int64_t left = start_task ? 1 : count - static_cast<int64_t>(placed_arns.size());
      txn.CountTasksNotPlaced(cluster->name, NotPlacedReason(placer->request().demand, p.failures),
                              static_cast<uint64_t>(left));
      not_placed += static_cast<uint64_t>(left);
      if (!start_task) {  // later tasks of the request would fail the same way
        auto summary = NotPlacedSummary(state, *cluster, txn.arn(), placer->request().demand, count,
                                        static_cast<int64_t>(placed_arns.size()), p.failures);
        if (summary) out.failures.push_back(std::move(*summary));
        break;
      }
      continue;
    }
    const std::string task_arn = t->arn, instance_arn = t->container_instance_arn;
    GP_TRY(txn.ReserveTask(std::move(*t)));
    auto placed = state.SharedTask(task_arn);  // shared with the state, which copies it before any change
    txn.CountPlacement();
    txn.Push(instance_arn, protocol::Assign{0, AssignmentFor(*placed, state, txn.arn())});
    placed_arns.push_back(placed->arn);
    out.tasks.push_back(std::move(placed));
  }
  // Instance counters and remaining resources are derived: a restart recomputes them from the tasks, so only
  // the tasks are persisted.
  if (not_placed > 0)
    txn.RecordRefusal({txn.now(), cluster->name, in.task_definition, in.overrides, not_placed, out.failures});
  if (has_token && !placed_arns.empty())
    txn.PutClientToken({cluster->name, *in.client_token, in.fingerprint, placed_arns, txn.now(), txn.seq()});
  txn.MarkWrite();
  return Status::Ok();
}

}  // namespace

Status RunTask(const RunTaskRequest& in, Transaction& txn, TasksResult& out) { return PlaceTasks(in, txn, out, false); }
Status StartTask(const StartTaskRequest& in, Transaction& txn, TasksResult& out) { return PlaceTasks(in, txn, out, true); }

Status StopTask(const StopTaskRequest& in, Transaction& txn, TaskResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(txn.state(), txn.arn(), in.cluster));
  GP_ASSIGN(task, ResolveTask(txn.state(), txn.arn(), cluster->name, in.task));
  const std::string arn = task->arn;
  StopTaskRecord(arn, stop_codes::kUserInitiated, in.reason.value_or("Task stopped by user"), txn);
  out.task = txn.state().SharedTask(arn);
  txn.MarkWrite();
  return Status::Ok();
}

Status DescribeTasks(const DescribeTasksRequest& in, const ReadContext& ctx, TasksResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(ctx.view, ctx.arn, in.cluster));
  for (const auto& ref : in.tasks) {
    auto id = ResourceIdFrom(ctx.arn, "task", ref);
    auto t = id.ok() ? ctx.view.TaskPtr(ctx.arn.TaskArn(cluster->name, *id)) : nullptr;
    if (t) {
      out.tasks.push_back(std::move(t));
    } else {
      out.failures.push_back(
          {id.ok() && ref.rfind("arn:", 0) != 0 ? ctx.arn.TaskArn(cluster->name, *id) : ref, "MISSING", ""});
    }
  }
  return Status::Ok();
}

// ListTasks: ECS's PENDING and RUNNING tasks both have desiredStatus RUNNING; oldest first. The view keeps each
// cluster's tasks in that order, so a page without filters costs its own length; a filter reads each task of
// the cluster's order until the page is full.
Status ListTasks(const ListTasksRequest& in, const ReadContext& ctx, ListPage& out) {
  GP_ASSIGN(cluster, ActiveCluster(ctx.view, ctx.arn, in.cluster));
  std::string instance_arn;
  if (in.container_instance) {
    GP_ASSIGN(id, ResourceIdFrom(ctx.arn, "container-instance", *in.container_instance));
    instance_arn = ctx.arn.InstanceArn(cluster->name, id);
  }
  const std::string family_part = in.family ? "task-definition/" + *in.family + ":" : "";
  const std::string service_group = in.service_name ? ServiceGroup(*in.service_name) : "";
  const bool filtered = !instance_arn.empty() || in.started_by || in.family || in.service_name;
  auto matches = [&](const TaskKey& key) {
    if (!filtered) return true;
    const Task* t = ctx.view.FindTask(key.arn);
    return t && (instance_arn.empty() || t->container_instance_arn == instance_arn) &&
           (!in.service_name || t->group == service_group) &&
           (!in.started_by || t->started_by == *in.started_by) &&
           (!in.family || t->task_definition_arn.find(family_part) != std::string::npos);
  };
  const TaskOrder& order = ctx.view.TaskOrderOf(cluster->name, in.desired_status == TaskStatus::kStopped);
  // Without filters the offset is a position in the order; with them, matches before it are skipped.
  size_t skip = filtered ? in.page.begin : 0;
  const size_t end = in.page.begin + in.page.limit;
  out.key = "taskArns";
  order.ForEachFrom(filtered ? 0 : in.page.begin, [&](const TaskKey& key) {
    if (!matches(key)) return true;
    if (skip > 0) {
      --skip;
      return true;
    }
    if (out.items.size() == in.page.limit) {  // one more match: there is a next page
      out.next_token = PageToken(end);
      return false;
    }
    out.items.push_back(key.arn);
    return true;
  });
  return Status::Ok();
}

// ExplainPlacement (ours): per instance and per GPU, where the task would go and why not elsewhere.
Status ExplainPlacement(const ExplainPlacementRequest& in, const ClusterState& state, const ArnContext& arn,
                        ExplainResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(state, arn, in.cluster));
  GP_ASSIGN(td, ResolveTaskDefinition(state, arn, in.task_definition));
  GP_TRY(ValidateOverrides(*td, in.overrides));
  GP_TRY(ValidatePlacement(in.constraints, in.strategies));
  PlacementRequest req = PlacementRequestFor(*cluster, *td, in.overrides, in.constraints, in.strategies, in.group,
                                             in.seed, in.policy);
  out.demand = req.demand;
  out.strategies = req.strategies.empty() ? std::vector<PlacementStrategy>{{"random", ""}} : req.strategies;
  out.group = req.group;
  GP_ASSIGN(placer, Placer::Create(std::move(req)));
  out.instances = placer->Explain(state);
  for (const auto& v : out.instances)
    if (v.chosen) out.chosen = v.arn;
  return Status::Ok();
}

void PurgeExpired(Transaction& txn, EpochMs retention_ms) {
  // The STOPPED tasks earliest first: only the expired ones are read, however many tasks wait or run. (A STOPPED
  // task still holding resources, which no operation leaves, would be refused by EraseStoppedTask and stay filed.)
  std::vector<std::string> expired;
  for (const auto& [stopped_at, arn] : txn.state().StoppedTasks()) {
    if (txn.now() - stopped_at <= retention_ms) break;
    expired.push_back(arn);
  }
  for (const auto& arn : expired) (void)txn.EraseStoppedTask(arn);
  // The clientToken records oldest first, the same way: only the expired ones are read, however many are live.
  // Their keys are copied first: a record's strings go with it.
  std::vector<std::pair<std::string, std::string>> tokens;
  for (const ClientTokenRecord* r : txn.state().ClientTokensByAge()) {
    if (txn.now() - r->created_at <= kClientTokenRetentionMs) break;
    tokens.emplace_back(r->cluster, r->token);
  }
  for (const auto& [cluster, token] : tokens) txn.DeleteClientToken(cluster, token);
}

}  // namespace gpupack::api
