#include "engine/applier.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "engine/operations/operations.h"
#include "storage/invariants.h"

namespace gpupack::api {

Applier::Applier(ApplierOptions options, Store& store, GroupCommitter& committer)
    : options_(std::move(options)), store_(store), committer_(committer) {
  if (!options_.clock)
    options_.clock = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  rng_.seed(options_.seed ? options_.seed : std::random_device{}());
  if (options_.fragmentation_workload) state_.SetTargetWorkload("", options_.fragmentation_workload);
  committer_.SetAfterGroup([this] { FinishGroup(); });
  // Each write is decided on top of the ones before it: once one is lost, none after it may become durable.
  committer_.SetStopAfterFailure(true);
}

Applier::~Applier() { committer_.SetAfterGroup(nullptr); }

Status Applier::Load() {
  std::lock_guard lock(mu_);
  // Tasks go straight from the store into state_ (PutTask needs no cluster or instance and touches no
  // reservation), so a restart never holds every decoded task twice. The store hands them over before it
  // returns the rest of the snapshot; if it then fails, the tasks it handed over are dropped again, leaving
  // state_ as it was (Load runs once, on an applier that holds no task yet).
  std::vector<std::string> held_before;
  state_.ForEachTask([&](const Task& t) { held_before.push_back(t.arn); });
  auto snap = store_.LoadStreaming([this](Task&& t) {
    state_.PutTask(std::move(t));
    return Status::Ok();
  });
  if (!snap.ok()) {
    std::vector<std::string> streamed;
    state_.ForEachTask([&](const Task& t) {
      if (std::find(held_before.begin(), held_before.end(), t.arn) == held_before.end()) streamed.push_back(t.arn);
    });
    for (const std::string& arn : streamed) {
      state_.FindTask(arn)->resources_released = true;  // never reserved: it was only put
      (void)state_.EraseStoppedTask(arn);
    }
    return snap.status();
  }
  for (auto& c : snap->clusters) state_.PutCluster(std::move(c));
  for (auto& td : snap->task_definitions) state_.PutTaskDefinition(std::move(td));
  for (auto& i : snap->instances) {
    i.agent_connected = false;  // until its agent says hello again
    state_.PutInstance(std::move(i));
  }
  for (auto& ct : snap->client_tokens) state_.PutClientToken(std::move(ct));
  state_.RebuildReservations();
  // Records that decode but contradict each other are never served (storage/invariants.h).
  if (Status s = CheckInvariants(state_); !s.ok()) return s;
  auto view = ReadView::FromState(state_);
  std::lock_guard view_lock(view_mu_);
  view_ = std::move(view);
  return Status::Ok();
}

void Applier::Write(const WriteOp& op, std::function<void(Status)> done) {
  std::unique_lock lock(mu_);
  Transaction txn(state_, options_.arn, Now(), rng_, counters_);
  const uint64_t seq = ++next_seq_;
  const uint64_t durable_through = durable_through_.load();
  const std::shared_ptr<const ReadView> committed = View();  // at least as new as durable_through
  txn.SetDurability(seq, durable_through, committed.get());
  if (txn.now() - last_purge_ >= 60'000 && !degraded_.load()) {
    last_purge_ = txn.now();
    PurgeExpired(txn, options_.stopped_task_retention_ms);
  }
  Status s;
  try {
    s = op(txn);
  } catch (const std::exception& e) {
    s = Status::Server(std::string("internal error: ") + e.what());
  }
  Transaction::Outcome outcome = txn.Finish();
  state_.DropSuperseded();  // no pointer taken during the operation outlives it
  const bool from_committed = s.ok() && outcome.from_committed && outcome.batch.empty() && !outcome.write;
  if (degraded_.load() && !from_committed) {
    // The disk is behind memory: the working state may hold changes that never became durable, so an operation
    // decided on it could answer from them (a repeated CreateCluster) without committing anything. Nothing is
    // answered until the durable state is reloaded, but an answer taken from the committed view (a repeated
    // clientToken whose first answer was durable).
    lock.unlock();
    done(Status::Server("the server could not persist an earlier change and refuses writes until restarted"));
    return;
  }
  const bool wait_durable = !outcome.batch.empty() || (outcome.write && s.ok());
  if (!wait_durable) {
    lock.unlock();
    done(s);
    return;
  }
  // Writes are answered once durable; agents hear of new assignments and stops only then, so they never act on
  // a change that could be lost. A write with an empty batch goes through the committer too, as a barrier
  // behind the commits before it. Submitting under the lock keeps commits in the order writes were applied.
  // This callback is the commit step: the one place a fencing check would go.
  auto shared = std::make_shared<Transaction::Outcome>(std::move(outcome));
  committer_.Submit(std::move(shared->batch), [this, seq, shared, s, done = std::move(done)](Status commit) mutable {
    if (!commit.ok()) {
      degraded_.store(true);
      spdlog::error("commit failed, refusing writes until restart: {}", commit.message());
      done(Status::Server("could not persist the change: " + commit.message()));
      return;
    }
    std::lock_guard lock(committed_mu_);
    committed_.push_back({seq, std::move(shared->delta), std::move(shared->pushes), s, std::move(done)});
  });
}

// FinishGroup publishes one view for every write of the commit group just made durable (applying their deltas
// in commit order: a later change to an entity wins), then sends their pushes and answers them, in that order.
void Applier::FinishGroup() {
  std::vector<Committed> group;
  {
    std::lock_guard lock(committed_mu_);
    group.swap(committed_);
  }
  if (group.empty()) return;
  ViewDelta merged;
  for (auto& c : group) {
    auto move_all = [](auto& to, auto& from) { std::move(from.begin(), from.end(), std::back_inserter(to)); };
    move_all(merged.clusters, c.delta.clusters);
    move_all(merged.task_definitions, c.delta.task_definitions);
    move_all(merged.instances, c.delta.instances);
    move_all(merged.tasks, c.delta.tasks);
    move_all(merged.erased_tasks, c.delta.erased_tasks);
  }
  if (!merged.empty()) {
    std::shared_ptr<const ReadView> base = View();
    auto next = ReadView::Apply(*base, std::move(merged));
    std::lock_guard lock(view_mu_);
    view_ = std::move(next);
  }
  uint64_t last = durable_through_.load();
  for (const auto& c : group) last = std::max(last, c.seq);
  durable_through_.store(last);  // after the view that shows them is published
  {
    std::lock_guard push_lock(push_mu_);
    if (push_sink_)
      for (auto& c : group)
        for (auto& [arn, push] : c.pushes) push_sink_(arn, std::move(push));
  }
  for (auto& c : group) c.done(c.status);
}

void Applier::Inspect(const std::function<void(const ClusterState&)>& f) const {
  std::lock_guard lock(mu_);
  f(state_);
}

std::shared_ptr<const ReadView> Applier::View() const {
  std::lock_guard lock(view_mu_);
  return view_;
}

void Applier::SetPushSink(PushSink sink) {
  std::lock_guard lock(push_mu_);
  push_sink_ = std::move(sink);
}

PlacementCounters Applier::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

}  // namespace gpupack::api
