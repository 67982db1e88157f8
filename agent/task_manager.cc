#include "agent/task_manager.h"

#include <cstdint>

#include <spdlog/spdlog.h>

namespace gpupack::agent {

using protocol::TaskStatus;

TaskManager::TaskManager(TaskContext& ctx, TaskManagerOptions options)
    : ctx_(ctx),
      options_(options),
      executor_(options.executor ? options.executor : std::make_shared<TaskExecutor>(options.max_threads)),
      // No ARN starts with '#'.
      orphan_key_("#orphans " + std::to_string(reinterpret_cast<uintptr_t>(this))) {}

TaskManager::~TaskManager() {
  Stop();
  Shutdown();
}

void TaskManager::Start() {
  std::vector<std::shared_ptr<ManagedTask>> starting;
  {
    std::lock_guard lock(mu_);
    for (TaskRecord& r : ctx_.store.Snapshot()) {
      const bool pending = r.report.status == TaskStatus::kPending;
      auto task = std::make_shared<ManagedTask>(ctx_, std::move(r));
      if (pending) starting.push_back(task);
      tasks_[task->arn()] = std::move(task);
    }
  }
  if (!starting.empty()) {
    // Containers that ended while the agent was away are noticed by the monitor; tasks it was starting fail.
    std::vector<RuntimeContainer> listed;
    if (auto l = ctx_.runtime.List(); l.ok()) listed = std::move(*l);
    for (const auto& task : starting) Post(task, [listed](ManagedTask& t) { t.Recover(listed); });
  }
  monitor_ = std::thread([this] { Monitor(); });
}

void TaskManager::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
}

void TaskManager::Shutdown() {
  std::unique_lock lock(mu_);
  closed_ = true;
  idle_cv_.wait(lock, [this] { return in_flight_ == 0; });
}

void TaskManager::Submit(const std::string& key, std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    ++in_flight_;
  }
  const bool posted = executor_->Post(key, [this, fn = std::move(fn)] {
    bool skip = false;
    {
      std::lock_guard lock(mu_);
      skip = closed_;
    }
    if (!skip) fn();
    Finished();
  });
  if (!posted) Finished();
}

void TaskManager::Finished() {
  std::lock_guard lock(mu_);
  if (--in_flight_ == 0) idle_cv_.notify_all();
}

std::shared_ptr<ManagedTask> TaskManager::Find(const std::string& arn) const {
  std::lock_guard lock(mu_);
  auto it = tasks_.find(arn);
  return it == tasks_.end() ? nullptr : it->second;
}

bool TaskManager::Knows(const std::string& arn) const { return Find(arn) != nullptr; }

void TaskManager::Post(const std::shared_ptr<ManagedTask>& task, std::function<void(ManagedTask&)> event) {
  Submit(task->arn(), [task, event = std::move(event)] { event(*task); });
}

void TaskManager::Forget(const std::shared_ptr<ManagedTask>& task) {
  Post(task, [this, task](ManagedTask& t) {
    if (!t.ForgetIfStopped()) return;
    std::lock_guard lock(mu_);
    auto it = tasks_.find(t.arn());
    if (it != tasks_.end() && it->second == task) tasks_.erase(it);
  });
}

// ---- from the server -------------------------------------------------------------------------------------------

void TaskManager::Assign(protocol::Assignment assignment, int64_t push_id) {
  std::shared_ptr<ManagedTask> task;
  {
    std::lock_guard lock(mu_);
    if (assignment.task_arn.empty() || tasks_.count(assignment.task_arn)) {
      task = nullptr;
    } else {
      task = std::make_shared<ManagedTask>(ctx_, TaskRecord::ForAssignment(std::move(assignment)));
      tasks_[task->arn()] = task;
    }
  }
  if (!task) return ctx_.reporter.Ack(push_id);  // never start a task twice
  Post(task, [push_id](ManagedTask& t) { t.Accept(push_id); });
}

void TaskManager::StopOrder(const protocol::StopOrder& order, int64_t push_id,
                            std::optional<protocol::StopCode> code) {
  const std::string reason =
      order.reason.empty() && code == protocol::StopCode::kUserInitiated ? "Task stopped by user" : order.reason;
  if (auto task = Find(order.task_arn)) {
    ctx_.reporter.Ack(push_id);
    StopRequest request{reason, code, false, "", "", /*resend_if_stopped=*/true};
    Post(task, [request](ManagedTask& t) { t.Stop(request); });
    return;
  }
  // Unknown here (already gone): tell the server it is stopped so it releases the memory.
  protocol::TaskReport gone;
  gone.task_arn = order.task_arn;
  gone.status = TaskStatus::kStopped;
  gone.reason = reason;
  gone.stop_code = code;
  ctx_.reporter.SendState(gone);
  ctx_.reporter.Ack(push_id);
}

void TaskManager::Welcome(const protocol::Welcome& welcome, const std::set<std::string>& hello_stopped) {
  // The welcome comes once the hello's reports are durable on the server: a task the hello reported STOPPED is
  // acknowledged like a STOPPED state report, so its record goes (else every later hello reports it again).
  for (const auto& arn : hello_stopped)
    if (auto task = Find(arn)) Forget(task);
  for (const auto& s : welcome.stop) StopOrder(s, 0, std::nullopt);
  for (const auto& a : welcome.assign) Assign(a, 0);
  Submit(orphan_key_, [this] { StopOrphans(); });
}

void TaskManager::ReportAcked(const std::string& arn, TaskStatus status) {
  if (status != TaskStatus::kStopped) return;
  if (auto task = Find(arn)) Forget(task);
}

// StopOrphans stops and removes the containers the runtime runs for tasks this agent does not know.
void TaskManager::StopOrphans() {
  auto listed = ctx_.runtime.List();
  if (!listed.ok()) return;
  for (const auto& c : *listed) {
    if (Knows(c.task_arn)) continue;
    spdlog::info("agent: stopping orphan container {} of unknown task {}", c.id, c.task_arn);
    (void)ctx_.runtime.Stop(c.id, options_.stop_grace);
    (void)ctx_.runtime.Remove(c.id);
  }
}

// ---- stops from elsewhere ---------------------------------------------------------------------------------------

void TaskManager::RequestStop(const std::string& arn, StopRequest request) {
  if (auto task = Find(arn)) Post(task, [request = std::move(request)](ManagedTask& t) { t.Stop(request); });
}

void TaskManager::StopAll(const std::string& reason, std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<ManagedTask>> all;
  {
    std::lock_guard lock(mu_);
    for (const auto& [arn, t] : tasks_) all.push_back(t);
  }
  StopRequest request{reason, protocol::StopCode::kUserInitiated, false, "", "", false};
  for (const auto& t : all) Post(t, [request](ManagedTask& task) { task.Stop(request); });
  std::unique_lock lock(mu_);
  idle_cv_.wait_for(lock, timeout, [this] { return in_flight_ == 0; });
}

// ---- the monitor ---------------------------------------------------------------------------------------------------

void TaskManager::Monitor() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.monitor_interval, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    try {
      CheckContainers();
    } catch (const std::exception& e) {
      spdlog::error("agent: monitor: {}", e.what());
    }
    lock.lock();
  }
}

// CheckContainers inspects the running containers of running tasks (not those being stopped) and posts the end
// of each one that is no longer running, once.
void TaskManager::CheckContainers() {
  struct Running {
    std::string arn;
    size_t index;
    std::string runtime_id;
  };
  std::vector<Running> running;
  ctx_.store.Visit([&running](const TaskRecord& r) {
    if (r.report.status != TaskStatus::kRunning) return;
    for (size_t i = 0; i < r.report.containers.size(); ++i)
      if (r.report.containers[i].status == TaskStatus::kRunning && !r.runtime_ids[i].empty())
        running.push_back({r.arn(), i, r.runtime_ids[i]});
  });
  std::set<std::string> seen;
  for (const Running& c : running) {
    seen.insert(c.runtime_id);
    if (exits_posted_.count(c.runtime_id)) continue;
    auto task = Find(c.arn);
    if (!task || task->stopping()) continue;
    auto st = ctx_.runtime.Inspect(c.runtime_id);
    if (!st.ok() || st->state == ContainerState::kRunning) continue;
    exits_posted_.insert(c.runtime_id);
    const size_t index = c.index;
    const std::string id = c.runtime_id;
    ContainerStatus status = *st;
    Post(task, [index, id, status](ManagedTask& t) { t.ContainerExited(index, id, status); });
  }
  for (auto it = exits_posted_.begin(); it != exits_posted_.end();)
    it = seen.count(*it) ? std::next(it) : exits_posted_.erase(it);
}

}  // namespace gpupack::agent
