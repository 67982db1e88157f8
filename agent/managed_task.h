// ManagedTask: the state machine of one task on this agent, fed by events (the ECS agent's managed task is the
// model). Events are Accept (an assignment to start), Stop, ContainerExited (the monitor saw a container end),
// Recover (the agent restarted while starting the task) and ForgetIfStopped (the server acknowledged its STOPPED
// report). The TaskManager runs a task's events on that task's turn of the TaskExecutor: never two at once for
// one task, in the order posted, while other tasks' events run alongside.
//
//   PENDING --Accept: every container started--> RUNNING --Stop / essential container exited--> STOPPED
//      |                                                                                          ^
//      +--Accept: desired STOPPED, MPS down, GPU held, a container cannot start; Recover ---------+
//                  (TaskFailedToStart)
//
// Every transition is written to the TaskStore before it is reported to the server (Reporter::SendState), so a
// report the connection drops (none is open) is still in the next hello, which is built from the store.
//
// Thread-safety: the event methods must be called on the task's turn only (the TaskManager does); stopping() and
// forgotten() may be read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/environment.h"
#include "agent/runtime.h"
#include "agent/task_store.h"
#include "protocol/messages.h"

namespace gpupack::agent {

// Reporter is the way to the server (ServerConnection): both calls are quick and thread-safe; without an open
// channel SendState does nothing (the next hello reports the task) and Ack does nothing.
class Reporter {
 public:
  virtual ~Reporter() = default;
  virtual void SendState(const protocol::TaskReport& report) = 0;
  virtual void Ack(int64_t push_id) = 0;  // 0: nothing to ack
};

// StartGate is what a start asks of the GPU health part (GpuHealth). Thread-safe.
class StartGate {
 public:
  virtual ~StartGate() = default;
  // MpsServing probes the MPS control daemon now (bounded by its probe timeout): a shared container started
  // without it would run without limits.
  virtual bool MpsServing() = 0;
  // Held: the GPU hit a fatal error and is held until MPS is healthy again.
  virtual bool Held(const std::string& gpu_uuid) const = 0;
};

// TaskContext is what every task's state machine uses; everything in it is thread-safe and outlives the tasks.
struct TaskContext {
  TaskStore& store;
  Runtime& runtime;
  RuntimeKind runtime_kind = RuntimeKind::kProcess;
  StartGate& gate;
  Reporter& reporter;
  std::string mps_pipe_dir;
  std::chrono::milliseconds stop_grace{10000};
};

// StopRequest says why a task is stopped.
struct StopRequest {
  std::string reason;
  std::optional<protocol::StopCode> code;  // none: the task's report carries no stop code (unless it has one)
  // override_reason: replace the stop code and reason the task already has (the watchdog and GPU faults say
  // what really ended it); otherwise they are only set when the task has none yet.
  bool override_reason = false;
  // The container the stop is about and its reason (the watchdog: "GpuMemoryLimitExceeded: ...").
  std::string container;
  std::string container_reason;
  // A server's stop order for a task already STOPPED here reports it again (its report may have been lost).
  bool resend_if_stopped = false;
  // watchdog: the GPU memory watchdog asked for it (the agent's metrics count such stops by this, not by reason).
  bool watchdog = false;
};

inline constexpr const char* kMpsDown = "MPS control daemon is not responding";

class ManagedTask {
 public:
  ManagedTask(TaskContext& ctx, TaskRecord record) : ctx_(ctx), r_(std::move(record)) {}

  const std::string& arn() const { return arn_; }

  // Accept persists the task (from then on a restarted agent knows it and never starts it again), acks the push
  // that assigned it, and starts its containers in order; a task that cannot start is STOPPED with
  // TaskFailedToStart and the reason.
  void Accept(int64_t push_id);
  // Stop stops every running container (SIGTERM, stop grace, SIGKILL) and reports the task STOPPED.
  void Stop(const StopRequest& request);
  // ContainerExited records a container's end; an essential container's end stops the task
  // (EssentialContainerExited). Ignored unless that container (same runtime id) is still RUNNING.
  void ContainerExited(size_t index, const std::string& runtime_id, const ContainerStatus& status);
  // Recover fails a task the agent was starting when it died: it stops every container the runtime has for it,
  // including one started but not yet recorded (found in `listed`).
  void Recover(const std::vector<RuntimeContainer>& listed);
  // ForgetIfStopped deletes the record of a STOPPED task (its report is acknowledged); true when it did. A
  // forgotten task ignores every later event.
  bool ForgetIfStopped();

  bool stopping() const { return stopping_.load(); }
  bool forgotten() const { return forgotten_.load(); }

 private:
  void Fail(const std::string& reason);
  void StopContainers();
  void Persist();
  void Report() { ctx_.reporter.SendState(r_.report); }
  Result<std::string> StartContainer(size_t index);

  TaskContext& ctx_;
  TaskRecord r_;                     // this task's own copy; the store holds what was last persisted
  const std::string arn_ = r_.arn();
  std::atomic<bool> stopping_{false};
  std::atomic<bool> forgotten_{false};
};

}  // namespace gpupack::agent
