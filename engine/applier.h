// Applier: the server's one writer. It owns the working ClusterState, runs each write operation serialized in
// arrival order with a Transaction, and commits what the transaction recorded through the GroupCommitter, in
// the order the writes were applied. Once a commit group is durable it publishes one ReadView for all its
// writes, hands their pushes to the agents and only then answers them. Reads never come here: they take View().
//
// The commit step (Write's callback) is the one place where everything durable passes; a fencing check for
// several servers sharing one database belongs there.
//
// When a commit fails the working state is ahead of the disk: the applier then refuses every further write
// with ServerException and healthy() turns false until a restart reloads the durable state. Reads keep
// answering from the last published view, which only ever holds committed state.
//
// Thread-safe: Write, Inspect and View may be called from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <random>

#include "scheduler/arn.h"
#include "engine/read_view.h"
#include "engine/requests.h"
#include "engine/transaction.h"
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
};

class Applier {
 public:
  Applier(ApplierOptions options, Store& store, GroupCommitter& committer);
  ~Applier();  // detaches from the committer (which must have no write of this applier in flight)
  Applier(const Applier&) = delete;
  Applier& operator=(const Applier&) = delete;

  // Load reads the durable state (tasks streamed straight into the state) and publishes the first view. Call
  // once, before serving.
  Status Load();

  using WriteOp = std::function<Status(Transaction&)>;
  // Write runs `op` serialized. `done` is called exactly once with op's status (or the commit's failure),
  // possibly on the committer's thread, after the writes are durable and the view that shows them is published.
  void Write(const WriteOp& op, std::function<void(Status)> done);

  // Inspect runs `f` on the working state under the writer's lock (placement dry runs; push re-send checks,
  // which must not race a report's commit). `f` must be quick and must not call the applier.
  void Inspect(const std::function<void(const ClusterState&)>& f) const;

  // View: the last published read view (committed state). Never null after Load.
  std::shared_ptr<const ReadView> View() const;

  using PushSink = std::function<void(const std::string& instance_arn, AgentPush push)>;
  // SetPushSink: where pushes go once their commit is durable (the agent channel). Set before serving.
  void SetPushSink(PushSink sink);

  bool healthy() const { return !degraded_.load(); }
  PlacementCounters counters() const;
  const ArnContext& arn() const { return options_.arn; }
  const PlacementPolicy& placement() const { return options_.placement; }
  EpochMs Now() const { return options_.clock(); }

 private:
  // A durable write waiting for the end of its commit group: the group's deltas become one view, then the
  // pushes go out and the writes are answered, in commit order.
  struct Committed {
    uint64_t seq;  // the write's sequence number
    ViewDelta delta;
    std::vector<std::pair<std::string, AgentPush>> pushes;
    Status status;
    std::function<void(Status)> done;
  };
  void FinishGroup();  // the committer's after-group hook

  ApplierOptions options_;
  Store& store_;
  GroupCommitter& committer_;

  mutable std::mutex mu_;      // the writer's lock
  ClusterState state_;         // guarded by mu_
  std::mt19937_64 rng_;        // guarded by mu_
  PlacementCounters counters_; // guarded by mu_
  EpochMs last_purge_ = 0;     // guarded by mu_
  uint64_t next_seq_ = 0;      // guarded by mu_: the last write's sequence number (Transaction::seq)
  // durable_through_: every write up to this sequence number is committed and in the published view (set by
  // FinishGroup after it publishes; never moves again once a commit failed).
  std::atomic<uint64_t> durable_through_{0};
  mutable std::mutex push_mu_;
  PushSink push_sink_;         // guarded by push_mu_ (read on the committer thread)
  std::atomic<bool> degraded_{false};

  std::mutex committed_mu_;
  std::vector<Committed> committed_;         // guarded by committed_mu_ (filled and drained on the committer thread)

  mutable std::mutex view_mu_;               // guards view_ (the pointer only; views are immutable)
  std::shared_ptr<const ReadView> view_;     // guarded by view_mu_
};

}  // namespace gpupack::api
