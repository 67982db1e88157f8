#include "agent/task_executor.h"

#include <exception>

#include <spdlog/spdlog.h>

namespace gpupack::agent {

TaskExecutor::TaskExecutor(size_t max_threads, std::chrono::milliseconds idle_timeout)
    : max_threads_(max_threads == 0 ? 1 : max_threads), idle_timeout_(idle_timeout) {}

TaskExecutor::~TaskExecutor() { Shutdown(); }

bool TaskExecutor::Post(const std::string& key, std::function<void()> fn) {
  std::unique_lock lock(mu_);
  if (stopping_) return false;
  JoinFinished(lock);
  auto [it, fresh] = queues_.try_emplace(key);
  it->second.push_back(std::move(fn));
  if (fresh) {  // the key had nothing queued or running: it is ready now
    ready_.push_back(key);
    SpawnIfNeeded(lock);
    work_cv_.notify_one();
  }
  return true;
}

void TaskExecutor::SpawnIfNeeded(std::unique_lock<std::mutex>&) {
  if (idle_ >= ready_.size() || workers_.size() >= max_threads_) return;
  std::thread t([this] { Work(); });
  const auto id = t.get_id();
  workers_.emplace(id, std::move(t));
}

void TaskExecutor::JoinFinished(std::unique_lock<std::mutex>& lock) {
  if (finished_.empty()) return;
  std::vector<std::thread> done;
  done.swap(finished_);
  lock.unlock();
  for (auto& t : done) t.join();
  lock.lock();
}

void TaskExecutor::Work() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_;
    const bool woke = work_cv_.wait_for(lock, idle_timeout_, [this] { return stopping_ || !ready_.empty(); });
    --idle_;
    if (stopping_) break;
    if (!woke) {  // idle for idle_timeout: this worker goes
      auto self = workers_.find(std::this_thread::get_id());
      if (self != workers_.end()) {
        finished_.push_back(std::move(self->second));
        workers_.erase(self);
      }
      return;
    }
    const std::string key = std::move(ready_.front());
    ready_.pop_front();
    auto& queue = queues_[key];
    std::function<void()> fn = std::move(queue.front());
    queue.pop_front();
    ++running_;
    lock.unlock();
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::error("agent: work for {} threw: {}", key, e.what());
    } catch (...) {
      spdlog::error("agent: work for {} threw", key);
    }
    fn = nullptr;  // its captures go before the lock is taken again
    lock.lock();
    --running_;
    auto it = queues_.find(key);
    if (it != queues_.end() && !it->second.empty() && !stopping_) {
      ready_.push_back(key);
      work_cv_.notify_one();
    } else if (it != queues_.end()) {
      queues_.erase(it);
    }
    if (running_ == 0 && ready_.empty()) idle_cv_.notify_all();
  }
}

bool TaskExecutor::Drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [this] { return running_ == 0 && ready_.empty(); });
}

void TaskExecutor::Shutdown() {
  std::unique_lock lock(mu_);
  stopping_ = true;
  ready_.clear();
  work_cv_.notify_all();
  std::map<std::thread::id, std::thread> workers;
  workers.swap(workers_);
  std::vector<std::thread> finished;
  finished.swap(finished_);
  lock.unlock();
  for (auto& [id, t] : workers) t.join();
  for (auto& t : finished) t.join();
  lock.lock();
  queues_.clear();
}

size_t TaskExecutor::threads() const {
  std::lock_guard lock(mu_);
  return workers_.size();
}

}  // namespace gpupack::agent
