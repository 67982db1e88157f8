// Tasks: RunTask, StartTask, StopTask, DescribeTasks, ListTasks, ExplainPlacement, and the retention purge.
#include <algorithm>

#include "api/operations/operations.h"
#include "api/operations/resolve.h"
#include "scheduler/fragmentation.h"
#include "scheduler/task_builder.h"
#include "scheduler/validation.h"

namespace gpupack::api {

namespace {

// PlacementRequestFor: the placement request of a RunTask, StartTask or ExplainPlacement.
PlacementRequest PlacementRequestFor(const Cluster& cluster, const TaskDefinition& td, const TaskOverride& overrides,
                                     const std::vector<PlacementConstraint>& constraints,
                                     const std::vector<PlacementStrategy>& strategies,
                                     const std::optional<std::string>& group, uint64_t seed) {
  PlacementRequest req;
  req.cluster = cluster.name;
  req.demand = DemandOf(td, overrides);
  req.group = group.value_or("family:" + td.family);
  req.constraints = constraints;
  req.constraints.insert(req.constraints.end(), td.placement_constraints.begin(), td.placement_constraints.end());
  req.strategies = strategies;
  req.seed = seed;
  req.compute_aware = cluster.settings.compute_aware_placement;
  return req;
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

  // Idempotency: the same token and request give the same tasks; a different request is a conflict.
  const bool has_token = in.client_token && !in.client_token->empty();
  if (has_token) {
    if (const ClientTokenRecord* rec = state.FindClientToken(cluster->name, *in.client_token)) {
      if (rec->request_fingerprint != in.fingerprint)
        return Status::Conflict("clientToken '" + *in.client_token + "' was used with a different request");
      for (const auto& arn : rec->task_arns)
        if (const Task* t = state.FindTask(arn)) out.tasks.push_back(std::make_shared<const Task>(*t));
      txn.MarkWrite();
      return Status::Ok();
    }
  }

  PlacementRequest req = PlacementRequestFor(*cluster, *td, in.overrides, in.constraints, in.strategies, in.group,
                                             txn.NextSeed());
  req.only_instances = only;
  GP_ASSIGN(placer, Placer::Create(std::move(req)));
  // Every task asked for is one demand of the cluster's recent workload (binpack(fragmentation)'s target).
  const WorkloadShape shape = WorkloadShapeOf(placer->request().demand, placer->request().constraints);
  for (int64_t i = 0; i < count; ++i) txn.RecordDemand(cluster->name, shape);

  std::vector<std::string> placed_arns;
  for (int i = 0; i < count; ++i) {
    if (start_task) {  // one task per named instance
      PlacementRequest one = placer->request();
      one.only_instances = {only[i]};
      GP_ASSIGN(p1, Placer::Create(std::move(one)));
      placer = std::move(p1);
    }
    Placement p = placer->PlaceOne(state, i);
    if (!p.placed()) {
      for (auto& f : p.failures) {
        if (f.arn.empty()) f.arn = txn.arn().ClusterArn(cluster->name);
        txn.CountFailure(f.reason);
        out.failures.push_back({f.arn, f.reason, f.detail});
      }
      if (!start_task) break;  // later tasks of the request would fail the same way
      continue;
    }
    NewTaskFields fields;
    fields.id = txn.NewId();
    fields.arn = txn.arn().TaskArn(cluster->name, fields.id);
    fields.cluster = cluster->name;
    fields.group = placer->request().group;
    fields.started_by = in.started_by.value_or("");
    fields.client_token = in.client_token.value_or("");
    fields.created_at = txn.now();
    fields.overrides = in.overrides;
    fields.tags = in.tags;
    const ArnContext& arn = txn.arn();
    const std::string cluster_name = cluster->name, task_id = fields.id;
    fields.container_arn = [&arn, cluster_name, task_id](const std::string& name) {
      return arn.ContainerArn(cluster_name, task_id, name);
    };
    Task t = BuildTask(std::move(fields), *td, placer->request().demand, *p.instance, p.gpu_indices);
    auto placed = std::make_shared<const Task>(t);
    const std::string instance_arn = t.container_instance_arn;
    GP_TRY(txn.ReserveTask(std::move(t)));
    txn.CountPlacement();
    txn.Push(instance_arn, protocol::Assign{0, AssignmentFor(*placed, state, txn.arn())});
    placed_arns.push_back(placed->arn);
    out.tasks.push_back(std::move(placed));
  }
  // Instance counters and remaining resources are derived: a restart recomputes them from the tasks, so only
  // the tasks are persisted.
  if (has_token && !placed_arns.empty())
    txn.PutClientToken({cluster->name, *in.client_token, in.fingerprint, placed_arns, txn.now()});
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
  out.task = std::make_shared<const Task>(*txn.state().FindTask(arn));
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

// ListTasks: ECS's PENDING and RUNNING tasks both have desiredStatus RUNNING; oldest first.
Status ListTasks(const ListTasksRequest& in, const ReadContext& ctx, ListPage& out) {
  GP_ASSIGN(cluster, ActiveCluster(ctx.view, ctx.arn, in.cluster));
  std::string instance_arn;
  if (in.container_instance) {
    GP_ASSIGN(id, ResourceIdFrom(ctx.arn, "container-instance", *in.container_instance));
    instance_arn = ctx.arn.InstanceArn(cluster->name, id);
  }
  const bool want_stopped = in.desired_status == TaskStatus::kStopped;
  const std::string family_part = in.family ? "task-definition/" + *in.family + ":" : "";
  std::vector<std::pair<EpochMs, std::string>> rows;
  ctx.view.ForEachTask([&](const Task& t) {
    if (t.cluster != cluster->name) return;
    if (want_stopped != (t.desired_status == TaskStatus::kStopped)) return;
    if (!instance_arn.empty() && t.container_instance_arn != instance_arn) return;
    if (in.started_by && t.started_by != *in.started_by) return;
    if (in.family && t.task_definition_arn.find(family_part) == std::string::npos) return;
    rows.emplace_back(t.created_at, t.arn);
  });
  std::sort(rows.begin(), rows.end());
  std::vector<std::string> arns;
  arns.reserve(rows.size());
  for (auto& r : rows) arns.push_back(std::move(r.second));
  out = PageOf("taskArns", std::move(arns), in.page.begin, in.page.limit);
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
                                             in.seed);
  out.demand = req.demand;
  GP_ASSIGN(placer, Placer::Create(std::move(req)));
  out.instances = placer->Explain(state);
  for (const auto& v : out.instances)
    if (v.chosen) out.chosen = v.arn;
  return Status::Ok();
}

void PurgeExpired(Transaction& txn, EpochMs retention_ms) {
  std::vector<std::string> expired;
  for (const auto& [arn, t] : txn.state().Tasks())
    if (t.last_status == TaskStatus::kStopped && t.resources_released && t.stopped_at &&
        txn.now() - t.stopped_at > retention_ms)
      expired.push_back(arn);
  for (const auto& arn : expired) (void)txn.EraseStoppedTask(arn);
}

}  // namespace gpupack::api
