// Transaction: the only way an operation changes the cluster state.
//
// The applier (engine/applier.h) hands each write operation one Transaction over its working ClusterState. The
// operation reads the state through state() (const) and changes it only through the methods below; each change
// bumps the entity's version once per transaction and is recorded, so Finish() yields the WriteBatch to commit,
// the copies the next read view needs, and the pushes to send agents once the batch is durable. No operation
// writes a WriteBatch, bumps a version or talks to an agent by hand.
//
// Not thread-safe: used by one operation, on the applier's thread of control, under its lock.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "scheduler/arn.h"
#include "engine/core/read_view.h"
#include "engine/core/refusals.h"
#include "protocol/messages.h"
#include "scheduler/cluster_state.h"
#include "storage/store.h"

namespace gpupack::api {

// AgentPush: what the server sends an agent after a commit (the channel adds the id).
using AgentPush = std::variant<protocol::Assign, protocol::Stop>;

// PlacementCounters: placements and refusals, for /metrics (kept by the applier). Keys are (cluster, reason).
// WaitHistogram: how long the tasks placed from a capacity provider's line had waited (acknowledged PROVISIONING
// to placed), as counts per bucket of kWaitBucketsSeconds (not cumulative; the last counts the longer ones).
inline constexpr double kWaitBucketsSeconds[] = {1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600};
struct WaitHistogram {
  std::vector<uint64_t> buckets = std::vector<uint64_t>(std::size(kWaitBucketsSeconds) + 1, 0);
  uint64_t count = 0;
  double sum_seconds = 0;
};

struct PlacementCounters {
  uint64_t changes = 0;  // bumps with every count or refusal below (the applier publishes them when it moved)
  uint64_t placements = 0;
  std::map<std::pair<std::string, std::string>, uint64_t> tasks_not_placed;   // one per task left unplaced
  std::map<std::pair<std::string, std::string>, uint64_t> instance_refusals;  // one per instance that refused one
  // refusals: the latest refused placements and the per-minute counts (never null). Shared between the working
  // counters and the published ones until the next refusal, which changes a copy (Transaction::RecordRefusal).
  std::shared_ptr<RefusalLog> refusals = std::make_shared<RefusalLog>();
  std::map<std::string, WaitHistogram> waits;  // capacity provider -> the waits of the tasks placed from its lines
  // (cluster, capacity provider) -> tasks waiting now (CountWaiting; a line that emptied stays, at 0)
  std::map<std::pair<std::string, std::string>, uint64_t> waiting;
};

class Transaction {
 public:
  Transaction(ClusterState& state, const ArnContext& arn, EpochMs now, std::mt19937_64& rng,
              PlacementCounters& counters);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  const ClusterState& state() const { return state_; }
  const ArnContext& arn() const { return arn_; }
  EpochMs now() const { return now_; }
  std::string NewId();      // 32 hex digits from the applier's seeded generator
  uint64_t NextSeed();      // a placement seed from the same generator

  // ---- clusters and task definitions: replaced whole
  void PutCluster(Cluster cluster);
  void PutTaskDefinition(TaskDefinition td);

  // ---- container instances
  // PutInstance adds or replaces an instance (registration); `rebuild` recomputes every reservation, for a
  // re-registration whose GPU list may have changed under held reservations.
  void PutInstance(ContainerInstance instance, bool rebuild);
  // UpdateInstance applies `change` to a stored instance and records it.
  void UpdateInstance(const std::string& arn, const std::function<void(ContainerInstance&)>& change);

  // ---- tasks
  // ReserveTask adds a placed task and holds its reservations (ClusterState::ReserveTask).
  Status ReserveTask(Task task);
  // UpdateTask applies `change` to a stored task and records it. `change` must not touch last_status (use
  // SetTaskStatus, the only way reservations move).
  void UpdateTask(const std::string& arn, const std::function<void(Task&)>& change);
  // SetTaskStatus moves a task to PENDING, RUNNING or STOPPED (STOPPED releases its reservations exactly once).
  void SetTaskStatus(const std::string& arn, TaskStatus status);
  // AddWaitingTask adds a task acknowledged PROVISIONING (ClusterState::AddWaitingTask); PlaceWaitingTask places
  // it (ClusterState::PlaceWaitingTask). Both record it.
  Status AddWaitingTask(Task task);
  Status PlaceWaitingTask(Task placed);
  int64_t NextWaitSeq() { return state_.NextWaitSeq(); }
  // EraseStoppedTask forgets a STOPPED task whose retention expired.
  Status EraseStoppedTask(const std::string& arn);
  void PutClientToken(ClientTokenRecord record);
  // DeleteClientToken forgets a clientToken record (its retention expired), in the state and in the store. The
  // key is taken by value: it is read after the record (whose strings a caller may have passed) is gone.
  void DeleteClientToken(std::string cluster, std::string token);
  // RecordDemand: one RunTask/StartTask demand into the cluster's window of recent demands (working state only,
  // never stored): binpack(fragmentation) learns its target workload from it.
  void RecordDemand(const std::string& cluster, const WorkloadShape& shape) { state_.RecordDemand(cluster, shape); }

  // ---- services
  // PutService adds or replaces a service whole; UpdateService applies `change` to a stored one. Both record it
  // (its version bumps once per transaction) and mark it for the service scheduler.
  void PutService(Service service);
  void UpdateService(const std::string& arn, const std::function<void(Service&)>& change);
  // MarkService: the service scheduler looks at this service when the operation is done (a change of its
  // settings, or of something it depends on).
  void MarkService(const std::string& arn) { marked_services_.insert(arn); }
  const std::set<std::string>& marked_services() const { return marked_services_; }
  // changed_tasks / changed_instances: what this transaction changed so far (the service scheduler reads them
  // to find the services a write concerns; instances include those whose reservations moved).
  const std::vector<std::string>& changed_tasks() const { return task_order_; }
  // released_tasks: the tasks that returned their reservations in this transaction (they stopped), in order.
  const std::vector<std::string>& released_tasks() const { return released_tasks_; }
  // persisted_instances: the instances whose record this transaction changed (not only their reservations).
  const std::set<std::string>& persisted_instances() const { return instances_; }
  std::set<std::string> changed_instances() const {
    std::set<std::string> all = instance_views_;
    all.insert(instances_.begin(), instances_.end());
    return all;
  }

  // ---- capacity providers: PutCapacityProvider adds or replaces one whole and records it
  void PutCapacityProvider(CapacityProvider provider);
  // MarkCapacityFreed: something other than a task stopping or an instance changing may let a waiting task of
  // `cluster` be placed now (a provider was put on the cluster): the queue looks at the cluster's lines.
  void MarkCapacityFreed(const std::string& cluster) { freed_clusters_.insert(cluster); }
  const std::set<std::string>& freed_clusters() const { return freed_clusters_; }

  // ---- agents and metrics
  void Push(const std::string& instance_arn, AgentPush push);
  void CountPlacement() {
    ++counters_.placements;
    ++counters_.changes;
  }
  // CountInstanceRefusal: an instance refused a task of `cluster` for `reason`.
  void CountInstanceRefusal(const std::string& cluster, const std::string& reason) {
    ++counters_.instance_refusals[{cluster, reason}];
    ++counters_.changes;
  }
  // CountTasksNotPlaced: `tasks` tasks of `cluster` were left unplaced, for `reason`.
  void CountTasksNotPlaced(const std::string& cluster, const std::string& reason, uint64_t tasks) {
    counters_.tasks_not_placed[{cluster, reason}] += tasks;
    ++counters_.changes;
  }
  // CountWaitEnded: a task waited `waited_ms` in `provider`'s line before it was placed.
  void CountWaitEnded(const std::string& provider, EpochMs waited_ms);
  // CountWaiting: the tasks waiting now per (cluster, provider), from the state (the applier, after the queue).
  void CountWaiting();
  // RecordRefusal: a RunTask/StartTask left `refusal.tasks` tasks unplaced (the sum its CountTasksNotPlaced calls
  // counted), for the console (RefusalLog).
  void RecordRefusal(PlacementRefusal refusal);

  // ---- what is durable (set by the applier before the operation runs)
  // seq: this write's sequence number (1, 2, ... in the order writes are applied). durable_through: every write
  // up to that number is committed and shown by `committed()`, the last published view; no later one may be
  // (after a failed commit none ever will be, until a restart).
  void SetDurability(uint64_t seq, uint64_t durable_through, const ReadView* committed) {
    seq_ = seq;
    durable_through_ = durable_through;
    committed_ = committed;
  }
  uint64_t seq() const { return seq_; }
  // AnsweredFromCommitted: the answer comes from `committed()` alone (durable already): it may be given while
  // the server refuses writes after a failed commit.
  void AnsweredFromCommitted() { from_committed_ = true; }
  uint64_t durable_through() const { return durable_through_; }
  const ReadView* committed() const { return committed_; }

  // MarkWrite: the answer must wait for every commit before it even when this transaction changed nothing (a
  // repeated clientToken or StopTask answers from memory that an earlier commit still in flight may have made).
  void MarkWrite() { write_ = true; }

  struct Outcome {
    WriteBatch batch;
    ViewDelta delta;
    std::vector<std::pair<std::string, AgentPush>> pushes;  // (instance ARN, push)
    bool write = false;  // the answer waits for the commits before it
    bool from_committed = false;  // AnsweredFromCommitted
  };
  // Finish collects what the transaction changed. Call once, at the end.
  Outcome Finish();

 private:
  void TouchTask(Task& task);
  void TouchInstance(ContainerInstance& instance);
  void ViewInstance(const std::string& arn);  // derived fields changed: the view needs it, the store does not

  ClusterState& state_;
  const ArnContext& arn_;
  const EpochMs now_;
  std::mt19937_64& rng_;
  PlacementCounters& counters_;
  bool write_ = false;
  uint64_t seq_ = 0;
  uint64_t durable_through_ = 0;
  const ReadView* committed_ = nullptr;
  bool from_committed_ = false;

  std::set<std::string> clusters_;
  std::set<std::pair<std::string, int>> task_definitions_;
  std::set<std::string> instances_;       // persisted and viewed
  std::set<std::string> instance_views_;  // viewed only (reservations changed)
  std::vector<std::string> task_order_;   // changed tasks, in first-change order
  std::set<std::string> tasks_;
  std::set<std::string> erased_tasks_;
  std::vector<ClientTokenRecord> client_tokens_;
  std::set<std::pair<std::string, std::string>> deleted_client_tokens_;  // (cluster, token), none also put
  std::vector<std::pair<std::string, AgentPush>> pushes_;
  std::set<std::string> services_;         // changed services (ARN)
  std::vector<std::string> released_tasks_;
  std::set<std::string> marked_services_;  // services the scheduler should look at (MarkService)
  std::set<std::string> capacity_providers_;  // changed providers (name)
  std::set<std::string> freed_clusters_;      // MarkCapacityFreed
};

}  // namespace gpupack::api
