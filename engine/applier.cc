#include "engine/applier.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>

#include <spdlog/spdlog.h>

#include "engine/core/follow.h"
#include "engine/operations/agents.h"
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
  following_ = options_.follow;
  if (options_.fragmentation_workload) state_.SetTargetWorkload("", options_.fragmentation_workload);
  published_counters_ = std::make_shared<const PlacementCounters>();
  committer_.SetAfterGroup([this] { FinishGroup(); });
  // Each write is decided on top of the ones before it: once one is lost, none after it may become durable.
  committer_.SetStopAfterFailure(true);
  writer_ = std::thread([this] { WriterLoop(); });
  writer_id_ = writer_.get_id();
}

Applier::~Applier() {
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_one();
  writer_.join();       // runs what was queued first
  committer_.Flush();   // and waits for their commits, whose callbacks reach this applier
  committer_.SetAfterGroup(nullptr);
}

void Applier::Enqueue(Job job) {
  {
    std::lock_guard lock(queue_mu_);
    queue_.push_back(std::move(job));
  }
  queue_cv_.notify_one();
}

// WriterLoop takes everything queued at once and runs it in order. While nothing is queued it sleeps until the
// earliest end of a service's restart back-off, and then runs a write that wakes the service.
void Applier::WriterLoop() {
  std::deque<Job> jobs;
  for (;;) {
    {
      std::unique_lock lock(queue_mu_);
      auto ready = [this] { return stopping_ || !queue_.empty(); };
      // state_ is the writer thread's: read here, on it. The next timed write: a service's back-off ends, the
      // oldest waiting task's time is up, or the reconnect grace after a load ends.
      const auto& wakes = state_.ServiceWakes();
      const auto& waits = state_.WaitStarts();
      std::optional<EpochMs> next;
      if (!wakes.empty() && !following_) next = wakes.begin()->first;
      if (!waits.empty() && !following_) {
        const EpochMs expiry = waits.begin()->first + options_.placement.provisioning_timeout_ms;
        next = next ? std::min(*next, expiry) : expiry;
      }
      if (!reconnecting_.empty()) next = next ? std::min(*next, reconnect_deadline_) : reconnect_deadline_;
      if (!next) {
        queue_cv_.wait(lock, ready);
      } else if (const EpochMs delay = *next - Now(); delay > 0) {
        queue_cv_.wait_for(lock, std::chrono::milliseconds(delay), ready);
      }
      if (queue_.empty() && stopping_) return;  // stopping, and nothing left to run
      jobs.swap(queue_);
    }
    if (jobs.empty()) {  // a back-off, a wait or a grace ended: each is handled at the start of every write
      RunWrite([](Transaction&) { return Status::Ok(); }, [](Status) {});
      continue;
    }
    for (Job& job : jobs) {
      if (job.read) {
        job.read(state_);
      } else {
        RunWrite(job.op, std::move(job.done));
      }
    }
    jobs.clear();
  }
}

void Applier::PublishCounters() {
  auto counters = std::make_shared<const PlacementCounters>(counters_);
  std::lock_guard lock(view_mu_);
  published_counters_ = std::move(counters);
}

void Applier::RunOnWriter(const std::function<void()>& f) {
  if (std::this_thread::get_id() == writer_id_) return f();
  std::promise<void> ran;
  Enqueue({nullptr, nullptr, [&](const ClusterState&) {
             f();
             ran.set_value();
           }});
  ran.get_future().wait();
}

Status Applier::Load() {
  Status s;
  RunOnWriter([&] {
    s = LoadOnWriter();
    // Every service is looked at once after a load: a restarted or newly elected server goes on where the last
    // one stopped (a deployment half done, replicas a lost agent took with it).
    if (s.ok() && state_.ServiceCount() > 0 && !following_)
      Write(
          [](Transaction& txn) {
            MarkAllServices(txn);
            return Status::Ok();
          },
          [](Status) {});
  });
  return s;
}

Status Applier::LoadOnWriter() {
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
  reconnecting_.clear();
  reconnect_deadline_ = Now() + options_.agent_reconnect_grace_ms;
  for (auto& i : snap->instances) {
    // A follower shows the leader's view. Else, connected when last written: still connected for placement
    // while its agent finds this server (a takeover or a restart must not refuse RunTask as AGENT meanwhile);
    // else until its agent says hello.
    if (following_) {
    } else if (i.agent_connected && options_.agent_reconnect_grace_ms > 0 &&
               i.status != InstanceStatus::kInactive) {
      reconnecting_.insert(i.arn);
    } else {
      i.agent_connected = false;
    }
    state_.PutInstance(std::move(i));
  }
  loaded_change_seq_ = snap->change_seq;
  for (auto& ct : snap->client_tokens) state_.PutClientToken(std::move(ct));
  for (auto& svc : snap->services) state_.PutService(std::move(svc));
  for (auto& p : snap->capacity_providers) state_.PutCapacityProvider(std::move(p));
  state_.RebuildReservations();
  // Records that decode but contradict each other are never served (storage/invariants.h).
  if (Status s = CheckInvariants(state_); !s.ok()) return s;
  auto view = ReadView::FromState(state_);
  std::lock_guard view_lock(view_mu_);
  view_ = std::move(view);
  return Status::Ok();
}

void Applier::Write(WriteOp op, std::function<void(Status)> done) {
  if (following_) {
    done(Status::Server("this gpupack server is a standby: writes go to the leader"));
    return;
  }
  Enqueue({std::move(op), std::move(done), nullptr});
}

Status Applier::Follow(const std::vector<WriteBatch>& batches) {
  if (!following_) return Status::Server("only a standby's applier follows the change feed");
  Status s;
  RunOnWriter([&] {
    FollowedChanges touched;
    for (const WriteBatch& b : batches)
      if (s = ApplyCommitted(state_, b, touched); !s.ok()) return;
    auto view = ReadView::Apply(*View(), DeltaOf(state_, touched));
    std::lock_guard lock(view_mu_);
    view_ = std::move(view);
  });
  return s;
}

void Applier::Promote() {
  RunOnWriter([&] {
    if (!following_) return;
    // The instances the leader had connected stay placeable while their agents find this new leader, as after
    // a load (agent_reconnect_grace_ms); without a grace they are disconnected until their agents say hello.
    // One pass, no lookups: a takeover of 10,000 instances waits on this before the new leader listens.
    FollowedChanges touched;
    std::vector<std::string> disconnect;
    reconnecting_.clear();
    reconnecting_.reserve(state_.InstanceCount());
    reconnect_deadline_ = Now() + options_.agent_reconnect_grace_ms;
    state_.ForEachInstance([&](const ContainerInstance& i) {
      if (!i.agent_connected) return;
      if (options_.agent_reconnect_grace_ms > 0 && i.status != InstanceStatus::kInactive)
        reconnecting_.insert(i.arn);
      else
        disconnect.push_back(i.arn);
    });
    for (const std::string& arn : disconnect) {
      state_.FindInstance(arn)->agent_connected = false;  // until its agent says hello to this leader
      touched.TouchInstance(arn);
    }
    auto view = ReadView::Apply(*View(), DeltaOf(state_, touched));
    {
      std::lock_guard lock(view_mu_);
      view_ = std::move(view);
    }
    following_ = false;
    if (state_.ServiceCount() > 0)
      Write(
          [](Transaction& txn) {
            MarkAllServices(txn);
            return Status::Ok();
          },
          [](Status) {});
  });
}

void Applier::Read(std::function<void(const ClusterState&)> f) { Enqueue({nullptr, nullptr, std::move(f)}); }

void Applier::AgentBack(const std::string& instance_arn) { reconnecting_.erase(instance_arn); }

void Applier::EndReconnectGrace(Transaction& txn) {
  // In ARN order, so the same state gives the same commit whatever the hash set's order.
  std::vector<std::string> lost(reconnecting_.begin(), reconnecting_.end());
  std::sort(lost.begin(), lost.end());
  for (const std::string& arn : lost) AgentDisconnected(arn, txn);
  reconnecting_.clear();
}

void Applier::Inspect(const std::function<void(const ClusterState&)>& f) {
  RunOnWriter([&] { f(state_); });
}

void Applier::Drain() {
  RunOnWriter([] {});
}

// RunWrite applies one write on the writer thread and hands its batch to the committer.
void Applier::RunWrite(const WriteOp& op, std::function<void(Status)> done) {
  Transaction txn(state_, options_.arn, Now(), rng_, counters_);
  const uint64_t counters_before = counters_.changes;
  const uint64_t seq = ++next_seq_;
  const uint64_t durable_through = durable_through_.load();
  const std::shared_ptr<const ReadView> committed = View();  // at least as new as durable_through
  txn.SetDurability(seq, durable_through, committed.get());
  const bool degraded = degraded_.load();
  if (txn.now() - last_purge_ >= 60'000 && !degraded) {
    last_purge_ = txn.now();
    PurgeExpired(txn, options_.stopped_task_retention_ms);
  }
  Status s;
  try {
    if (!degraded) {
      WakeServices(txn);
      ExpireWaitingTasks(txn, options_.placement);
      if (!reconnecting_.empty() && txn.now() >= reconnect_deadline_) EndReconnectGrace(txn);
    }
    s = op(txn);
    // The capacity-provider queue and the service scheduler act on what the operation changed, in the same
    // transaction, so the tasks they start or stop are durable together with their cause. Waiting tasks were
    // acknowledged first: they take freed capacity before a service's missing replicas; capacity the service
    // scheduler frees (tasks it stops at once) goes to them too.
    if (!degraded) {
      PlaceWaitingTasks(txn, options_.placement);
      const size_t released = txn.released_tasks().size();
      ReconcileServices(txn, options_.placement);
      if (txn.released_tasks().size() != released) PlaceWaitingTasks(txn, options_.placement);
      txn.CountWaiting();
    }
  } catch (const std::exception& e) {
    s = Status::Server(std::string("internal error: ") + e.what());
  }
  Transaction::Outcome outcome = txn.Finish();
  state_.DropSuperseded();  // no pointer taken during the operation outlives it
  // The counters this write changed are published before it is answered, so whoever got the answer reads them
  // (/metrics, the console) without waiting for the writer.
  if (counters_.changes != counters_before) PublishCounters();
  const bool from_committed = s.ok() && outcome.from_committed && outcome.batch.empty() && !outcome.write;
  if (degraded_.load() && !from_committed) {
    // The disk is behind memory: the working state may hold changes that never became durable, so an operation
    // decided on it could answer from them (a repeated CreateCluster) without committing anything. Nothing is
    // answered until the durable state is reloaded, but an answer taken from the committed view (a repeated
    // clientToken whose first answer was durable).
    done(Status::Server("the server could not persist an earlier change and refuses writes until restarted"));
    return;
  }
  const bool wait_durable = !outcome.batch.empty() || (outcome.write && s.ok());
  if (!wait_durable) {
    done(s);
    return;
  }
  // Writes are answered once durable; agents hear of new assignments and stops only then, so they never act on
  // a change that could be lost. A write with an empty batch goes through the committer too, as a barrier
  // behind the commits before it. The writer thread submits in the order writes were applied, so commits land
  // in that order. This callback is the commit step: the one place a fencing check would go.
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
    move_all(merged.services, c.delta.services);
    move_all(merged.capacity_providers, c.delta.capacity_providers);
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

std::shared_ptr<const ReadView> Applier::View() const {
  std::lock_guard lock(view_mu_);
  return view_;
}

void Applier::SetPushSink(PushSink sink) {
  std::lock_guard lock(push_mu_);
  push_sink_ = std::move(sink);
}

PlacementCounters Applier::counters() const {
  std::shared_ptr<const PlacementCounters> c;
  {
    std::lock_guard lock(view_mu_);
    c = published_counters_;
  }
  return *c;
}

}  // namespace gpupack::api
