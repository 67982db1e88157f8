// ClusterState's index of STOPPED tasks (StoppedTasks), which the retention purge reads instead of walking every
// task: each STOPPED task with a stopped_at is in it once, under that time, whatever the order of the puts (a
// load, a follower applying batches), reservations, status changes, in-place changes and erasures that led there.
// And its index of clientToken records by created_at (ClientTokensByAge), which the purge reads instead of
// walking every record: each record in it once, under its latest created_at, through puts, erasures, the purge
// itself, a reload from the store and a standby applying the purge's batch.
#include "scheduler/cluster_state.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/applier.h"
#include "engine/core/follow.h"
#include "engine/core/transaction.h"
#include "engine/operations/operations.h"
#include "storage/group_committer.h"
#include "storage/memory_store.h"

namespace gpupack {
namespace {

using Filed = std::set<std::pair<EpochMs, std::string>>;

// Walked: what StoppedTasks must hold, from a walk of every task (what the purge walked before the index).
Filed Walked(const ClusterState& s) {
  Filed out;
  s.ForEachTask([&](const Task& t) {
    if (t.last_status == TaskStatus::kStopped && t.stopped_at != 0) out.emplace(t.stopped_at, t.arn);
  });
  return out;
}

class StoppedIndexTest : public ::testing::Test {
 protected:
  StoppedIndexTest() {
    ContainerInstance inst;
    inst.arn = "instance-1";
    inst.cluster = "c";
    inst.registered = inst.remaining = {1 << 20, 1 << 20};
    s_.PutInstance(inst);
  }
  // Placed: a task as placement leaves it on the instance (PENDING, holding 256 CPU units and 512 MiB).
  static Task Placed(const std::string& arn) {
    Task t;
    t.arn = arn;
    t.cluster = "c";
    t.container_instance_arn = "instance-1";
    t.reserved = {256, 512};
    return t;
  }
  // Stop: what FinishStop does through the transaction: stopped_at first, then STOPPED.
  void Stop(const std::string& arn, EpochMs at) {
    s_.FindTask(arn)->stopped_at = at;
    s_.RefileStopped(arn);
    s_.SetTaskLastStatus(arn, TaskStatus::kStopped);
  }
  ClusterState s_;
};

TEST_F(StoppedIndexTest, AStoppedTaskIsFiledOnceUnderItsStoppedAtWhateverTheOrderOfPutsAndReports) {
  ASSERT_TRUE(s_.ReserveTask(Placed("a")).ok());
  s_.SetTaskLastStatus("a", TaskStatus::kRunning);
  ASSERT_TRUE(s_.ReserveTask(Placed("b")).ok());
  EXPECT_TRUE(s_.StoppedTasks().empty()) << "a task that did not stop is in no entry";

  s_.FindTask("a")->stopped_at = 100;  // set before STOPPED, as FinishStop does: not filed yet
  s_.RefileStopped("a");
  EXPECT_TRUE(s_.StoppedTasks().empty());
  s_.SetTaskLastStatus("a", TaskStatus::kStopped);
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{100, "a"}}));
  s_.SetTaskLastStatus("a", TaskStatus::kStopped);  // a repeated report
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{100, "a"}}));

  // The same record put again (a reload, a follower applying a batch twice), then a later one of the task.
  const Task stopped = *s_.FindTask("a");
  s_.PutTask(stopped);
  s_.PutTask(stopped);
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{100, "a"}}));
  Task later = stopped;
  later.stopped_at = 200;
  s_.PutTask(later);
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{200, "a"}}));

  // Changed in place and refiled (Transaction::UpdateTask): the entry moves, it is not copied.
  s_.FindTask("a")->stopped_at = 50;
  s_.RefileStopped("a");
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{50, "a"}}));

  // A put record that is no longer STOPPED leaves the index; one put STOPPED without holding joins it.
  Task back = later;
  back.last_status = TaskStatus::kRunning;
  s_.PutTask(back);
  EXPECT_TRUE(s_.StoppedTasks().empty());
  Task loaded = Placed("c");
  loaded.last_status = TaskStatus::kStopped;
  loaded.stopped_at = 300;
  loaded.resources_released = true;
  s_.PutTask(loaded);
  Stop("b", 150);
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{150, "b"}, {300, "c"}}));

  ASSERT_TRUE(s_.EraseStoppedTask("b").ok());
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{300, "c"}}));
  // An ARN taken from the index itself (as a purge walking it might pass one) erases cleanly.
  ASSERT_TRUE(s_.EraseStoppedTask(s_.StoppedTasks().begin()->second).ok());
  EXPECT_TRUE(s_.StoppedTasks().empty());
  EXPECT_EQ(s_.TaskCount(), 1u);  // "a", put back RUNNING
}

TEST_F(StoppedIndexTest, AWaitingTaskStoppedOrPlacedIsFiledByItsRecord) {
  Task waiting;
  waiting.arn = "w";
  waiting.cluster = "c";
  waiting.capacity_provider_name = "pool";
  waiting.wait_seq = s_.NextWaitSeq();
  ASSERT_TRUE(s_.AddWaitingTask(waiting).ok());
  Task placed = Placed("w");
  placed.capacity_provider_name = "pool";
  ASSERT_TRUE(s_.PlaceWaitingTask(placed).ok());
  EXPECT_TRUE(s_.StoppedTasks().empty());

  waiting.arn = "w2";
  waiting.wait_seq = s_.NextWaitSeq();
  ASSERT_TRUE(s_.AddWaitingTask(waiting).ok());
  Stop("w2", 70);  // StopTask of a task still waiting: it leaves its line and stops
  EXPECT_EQ(s_.StoppedTasks(), (Filed{{70, "w2"}}));
  EXPECT_EQ(s_.WaitingTotal(), 0u);
}

// Random sequences of everything that stores or changes a task, on a few ARNs: after every step the index holds
// exactly what a walk of the tasks finds, each task once.
TEST_F(StoppedIndexTest, RandomSequencesKeepTheIndexEqualToAWalkOfTheTasks) {
  std::mt19937_64 rng(42);
  const std::string arns[] = {"t0", "t1", "t2", "t3", "t4", "t5"};
  for (int step = 0; step < 20'000; ++step) {
    const std::string& arn = arns[rng() % std::size(arns)];
    const Task* task = s_.FindTask(arn);
    const EpochMs at = static_cast<EpochMs>(1 + rng() % 5);  // few times: records often share one
    switch (rng() % 7) {
      case 0:  // RunTask: placed
        if (!task) {
          EXPECT_TRUE(s_.ReserveTask(Placed(arn)).ok());
        }
        break;
      case 1: {  // acknowledged PROVISIONING, or placed from its line
        if (!task) {
          Task w;
          w.arn = arn;
          w.cluster = "c";
          w.capacity_provider_name = "pool";
          w.wait_seq = s_.NextWaitSeq();
          EXPECT_TRUE(s_.AddWaitingTask(w).ok());
        } else if (task->last_status == TaskStatus::kProvisioning) {
          EXPECT_TRUE(s_.PlaceWaitingTask(Placed(arn)).ok());
        }
        break;
      }
      case 2:  // an agent's report: RUNNING or STOPPED (stopped_at first), repeated ones included
        if (task && rng() % 2) s_.SetTaskLastStatus(arn, TaskStatus::kRunning);
        else if (task) Stop(arn, at);
        break;
      case 3:  // a record put whole (a load or a follower), after the old one let go of what it held
        if (task) {
          Task next = *task;
          s_.ReleaseTask(arn);
          next.resources_released = true;
          next.last_status = rng() % 3 ? TaskStatus::kStopped : TaskStatus::kPending;
          next.stopped_at = rng() % 4 ? at : 0;
          s_.PutTask(next);
        }
        break;
      case 4:  // stopped_at changed in place (Transaction::UpdateTask)
        if (task) {
          s_.FindTask(arn)->stopped_at = at;
          s_.RefileStopped(arn);
        }
        break;
      case 5:  // the purge, or the erase of a task never reserved
        if (task) (void)s_.EraseStoppedTask(arn);
        break;
      case 6:  // a status move the server does not make (STOPPED back to PENDING): the index still follows
        if (task && task->last_status != TaskStatus::kProvisioning) s_.SetTaskLastStatus(arn, TaskStatus::kPending);
        break;
    }
    ASSERT_EQ(s_.StoppedTasks(), Walked(s_)) << "step " << step;
  }
}

// ---- clientToken records by created_at (ClientTokensByAge)

using Aged = std::vector<std::tuple<EpochMs, std::string, std::string>>;  // (created_at, cluster, token)

// ByAge: the index as it stands, in its order.
Aged ByAge(const ClusterState& s) {
  Aged out;
  for (const ClientTokenRecord* r : s.ClientTokensByAge()) out.emplace_back(r->created_at, r->cluster, r->token);
  return out;
}

// WalkedTokens: what ClientTokensByAge must hold, from a walk of every record (what the purge walked before the
// index), in the index's order.
Aged WalkedTokens(const ClusterState& s) {
  Aged out;
  s.ForEachClientToken([&](const ClientTokenRecord& r) { out.emplace_back(r.created_at, r.cluster, r.token); });
  std::sort(out.begin(), out.end());
  return out;
}

ClientTokenRecord Token(const std::string& cluster, const std::string& token, EpochMs created_at) {
  return {cluster, token, "sha256:" + token, {"arn:aws:ecs:us-east-1:000000000000:task/" + cluster + "/" + token},
          created_at};
}

TEST(ClientTokenIndexTest, ARecordPutAgainIsFiledOnceUnderItsLatestCreatedAt) {
  ClusterState s;
  s.PutClientToken(Token("c", "a", 100));
  s.PutClientToken(Token("c", "b", 50));
  s.PutClientToken(Token("d", "a", 100));  // the same token in another cluster is another record
  EXPECT_EQ(ByAge(s), (Aged{{50, "c", "b"}, {100, "c", "a"}, {100, "d", "a"}}));

  s.PutClientToken(Token("c", "a", 100));  // the same record again (a reload, a batch applied twice)
  s.PutClientToken(Token("c", "a", 100));
  EXPECT_EQ(ByAge(s), (Aged{{50, "c", "b"}, {100, "c", "a"}, {100, "d", "a"}}));
  s.PutClientToken(Token("c", "a", 200));  // replaced by a later record: it moves, it is not copied
  EXPECT_EQ(ByAge(s), (Aged{{50, "c", "b"}, {100, "d", "a"}, {200, "c", "a"}}));
  s.PutClientToken(Token("c", "a", 10));  // and by an earlier one
  EXPECT_EQ(ByAge(s), (Aged{{10, "c", "a"}, {50, "c", "b"}, {100, "d", "a"}}));
  EXPECT_EQ(s.ClientTokensByAge().size(), s.ClientTokenCount());
  // An entry shows its record as the state holds it now: the fingerprint of the last put.
  ClientTokenRecord other = Token("c", "a", 10);
  other.request_fingerprint = "sha256:other";
  s.PutClientToken(other);
  EXPECT_EQ((*s.ClientTokensByAge().begin())->request_fingerprint, "sha256:other");
  EXPECT_EQ(*s.ClientTokensByAge().begin(), s.FindClientToken("c", "a"));
}

TEST(ClientTokenIndexTest, AnErasedRecordLeavesTheIndex) {
  ClusterState s;
  s.PutClientToken(Token("c", "a", 100));
  s.PutClientToken(Token("c", "b", 50));
  s.PutClientToken(Token("c", "z", 100));
  EXPECT_TRUE(s.EraseClientToken("c", "a"));
  EXPECT_EQ(ByAge(s), (Aged{{50, "c", "b"}, {100, "c", "z"}}));
  EXPECT_FALSE(s.EraseClientToken("c", "a"));  // gone already
  EXPECT_FALSE(s.EraseClientToken("d", "b"));  // never there
  EXPECT_EQ(ByAge(s), (Aged{{50, "c", "b"}, {100, "c", "z"}}));
  // Keys copied from the index itself (as the purge takes them) erase cleanly.
  const ClientTokenRecord* oldest = *s.ClientTokensByAge().begin();
  const std::string cluster = oldest->cluster, token = oldest->token;
  EXPECT_TRUE(s.EraseClientToken(cluster, token));
  EXPECT_EQ(ByAge(s), (Aged{{100, "c", "z"}}));
  s.PutClientToken(Token("c", "b", 70));  // put again after its erase: filed under its new time
  EXPECT_EQ(ByAge(s), (Aged{{70, "c", "b"}, {100, "c", "z"}}));
  EXPECT_TRUE(s.EraseClientToken("c", "z"));
  EXPECT_TRUE(s.EraseClientToken("c", "b"));
  EXPECT_TRUE(s.ClientTokensByAge().empty());
  EXPECT_EQ(s.ClientTokenCount(), 0u);
}

// Random puts and erasures on a few keys and times: after every step the index holds exactly what a walk of the
// records finds, each record once.
TEST(ClientTokenIndexTest, RandomPutsAndErasesKeepTheIndexEqualToAWalkOfTheRecords) {
  ClusterState s;
  std::mt19937_64 rng(42);
  const std::string clusters[] = {"c", "d"};
  const std::string tokens[] = {"t0", "t1", "t2", "t3", "t4"};
  for (int step = 0; step < 20'000; ++step) {
    const std::string& cluster = clusters[rng() % std::size(clusters)];
    const std::string& token = tokens[rng() % std::size(tokens)];
    const EpochMs at = static_cast<EpochMs>(1 + rng() % 4);  // few times: records often share one
    if (rng() % 3 != 0) s.PutClientToken(Token(cluster, token, at));
    else s.EraseClientToken(cluster, token);
    ASSERT_EQ(ByAge(s), WalkedTokens(s)) << "step " << step;
  }
}

// The purge in a transaction, as the writer runs it, on records about the retention's edge, then its batch
// committed to a store and applied by a standby: the expired records go, exactly, from the state, the store and
// the standby; a reload files the rest as the leader does, and a later purge of the reloaded server goes on from
// there.
TEST(ClientTokenIndexTest, ThePurgeForgetsExactlyTheExpiredRecordsAndAReloadFilesTheRest) {
  using api::Transaction;
  constexpr EpochMs kNow = 1'700'000'000'000;
  const EpochMs edge = kNow - api::kClientTokenRetentionMs;  // older than this: expired
  MemoryStore store;
  ClusterState leader, standby;
  const ArnContext arn;
  std::mt19937_64 rng(3);
  api::PlacementCounters counters;
  auto commit = [&](Transaction& txn) {
    Transaction::Outcome out = txn.Finish();
    ASSERT_TRUE(store.Commit(out.batch).ok());
    api::FollowedChanges touched;
    ASSERT_TRUE(api::ApplyCommitted(standby, out.batch, touched).ok());
  };

  // 300 records from 150 s before the edge to 150 s after it, tokens hashed so that (cluster, token) order is
  // not their age; a record exactly at the edge stays. Then "again": put expired, put again live (the latest
  // record counts), and "late": put live, put again expired.
  std::set<std::pair<std::string, std::string>> expired, kept;
  {
    Transaction txn(leader, arn, edge - 200'000, rng, counters);
    for (int i = 0; i < 300; ++i) {
      const std::string cluster = i % 3 ? "c" : "d";
      const std::string token = std::to_string(std::hash<int>{}(i) * 2654435761u % 1'000'003) + "-" + std::to_string(i);
      const EpochMs at = edge + (i - 150) * 1000;
      txn.PutClientToken(Token(cluster, token, at));
      (at < edge ? expired : kept).emplace(cluster, token);
    }
    txn.PutClientToken(Token("c", "again", edge - 5));
    txn.PutClientToken(Token("c", "late", edge + 5));
    commit(txn);
  }
  {
    Transaction txn(leader, arn, edge + 10, rng, counters);
    txn.PutClientToken(Token("c", "again", edge + 10));
    txn.PutClientToken(Token("c", "late", edge - 10));
    commit(txn);
  }
  kept.emplace("c", "again");
  expired.emplace("c", "late");
  ASSERT_EQ(expired.size(), 151u);
  ASSERT_EQ(kept.size(), 151u);
  ASSERT_EQ(ByAge(leader), WalkedTokens(leader));
  ASSERT_EQ(ByAge(standby), ByAge(leader));

  {
    Transaction txn(leader, arn, kNow, rng, counters);
    api::PurgeExpired(txn, 3'600'000);
    Transaction::Outcome out = txn.Finish();
    EXPECT_EQ(out.batch.deleted_client_tokens(), expired) << "the batch deletes exactly the expired records";
    EXPECT_TRUE(out.batch.client_tokens().empty());
    ASSERT_TRUE(store.Commit(out.batch).ok());
    api::FollowedChanges touched;
    ASSERT_TRUE(api::ApplyCommitted(standby, out.batch, touched).ok());
  }
  std::set<std::pair<std::string, std::string>> left;
  leader.ForEachClientToken([&](const ClientTokenRecord& r) { left.emplace(r.cluster, r.token); });
  EXPECT_EQ(left, kept);
  EXPECT_EQ(ByAge(leader), WalkedTokens(leader));
  EXPECT_EQ(leader.ClientTokensByAge().size(), kept.size());
  EXPECT_EQ(std::get<0>(ByAge(leader).front()), edge) << "the record exactly at the edge stays";
  EXPECT_EQ(ByAge(standby), ByAge(leader));
  EXPECT_EQ(ByAge(standby), WalkedTokens(standby));
  auto stored = store.Load();
  ASSERT_TRUE(stored.ok());
  std::set<std::pair<std::string, std::string>> in_store;
  for (const ClientTokenRecord& r : stored->client_tokens) in_store.emplace(r.cluster, r.token);
  EXPECT_EQ(in_store, kept);

  // A reload (Applier::Load, as a restart runs it) files what the store holds as the leader had it. Its first
  // write purges at once and forgets nothing; a write 100 s later (the purge runs at most once a minute) forgets
  // the 101 records that expired meanwhile, and exactly those.
  std::atomic<EpochMs> now{kNow};
  api::ApplierOptions o;
  o.clock = [&now] { return now.load(); };
  GroupCommitter committer(store);
  api::Applier reloaded(o, store, committer);
  ASSERT_TRUE(reloaded.Load().ok());
  Aged after_reload;
  reloaded.Inspect([&](const ClusterState& st) { after_reload = ByAge(st); });
  EXPECT_EQ(after_reload, ByAge(leader));
  auto write = [&] {
    std::promise<Status> done;
    reloaded.Write([](Transaction&) { return Status::Ok(); }, [&](Status s) { done.set_value(s); });
    return done.get_future().get();
  };
  ASSERT_TRUE(write().ok());
  reloaded.Inspect([&](const ClusterState& st) { EXPECT_EQ(ByAge(st), after_reload); });
  now = kNow + 100'000;
  ASSERT_TRUE(write().ok());
  Aged later = after_reload;
  std::erase_if(later, [&](const auto& e) { return std::get<0>(e) < edge + 100'000; });
  ASSERT_EQ(later.size(), kept.size() - 101);
  reloaded.Inspect([&](const ClusterState& st) {
    EXPECT_EQ(ByAge(st), later);
    EXPECT_EQ(ByAge(st), WalkedTokens(st));
  });
  committer.Flush();
  stored = store.Load();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->client_tokens.size(), later.size());
}

}  // namespace
}  // namespace gpupack
