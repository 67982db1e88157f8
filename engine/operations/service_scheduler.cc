// The service scheduler: after every write, in the same transaction, it looks at the services the write
// concerns and starts and stops their tasks until each runs desiredCount tasks of its PRIMARY deployment (one
// per ACTIVE instance for DAEMON). A service is looked at when
//   - an operation marked it (CreateService, UpdateService, DeleteService, the end of a restart back-off, a load);
//   - one of its tasks changed (placed, RUNNING, stopping, STOPPED);
//   - an instance its tasks run on changed (DRAINING, a GPU held after a fault), or an instance of its cluster
//     changed or a task of its cluster stopped while it waits for capacity (starved), or it is a DAEMON service
//     of a cluster whose instances changed.
// It never scans every service or every task: the state keeps each service's live tasks (ServiceTasks), the
// starved and DAEMON services per cluster and the back-off wakes.
//
// Because it runs inside the write that caused it, a task it starts is committed together with that write:
// after a crash either both are durable or neither, so nothing is started twice and nothing is forgotten.
#include <algorithm>
#include <cstdio>
#include <map>

#include "engine/operations/operations.h"

namespace gpupack::api {

namespace {

constexpr EpochMs kFailureWindowMs = 10 * 60'000;          // a failure later than this after the last starts afresh
constexpr int kFailuresBeforeBackoff = 3;                   // failures in a row a service restarts at once
constexpr EpochMs kBackoffBaseMs = 10'000;                  // the first back-off, doubled per further failure
constexpr EpochMs kBackoffMaxMs = 15 * 60'000;              // the longest back-off
constexpr EpochMs kRepeatedEventMs = 5 * 60'000;            // an identical event is not repeated within this

std::string Who(const Service& svc) { return "(service " + svc.name + ")"; }

std::string EventId(Transaction& txn) {
  std::string hex = txn.NewId();
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" + hex.substr(16, 4) + "-" +
         hex.substr(20, 12);
}

// AddEvent: newest first, at most Service::kMaxServiceEvents; `dedupe` skips a message already given within
// kRepeatedEventMs (a service that keeps failing to place says so once per five minutes, as ECS does).
void AddEvent(Service& svc, Transaction& txn, std::string message, bool dedupe = false) {
  if (dedupe)
    for (const auto& e : svc.events) {
      if (txn.now() - e.created_at >= kRepeatedEventMs) break;
      if (e.message == message) return;
    }
  svc.events.insert(svc.events.begin(), ServiceEvent{EventId(txn), txn.now(), std::move(message)});
  if (svc.events.size() > Service::kMaxServiceEvents) svc.events.resize(Service::kMaxServiceEvents);
}

std::string TaskList(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : " ") + std::string("(task ") + id + ")";
  return out;
}

// Insufficient: ECS's words for the resource an instance lacked.
std::string Insufficient(const std::string& why) {
  if (why == reason::kGpuMemory) return "has insufficient GPU memory available";
  if (why == reason::kGpuCompute) return "has insufficient GPU compute available";
  if (why == reason::kGpu) return "has insufficient GPU available";
  if (why == reason::kMemory) return "has insufficient memory available";
  if (why == reason::kCpu) return "has insufficient CPU units available";
  if (why == reason::kAttribute) return "is missing an attribute required by your task";
  if (why == reason::kAgent) return "has no connected agent";
  if (why == reason::kStatus) return "is not ACTIVE";
  return "was refused (" + why + ")";
}

// UnplacedEvent: ECS's event for a task no instance could take, naming the closest matching instance (the
// first that refused it for the reason most instances gave) and what it lacked.
std::string UnplacedEvent(const Service& svc, const ArnContext& arn, const std::vector<Failure>& failures) {
  const std::string cluster_arn = arn.ClusterArn(svc.cluster);
  std::map<std::string, int> votes;
  const Failure* closest = nullptr;
  for (const auto& f : failures) {
    if (f.arn == cluster_arn || f.arn.find(":container-instance/") == std::string::npos) continue;
    if (++votes[f.reason] > (closest ? votes[closest->reason] : 0)) closest = &f;
  }
  if (!closest)
    return Who(svc) + " was unable to place a task because no container instances were found in your cluster.";
  const std::string id = closest->arn.substr(closest->arn.rfind('/') + 1);
  return Who(svc) + " was unable to place a task because no container instance met all of its requirements. " +
         "The closest matching (container-instance " + id + ") " + Insufficient(closest->reason) + ".";
}

// Doomed: a live task the service replaces and then stops: its instance is DRAINING (or gone), or a GPU it holds
// is held after a fault.
bool Doomed(const ClusterState& state, const Task& t) {
  const ContainerInstance* inst = state.FindInstance(t.container_instance_arn);
  if (!inst || inst->status != InstanceStatus::kActive) return true;
  for (const auto& r : t.gpu_reservations)
    for (const Gpu& g : inst->gpus)
      if (g.id == r.gpu_id && g.held) return true;
  return false;
}

// Visit: one service looked at once, on a copy written back when it changed.
class Visit {
 public:
  Visit(Service svc, Transaction& txn, const PlacementPolicy& policy)
      : svc_(std::move(svc)), txn_(txn), state_(txn.state()), policy_(policy) {}

  Service& service() { return svc_; }

  // Failed: a task of the service stopped without the scheduler or a user asking: it counts toward the restart
  // back-off and, for a deployment in progress, toward its circuit breaker.
  void Failed(const Task& t) {
    if (txn_.now() - svc_.last_failure_at > kFailureWindowMs) svc_.failure_streak = 0;
    ++svc_.failure_streak;
    svc_.last_failure_at = txn_.now();
    for (auto& d : svc_.deployments)
      if (d.id == t.started_by) ++d.failed_tasks;
    if (svc_.failure_streak > kFailuresBeforeBackoff) {
      const int doublings = std::min(svc_.failure_streak - kFailuresBeforeBackoff - 1, 20);
      svc_.next_launch_at = txn_.now() + std::min(kBackoffBaseMs << doublings, kBackoffMaxMs);
      AddEvent(svc_, txn_,
               Who(svc_) + " is unable to consistently start tasks successfully. For more information, see the "
                           "Troubleshooting section of the Amazon ECS Developer Guide.",
               /*dedupe=*/true);
    }
    TripCircuitBreaker();
  }

  void Run() {
    if (svc_.status == ServiceStatus::kInactive || svc_.deployments.empty()) return;
    Collect();
    if (svc_.daemon) {
      Daemon();
    } else {
      Replica();
    }
    Stop();
    Recount();
  }

 private:
  ServiceDeployment& primary() { return svc_.deployments.front(); }
  const ServiceDeployment& primary() const { return svc_.deployments.front(); }
  int Desired() const { return svc_.status == ServiceStatus::kActive ? svc_.desired_count : 0; }

  // Collect sorts the service's live tasks: those it keeps (of the PRIMARY deployment, on healthy capacity) and
  // those to replace (of an older deployment, or doomed); tasks already stopping are neither.
  void Collect() {
    for (const auto& arn : state_.ServiceTasks(svc_.cluster, ServiceGroup(svc_.name))) {
      const Task* t = state_.FindTask(arn);
      if (!t) continue;
      if (t->desired_status == TaskStatus::kStopped) {
        ++stopping_;
        continue;
      }
      if (t->started_by == primary().id && !Doomed(state_, *t)) {
        keep_.push_back(t);
      } else {
        replace_.push_back(t);
      }
    }
    // Oldest first, so scale-in (from the back) stops the newest, and replacement stops the oldest first.
    auto older = [](const Task* a, const Task* b) {
      return a->created_at != b->created_at ? a->created_at < b->created_at : a->arn < b->arn;
    };
    std::sort(keep_.begin(), keep_.end(), older);
    std::sort(replace_.begin(), replace_.end(), older);
  }

  void Replica() {
    const int desired = Desired();
    const auto& cfg = svc_.deployment_configuration;
    const int max_total = desired * cfg.maximum_percent / 100;
    // Scale-in: PENDING tasks first, then the newest.
    std::stable_partition(keep_.begin(), keep_.end(),
                          [](const Task* t) { return t->last_status == TaskStatus::kRunning; });
    while (static_cast<int>(keep_.size()) > desired) {
      Plan(keep_.back(), "Scaling activity initiated by (deployment " + primary().id + ")");
      keep_.pop_back();
    }
    const int live = static_cast<int>(keep_.size() + replace_.size());
    const int want = desired - static_cast<int>(keep_.size());
    const int room = max_total - live;
    const int start = std::max(0, std::min(want, room));
    if (start > 0) Launch(start, {});
    // Replace: a task not RUNNING goes at once; a RUNNING one only while enough RUNNING tasks stay. When the two
    // percents leave no room at all (one replica at maximumPercent 100) and nothing is on its way up or down,
    // one task goes first: the only way on.
    const int min_running = (desired * cfg.minimum_healthy_percent + 99) / 100;
    int running = 0;
    for (const Task* t : keep_) running += t->last_status == TaskStatus::kRunning;
    for (const Task* t : replace_) running += t->last_status == TaskStatus::kRunning;
    // A FAILED deployment (circuit breaker, no rollback) starts nothing, so the tasks before it stay.
    const bool failed = primary().rollout_state == RolloutState::kFailed;
    bool stopped_one = false;
    for (const Task* t : replace_) {
      if (failed && !Doomed(state_, *t)) continue;
      if (t->last_status == TaskStatus::kRunning) {
        if (running <= min_running) continue;
        --running;
      }
      Plan(t, ReplaceReason(*t));
      stopped_one = true;
    }
    const bool waiting = stopping_ > 0 || std::any_of(keep_.begin(), keep_.end(), [](const Task* t) {
      return t->last_status != TaskStatus::kRunning;  // a task on its way up or down moves things on
    });
    if (!stopped_one && !failed && !waiting && want > 0 && room <= 0 && !replace_.empty())
      Plan(replace_.front(), ReplaceReason(*replace_.front()));
  }

  // Daemon: one task of the PRIMARY deployment per ACTIVE instance. Old and doomed tasks stop (an instance is
  // given its new task once the old one is gone), within minimumHealthyPercent of the ACTIVE instances.
  void Daemon() {
    std::set<std::string> occupied;  // instances with a live task of the service (stopping ones included)
    for (const auto& arn : state_.ServiceTasks(svc_.cluster, ServiceGroup(svc_.name)))
      if (const Task* t = state_.FindTask(arn)) occupied.insert(t->container_instance_arn);
    int active = 0;
    std::vector<std::string> empty;
    for (const ContainerInstance* inst : state_.InstancesOf(svc_.cluster)) {
      if (inst->status != InstanceStatus::kActive) continue;
      ++active;
      if (!occupied.count(inst->arn)) empty.push_back(inst->arn);
    }
    daemon_desired_ = svc_.status == ServiceStatus::kActive ? active : 0;
    if (svc_.status == ServiceStatus::kActive && !empty.empty()) Launch(static_cast<int>(empty.size()), empty);
    const int min_running = (daemon_desired_ * svc_.deployment_configuration.minimum_healthy_percent + 99) / 100;
    int running = 0;
    for (const Task* t : keep_) running += t->last_status == TaskStatus::kRunning;
    for (const Task* t : replace_) running += t->last_status == TaskStatus::kRunning;
    for (const Task* t : replace_) {
      const bool gone = Doomed(state_, *t) || svc_.status != ServiceStatus::kActive;
      if (t->last_status == TaskStatus::kRunning && !gone) {
        if (running <= min_running) continue;
        --running;
      }
      Plan(t, ReplaceReason(*t));
    }
    if (svc_.status != ServiceStatus::kActive)
      for (const Task* t : keep_) Plan(t, "Scaling activity initiated by (deployment " + primary().id + ")");
  }

  std::string ReplaceReason(const Task& t) const {
    if (svc_.status != ServiceStatus::kActive) return "Service " + svc_.name + " was deleted";
    const ContainerInstance* inst = state_.FindInstance(t.container_instance_arn);
    if (!inst || inst->status != InstanceStatus::kActive)
      return "Container instance " + (inst ? inst->id : t.container_instance_arn) +
             " is DRAINING: the task was replaced on another instance";
    if (Doomed(state_, t)) return "A GPU of the task is held after a fault: the task was replaced";
    return "Scaling activity initiated by (deployment " + primary().id + ")";
  }

  // Launch starts `count` tasks of the PRIMARY deployment (DAEMON: one on each of `instances`), unless the
  // service waits out a back-off or its deployment failed. What could not be placed leaves the service starved,
  // to be tried again when capacity frees, with ECS's event.
  void Launch(int count, const std::vector<std::string>& instances) {
    if (primary().rollout_state == RolloutState::kFailed) return;
    if (txn_.now() < svc_.next_launch_at) return;
    RunTaskRequest req;
    req.cluster = svc_.cluster;
    req.task_definition = primary().task_definition_arn;
    req.group = ServiceGroup(svc_.name);
    req.started_by = primary().id;
    req.constraints = svc_.placement_constraints;
    req.strategies = svc_.placement_strategy;
    req.capacity_provider_strategy = svc_.capacity_provider_strategy;
    req.launch_type_given = svc_.capacity_provider_strategy.empty();  // resolved at CreateService: no default now
    req.queue = false;  // a replica that does not fit leaves the service starved, retried when capacity frees
    req.policy = policy_;
    int placed = 0;
    std::vector<Failure> failures;
    Status first_error;
    auto run = [&](const PlaceTasksRequest& r, bool start_task) {
      TasksResult out;
      Status s = start_task ? StartTask(static_cast<const StartTaskRequest&>(r), txn_, out)
                            : RunTask(static_cast<const RunTaskRequest&>(r), txn_, out);
      if (!s.ok()) {
        if (first_error.ok()) first_error = s;
        return;
      }
      for (const auto& t : out.tasks) started_.push_back(t->id);
      placed += static_cast<int>(out.tasks.size());
      failures.insert(failures.end(), out.failures.begin(), out.failures.end());
    };
    if (instances.empty()) {
      req.count = count;
      run(req, false);
    } else {
      StartTaskRequest one;
      static_cast<PlaceTasksRequest&>(one) = req;
      one.strategies.clear();
      for (const auto& arn : instances) {
        one.container_instances = {arn};
        run(one, true);
      }
    }
    svc_.starved = placed < count;
    if (!first_error.ok()) {
      AddEvent(svc_, txn_, Who(svc_) + " was unable to place a task: " + first_error.message(), true);
    } else if (placed < count) {
      AddEvent(svc_, txn_, UnplacedEvent(svc_, txn_.arn(), failures), true);
    }
    launched_any_ = true;
  }

  // Plan: stop `t` once the visit is done (Stop), for `reason`.
  void Plan(const Task* t, std::string reason) { to_stop_.emplace_back(t->arn, std::move(reason)); }

  void Stop() {
    std::vector<std::string> ids;
    for (const auto& [arn, reason] : to_stop_) {
      const Task* t = state_.FindTask(arn);
      if (!t || t->desired_status == TaskStatus::kStopped) continue;
      ids.push_back(t->id);
      StopTaskRecord(arn, stop_codes::kServiceSchedulerInitiated, reason, txn_);
    }
    if (!started_.empty())
      AddEvent(svc_, txn_,
               Who(svc_) + " has started " + std::to_string(started_.size()) + " tasks: " + TaskList(started_) + ".");
    if (!ids.empty())
      AddEvent(svc_, txn_, Who(svc_) + " has stopped " + std::to_string(ids.size()) + " running tasks: " +
                               TaskList(ids) + ".");
    // Nothing was tried: a service that wanted no task is not waiting for capacity (one that waits out a
    // back-off or room under maximumPercent stays as it was).
    if (!launched_any_ && (svc_.daemon || static_cast<int>(keep_.size()) >= Desired())) svc_.starved = false;
  }

  // Recount: the counts of the service and of each deployment from its live tasks; an older deployment with no
  // task left is dropped; a PRIMARY deployment that runs desiredCount alone has COMPLETED, and the service has
  // reached a steady state.
  void Recount() {
    std::map<std::string, std::pair<int, int>> counts;  // deployment id -> (running, pending)
    std::map<std::string, int> live;                    // deployment id -> live tasks, stopping ones included
    int stopping = 0;
    for (const auto& arn : state_.ServiceTasks(svc_.cluster, ServiceGroup(svc_.name))) {
      const Task* t = state_.FindTask(arn);
      if (!t) continue;
      ++live[t->started_by];
      if (t->desired_status == TaskStatus::kStopped) {
        ++stopping;
        continue;
      }
      auto& [running, pending] = counts[t->started_by];
      ++(t->last_status == TaskStatus::kRunning ? running : pending);
    }
    svc_.running_count = svc_.pending_count = 0;
    for (auto& d : svc_.deployments) {
      d.running_count = counts[d.id].first;
      d.pending_count = counts[d.id].second;
      d.desired_count = d.primary ? Desired() : d.running_count + d.pending_count;
      svc_.running_count += d.running_count;
      svc_.pending_count += d.pending_count;
    }
    if (svc_.daemon) {
      primary().desired_count = daemon_desired_;
      svc_.desired_count = daemon_desired_;
    }
    std::erase_if(svc_.deployments, [&](const ServiceDeployment& d) { return !d.primary && live[d.id] == 0; });
    if (svc_.status == ServiceStatus::kDraining && live.empty()) {
      svc_.status = ServiceStatus::kInactive;
      svc_.starved = false;
      return;
    }
    const int desired = svc_.daemon ? daemon_desired_ : Desired();
    ServiceDeployment& p = primary();
    const bool converged = svc_.status == ServiceStatus::kActive && p.running_count == desired &&
                           p.pending_count == 0 && svc_.deployments.size() == 1 && stopping == 0;
    if (converged && p.rollout_state == RolloutState::kInProgress) {
      p.rollout_state = RolloutState::kCompleted;
      p.rollout_state_reason = "ECS deployment " + p.id + " completed.";
      p.updated_at = txn_.now();
      svc_.stable_task_definition_arn = p.task_definition_arn;
      AddEvent(svc_, txn_, Who(svc_) + " (deployment " + p.id + ") deployment completed.");
    }
    if (converged && !svc_.steady) AddEvent(svc_, txn_, Who(svc_) + " has reached a steady state.");
    svc_.steady = converged;
  }

  // TripCircuitBreaker: a deployment in progress whose tasks failed clamp(ceil(desired / 2), 3, 200) times has
  // FAILED; with rollback, a new deployment returns to the task definition of the last completed one.
  void TripCircuitBreaker() {
    const auto& cfg = svc_.deployment_configuration;
    ServiceDeployment& p = primary();
    if (!cfg.circuit_breaker || p.rollout_state != RolloutState::kInProgress) return;
    const int threshold = std::clamp((svc_.desired_count + 1) / 2, 3, 200);
    if (p.failed_tasks < threshold) return;
    p.rollout_state = RolloutState::kFailed;
    p.rollout_state_reason = "ECS deployment circuit breaker: tasks failed to start.";
    p.updated_at = txn_.now();
    AddEvent(svc_, txn_, Who(svc_) + " (deployment " + p.id + ") deployment failed: tasks failed to start.");
    if (!cfg.rollback || svc_.stable_task_definition_arn.empty() ||
        svc_.stable_task_definition_arn == p.task_definition_arn)
      return;
    for (auto& d : svc_.deployments) d.primary = false;
    svc_.task_definition_arn = svc_.stable_task_definition_arn;
    svc_.deployments.insert(svc_.deployments.begin(),
                            NewDeployment(txn_, svc_.stable_task_definition_arn, svc_.desired_count));
    svc_.failure_streak = 0;
    svc_.next_launch_at = 0;
    AddEvent(svc_, txn_, Who(svc_) + " (deployment " + primary().id + ") rolling back to " +
                             svc_.stable_task_definition_arn + ", the task definition of the last completed "
                                                               "deployment.");
  }

  Service svc_;
  Transaction& txn_;
  const ClusterState& state_;
  const PlacementPolicy& policy_;
  std::vector<const Task*> keep_, replace_;
  int stopping_ = 0;
  int daemon_desired_ = 0;
  bool launched_any_ = false;
  std::vector<std::string> started_;                         // ids of the tasks started
  std::vector<std::pair<std::string, std::string>> to_stop_;  // (task ARN, reason)
};

// ServiceOf: the ARN of the service a task belongs to ("" for a standalone task).
std::string ServiceOf(const ArnContext& arn, const Task& t) {
  static constexpr std::string_view kPrefix = "service:";
  if (t.group.rfind(kPrefix, 0) != 0) return "";
  return arn.ServiceArn(t.cluster, t.group.substr(kPrefix.size()));
}

}  // namespace

ServiceDeployment NewDeployment(Transaction& txn, const std::string& task_definition_arn, int desired_count) {
  char digits[20];
  std::snprintf(digits, sizeof digits, "%019llu",
                static_cast<unsigned long long>(txn.NextSeed() % 10'000'000'000'000'000'000ULL));
  ServiceDeployment d;
  d.id = std::string("ecs-svc/") + digits;
  d.primary = true;
  d.task_definition_arn = task_definition_arn;
  d.desired_count = desired_count;
  d.created_at = d.updated_at = txn.now();
  return d;
}

void ReconcileServices(Transaction& txn, const PlacementPolicy& policy) {
  const ClusterState& state = txn.state();
  std::set<std::string> visit = txn.marked_services();
  std::map<std::string, std::vector<std::string>> failed;  // service ARN -> tasks that stopped on their own
  std::set<std::string> freed;                             // clusters where capacity freed or instances changed
  for (const auto& arn : txn.changed_tasks())
    if (const Task* t = state.FindTask(arn))
      if (std::string svc = ServiceOf(txn.arn(), *t); !svc.empty()) visit.insert(std::move(svc));
  for (const auto& arn : txn.released_tasks()) {
    const Task* t = state.FindTask(arn);
    if (!t) continue;
    freed.insert(t->cluster);
    std::string svc = ServiceOf(txn.arn(), *t);
    if (svc.empty()) continue;
    if (t->stop_code != stop_codes::kServiceSchedulerInitiated && t->stop_code != stop_codes::kUserInitiated)
      failed[svc].push_back(arn);
    visit.insert(std::move(svc));
  }
  for (const auto& arn : txn.persisted_instances()) {
    const ContainerInstance* inst = state.FindInstance(arn);
    if (!inst) continue;
    freed.insert(inst->cluster);
    for (const auto& [group, n] : state.LoadOf(*inst).group_counts)
      if (n > 0 && group.rfind("service:", 0) == 0) visit.insert(txn.arn().ServiceArn(inst->cluster, group.substr(8)));
    for (const auto& svc : state.DaemonServices(inst->cluster)) visit.insert(svc);
  }
  for (const auto& cluster : freed)
    for (const auto& svc : state.StarvedServices(cluster)) visit.insert(svc);

  // A task the scheduler stops may stop at once (a PENDING task no agent holds) and free room for its
  // replacement: the services of such tasks are looked at again, a few rounds at most.
  for (int round = 0; round < 4 && !visit.empty(); ++round) {
    const size_t released_before = txn.released_tasks().size();
    for (const auto& arn : visit) {
      const Service* found = state.FindService(arn);
      if (!found || found->status == ServiceStatus::kInactive) continue;
      Visit v(*found, txn, policy);
      if (auto it = failed.find(arn); it != failed.end())
        for (const auto& task_arn : it->second)
          if (const Task* t = state.FindTask(task_arn)) v.Failed(*t);
      v.Run();
      const Service* now = state.FindService(arn);
      if (now && !(*now == v.service())) {
        v.service().updated_at = txn.now();
        txn.UpdateService(arn, [&v](Service& s) {
          const int64_t version = s.version;
          s = std::move(v.service());
          s.version = version;
        });
      }
    }
    failed.clear();
    visit.clear();
    const auto& released = txn.released_tasks();
    for (size_t i = released_before; i < released.size(); ++i)
      if (const Task* t = state.FindTask(released[i]))
        if (std::string svc = ServiceOf(txn.arn(), *t); !svc.empty()) visit.insert(std::move(svc));
  }
}

void WakeServices(Transaction& txn) {
  std::vector<std::string> due;
  for (const auto& [at, arn] : txn.state().ServiceWakes()) {
    if (at > txn.now()) break;
    due.push_back(arn);
  }
  for (const auto& arn : due) {
    txn.UpdateService(arn, [](Service& s) { s.next_launch_at = 0; });
    txn.MarkService(arn);
  }
}

void MarkAllServices(Transaction& txn) {
  txn.state().ForEachService([&](const Service& s) {
    if (s.status != ServiceStatus::kInactive) txn.MarkService(s.arn);
  });
}

}  // namespace gpupack::api
