#include "storage/group_committer.h"

#include <cassert>
#include <utility>
#include <vector>

namespace gpupack {

GroupCommitter::GroupCommitter(Store& store) : store_(store), thread_([this] { Run(); }) {}

GroupCommitter::~GroupCommitter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

void GroupCommitter::Submit(WriteBatch batch, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Pending{std::move(batch), std::move(done)});
    ++submitted_;
  }
  work_cv_.notify_one();
}

void GroupCommitter::Flush() {
  assert(std::this_thread::get_id() != thread_.get_id() && "Flush() from a done callback would wait for itself");
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = submitted_;
  done_cv_.wait(lock, [&] { return completed_ >= target; });
}

void GroupCommitter::SetStopAfterFailure(bool stop) {
  std::lock_guard<std::mutex> lock(mu_);
  stop_after_failure_ = stop;
}

void GroupCommitter::SetAfterGroup(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  after_group_ = std::move(hook);
}

GroupCommitter::Stats GroupCommitter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void GroupCommitter::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and everything submitted has been committed
    std::deque<Pending> group;
    group.swap(queue_);
    lock.unlock();
    CommitGroup(group);
    lock.lock();
  }
}

void GroupCommitter::CommitGroup(std::deque<Pending>& group) {
  const size_t n = group.size();
  std::vector<Status> results(n);
  uint64_t commits = 0;
  bool stop_after_failure = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_after_failure = stop_after_failure_;
  }
  // The batch that failed (and the reason), when committing stops after it.
  auto stop_at = [&](size_t i) {
    if (!stop_after_failure || results[i].ok() || stopped_) return;
    stopped_ = Status::Server("not committed: an earlier commit failed (" + results[i].message() +
                              "), and nothing decided after it may be made durable");
  };

  if (stopped_) {
    for (auto& r : results) r = *stopped_;
  } else if (n == 1) {
    if (!group[0].batch.empty()) {
      results[0] = store_.Commit(group[0].batch);
      ++commits;
    }
    stop_at(0);
  } else {
    // Merge in submission order. Copies, not moves: a failed merged commit is retried batch by batch.
    WriteBatch merged;
    for (const auto& p : group) {
      WriteBatch copy = p.batch;
      merged.Append(std::move(copy));
    }
    Status merged_status;
    if (!merged.empty()) {
      merged_status = store_.Commit(merged);
      ++commits;
    }
    if (merged_status.ok()) {
      for (auto& r : results) r = merged_status;
    } else {
      // Someone's batch (or the store) failed: find out whose, so the others still land (or, stopping after a
      // failure, so the ones before it do).
      for (size_t i = 0; i < n; ++i) {
        if (stopped_) {
          results[i] = *stopped_;
          continue;
        }
        if (group[i].batch.empty()) continue;
        results[i] = store_.Commit(group[i].batch);
        ++commits;
        stop_at(i);
      }
    }
  }

  uint64_t failed = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!results[i].ok()) ++failed;
    if (group[i].done) group[i].done(std::move(results[i]));
  }
  group.clear();  // release the batches before waking Flush()
  std::function<void()> after;
  {
    std::lock_guard<std::mutex> lock(mu_);
    after = after_group_;
  }
  if (after) after();

  {
    std::lock_guard<std::mutex> lock(mu_);
    completed_ += n;
    stats_.batches += n;
    stats_.commits += commits;
    stats_.failed_batches += failed;
  }
  done_cv_.notify_all();
}

}  // namespace gpupack
