// TaskManager: the tasks of this agent. It keeps one ManagedTask per task the TaskStore has a record of, turns
// what arrives from the server (assign, stop, welcome, acks), from the GPU health part (watchdog and fault stops)
// and from its own monitor (containers that ended) into events, and runs each task's events on that task's turn
// of a TaskExecutor (keyed by task ARN): a slow stop or start delays only its own task.
//
// Threads: the channel's io thread calls Assign, StopOrder, Welcome and ReportAcked, which only record and post
// (no runtime call, no disk write on that thread); GpuHealth's thread calls RequestStop; the monitor thread
// (Start/Stop) inspects every running container each monitor_interval and posts ContainerExited for one that
// ended. The runtime's own work runs on the executor's workers: the manager's own, or one shared by the agents
// of the process (`gpupack up`), where task ARNs keep the keys apart. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "agent/managed_task.h"
#include "agent/task_executor.h"

namespace gpupack::agent {

struct TaskManagerOptions {
  std::chrono::milliseconds monitor_interval{100};  // how often running containers are inspected
  std::chrono::milliseconds stop_grace{10000};      // for orphan containers too
  size_t max_threads = 32;                          // workers of the TaskExecutor it makes when given none
  // A TaskExecutor shared with other agents of the process (gpupack up), or null for one of its own.
  std::shared_ptr<TaskExecutor> executor;
};

class TaskManager {
 public:
  TaskManager(TaskContext& ctx, TaskManagerOptions options);
  ~TaskManager();  // Stop(), then the executor's Shutdown
  TaskManager(const TaskManager&) = delete;
  TaskManager& operator=(const TaskManager&) = delete;

  // Start takes on every task of the store (a PENDING one was being started when the agent died: it is failed,
  // see ManagedTask::Recover) and starts the monitor thread.
  void Start();
  // Stop ends the monitor thread (tasks keep running; their pending events still run).
  void Stop();

  // ---- from the server (quick: they record and post) ----
  // Assign takes on an assigned task; one it already has is not started again (the push is acked at once).
  void Assign(protocol::Assignment assignment, int64_t push_id);
  // StopOrder: a task it knows is acked before it is stopped (that takes up to the stop grace): the server's
  // desired status is durable, so a stop lost with this agent comes back in the welcome. One it does not know is
  // reported STOPPED first, then acked.
  void StopOrder(const protocol::StopOrder& order, int64_t push_id, std::optional<protocol::StopCode> code);
  // Welcome: the hello's STOPPED tasks are acknowledged (forgotten), then its stops and assigns are taken, then
  // containers of tasks this agent does not know (orphans) are stopped and removed.
  void Welcome(const protocol::Welcome& welcome, const std::set<std::string>& hello_stopped);
  // ReportAcked: the server made a report durable; a STOPPED task whose STOPPED report it was is forgotten.
  void ReportAcked(const std::string& arn, protocol::TaskStatus status);

  // ---- from the GPU health part and shutdown ----
  void RequestStop(const std::string& arn, StopRequest request);
  // StopAll stops every task (in parallel) and waits (bounded) until their events have run.
  void StopAll(const std::string& reason, std::chrono::milliseconds timeout);
  // Shutdown waits for this manager's running events, skips its queued ones and refuses later ones (the
  // executor may be shared: other agents' work goes on).
  void Shutdown();

  bool Knows(const std::string& arn) const;

 private:
  std::shared_ptr<ManagedTask> Find(const std::string& arn) const;
  // Submit runs `fn` on `key`'s turn of the executor unless Shutdown came first; in_flight_ counts it until then.
  void Submit(const std::string& key, std::function<void()> fn);
  void Finished();
  void Post(const std::shared_ptr<ManagedTask>& task, std::function<void(ManagedTask&)> event);
  void Forget(const std::shared_ptr<ManagedTask>& task);
  void Monitor();
  void CheckContainers();
  void StopOrphans();

  TaskContext& ctx_;
  const TaskManagerOptions options_;
  const std::shared_ptr<TaskExecutor> executor_;
  const std::string orphan_key_;  // the executor key of the orphan sweep: unique per manager, no ARN
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<ManagedTask>> tasks_;  // by ARN; guarded by mu_
  bool stopping_ = false;                                      // the monitor ends; guarded by mu_
  bool closed_ = false;                                        // Shutdown: no more events; guarded by mu_
  size_t in_flight_ = 0;                                       // submitted, not yet run; guarded by mu_
  std::condition_variable cv_;       // the monitor's wait
  std::condition_variable idle_cv_;  // in_flight_ reached 0
  std::thread monitor_;
  std::set<std::string> exits_posted_;  // runtime ids whose exit was posted (monitor thread only)
};

}  // namespace gpupack::agent
