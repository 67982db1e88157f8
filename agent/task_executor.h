// TaskExecutor: a bounded pool of worker threads that runs closures serialized per key. The agent keys work by
// task ARN, so each task's events (start, stop, a container's exit) run one at a time and in the order posted,
// while different tasks run side by side: a slow stop (the stop grace), a slow Docker call or a failed start
// holds up only its own task.
//
// Threads are started on demand, up to max_threads, when work is ready and no worker is idle; a worker idle for
// idle_timeout exits. With every worker busy, ready keys wait in FIFO order (a key is queued once however much
// work it has; after each closure it goes to the back, so one task's queue cannot starve the others).
//
// Thread-safe. Closures must not throw (one that does is logged and dropped). Shutdown (also the destructor)
// waits for the closures that are running, drops those still queued and refuses later Posts.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpupack::agent {

class TaskExecutor {
 public:
  explicit TaskExecutor(size_t max_threads, std::chrono::milliseconds idle_timeout = std::chrono::seconds(10));
  ~TaskExecutor();
  TaskExecutor(const TaskExecutor&) = delete;
  TaskExecutor& operator=(const TaskExecutor&) = delete;

  // Post queues `fn` behind the work already queued for `key`; false after Shutdown (fn is dropped).
  bool Post(const std::string& key, std::function<void()> fn);
  // Drain waits (bounded by `timeout`) until nothing is queued or running; true when it got there.
  bool Drain(std::chrono::milliseconds timeout);
  void Shutdown();

  size_t threads() const;  // workers alive now

 private:
  void Work();
  void SpawnIfNeeded(std::unique_lock<std::mutex>& lock);
  void JoinFinished(std::unique_lock<std::mutex>& lock);

  const size_t max_threads_;
  const std::chrono::milliseconds idle_timeout_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // workers: a key is ready, or shutting down
  std::condition_variable idle_cv_;  // Drain: nothing queued or running
  std::map<std::string, std::deque<std::function<void()>>> queues_;  // keys with work queued or running
  std::deque<std::string> ready_;    // keys with work queued and none running, in turn order
  size_t running_ = 0;               // closures running now
  size_t idle_ = 0;                  // workers waiting for work
  bool stopping_ = false;
  std::map<std::thread::id, std::thread> workers_;  // alive
  std::vector<std::thread> finished_;                // exited on their own; joined on the next Post or Shutdown
};

}  // namespace gpupack::agent
