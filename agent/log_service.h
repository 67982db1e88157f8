// LogService: the agent's answers to the server's log requests (protocol::LogsRequest), read from the log store
// (agent/log_store.h) on a thread of its own, and the purge of old logs.
//
// The channel's io thread only queues a request (Post); the service's thread asks the runtime to bring the
// container's stream up to date (the docker runtime copies what the engine has; the process runtime's monitor
// writes as it goes), reads one page and hands the answer to `reply`. At most `max_queue` requests wait; one more
// is answered at once with an error. Answers are bounded by the request's maxBytes (at most
// protocol::kLogsAnswerBytes), so each fits one channel message.
//
// Retention: a task's logs (<root>/<task id>) are kept while the agent has the task and for `retention` after
// their last write once it does not (its STOPPED report was acknowledged and its record deleted): the thread
// sweeps at start and every `sweep_interval`. Cap: the store holds at most `cap_bytes` in all (0: no cap); every
// `cap_interval` the thread deletes the logs of tasks the agent no longer has, least recently written first,
// until it does (CapLogs), so many short tasks cannot fill the disk within the retention.
//
// Thread-safe; the destructor stops the thread (requests still queued are dropped: the server times them out).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "agent/log_store.h"
#include "protocol/messages.h"

namespace gpupack::agent {

struct LogServiceOptions {
  std::string root;  // the log store's root directory
  std::chrono::seconds retention{24 * 3600};
  std::chrono::seconds sweep_interval{600};
  uint64_t cap_bytes = 0;
  std::chrono::seconds cap_interval{10};
  size_t max_queue = 64;
};

class LogService {
 public:
  using Reply = std::function<void(const protocol::LogsAnswer&)>;
  struct Hooks {
    // Collect brings a container's stream up to date before it is read (docker); may be empty.
    std::function<void(const std::string& task_arn, const std::string& container_name)> collect;
    // Keep says whether the agent still has the task of this id (its logs are then never purged).
    std::function<bool(const std::string& task_id)> keep;
  };

  LogService(LogServiceOptions options, Hooks hooks);
  ~LogService();
  LogService(const LogService&) = delete;
  LogService& operator=(const LogService&) = delete;

  // Post queues a request; `reply` runs on the service's thread with the answer.
  void Post(protocol::LogsRequest request, Reply reply);

  // Answer reads the page a request asks for (what the thread runs for each request).
  static protocol::LogsAnswer Answer(const std::string& root, const protocol::LogsRequest& request);

 private:
  void Loop();

  const LogServiceOptions options_;
  const Hooks hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<protocol::LogsRequest, Reply>> queue_;  // guarded by mu_
  bool stopping_ = false;                                     // guarded by mu_
  std::thread thread_;
};

}  // namespace gpupack::agent
