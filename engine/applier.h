// Applier: the server's one writer. It owns the working ClusterState on a thread of its own, the writer
// thread, which drains a queue of write operations in arrival order, runs each with a Transaction, and commits
// what the transaction recorded through the GroupCommitter, in the order the writes were applied. Once a commit
// group is durable it publishes one ReadView for all its writes, hands their pushes to the agents and only then
// answers them. Callers (the HTTP I/O threads, the agent channel) only enqueue: no caller ever waits for the
// writer or takes a lock the writer holds while it decides. Reads never come here: they take View().
//
// The commit step (the Submit callback in RunWrite) is the one place where everything durable passes; the
// fencing check for several servers sharing one database belongs there.
//
// When a commit fails the working state is ahead of the disk: the applier then refuses every further write
// with ServerException and healthy() turns false until a restart reloads the durable state. Reads keep
// answering from the last published view, which only ever holds committed state.
//
// Threads: the writer thread alone touches state_, rng_, counters_ and the purge clock. Write, Read, View and
// counters may be called from any thread; Inspect, Load and Drain block their caller until the writer has run
// them, so they must not be called from an HTTP I/O thread while serving (tests, start-up, shutdown and the
// agent channel's own timer thread call them). Called on the writer thread itself they run inline.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>

#include "scheduler/arn.h"
#include "engine/core/read_view.h"
#include "engine/core/requests.h"
#include "engine/core/transaction.h"
#include "scheduler/cluster_state.h"
#include "storage/group_committer.h"
#include "storage/store.h"

namespace gpupack::api {

struct ApplierOptions {
  ArnContext arn;
  std::function<EpochMs()> clock;  // defaults to the system clock
  uint64_t seed = 0;               // 0 = from std::random_device; ids and random placement derive from it
  EpochMs stopped_task_retention_ms = 3'600'000;  // STOPPED tasks stay describable this long (ECS: >= 1 h)
  PlacementPolicy placement;  // the default strategy for shared-GPU tasks, placing on disconnected instances
  // The operator's target workload of binpack(fragmentation) for every cluster (gpupack server
  // --fragmentation-workload); null: each cluster learns it from its recent RunTask demands.
  std::shared_ptr<const TargetWorkload> fragmentation_workload;
  // agent_reconnect_grace_ms: after Load or Promote (a restart, a new leader), an instance whose agent was
  // connected when the state was last written stays connected for placement this long, while its agent finds
  // this server:
  // tasks placed on it wait PENDING and are assigned by the agent's hello. An agent not back by then is marked
  // disconnected, as when its channel closes. 0: every instance starts disconnected. The server sets it to
  // three heartbeat intervals.
  EpochMs agent_reconnect_grace_ms = 15'000;
  // follow: a hot standby's applier (docs/ha.md): its state comes from the leader's committed batches (Follow)
  // and it runs no write of its own (Write is refused, no timed write runs) until Promote.
  bool follow = false;
};

class Applier {
 public:
  Applier(ApplierOptions options, Store& store, GroupCommitter& committer);
  // The destructor runs what is queued, stops the writer thread, waits for the commits of its writes and
  // detaches from the committer.
  ~Applier();
  Applier(const Applier&) = delete;
  Applier& operator=(const Applier&) = delete;

  // Load reads the durable state (tasks streamed straight into the state) and publishes the first view. Call
  // once, before serving.
  Status Load();
  // loaded_change_seq: the change-feed position of the state Load read (storage/change_feed.h).
  uint64_t loaded_change_seq() const { return loaded_change_seq_.load(); }

  // Follow (a following applier only) applies committed batches, in commit order, to the working state and
  // publishes one view for them all (engine/core/follow.h). An error leaves the state part applied: the caller
  // must drop this applier and load afresh. Blocks until done (not from an HTTP I/O thread).
  Status Follow(const std::vector<WriteBatch>& batches);
  // Promote turns a following applier into the leader's: as after a Load, the instances the leader had connected
  // stay placeable for agent_reconnect_grace_ms while their agents say hello to this server, the services are
  // looked at once, and writes are taken from now on.
  void Promote();
  bool following() const { return following_.load(); }

  using WriteOp = std::function<Status(Transaction&)>;
  // Write queues `op` for the writer thread and returns at once. `op` runs later, serialized with every other
  // write, so it must own what it reads (capture by value). `done` is called exactly once with op's status (or
  // the commit's failure): on the writer thread when nothing needs to become durable, else on the committer's
  // thread after the writes are durable and the view that shows them is published.
  void Write(WriteOp op, std::function<void(Status)> done);

  // Read queues `f` for the writer thread: it runs on the working state between two writes, after every write
  // queued before it was applied (placement dry runs). `f` must be quick, must own what it reads and must not
  // call the applier.
  void Read(std::function<void(const ClusterState&)> f);
  // Inspect is Read that waits until `f` has run (tests; the agent channel's push re-send check, on its own
  // thread).
  void Inspect(const std::function<void(const ClusterState&)>& f);
  // Drain waits until every operation queued before the call has run on the writer thread (its commit may still
  // be in flight: GroupCommitter::Flush waits for that). For shutdown and tests.
  void Drain();

  // View: the last published read view (committed state). Never null after Load.
  std::shared_ptr<const ReadView> View() const;

  using PushSink = std::function<void(const std::string& instance_arn, AgentPush push)>;
  // SetPushSink: where pushes go once their commit is durable (the agent channel). Set before serving.
  void SetPushSink(PushSink sink);

  // AgentBack: the instance's agent said hello to this server (from the hello's write, on the writer thread):
  // its reconnect grace after Load is over.
  void AgentBack(const std::string& instance_arn);

  bool healthy() const { return !degraded_.load(); }
  // counters: the placement counters as the writer last published them: a write that changed them publishes
  // them before it is answered.
  PlacementCounters counters() const;
  const ArnContext& arn() const { return options_.arn; }
  const PlacementPolicy& placement() const { return options_.placement; }
  EpochMs Now() const { return options_.clock(); }

 private:
  // Job: one queued item: a write (op + done), or a read of the working state (read).
  struct Job {
    WriteOp op;
    std::function<void(Status)> done;
    std::function<void(const ClusterState&)> read;
  };
  // A durable write waiting for the end of its commit group: the group's deltas become one view, then the
  // pushes go out and the writes are answered, in commit order.
  struct Committed {
    uint64_t seq;  // the write's sequence number
    ViewDelta delta;
    std::vector<std::pair<std::string, AgentPush>> pushes;
    Status status;
    std::function<void(Status)> done;
  };
  void Enqueue(Job job);
  void RunOnWriter(const std::function<void()>& f);  // queue f and wait for it (inline on the writer thread)
  void WriterLoop();                                // the writer thread
  void RunWrite(const WriteOp& op, std::function<void(Status)> done);  // writer thread only
  void PublishCounters();                                              // writer thread only
  Status LoadOnWriter();                            // writer thread only
  void FinishGroup();  // the committer's after-group hook

  ApplierOptions options_;
  Store& store_;
  GroupCommitter& committer_;

  // Owned by the writer thread (touched by no other thread once it runs):
  ClusterState state_;
  std::mt19937_64 rng_;
  PlacementCounters counters_;
  EpochMs last_purge_ = 0;
  uint64_t next_seq_ = 0;  // the last write's sequence number (Transaction::seq)
  // The instances loaded connected whose agent has not said hello since (agent_reconnect_grace_ms), and when
  // their grace ends.
  std::unordered_set<std::string> reconnecting_;
  EpochMs reconnect_deadline_ = 0;
  void EndReconnectGrace(Transaction& txn);  // writer thread only

  // The queue: the only lock a caller takes to hand the writer work, held for a push_back.
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;  // signalled when queue_ gains a job or stopping_ is set
  std::deque<Job> queue_;             // guarded by queue_mu_
  bool stopping_ = false;             // guarded by queue_mu_

  // durable_through_: every write up to this sequence number is committed and in the published view (set by
  // FinishGroup after it publishes; never moves again once a commit failed).
  std::atomic<uint64_t> durable_through_{0};
  mutable std::mutex push_mu_;
  PushSink push_sink_;         // guarded by push_mu_ (read on the committer thread)
  std::atomic<bool> degraded_{false};
  std::atomic<bool> following_{false};
  std::atomic<uint64_t> loaded_change_seq_{0};

  std::mutex committed_mu_;
  std::vector<Committed> committed_;         // guarded by committed_mu_ (filled and drained on the committer thread)

  mutable std::mutex view_mu_;               // guards the two published pointers below (the pointers only)
  std::shared_ptr<const ReadView> view_;     // guarded by view_mu_
  std::shared_ptr<const PlacementCounters> published_counters_;  // guarded by view_mu_

  std::thread::id writer_id_;  // set before the writer thread runs anything
  std::thread writer_;         // last: started once everything above is initialized
};

}  // namespace gpupack::api
