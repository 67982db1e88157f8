#include "agent/managed_task.h"

#include <algorithm>
#include <cstdlib>

#include <spdlog/spdlog.h>

namespace gpupack::agent {

using protocol::StopCode;
using protocol::TaskStatus;

void ManagedTask::Persist() {
  if (Status s = ctx_.store.Put(r_); !s.ok()) spdlog::warn("agent: task {}: {}", arn_, s.message());
}

// ---- start ---------------------------------------------------------------------------------------------------

void ManagedTask::Accept(int64_t push_id) {
  if (forgotten()) return;
  Persist();  // from here a restarted agent knows the task and will not start it again
  ctx_.reporter.Ack(push_id);
  if (r_.report.status != TaskStatus::kPending) return;
  if (r_.assignment.desired_status == TaskStatus::kStopped) return Fail("stopped before it started");

  const auto& containers = r_.assignment.containers;
  const bool shared = std::any_of(containers.begin(), containers.end(), [](const auto& c) { return c.mps.has_value(); });
  // A container started without the daemon would silently run without limits.
  if (shared && !ctx_.gate.MpsServing()) return Fail(kMpsDown);
  for (const auto& c : containers)
    for (const auto& g : c.gpu_ids)
      if (ctx_.gate.Held(g)) return Fail("GPU " + g + " is held after a fault until its MPS server is healthy");

  for (size_t i = 0; i < containers.size(); ++i) {
    auto id = StartContainer(i);
    if (!id.ok()) {
      r_.report.containers[i].reason = "CannotStartContainerError: " + id.status().message();
      return Fail("CannotStartContainerError: " + id.status().message());
    }
    r_.runtime_ids[i] = *id;
    r_.report.containers[i].status = TaskStatus::kRunning;
    // The process runtime says, where DescribeTasks and the console show it, that the image was not used.
    if (ctx_.runtime_kind == RuntimeKind::kProcess) r_.report.containers[i].reason = ProcessImageNote(containers[i].image);
    if (i + 1 < containers.size()) Persist();  // the last one is persisted with the task's RUNNING below
  }
  r_.report.status = TaskStatus::kRunning;
  Persist();
  Report();
  const std::string note = ctx_.runtime_kind == RuntimeKind::kProcess ? ProcessImageNote(containers[0].image) : "";
  spdlog::info("agent: task {} RUNNING{}", arn_, note.empty() ? "" : " (" + note + ")");
}

Result<std::string> ManagedTask::StartContainer(size_t index) {
  const protocol::AssignedContainer& c = r_.assignment.containers[index];
  GpuAssignment gpu;
  gpu.gpu_uuids = c.gpu_ids;
  if (c.mps) {
    MpsSharing m;
    m.memory_mib = c.mps->memory_mib;
    m.max_compute_percent = c.mps->max_compute_percent;
    gpu.mps = m;
  }
  ContainerSpec spec;
  spec.task_arn = arn_;
  spec.container_name = c.name;
  spec.image = c.image;
  spec.entry_point = c.entry_point;
  spec.command = c.command;
  spec.environment = ContainerEnvironment(c.environment, c.override_environment, gpu, ctx_.mps_pipe_dir,
                                          ctx_.runtime_kind);
  if (ctx_.runtime_kind == RuntimeKind::kProcess)
    spec.environment = WithHostDefaults(std::move(spec.environment), [](const char* n) { return std::getenv(n); });
  spec.mps_pipe_dir = gpu.mps ? ctx_.mps_pipe_dir : "";
  spec.cpu = c.cpu;
  spec.memory = c.memory;
  spec.memory_reservation = c.memory_reservation;
  return ctx_.runtime.Start(spec);
}

// Fail ends a task that could not start: stops what did start, reports STOPPED with TaskFailedToStart.
void ManagedTask::Fail(const std::string& reason) {
  spdlog::warn("agent: task {} failed to start: {}", arn_, reason);
  stopping_ = true;
  for (size_t i = 0; i < r_.report.containers.size(); ++i) {
    auto& c = r_.report.containers[i];
    if (!r_.runtime_ids[i].empty() && c.status == TaskStatus::kRunning) {
      (void)ctx_.runtime.Stop(r_.runtime_ids[i], ctx_.stop_grace);
      (void)ctx_.runtime.Remove(r_.runtime_ids[i]);
    }
    c.status = TaskStatus::kStopped;
    if (c.reason.empty()) c.reason = reason;
  }
  r_.report.status = TaskStatus::kStopped;
  r_.report.stop_code = StopCode::kTaskFailedToStart;
  r_.report.reason = reason;
  Persist();
  Report();
}

void ManagedTask::Recover(const std::vector<RuntimeContainer>& listed) {
  if (forgotten() || r_.report.status != TaskStatus::kPending) return;
  // The agent died while starting it: some containers may run, even one whose id it had not recorded yet
  // (killed between the runtime's Start and the Persist after it). Stop them all; the task failed to start. A
  // container left running here would use its GPU with no reservation on the server.
  for (size_t i = 0; i < r_.report.containers.size(); ++i)
    for (const auto& rc : listed)
      if (r_.runtime_ids[i].empty() && rc.task_arn == arn_ && rc.container_name == r_.report.containers[i].name) {
        r_.runtime_ids[i] = rc.id;
        r_.report.containers[i].status = TaskStatus::kRunning;
      }
  Fail("the agent restarted while starting the task");
}

// ---- stop ----------------------------------------------------------------------------------------------------

void ManagedTask::Stop(const StopRequest& request) {
  if (forgotten()) return;
  if (r_.report.status == TaskStatus::kStopped) {
    if (request.resend_if_stopped) Report();
    return;
  }
  stopping_ = true;
  if (request.override_reason || !r_.report.stop_code) {
    if (request.code) r_.report.stop_code = request.code;
  }
  if (request.override_reason || r_.report.reason.empty()) r_.report.reason = request.reason;
  for (auto& c : r_.report.containers)
    if (!request.container.empty() && c.name == request.container && c.status == TaskStatus::kRunning)
      c.reason = request.container_reason;
  StopContainers();
  spdlog::info("agent: task {} STOPPED ({})", arn_, request.reason);
}

// StopContainers stops every running container (one after another, each SIGTERM, grace, SIGKILL), records their
// exit, and reports the task STOPPED.
void ManagedTask::StopContainers() {
  for (size_t i = 0; i < r_.report.containers.size(); ++i) {
    auto& c = r_.report.containers[i];
    const std::string& id = r_.runtime_ids[i];
    if (id.empty() || c.status == TaskStatus::kStopped) {
      c.status = TaskStatus::kStopped;
      continue;
    }
    (void)ctx_.runtime.Stop(id, ctx_.stop_grace);
    if (auto st = ctx_.runtime.Inspect(id); st.ok()) {
      c.exit_code = st->exit_code;
      if (c.reason.empty()) c.reason = st->reason;
    }
    (void)ctx_.runtime.Remove(id);
    c.status = TaskStatus::kStopped;
  }
  r_.report.status = TaskStatus::kStopped;
  Persist();
  Report();
}

void ManagedTask::ContainerExited(size_t index, const std::string& runtime_id, const ContainerStatus& status) {
  if (forgotten() || r_.report.status != TaskStatus::kRunning || index >= r_.report.containers.size()) return;
  auto& c = r_.report.containers[index];
  if (c.status != TaskStatus::kRunning || r_.runtime_ids[index] != runtime_id) return;
  c.status = TaskStatus::kStopped;
  c.exit_code = status.exit_code;
  // An exit without a reason of its own keeps the note the container started with (ProcessImageNote).
  if (status.state == ContainerState::kMissing) c.reason = "the container disappeared";
  else if (!status.reason.empty() || c.reason.empty()) c.reason = status.reason;
  if (!r_.assignment.containers[index].essential) {
    Persist();
    Report();
    return;
  }
  stopping_ = true;
  r_.report.stop_code = StopCode::kEssentialContainerExited;
  r_.report.reason = "Essential container in task exited";
  StopContainers();
  spdlog::info("agent: task {} STOPPED ({})", arn_, r_.report.reason);
}

bool ManagedTask::ForgetIfStopped() {
  if (forgotten() || r_.report.status != TaskStatus::kStopped) return false;
  ctx_.store.Erase(arn_);
  forgotten_ = true;
  return true;
}

}  // namespace gpupack::agent
