// The change feed and a hot standby's following (storage/change_feed.h, engine/core/follow.h): a batch survives
// its encoding, and a following applier fed the leader's committed batches holds the leader's state exactly,
// reservations included, and places on it like the leader once promoted.
#include "engine/core/follow.h"

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <set>

#include <gtest/gtest.h>

#include "api/ecs/router.h"
#include "engine/control_plane.h"
#include "storage/change_feed.h"
#include "storage/group_committer.h"
#include "storage/memory_store.h"
#include "storage/serialize.h"

namespace gpupack::api {
namespace {

using storage_internal::ToDoc;

// RecordingStore: a MemoryStore that keeps every batch it committed, in order (what the feed would carry).
class RecordingStore : public MemoryStore {
 public:
  Status Commit(const WriteBatch& batch) override {
    Status s = MemoryStore::Commit(batch);
    if (s.ok() && !batch.empty()) {
      std::lock_guard lock(mu_);
      batches_.push_back(batch);
    }
    return s;
  }
  std::vector<WriteBatch> batches() {
    std::lock_guard lock(mu_);
    return batches_;
  }

 private:
  std::mutex mu_;
  std::vector<WriteBatch> batches_;
};

Json Resources(int cpu, int mem) {
  return Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", cpu}},
                      {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", mem}}});
}

ControlPlaneOptions Options(bool follow) {
  ControlPlaneOptions o;
  o.seed = 7;
  o.placement.place_on_disconnected = true;
  o.clock = [] { return EpochMs{1'700'000'000'000}; };
  o.follow = follow;
  return o;
}

Json Ok(ControlPlane& cp, const std::string& op, const Json& body) {
  std::promise<OperationResult> p;
  Execute(cp, op, body, [&p](OperationResult r) { p.set_value(std::move(r)); });
  OperationResult r = p.get_future().get();
  EXPECT_TRUE(r.status.ok()) << op << ": " << r.status.message();
  return r.body;
}

// RegisterMps registers the family "mps": one container sharing a GPU through MPS with 4,096 MiB.
void RegisterMps(ControlPlane& cp) {
  Ok(cp, "RegisterTaskDefinition",
     {{"family", "mps"},
      {"containerDefinitions",
       Json::array({{{"name", "main"},
                     {"image", "busybox"},
                     {"memory", 64},
                     {"resourceRequirements",
                      Json::array({{{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", {{"memory", 4096}}}}}}})}}})}});
}

// Same: both views hold the same tasks and instances, field for field (their stored documents), and the same
// group counts on each instance.
void ExpectSameViews(const ReadView& a, const ReadView& b) {
  EXPECT_EQ(a.task_count(), b.task_count());
  a.ForEachTask([&](const Task& t) {
    const Task* other = b.FindTask(t.arn);
    ASSERT_NE(other, nullptr) << t.arn;
    EXPECT_EQ(ToDoc(t), ToDoc(*other));
  });
  for (const Cluster* c : a.Clusters()) {
    auto mine = a.InstancesOf(c->name), theirs = b.InstancesOf(c->name);
    ASSERT_EQ(mine.size(), theirs.size());
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_EQ(ToDoc(mine[i]->instance), ToDoc(theirs[i]->instance));
      EXPECT_EQ(mine[i]->load.group_counts, theirs[i]->load.group_counts);
    }
    EXPECT_EQ(a.TaskOrderOf(c->name, false).size(), b.TaskOrderOf(c->name, false).size());
  }
}

TEST(ChangeFeed, EncodingKeepsEveryOperation) {
  WriteBatch b;
  Cluster c;
  c.name = "gpu";
  b.PutCluster(c);
  Task t;
  t.arn = "arn:aws:ecs:us-east-1:000000000000:task/gpu/1";
  t.cluster = "gpu";
  t.stopped_reason = "line\nbreak and \"quotes\"";  // a document stays on one line
  b.PutTask(t);
  b.DeleteTask("arn:aws:ecs:us-east-1:000000000000:task/gpu/2");
  b.DeleteClientToken("gpu", "token with space");
  ClientTokenRecord rec;
  rec.cluster = "gpu";
  rec.token = "t1";
  rec.task_arns = {t.arn};
  b.PutClientToken(rec);
  auto decoded = DecodeChange(EncodeChange(b, DocsOf(b)));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->clusters().size(), 1u);
  EXPECT_EQ(decoded->clusters()[0].name, "gpu");
  ASSERT_EQ(decoded->tasks().size(), 1u);
  EXPECT_EQ(ToDoc(decoded->tasks()[0]), ToDoc(t));
  EXPECT_EQ(decoded->deleted_tasks(), b.deleted_tasks());
  EXPECT_EQ(decoded->deleted_client_tokens(), b.deleted_client_tokens());
  ASSERT_EQ(decoded->client_tokens().size(), 1u);
  EXPECT_EQ(decoded->client_tokens()[0], rec);
  EXPECT_FALSE(decoded->replaces_everything());

  WriteBatch all;
  all.ReplaceEverything();
  all.PutCluster(c);
  auto replaced = DecodeChange(EncodeChange(all, DocsOf(all)));
  ASSERT_TRUE(replaced.ok());
  EXPECT_TRUE(replaced->replaces_everything());
}

TEST(ChangeFeed, UnreadableLinesAreErrorsNotCrashes) {
  for (const char* text : {"x {}\n", "t {not json\n", "-t 42\n", "-k [\"only one\"]\n", "t [1,2]\n"}) {
    auto decoded = DecodeChange(text);
    EXPECT_FALSE(decoded.ok()) << text;
    if (!decoded.ok()) {
      EXPECT_NE(decoded.status().message().find("change feed"), std::string::npos);
    }
  }
  EXPECT_TRUE(DecodeChange("").ok());
}

TEST(Follow, AFollowerFedTheCommittedBatchesHoldsTheLeadersState) {
  RecordingStore leader_store;
  GroupCommitter leader_committer(leader_store);
  ControlPlane leader(Options(false), leader_store, leader_committer);
  ASSERT_TRUE(leader.Load().ok());

  MemoryStore empty;
  GroupCommitter follower_committer(empty);
  ControlPlane follower(Options(true), empty, follower_committer);
  ASSERT_TRUE(follower.Load().ok());

  Ok(leader, "CreateCluster", Json::object());
  const Json gpu = {{"id", "GPU-0"}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 24576}}}};
  for (int i = 0; i < 2; ++i)
    Ok(leader, "RegisterContainerInstance",
       {{"totalResources", Resources(8192, 32768)}, {"platformDevices", Json::array({gpu})}});
  RegisterMps(leader);
  std::vector<std::string> arns;
  for (int i = 0; i < 4; ++i) {
    Json r = Ok(leader, "RunTask", {{"taskDefinition", "mps"}, {"count", 2}, {"group", "g" + std::to_string(i % 2)}});
    for (const auto& t : r["tasks"]) arns.push_back(t["taskArn"]);
  }
  ASSERT_EQ(arns.size(), 8u);

  // Half the batches, then the rest with a stop and a state change among them: rounds of any size.
  std::vector<WriteBatch> batches = leader_store.batches();
  const size_t half = batches.size() / 2;
  ASSERT_TRUE(follower.applier().Follow({batches.begin(), batches.begin() + static_cast<long>(half)}).ok());
  Ok(leader, "StopTask", {{"task", arns[0]}});
  Ok(leader, "SubmitTaskStateChange", {{"task", arns[1]}, {"status", "RUNNING"}});
  Ok(leader, "SubmitTaskStateChange", {{"task", arns[2]}, {"status", "STOPPED"}, {"reason", "done"}});
  leader_committer.Flush();
  batches = leader_store.batches();
  ASSERT_TRUE(follower.applier().Follow({batches.begin() + static_cast<long>(half), batches.end()}).ok());
  ExpectSameViews(*leader.applier().View(), *follower.applier().View());

  // A follower takes no write of its own until promoted; then it places on the same free memory as the leader.
  std::promise<OperationResult> refused;
  Execute(follower, "RunTask", {{"taskDefinition", "mps"}}, [&](OperationResult r) { refused.set_value(r); });
  EXPECT_FALSE(refused.get_future().get().status.ok());
  follower.applier().Promote();
  for (ControlPlane* cp : {&leader, &follower}) Ok(*cp, "RunTask", {{"taskDefinition", "mps"}, {"count", 2}});
  leader.applier().Drain();
  leader_committer.Flush();
  follower.applier().Drain();
  follower_committer.Flush();
  // The free GPU memory of the cluster (where each task went may differ: the two placed with their own seeds).
  auto free_mib = [](const ReadView& v) {
    int64_t sum = 0;
    for (const Cluster* c : v.Clusters())
      for (const InstanceRecord* rec : v.InstancesOf(c->name))
        for (const auto& g : rec->instance.gpus) sum += g.remaining_memory_mib;
    return sum;
  };
  // 2 x 24,576 MiB, minus 6 tasks still holding 4,096 MiB each (8 run, 2 stopped, then 2 more): 24,576 MiB.
  EXPECT_EQ(free_mib(*leader.applier().View()), 2 * 24576 - 8 * 4096);
  EXPECT_EQ(free_mib(*follower.applier().View()), free_mib(*leader.applier().View()));
}

// A promoted follower, like a leader that loaded the state, keeps the instances the old leader had connected
// placeable while their agents find it (agent_reconnect_grace_ms): RunTask places there (PENDING, for the agent's
// hello), and the first write after the grace marks an agent that never came disconnected.
TEST(Follow, APromotedFollowerKeepsTheLeadersConnectedInstancesPlaceableForTheGrace) {
  EpochMs now = 1'700'000'000'000;
  auto options = [&now](bool follow) {
    ControlPlaneOptions o = Options(follow);
    o.placement.place_on_disconnected = false;
    o.clock = [&now] { return now; };
    return o;
  };
  RecordingStore leader_store;
  GroupCommitter leader_committer(leader_store);
  ControlPlane leader(options(false), leader_store, leader_committer);
  ASSERT_TRUE(leader.Load().ok());
  MemoryStore empty;
  GroupCommitter follower_committer(empty);
  ControlPlane follower(options(true), empty, follower_committer);
  ASSERT_TRUE(follower.Load().ok());

  Ok(leader, "CreateCluster", Json::object());
  const Json gpu = {{"id", "GPU-0"}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 24576}}}};
  const std::string inst = Ok(leader, "RegisterContainerInstance",
                              {{"totalResources", Resources(8192, 32768)}, {"platformDevices", Json::array({gpu})}})
                               ["containerInstance"]["containerInstanceArn"];
  RegisterMps(leader);
  std::promise<Status> hello;
  leader.AgentHello(inst, protocol::Hello{}, [&](Status s, protocol::Welcome) { hello.set_value(s); });
  ASSERT_TRUE(hello.get_future().get().ok());
  leader.applier().Drain();
  leader_committer.Flush();
  ASSERT_TRUE(follower.applier().Follow(leader_store.batches()).ok());

  follower.applier().Promote();
  Json r = Ok(follower, "RunTask", {{"taskDefinition", "mps"}});
  ASSERT_EQ(r["tasks"].size(), 1u) << r.dump();
  EXPECT_EQ(r["tasks"][0]["lastStatus"], "PENDING");
  now += ApplierOptions{}.agent_reconnect_grace_ms + 1;  // the grace is over and the agent never came
  r = Ok(follower, "RunTask", {{"taskDefinition", "mps"}});
  EXPECT_TRUE(r["tasks"].empty()) << r.dump();
  ASSERT_EQ(r["failures"].size(), 1u) << r.dump();
  EXPECT_EQ(r["failures"][0]["reason"], "AGENT");
}

TEST(Follow, ABatchThatReplacesEverythingAsksForALoad) {
  ClusterState state;
  FollowedChanges touched;
  WriteBatch b;
  b.ReplaceEverything();
  EXPECT_FALSE(ApplyCommitted(state, b, touched).ok());
  WriteBatch d;
  d.DeleteInstance("arn:aws:ecs:us-east-1:000000000000:container-instance/default/x");
  EXPECT_FALSE(ApplyCommitted(state, d, touched).ok());
}

// A hot standby files the STOPPED tasks of the batches it follows as the leader does (ClusterState::StoppedTasks:
// the index the retention purge reads), a task reported STOPPED twice once; it drops the ones the leader's purge
// deleted; promoted, it purges from its own index exactly the tasks whose hour is over.
TEST(Follow, AFollowerKeepsTheIndexOfStoppedTasksAndPurgesFromItOncePromoted) {
  constexpr EpochMs kMinute = 60'000;
  const EpochMs t0 = 1'700'000'000'000;
  auto now = std::make_shared<std::atomic<EpochMs>>(t0);
  auto options = [now](bool follow) {
    ControlPlaneOptions o = Options(follow);
    o.clock = [now] { return now->load(); };
    return o;
  };
  RecordingStore leader_store;
  GroupCommitter leader_committer(leader_store);
  ControlPlane leader(options(false), leader_store, leader_committer);
  ASSERT_TRUE(leader.Load().ok());
  MemoryStore empty;
  GroupCommitter follower_committer(empty);
  ControlPlane follower(options(true), empty, follower_committer);
  ASSERT_TRUE(follower.Load().ok());
  size_t followed = 0;  // the leader's batches the follower has applied
  auto follow = [&] {
    leader_committer.Flush();
    const std::vector<WriteBatch> batches = leader_store.batches();
    ASSERT_TRUE(follower.applier().Follow({batches.begin() + static_cast<long>(followed), batches.end()}).ok());
    followed = batches.size();
  };
  using Filed = std::set<std::pair<EpochMs, std::string>>;
  auto filed = [](ControlPlane& cp) {
    Filed out;
    cp.applier().Inspect([&](const ClusterState& st) { out = st.StoppedTasks(); });
    return out;
  };

  Ok(leader, "CreateCluster", Json::object());
  Ok(leader, "RegisterContainerInstance",
     {{"totalResources", Resources(8192, 32768)},
      {"platformDevices", Json::array({{{"id", "GPU-0"}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 24576}}}}})}});
  RegisterMps(leader);
  std::vector<std::string> arns;
  const Json ran = Ok(leader, "RunTask", {{"taskDefinition", "mps"}, {"count", 4}});
  for (const auto& t : ran["tasks"]) arns.push_back(t["taskArn"]);
  ASSERT_EQ(arns.size(), 4u) << ran.dump();
  Ok(leader, "SubmitTaskStateChange", {{"task", arns[0]}, {"status", "STOPPED"}});
  Ok(leader, "StopTask", {{"task", arns[1]}});  // PENDING: stopped at once
  follow();
  Ok(leader, "SubmitTaskStateChange", {{"task", arns[0]}, {"status", "STOPPED"}, {"reason", "again"}});
  now->store(t0 + 40 * kMinute);
  Ok(leader, "SubmitTaskStateChange", {{"task", arns[2]}, {"status", "STOPPED"}});
  follow();
  const Filed all = {{t0, arns[0]}, {t0, arns[1]}, {t0 + 40 * kMinute, arns[2]}};
  EXPECT_EQ(filed(leader), all);
  EXPECT_EQ(filed(follower), all);

  now->store(t0 + 70 * kMinute);  // the leader's next write purges the two stopped at t0
  Ok(leader, "CreateCluster", {{"clusterName", "other"}});
  follow();
  EXPECT_EQ(filed(leader), (Filed{{t0 + 40 * kMinute, arns[2]}}));
  EXPECT_EQ(filed(follower), (Filed{{t0 + 40 * kMinute, arns[2]}}));
  ExpectSameViews(*leader.applier().View(), *follower.applier().View());

  follower.applier().Promote();
  now->store(t0 + 101 * kMinute);  // arns[2] stopped 61 minutes ago
  Ok(follower, "CreateCluster", {{"clusterName", "third"}});
  EXPECT_TRUE(filed(follower).empty());
  EXPECT_TRUE(Ok(follower, "ListTasks", {{"desiredStatus", "STOPPED"}})["taskArns"].empty());
  const Json d = Ok(follower, "DescribeTasks", {{"tasks", arns}});
  ASSERT_EQ(d["tasks"].size(), 1u);
  EXPECT_EQ(d["tasks"][0]["taskArn"], arns[3]);
  EXPECT_EQ(d["failures"].size(), 3u);
}

}  // namespace
}  // namespace gpupack::api
