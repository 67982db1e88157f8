#include "agent/log_service.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace gpupack::agent {

LogService::LogService(LogServiceOptions options, Hooks hooks)
    : options_(std::move(options)), hooks_(std::move(hooks)) {
  thread_ = std::thread([this] { Loop(); });
}

LogService::~LogService() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LogService::Post(protocol::LogsRequest request, Reply reply) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_ && queue_.size() < options_.max_queue) {
      queue_.emplace_back(std::move(request), std::move(reply));
      cv_.notify_one();
      return;
    }
  }
  protocol::LogsAnswer busy;
  busy.id = request.id;
  busy.error = "the agent has " + std::to_string(options_.max_queue) + " log requests waiting; try again";
  reply(busy);
}

protocol::LogsAnswer LogService::Answer(const std::string& root, const protocol::LogsRequest& request) {
  protocol::LogsAnswer answer;
  answer.id = request.id;
  LogQuery q;
  q.forward = request.forward;
  if (request.position && *request.position >= 0) q.position = static_cast<uint64_t>(*request.position);
  q.start_ms = request.start_ms;
  q.end_ms = request.end_ms;
  q.terms = request.terms;
  q.limit = static_cast<size_t>(std::clamp<int64_t>(request.limit, 1, 10000));
  q.max_bytes = static_cast<size_t>(std::clamp<int64_t>(request.max_bytes, 1, protocol::kLogsAnswerBytes));
  auto page = ReadLogPage(LogDirectory(root, request.task_arn, request.container_name), q);
  if (!page.ok()) {
    answer.error = page.status().message();
    return answer;
  }
  answer.found = page->found;
  answer.next_forward = static_cast<int64_t>(page->next_forward);
  answer.next_backward = static_cast<int64_t>(page->next_backward);
  answer.at_end = page->at_end;
  answer.events.reserve(page->events.size());
  for (LogEvent& e : page->events) answer.events.push_back({e.timestamp_ms, std::move(e.message)});
  return answer;
}

void LogService::Loop() {
  auto next_sweep = std::chrono::steady_clock::now();
  auto next_cap = next_sweep;
  bool over_cap = false;  // warned that the tasks the agent has hold more than the cap
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (options_.cap_bytes > 0 && std::chrono::steady_clock::now() >= next_cap) {
      lock.unlock();
      const LogCapResult r = CapLogs(options_.root, options_.cap_bytes, hooks_.keep);
      if (r.removed_tasks > 0)
        spdlog::info("agent: the task logs held more than --log-cap-mib; deleted the logs of {} stopped task(s) "
                     "({} bytes), the least recently written first", r.removed_tasks, r.removed_bytes);
      if (r.bytes > options_.cap_bytes && !over_cap)
        spdlog::warn("agent: the logs of the tasks this agent runs hold {} bytes, more than --log-cap-mib ({} "
                     "bytes); they are kept (each container's are bounded by --log-file-mib x --log-files)",
                     r.bytes, options_.cap_bytes);
      over_cap = r.bytes > options_.cap_bytes;
      lock.lock();
      next_cap = std::chrono::steady_clock::now() + options_.cap_interval;
      continue;
    }
    if (std::chrono::steady_clock::now() >= next_sweep) {
      lock.unlock();
      const size_t purged = PurgeLogs(options_.root, options_.retention, hooks_.keep);
      if (purged > 0) spdlog::info("agent: purged the logs of {} task(s) older than {} s", purged,
                                   options_.retention.count());
      lock.lock();
      next_sweep = std::chrono::steady_clock::now() + options_.sweep_interval;
      continue;
    }
    if (queue_.empty()) {
      const auto wake = options_.cap_bytes > 0 ? std::min(next_sweep, next_cap) : next_sweep;
      cv_.wait_until(lock, wake, [this] { return stopping_ || !queue_.empty(); });
      continue;
    }
    auto [request, reply] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (hooks_.collect) hooks_.collect(request.task_arn, request.container_name);
    reply(Answer(options_.root, request));
    lock.lock();
  }
}

}  // namespace gpupack::agent
