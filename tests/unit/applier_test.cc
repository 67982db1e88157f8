// The applier, its transactions and the read view: reads show only committed state, a write's answer comes
// once its commit is durable, a transaction records what it changed (batch, versions, view), a view shares what
// a commit did not touch, and the router says which operations write.
#include "engine/applier.h"

#include <atomic>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "api/ecs/router.h"
#include "engine/control_plane.h"
#include "engine/operations/operations.h"
#include "storage/group_committer.h"
#include "storage/memory_store.h"
#include "tests/unit/gated_store.h"

namespace gpupack::api {
namespace {

using testing_support::GatedStore;

Json Resources(int cpu, int mem) {
  return Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", cpu}},
                      {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", mem}}});
}

class ApplierTest : public ::testing::Test {
 protected:
  ApplierTest() : committer_(store_), cp_(Options(), store_, committer_) { EXPECT_TRUE(cp_.Load().ok()); }
  ~ApplierTest() override {
    store_.Open();
    committer_.Flush();
  }

  ControlPlaneOptions Options() const {
    ControlPlaneOptions o;
    o.seed = 11;
    o.placement.place_on_disconnected = true;  // the test plays the agent (SubmitTaskStateChange)
    o.clock = [now = now_] { return now->load(); };
    return o;
  }

  std::future<OperationResult> Start(const std::string& op, const Json& body) {
    auto p = std::make_shared<std::promise<OperationResult>>();
    auto f = p->get_future();
    Execute(cp_, op, body, [p](OperationResult r) { p->set_value(std::move(r)); });
    return f;
  }
  Json Ok(const std::string& op, const Json& body) {
    OperationResult r = Start(op, body).get();
    EXPECT_TRUE(r.status.ok()) << op << ": " << r.status.message();
    return r.body;
  }

  // SetUpCluster: a cluster, an instance with one 24,576 MiB GPU, and a task definition sharing 4,096 MiB.
  void SetUpCluster() {
    Ok("CreateCluster", Json::object());
    Ok("RegisterContainerInstance",
       {{"totalResources", Resources(8192, 32768)},
        {"platformDevices", Json::array({{{"id", "GPU-0"}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 24576}}}}})}});
    Ok("RegisterTaskDefinition",
       {{"family", "mps"},
        {"containerDefinitions",
         Json::array({{{"name", "main"},
                       {"image", "busybox"},
                       {"memory", 64},
                       {"resourceRequirements",
                        Json::array({{{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", {{"memory", 4096}}}}}}})}}})}});
  }

  // QueueBehind: a write that runs on the writer thread after everything queued so far, and returns once it has,
  // so the writes before it are decided (in memory) even while their commit waits at the gate.
  void QueueBehind() {
    std::promise<void> ran;
    cp_.applier().Write(
        [&ran](Transaction&) {
          ran.set_value();
          return Status::Ok();
        },
        [](Status) {});
    ran.get_future().wait();
  }

  // now_: the clock every write reads; a test moves it (shared with the plane's clock).
  std::shared_ptr<std::atomic<EpochMs>> now_ = std::make_shared<std::atomic<EpochMs>>(1'700'000'000'000);
  GatedStore store_;
  GroupCommitter committer_;
  ControlPlane cp_;
};

TEST_F(ApplierTest, ReadsShowATaskOnlyOnceItsRunTaskIsDurable) {
  SetUpCluster();
  store_.Close();
  auto run = Start("RunTask", {{"taskDefinition", "mps"}});
  ASSERT_TRUE(store_.WaitForCommit());
  // Placed in memory, not durable: no read may show it, and the GPU still reads as free.
  EXPECT_EQ(run.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout) << "answered before durable";
  EXPECT_TRUE(Ok("ListTasks", {{"desiredStatus", "RUNNING"}})["taskArns"].empty());
  Json ci = Ok("ListContainerInstances", Json::object());
  Json d = Ok("DescribeContainerInstances", {{"containerInstances", ci["containerInstanceArns"]}});
  EXPECT_EQ(d["containerInstances"][0]["gpuDevices"][0]["remainingMemoryInMiB"], 24576);
  EXPECT_EQ(Ok("DescribeClusters", Json::object())["clusters"][0]["pendingTasksCount"], 0);

  store_.Open();
  OperationResult r = run.get();
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  const std::string arn = r.body["tasks"][0]["taskArn"];
  // The answer comes after the view that shows it was published: a read right after sees the task.
  Json tasks = Ok("DescribeTasks", {{"tasks", {arn}}});
  ASSERT_EQ(tasks["tasks"].size(), 1u);
  EXPECT_EQ(tasks["tasks"][0]["lastStatus"], "PENDING");
  d = Ok("DescribeContainerInstances", {{"containerInstances", ci["containerInstanceArns"]}});
  EXPECT_EQ(d["containerInstances"][0]["gpuDevices"][0]["remainingMemoryInMiB"], 24576 - 4096);
  EXPECT_EQ(Ok("DescribeClusters", Json::object())["clusters"][0]["pendingTasksCount"], 1);
}

// Two changes of one task in one commit group (a StopTask and the agent's STOPPED report, or two reports) moved
// the task into the STOPPED ListTasks order once per change: ListTasks desiredStatus STOPPED listed it twice,
// and after the retention purge one copy stayed behind as a ghost ARN that DescribeTasks answered MISSING. The
// view now moves each task of a group once, from where the last published view had it to where its last change
// puts it.
TEST_F(ApplierTest, ATaskChangedTwiceInOneCommitGroupIsListedOnceAndPurgedWhole) {
  SetUpCluster();
  // A task stopped earlier: the STOPPED order is not empty (an empty one was rebuilt from scratch, deduplicated).
  const std::string c = Ok("RunTask", {{"taskDefinition", "mps"}})["tasks"][0]["taskArn"];
  Ok("SubmitTaskStateChange", {{"task", c}, {"status", "STOPPED"}});
  const std::string a = Ok("RunTask", {{"taskDefinition", "mps"}})["tasks"][0]["taskArn"];
  const std::string b = Ok("RunTask", {{"taskDefinition", "mps"}})["tasks"][0]["taskArn"];
  Ok("SubmitTaskStateChange", {{"task", a}, {"status", "RUNNING"}});
  Ok("SubmitTaskStateChange", {{"task", b}, {"status", "RUNNING"}});
  // Hold one commit at the gate; what is decided meanwhile commits as the next group, together.
  store_.Close();
  auto blocker = Start("RunTask", {{"taskDefinition", "mps"}});
  ASSERT_TRUE(store_.WaitForCommit());
  auto stop = Start("StopTask", {{"task", a}});
  auto report = Start("SubmitTaskStateChange", {{"task", a}, {"status", "STOPPED"}});
  auto report1 = Start("SubmitTaskStateChange", {{"task", b}, {"status", "STOPPED"}});
  auto report2 = Start("SubmitTaskStateChange", {{"task", b}, {"status", "STOPPED"}, {"reason", "again"}});
  QueueBehind();
  store_.Open();
  for (auto* f : {&blocker, &stop, &report, &report1, &report2}) {
    const OperationResult r = f->get();
    ASSERT_TRUE(r.status.ok()) << r.status.message();
  }
  const Json stopped = Ok("ListTasks", {{"desiredStatus", "STOPPED"}})["taskArns"];
  EXPECT_EQ(stopped.size(), 3u) << stopped.dump();
  EXPECT_EQ(std::set<std::string>(stopped.begin(), stopped.end()), (std::set<std::string>{a, b, c}));
  EXPECT_EQ(Ok("ListTasks", {{"desiredStatus", "RUNNING"}})["taskArns"].size(), 1u);  // the blocker
  // The purge's index of STOPPED tasks (working state) holds each of the three once, too.
  auto filed = [this] {
    std::set<std::pair<EpochMs, std::string>> out;
    cp_.applier().Inspect([&](const ClusterState& st) { out = st.StoppedTasks(); });
    return out;
  };
  const EpochMs stopped_at = now_->load();
  EXPECT_EQ(filed(), (std::set<std::pair<EpochMs, std::string>>{{stopped_at, a}, {stopped_at, b}, {stopped_at, c}}));

  // Past the retention: the next write purges all three, and neither order nor the index keeps a trace of them.
  now_->store(now_->load() + 3'600'000 + 120'000);
  Ok("CreateCluster", {{"clusterName", "other"}});
  EXPECT_TRUE(filed().empty());
  EXPECT_TRUE(Ok("ListTasks", {{"desiredStatus", "STOPPED"}})["taskArns"].empty());
  const Json d = Ok("DescribeTasks", {{"tasks", {a, b, c}}});
  EXPECT_TRUE(d["tasks"].empty());
  EXPECT_EQ(d["failures"].size(), 3u);
}

TEST_F(ApplierTest, ATaskWhoseCommitFailedIsNeverVisibleAndWritesAreRefused) {
  SetUpCluster();
  store_.FailCommits(Status::Server("disk full"));
  OperationResult r = Start("RunTask", {{"taskDefinition", "mps"}}).get();
  EXPECT_EQ(r.status.code(), ErrorCode::kServer);
  EXPECT_FALSE(cp_.healthy());
  // The placement happened in the working state, but the view never took it.
  EXPECT_TRUE(Ok("ListTasks", {{"desiredStatus", "RUNNING"}})["taskArns"].empty());
  Json ci = Ok("ListContainerInstances", Json::object());
  Json d = Ok("DescribeContainerInstances", {{"containerInstances", ci["containerInstanceArns"]}});
  EXPECT_EQ(d["containerInstances"][0]["gpuDevices"][0]["remainingMemoryInMiB"], 24576);
  store_.FailCommits(Status::Ok());
  EXPECT_EQ(Start("CreateCluster", {{"clusterName", "other"}}).get().status.code(), ErrorCode::kServer);
}

// A write repeated after its commit failed must not be answered from the working state, where the lost change
// still is: a second CreateCluster of the same name would find the cluster there and answer ok without
// committing anything (a repeated RunTask with its clientToken likewise).
TEST_F(ApplierTest, AWriteRepeatedAfterItsCommitFailedIsRefusedNotAnsweredFromMemory) {
  store_.FailCommits(Status::Server("disk full"), 1);
  EXPECT_EQ(Start("CreateCluster", {{"clusterName", "lost"}}).get().status.code(), ErrorCode::kServer);
  OperationResult again = Start("CreateCluster", {{"clusterName", "lost"}}).get();
  EXPECT_EQ(again.status.code(), ErrorCode::kServer) << again.body.dump();
  EXPECT_TRUE(Ok("DescribeClusters", {{"clusters", {"lost"}}})["clusters"].empty());
}

// Nothing decided on top of a lost change becomes durable. With the GPU full, a StopTask frees its memory in the
// working state and its commit fails (the disk is full for that one commit); a RunTask placed on that memory
// meanwhile is refused as well, although its own commit could have gone through. Reloaded, the store holds the
// six tasks on the full GPU and neither the stop nor the new task: no GPU is promised twice.
TEST_F(ApplierTest, NothingDecidedAfterAFailedCommitBecomesDurable) {
  SetUpCluster();
  const Json six = Ok("RunTask", {{"taskDefinition", "mps"}, {"count", 6}});  // 6 x 4,096 MiB: the GPU is full
  ASSERT_EQ(six["tasks"].size(), 6u);
  store_.Close();
  auto stop = Start("StopTask", {{"task", six["tasks"][0]["taskArn"]}});
  ASSERT_TRUE(store_.WaitForCommit());
  auto run = Start("RunTask", {{"taskDefinition", "mps"}});  // submitted behind the stop's commit...
  cp_.applier().Drain();                                       // ...once the writer has run it
  store_.FailCommits(Status::Server("disk full"), 1);       // the stop's commit alone fails
  store_.Open();
  EXPECT_EQ(stop.get().status.code(), ErrorCode::kServer);
  const OperationResult placed = run.get();
  EXPECT_EQ(placed.status.code(), ErrorCode::kServer) << placed.body.dump();
  EXPECT_NE(placed.status.message().find("an earlier commit failed (disk full)"), std::string::npos)
      << placed.status.message();

  GroupCommitter committer(store_);
  ControlPlane reloaded(Options(), store_, committer);
  ASSERT_TRUE(reloaded.Load().ok());
  auto call = [&](const std::string& op, const Json& body) {
    std::promise<OperationResult> p;
    Execute(reloaded, op, body, [&p](OperationResult r) { p.set_value(std::move(r)); });
    OperationResult r = p.get_future().get();
    EXPECT_TRUE(r.status.ok()) << op << ": " << r.status.message();
    return r.body;
  };
  EXPECT_EQ(call("ListTasks", Json::object())["taskArns"].size(), 6u);
  EXPECT_TRUE(call("ListTasks", {{"desiredStatus", "STOPPED"}})["taskArns"].empty());
  const Json ci = call("ListContainerInstances", Json::object());
  const Json d = call("DescribeContainerInstances", {{"containerInstances", ci["containerInstanceArns"]}});
  EXPECT_EQ(d["containerInstances"][0]["gpuDevices"][0]["remainingMemoryInMiB"], 0);
}

// A retry of an acknowledged clientToken gets its first answer again while the server refuses writes after a
// failed commit, showing the committed task (not a stop whose commit failed); a token whose first request was
// never acknowledged is not answered as if it had been.
TEST_F(ApplierTest, AnAcknowledgedClientTokenIsAnsweredAgainWhileDegraded) {
  SetUpCluster();
  const Json first = Ok("RunTask", {{"taskDefinition", "mps"}, {"clientToken", "ci-1"}});
  ASSERT_EQ(first["tasks"].size(), 1u);
  const std::string arn = first["tasks"][0]["taskArn"];
  store_.FailCommits(Status::Server("disk full"));
  EXPECT_EQ(Start("StopTask", {{"task", arn}}).get().status.code(), ErrorCode::kServer);
  const OperationResult lost = Start("RunTask", {{"taskDefinition", "mps"}, {"clientToken", "ci-2"}}).get();
  EXPECT_EQ(lost.status.code(), ErrorCode::kServer);
  ASSERT_FALSE(cp_.healthy());

  const OperationResult again = Start("RunTask", {{"taskDefinition", "mps"}, {"clientToken", "ci-1"}}).get();
  ASSERT_TRUE(again.status.ok()) << again.status.message();
  ASSERT_EQ(again.body["tasks"].size(), 1u);
  EXPECT_EQ(again.body["tasks"][0]["taskArn"], arn);
  EXPECT_EQ(again.body["tasks"][0]["desiredStatus"], "RUNNING") << "the stop was never committed";
  EXPECT_TRUE(again.body["failures"].empty());

  const OperationResult ghost = Start("RunTask", {{"taskDefinition", "mps"}, {"clientToken", "ci-2"}}).get();
  EXPECT_EQ(ghost.status.code(), ErrorCode::kServer) << ghost.body.dump();
  store_.FailCommits(Status::Ok());
}

TEST_F(ApplierTest, ReadsAnswerWhileAWriteWaitsForItsCommit) {
  SetUpCluster();
  store_.Close();
  auto run = Start("RunTask", {{"taskDefinition", "mps"}});
  ASSERT_TRUE(store_.WaitForCommit());
  // The writer holds no lock while its commit is in flight; reads come from the view in any case.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Ok("ListClusters", Json::object())["clusterArns"].size(), 1u);
  store_.Open();
  EXPECT_TRUE(run.get().status.ok());
}

// Reads never wait for the writer: ListTasks and DescribeTasks answer from the published view while the writer
// thread is busy (here held inside Inspect, as a placement dry run holds it). When every read scanned the state
// under the one global lock, 16 clients calling ListTasks delayed an unrelated RunTask to 0.7-1.7 s; a read that
// waits for the writer fails this test after its 10 s bound instead of answering.
TEST_F(ApplierTest, ReadsAnswerWhileTheWritersLockIsHeld) {
  SetUpCluster();
  const std::string arn = Ok("RunTask", {{"taskDefinition", "mps"}})["tasks"][0]["taskArn"];
  // Each read runs on a thread of its own, as the HTTP io threads call it (a read runs on its caller's thread).
  auto read = [this](const std::string& op, const Json& body) {
    return std::async(std::launch::async, [this, op, body] { return Start(op, body).get(); });
  };
  std::future<OperationResult> list, describe;
  bool answered = false;
  cp_.applier().Inspect([&](const ClusterState&) {
    list = read("ListTasks", {{"maxResults", 1}});
    describe = read("DescribeTasks", {{"tasks", {arn}}});
    answered = list.wait_for(std::chrono::seconds(10)) == std::future_status::ready &&
               describe.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  });
  EXPECT_TRUE(answered) << "a read waited for the writer's lock";
  const OperationResult l = list.get(), d = describe.get();
  ASSERT_TRUE(l.status.ok()) << l.status.message();
  ASSERT_TRUE(d.status.ok()) << d.status.message();
  EXPECT_EQ(l.body["taskArns"], Json::array({arn}));
  EXPECT_EQ(d.body["tasks"].size(), 1u);
}

// Writes run on the applier's one writer thread, in the order they were queued; queueing one never waits for
// the writer, even while it is busy (held here inside a read of its working state).
TEST_F(ApplierTest, WritesRunOnOneWriterThreadInArrivalOrderAndQueueingNeverWaits) {
  std::promise<void> release, held;
  std::future<void> busy = std::async(std::launch::async, [&] {
    cp_.applier().Inspect([&](const ClusterState&) {
      held.set_value();
      release.get_future().wait();
    });
  });
  held.get_future().wait();
  std::vector<int> order;              // written by the writer thread only
  std::set<std::thread::id> threads;   // likewise
  auto last = std::make_shared<std::promise<Status>>();
  std::future<void> queued = std::async(std::launch::async, [&] {
    for (int i = 0; i < 50; ++i)
      cp_.applier().Write(
          [i, &order, &threads](Transaction&) {
            order.push_back(i);
            threads.insert(std::this_thread::get_id());
            return Status::Ok();
          },
          [i, last](Status s) {
            if (i == 49) last->set_value(s);
          });
  });
  // All 50 are queued while the writer is still held: Write returned without it.
  ASSERT_EQ(queued.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "a Write waited for the writer";
  release.set_value();
  busy.get();
  EXPECT_TRUE(last->get_future().get().ok());
  std::vector<int> expected(50);
  for (int i = 0; i < 50; ++i) expected[i] = i;
  EXPECT_EQ(order, expected);
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(*threads.begin(), std::this_thread::get_id());
}

// RefusalLog keeps the latest refusals, newest first, and counts refused tasks per cluster and minute for an hour.
TEST(RefusalLogTest, CountsTheLastHourPerClusterAndKeepsTheLatest) {
  RefusalLog log;
  const EpochMs t0 = 1'700'000'000'000;
  PlacementRefusal big{t0, "a", std::string(600, 'x'), {}, 2, {}};
  for (int i = 0; i < 12; ++i) big.failures.push_back({"arn:x", "RESOURCE:GPU_MEMORY", ""});
  log.Add(big);
  log.Add({t0 + 30 * 60'000, "b", "fits", {}, 1, {}});
  EXPECT_EQ(log.LastHour("a", t0), 2u);
  EXPECT_EQ(log.LastHour("b", t0 + 30 * 60'000), 1u);
  EXPECT_EQ(log.LastHour("default", t0), 0u);
  EXPECT_EQ(log.LastHour("a", t0 + 61 * 60'000), 0u);
  EXPECT_EQ(log.LastHour("b", t0 + 61 * 60'000), 1u);
  log.Add({t0 + 62 * 60'000, "a", "big", {}, 5, {}});  // the same slot of the minute ring, an hour later
  EXPECT_EQ(log.LastHour("a", t0 + 62 * 60'000), 5u);
  ASSERT_EQ(log.recent().size(), 3u);
  EXPECT_EQ(log.recent()[0].tasks, 5u);
  EXPECT_EQ(log.recent()[1].cluster, "b");
  EXPECT_EQ(log.recent()[2].task_definition.size(), RefusalLog::kMaxTaskDefinition);
  EXPECT_EQ(log.recent()[2].failures.size(), RefusalLog::kMaxFailures);
  for (size_t i = 0; i < RefusalLog::kRecent; ++i) log.Add({t0, "c", "td", {}, 1, {}});
  EXPECT_EQ(log.recent().size(), RefusalLog::kRecent);
  EXPECT_EQ(log.generation(), 3 + RefusalLog::kRecent);
}

TEST(TransactionTest, RecordsWhatChangedOnceWithOneVersionBump) {
  ClusterState state;
  std::mt19937_64 rng(3);
  PlacementCounters counters;
  ArnContext arn;
  Cluster c;
  c.name = "default";
  state.PutCluster(c);
  ContainerInstance inst;
  inst.arn = arn.InstanceArn("default", "i1");
  inst.id = "i1";
  inst.cluster = "default";
  inst.registered = inst.remaining = {4096, 8192};
  state.PutInstance(inst);

  Transaction txn(state, arn, 1000, rng, counters);
  txn.UpdateInstance(inst.arn, [](ContainerInstance& i) { i.status = InstanceStatus::kDraining; });
  txn.UpdateInstance(inst.arn, [](ContainerInstance& i) { i.agent_connected = false; });
  Task t;
  t.arn = arn.TaskArn("default", "t1");
  t.id = "t1";
  t.cluster = "default";
  t.container_instance_arn = inst.arn;
  t.reserved = {1024, 512};
  ASSERT_TRUE(txn.ReserveTask(t).ok());
  txn.SetTaskStatus(t.arn, TaskStatus::kRunning);
  txn.UpdateTask(t.arn, [](Task& task) { task.started_at = 1000; });
  Transaction::Outcome out = txn.Finish();

  // One put per entity with its final value; the instance's version moved once for two changes; a new task
  // keeps version 1 through its first transaction.
  ASSERT_EQ(out.batch.instances().size(), 1u);
  EXPECT_EQ(out.batch.instances()[0].status, InstanceStatus::kDraining);
  EXPECT_FALSE(out.batch.instances()[0].agent_connected);
  EXPECT_EQ(out.batch.instances()[0].version, inst.version + 1);
  ASSERT_EQ(out.batch.tasks().size(), 1u);
  EXPECT_EQ(out.batch.tasks()[0].last_status, TaskStatus::kRunning);
  EXPECT_EQ(out.batch.tasks()[0].started_at, 1000);
  EXPECT_EQ(out.batch.tasks()[0].version, 1);
  // The view delta carries the same entities, the instance with its reservation: 4096 - 1024 CPU left.
  ASSERT_EQ(out.delta.instances.size(), 1u);
  EXPECT_EQ(out.delta.instances[0]->instance.remaining.cpu, 3072);
  ASSERT_EQ(out.delta.tasks.size(), 1u);
  EXPECT_EQ(out.delta.tasks[0]->last_status, TaskStatus::kRunning);
}

TEST(ReadViewTest, ApplySharesWhatACommitDidNotTouch) {
  ClusterState state;
  Cluster c;
  c.name = "default";
  state.PutCluster(c);
  for (int i = 0; i < 50; ++i) {
    Task t;
    t.arn = "task-" + std::to_string(i);
    t.cluster = "default";
    t.resources_released = true;
    state.PutTask(t);
  }
  auto v0 = ReadView::FromState(state);
  EXPECT_EQ(v0->task_count(), 50u);

  ViewDelta delta;
  auto changed = std::make_shared<Task>(*v0->FindTask("task-7"));
  changed->last_status = TaskStatus::kStopped;
  delta.tasks.push_back(changed);
  delta.erased_tasks.push_back("task-8");
  auto added = std::make_shared<Task>();
  added->arn = "task-new";
  delta.tasks.push_back(added);
  auto v1 = ReadView::Apply(*v0, delta);

  EXPECT_EQ(v1->sequence(), v0->sequence() + 1);
  EXPECT_EQ(v1->task_count(), 50u);  // one erased, one added
  EXPECT_EQ(v1->FindTask("task-7")->last_status, TaskStatus::kStopped);
  EXPECT_EQ(v0->FindTask("task-7")->last_status, TaskStatus::kPending);  // the old view is unchanged
  EXPECT_EQ(v1->FindTask("task-8"), nullptr);
  EXPECT_NE(v0->FindTask("task-8"), nullptr);
  EXPECT_NE(v1->FindTask("task-new"), nullptr);
  // Untouched tasks are the same objects in both views (shared, not copied).
  for (int i = 0; i < 50; ++i) {
    const std::string arn = "task-" + std::to_string(i);
    if (arn == "task-7" || arn == "task-8") continue;
    EXPECT_EQ(v0->FindTask(arn), v1->FindTask(arn)) << arn;
  }
  size_t seen = 0;
  v1->ForEachTask([&seen](const Task&) { ++seen; });
  EXPECT_EQ(seen, 50u);
}

// A commit that changes services copies only their shards: every other service is the same object in both
// views, and the sorted ARNs (ListServices) are copied only when a service is new.
TEST(ReadViewTest, ApplyCopiesTheShardsOfChangedServicesOnly) {
  const std::string prefix = "arn:aws:ecs:us-east-1:000000000000:service/default/";
  ClusterState state;
  for (int i = 100; i < 200; ++i) {
    Service svc;
    svc.arn = prefix + "s" + std::to_string(i);
    svc.name = "s" + std::to_string(i);
    svc.cluster = "default";
    state.PutService(svc);
  }
  auto v0 = ReadView::FromState(state);
  ASSERT_EQ(v0->ServiceArns().size(), 100u);

  ViewDelta changed;
  auto s107 = std::make_shared<Service>(*v0->FindService(prefix + "s107"));
  s107->desired_count = 9;
  changed.services.push_back(s107);
  auto v1 = ReadView::Apply(*v0, changed);
  EXPECT_EQ(v1->FindService(prefix + "s107")->desired_count, 9);
  EXPECT_EQ(v0->FindService(prefix + "s107")->desired_count, 0);  // the old view is unchanged
  EXPECT_EQ(&v1->ServiceArns(), &v0->ServiceArns());                // no new service: the ARNs are shared
  for (int i = 100; i < 200; ++i) {
    const std::string arn = prefix + "s" + std::to_string(i);
    if (i == 107) continue;
    EXPECT_EQ(v1->FindService(arn), v0->FindService(arn)) << arn;  // shared, not copied
  }

  ViewDelta added;
  auto s050 = std::make_shared<Service>();
  s050->arn = prefix + "s050";  // sorts before every other
  added.services.push_back(s050);
  auto v2 = ReadView::Apply(*v1, added);
  ASSERT_EQ(v2->ServiceArns().size(), 101u);
  EXPECT_EQ(*v2->ServiceArns().begin(), prefix + "s050");
  EXPECT_EQ(v1->ServiceArns().size(), 100u);
  EXPECT_NE(v2->FindService(prefix + "s050"), nullptr);
  EXPECT_EQ(v1->FindService(prefix + "s050"), nullptr);
  EXPECT_EQ(v2->FindService(prefix + "s107")->desired_count, 9);
}

TEST(RouterTest, WhetherAnOperationWritesIsItsRequestTypes) {
  EXPECT_EQ(Router::AccessOf("RunTask"), Access::kWrite);
  EXPECT_EQ(Router::AccessOf("SubmitTaskStateChange"), Access::kWrite);
  EXPECT_EQ(Router::AccessOf("DescribeTasks"), Access::kRead);
  EXPECT_EQ(Router::AccessOf("ListAttributes"), Access::kRead);
  EXPECT_EQ(Router::AccessOf("ExplainPlacement"), Access::kRead);
  EXPECT_EQ(Router::AccessOf("NoSuchOperation"), std::nullopt);
  EXPECT_FALSE(Router::Knows("describeTasks"));  // names are case-sensitive, as in ECS
}

}  // namespace
}  // namespace gpupack::api
