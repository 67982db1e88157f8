// GroupCommitter: group commit in front of a Store, so many writers share one durable transaction (one fsync).
//
// Submit() queues a WriteBatch with a completion callback and returns at once. One background thread takes
// everything queued, merges it in submission order (WriteBatch::Append: later puts of a key win) into one
// Store::Commit, then calls each callback, in submission order, with the result. When a merged commit fails
// and it held more than one batch, the batches are committed again one by one, so a batch fails only because
// of its own content or because the store itself is failing, never because of a neighbour.
//
// With SetStopAfterFailure(true) (the server's applier: each of its batches was decided on top of the ones
// before it) the first failed batch ends committing for good: the batches of its group after it, and every
// batch submitted later, fail without reaching the store (an empty one too), so nothing decided on top of a
// change that was lost can become durable.
//
// Thread-safety: Submit(), Flush() and the counters may be called from any thread. Callbacks run on the
// committer thread, one at a time; they must not throw and must not call Flush() (that would wait for itself)
// but may call Submit(). The Store must outlive the GroupCommitter, and nothing else may Commit to it while
// the committer runs unless the Store is thread-safe (SqliteStore is). The destructor commits everything
// already submitted, calls its callbacks, and joins the thread; Submit() must not race with it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "base/status.h"
#include "storage/store.h"

namespace gpupack {

class GroupCommitter {
 public:
  using Done = std::function<void(Status)>;

  // Counters for /metrics; monotonic.
  struct Stats {
    uint64_t batches = 0;         // batches whose callback has been called
    uint64_t commits = 0;         // Store::Commit calls (merged groups plus one-by-one retries)
    uint64_t failed_batches = 0;  // batches whose callback got a non-ok status
  };

  explicit GroupCommitter(Store& store);
  ~GroupCommitter();
  GroupCommitter(const GroupCommitter&) = delete;
  GroupCommitter& operator=(const GroupCommitter&) = delete;

  // Submit queues `batch`; `done` (may be empty) is called exactly once, on the committer thread, with ok once
  // the batch is durable or with the failure. An empty batch completes ok without touching the store.
  void Submit(WriteBatch batch, Done done);

  // SetAfterGroup: `hook` runs on the committer thread after the callbacks of every group (one store
  // transaction and the batches it held), before Flush() sees the group complete; the applier publishes one
  // read view per group there instead of one per batch. Empty clears it.
  void SetAfterGroup(std::function<void()> hook);

  // SetStopAfterFailure: after the first failed batch, fail every later one without committing it (see above).
  void SetStopAfterFailure(bool stop);

  // Flush blocks until every batch submitted before the call has been committed and its callback has returned.
  void Flush();

  Stats stats() const;
  uint64_t commits() const { return stats().commits; }
  uint64_t batches() const { return stats().batches; }

 private:
  struct Pending {
    WriteBatch batch;
    Done done;
  };

  void Run();
  // CommitGroup commits `group` (merged, or one by one after a failure) and calls the callbacks in order.
  void CommitGroup(std::deque<Pending>& group);

  Store& store_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // signalled when queue_ gains work or stopping_ is set
  std::condition_variable done_cv_;  // signalled when completed_ advances
  std::deque<Pending> queue_;        // guarded by mu_
  uint64_t submitted_ = 0;           // guarded by mu_: batches ever submitted
  uint64_t completed_ = 0;           // guarded by mu_: batches whose callback has returned
  bool stopping_ = false;            // guarded by mu_
  std::function<void()> after_group_;  // guarded by mu_
  bool stop_after_failure_ = false;    // guarded by mu_
  std::optional<Status> stopped_;      // committer thread only: why committing stopped (stop_after_failure_)
  Stats stats_;                      // guarded by mu_

  std::thread thread_;  // last: started after everything above is initialized
};

}  // namespace gpupack
