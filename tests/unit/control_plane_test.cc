// ControlPlane end to end below HTTP: the ECS operations on a real SQLite file, including a restart.
#include "api/ecs/router.h"
#include "engine/control_plane.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>

#include "storage/group_committer.h"
#include "storage/memory_store.h"
#include "storage/sqlite_store.h"
#include "tests/unit/ecs_test_server.h"
#include "tests/unit/gated_store.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::api {
namespace {

namespace fs = std::filesystem;

class ControlPlaneTest : public ::testing::Test {
 protected:
  testing_support::TempDir tmp_{"gpupack-cp"};  // tmp_: this test's directory, removed after it
  fs::path dir_ = tmp_.path();
  std::string db_ = (dir_ / "state.db").string();
};

// An instance holds at most kMaxInstanceAttributes attributes: a registration or a PutAttributes past it is
// refused whole (nothing of it applied), so no instance, and no answer that lists it, grows without bound.
TEST_F(ControlPlaneTest, AnInstanceHoldsABoundedNumberOfAttributes) {
  EcsServer s(db_, 7);
  s.Ok("CreateCluster", Json::object());
  auto named = [](int from, int n) {
    Json list = Json::array();
    for (int i = from; i < from + n; ++i) list.push_back({{"name", "custom.a" + std::to_string(i)}, {"value", "v"}});
    return list;
  };
  OperationResult big = s.Call("RegisterContainerInstance", {{"totalResources", Resources(1024, 1024)},
                                                             {"attributes", named(0, 101)}});
  EXPECT_EQ(big.status.code(), ErrorCode::kInvalidParameter);
  EXPECT_NE(big.status.message().find("at most 100"), std::string::npos) << big.status.message();
  const std::string arn = s.Ok("RegisterContainerInstance", {{"totalResources", Resources(1024, 1024)},
                                                             {"attributes", named(0, 95)}})["containerInstance"]
                                                           ["containerInstanceArn"];
  auto put = [&](int from, int n) {
    Json list = named(from, n);
    for (auto& a : list) a["targetId"] = arn;
    return s.Call("PutAttributes", {{"attributes", list}});
  };
  auto count = [&] {
    return s.Ok("DescribeContainerInstances", {{"containerInstances", {arn}}})["containerInstances"][0]["attributes"]
        .size();
  };
  const size_t before = count();
  ASSERT_LE(before, 100u);
  EXPECT_TRUE(put(0, 5).status.ok()) << "names it already holds are replaced, not added";
  EXPECT_EQ(count(), before);
  const OperationResult over = put(1000, static_cast<int>(101 - before));
  EXPECT_EQ(over.status.code(), ErrorCode::kInvalidParameter) << over.status.message();
  EXPECT_EQ(count(), before) << "a refused PutAttributes applied nothing";
  EXPECT_TRUE(put(1000, static_cast<int>(100 - before)).status.ok());
  EXPECT_EQ(count(), 100u);
}

// An instance registered over plain HTTP has no agent behind it: it reads agentConnected false and the
// server's default places nothing there (ECS's reason AGENT), so no task is left PENDING forever.
TEST_F(ControlPlaneTest, AnInstanceWithoutAConnectedAgentIsNotPlacedOnByDefault) {
  std::string inst;
  {
    EcsServer s(db_, 7, /*place_on_disconnected=*/false);
    s.Ok("CreateCluster", Json::object());
    inst = RegisterInstance(s, {22587});
    RegisterShared(s, "mps", 4096);
    Json described = s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({inst})}});
    EXPECT_EQ(described["containerInstances"][0]["agentConnected"], false);
    Json r = s.Ok("RunTask", {{"taskDefinition", "mps"}});
    EXPECT_TRUE(r["tasks"].empty());
    ASSERT_GE(r["failures"].size(), 1u);
    EXPECT_EQ(r["failures"][0]["arn"], inst);
    EXPECT_EQ(r["failures"][0]["reason"], "AGENT");
    EXPECT_NE(r["failures"][0]["detail"].get<std::string>().find("not connected"), std::string::npos);
    Json e = s.Ok("ExplainPlacement", {{"taskDefinition", "mps"}});
    ASSERT_EQ(e["instances"].size(), 1u);
    EXPECT_EQ(e["instances"][0]["eligible"], false);
    EXPECT_EQ(e["instances"][0]["reason"], "AGENT");
    EXPECT_FALSE(e.contains("chosenContainerInstanceArn"));
  }
  // The instance still reads disconnected after a restart (once the first server is gone: one server per file).
  EcsServer again(db_, 7, false);
  Json after = again.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({inst})}});
  EXPECT_EQ(after["containerInstances"][0]["agentConnected"], false);
}

// After a load (a restart, a new leader), an instance whose agent was connected when its state was last written
// stays placeable for a grace (agent_reconnect_grace_ms, 15 s by default) while its agent finds this server:
// RunTask is not refused as AGENT meanwhile. An agent that says hello ends its grace; one that does not is marked
// disconnected by the first write after the grace, and a later load starts it disconnected.
TEST_F(ControlPlaneTest, AnInstanceConnectedBeforeALoadStaysPlaceableWhileItsAgentReconnects) {
  auto run = [](EcsServer& s) { return s.Ok("RunTask", {{"taskDefinition", "mps"}}); };
  auto connected = [](EcsServer& s, const std::string& inst) {
    return s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({inst})}})["containerInstances"][0]
                                                                                            ["agentConnected"];
  };
  std::string inst;
  {
    EcsServer s(db_, 7, /*place_on_disconnected=*/false);
    s.Ok("CreateCluster", Json::object());
    inst = RegisterInstance(s, {22587});
    RegisterShared(s, "mps", 1024);
    s.Hello(inst);
    ASSERT_EQ(run(s)["tasks"].size(), 1u);
  }
  {
    EcsServer s(db_, 8, false);  // the agent has not found this server yet
    Json r = run(s);
    ASSERT_EQ(r["tasks"].size(), 1u) << r.dump();
    EXPECT_EQ(r["tasks"][0]["lastStatus"], "PENDING");
    EXPECT_EQ(connected(s, inst), true);
    s.now_ += 15'001;  // the grace is over and the agent never came: the next write marks it disconnected
    r = run(s);
    EXPECT_TRUE(r["tasks"].empty());
    ASSERT_EQ(r["failures"].size(), 1u);
    EXPECT_EQ(r["failures"][0]["reason"], "AGENT");
    EXPECT_EQ(connected(s, inst), false);
  }
  {
    EcsServer s(db_, 9, false);  // loaded disconnected, as the last server left it: no grace
    EXPECT_EQ(run(s)["failures"][0]["reason"], "AGENT");
    s.Hello(inst);
  }
  EcsServer s(db_, 10, false);  // each server its own seed: no task ARN repeats
  s.Hello(inst);  // back within the grace: its end does not disconnect it
  s.now_ += 60'000;
  EXPECT_EQ(run(s)["tasks"].size(), 1u);
  EXPECT_EQ(connected(s, inst), true);
}

// A hello that changes nothing about its instance writes nothing: after a load (a takeover) an instance its agent
// had connected is still connected within the grace, so its agent's hello commits nothing (a herd of 10,000
// hellos after a takeover, docs/benchmarks.md section 15), still ends the grace, and still assigns the tasks
// placed on it meanwhile. A hello that connects the instance writes it.
TEST_F(ControlPlaneTest, AHelloWithinTheReconnectGraceWritesNothing) {
  auto version = [](EcsServer& s, const std::string& inst) {
    return s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({inst})}})["containerInstances"][0]
                                                                                          ["version"];
  };
  std::string inst;
  {
    EcsServer s(db_, 7, /*place_on_disconnected=*/false);
    s.Ok("CreateCluster", Json::object());
    inst = RegisterInstance(s, {22587});
    RegisterShared(s, "mps", 1024);
    const Json registered = version(s, inst);
    const uint64_t commits = s.commits();
    s.Hello(inst);  // disconnected -> connected: written
    EXPECT_NE(version(s, inst), registered);
    EXPECT_EQ(s.commits(), commits + 1);
  }
  EcsServer s(db_, 8, false);  // a new leader: the instance is in its grace
  Json r = s.Ok("RunTask", {{"taskDefinition", "mps"}});
  ASSERT_EQ(r["tasks"].size(), 1u) << r.dump();
  const std::string task = r["tasks"][0]["taskArn"];
  const Json before = version(s, inst);
  const uint64_t commits = s.commits();
  protocol::Welcome welcome = s.Hello(inst);
  EXPECT_EQ(s.commits(), commits) << "the hello changed nothing: no commit";
  EXPECT_EQ(version(s, inst), before);
  ASSERT_EQ(welcome.assign.size(), 1u) << "the task placed within the grace is assigned by the hello";
  EXPECT_EQ(welcome.assign[0].task_arn, task);
  s.now_ += 60'000;  // past the grace: the hello ended it, so the instance stays connected and placeable
  EXPECT_EQ(s.Ok("RunTask", {{"taskDefinition", "mps"}})["tasks"].size(), 1u);
  EXPECT_EQ(s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({inst})}})["containerInstances"][0]
                                                                                             ["agentConnected"],
            true);
}

// --place-on-disconnected (benchmarks, simulations whose client plays the agent): the same instance takes tasks,
// and still reads agentConnected false.
TEST_F(ControlPlaneTest, PlaceOnDisconnectedPlacesOnInstancesWithoutAnAgent) {
  EcsServer s(db_, 7, /*place_on_disconnected=*/true);
  s.Ok("CreateCluster", Json::object());
  std::string inst = RegisterInstance(s, {22587});
  RegisterShared(s, "mps", 4096);
  Json r = s.Ok("RunTask", {{"taskDefinition", "mps"}});
  ASSERT_EQ(r["tasks"].size(), 1u);
  EXPECT_EQ(r["tasks"][0]["containerInstanceArn"], inst);
  Json described = s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({inst})}});
  EXPECT_EQ(described["containerInstances"][0]["agentConnected"], false);
}

// Tasks that share a GPU and name no strategy are packed (binpack on gpuMemory): five 1,000 MiB tasks all join
// the GPU that already holds one, though an empty GPU on another instance is as good a fit; random placement
// (ECS's default) would spread them.
TEST_F(ControlPlaneTest, SharedTasksWithoutAStrategyArePackedByDefault) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string a = RegisterInstance(s, {22587});
  std::string b = RegisterInstance(s, {22587});
  RegisterShared(s, "seed", 4096);
  RegisterShared(s, "small", 1000);
  Json first = s.Ok("StartTask", {{"taskDefinition", "seed"}, {"containerInstances", Json::array({b})}});
  ASSERT_EQ(first["tasks"].size(), 1u);
  Json r = s.Ok("RunTask", {{"taskDefinition", "small"}, {"count", 5}});
  ASSERT_EQ(r["tasks"].size(), 5u);
  for (const auto& t : r["tasks"]) EXPECT_EQ(t["containerInstanceArn"], b);
  EXPECT_EQ(Gpus(s, a)[0]["containerCount"], 0);
  EXPECT_EQ(Gpus(s, b)[0]["containerCount"], 6);
  // ExplainPlacement answers with the same default: one score, the chosen instance is the fuller one.
  Json e = s.Ok("ExplainPlacement", {{"taskDefinition", "small"}});
  EXPECT_EQ(e["chosenContainerInstanceArn"], b);
  // A strategy the request names wins over the default.
  Json spread = s.Ok("RunTask", {{"taskDefinition", "small"},
                                 {"placementStrategy", Json::array({{{"type", "spread"}, {"field", "instanceId"}}})}});
  ASSERT_EQ(spread["tasks"].size(), 1u);
  EXPECT_EQ(spread["tasks"][0]["containerInstanceArn"], a);
}

// Tasks that share no GPU keep ECS's default, random: ten CPU-only tasks on two equal instances land on both.
TEST_F(ControlPlaneTest, TasksThatShareNoGpuArePlacedAtRandomByDefault) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string a = RegisterInstance(s, {22587});
  std::string b = RegisterInstance(s, {22587});
  s.Ok("RegisterTaskDefinition",
       {{"family", "cpu"}, {"containerDefinitions", Json::array({{{"name", "c"}, {"image", "busybox"}, {"memory", 64}}})}});
  Json r = s.Ok("RunTask", {{"taskDefinition", "cpu"}, {"count", 10}});
  ASSERT_EQ(r["tasks"].size(), 10u);
  std::set<std::string> used;
  for (const auto& t : r["tasks"]) used.insert(t["containerInstanceArn"].get<std::string>());
  EXPECT_EQ(used.size(), 2u);
}

// The server's --default-strategy chooses another default for shared tasks (here spread on instanceId).
TEST_F(ControlPlaneTest, TheServerChoosesAnotherDefaultForSharedTasks) {
  EcsServer s(db_, 7, true, std::vector<PlacementStrategy>{{"spread", "instanceId"}});
  s.Ok("CreateCluster", Json::object());
  std::string a = RegisterInstance(s, {22587});
  std::string b = RegisterInstance(s, {22587});
  RegisterShared(s, "small", 1000);
  Json r = s.Ok("RunTask", {{"taskDefinition", "small"}, {"count", 4}});
  ASSERT_EQ(r["tasks"].size(), 4u);
  EXPECT_EQ(Gpus(s, a)[0]["containerCount"], 2);
  EXPECT_EQ(Gpus(s, b)[0]["containerCount"], 2);
}

// Refusals answer the next question: a RunTask of 10 that placed 6 says 4 were not placed; a task larger than
// every GPU is told it can never fit and which GPU is the largest; ExplainPlacement's random scores read as
// draws in [0, 1), with the placer's number kept under rawScores.
TEST_F(ControlPlaneTest, RefusalsSayHowManyWereNotPlacedAndWhatCanNeverFit) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string a = RegisterInstance(s, {22587});
  RegisterShared(s, "quarter", 5000);   // 4 fit on one 22,587 MiB GPU
  RegisterShared(s, "huge", 30000);
  Json r = s.Ok("RunTask", {{"taskDefinition", "quarter"}, {"count", 6}});
  EXPECT_EQ(r["tasks"].size(), 4u);
  ASSERT_EQ(r["failures"].size(), 2u);
  EXPECT_EQ(r["failures"][0]["arn"], a);
  EXPECT_EQ(r["failures"][1]["arn"], "arn:aws:ecs:us-east-1:000000000000:cluster/default");
  EXPECT_EQ(r["failures"][1]["reason"], "RESOURCE:GPU_MEMORY");
  EXPECT_EQ(r["failures"][1]["detail"],
            "2 of 6 tasks were not placed (4 placed): no instance could take task 5 (the other failures say why, per "
            "instance); later tasks were not tried");

  Json h = s.Ok("RunTask", {{"taskDefinition", "huge"}});
  EXPECT_TRUE(h["tasks"].empty());
  ASSERT_EQ(h["failures"].size(), 2u);
  const std::string gpu = Gpus(s, a)[0]["gpuId"];
  EXPECT_EQ(h["failures"][0]["detail"], "task needs 30,000 MiB on one GPU and the largest GPU of this instance, " + gpu +
                                            ", has 22,587 MiB in all: it can never fit here");
  EXPECT_EQ(h["failures"][1]["reason"], "RESOURCE:GPU_MEMORY");
  const std::string id = a.substr(a.rfind('/') + 1);
  EXPECT_EQ(h["failures"][1]["detail"],
            "it can never be placed in this cluster as registered: it needs 30,000 MiB on one GPU and the largest GPU, " +
                gpu + " on container instance " + id + ", has 22,587 MiB in all (lower nvidiaMps.memory or register a "
                "larger GPU)");

  RegisterInstance(s, {22587});
  Json e = s.Ok("ExplainPlacement", {{"taskDefinition", "quarter"},
                                     {"placementStrategy", Json::array({{{"type", "random"}}})}});
  ASSERT_EQ(e["instances"].size(), 2u);
  const Json& score = e["instances"][1]["scores"][0];
  EXPECT_EQ(score["strategy"], "random");
  EXPECT_GE(score["value"].get<double>(), 0.0);
  EXPECT_LT(score["value"].get<double>(), 1.0);
  EXPECT_EQ(score["text"].get<std::string>().rfind("random draw 0.", 0), 0u);
  EXPECT_GT(e["instances"][1]["rawScores"][0].get<double>(), 1.0);
}

// A refusal is recorded once, where placement decides it: the console's log and its "last hour" count the same
// tasks as gpupack_placement_failures_total (tasks_not_placed), and nothing else (a placed task, a Describe
// failure, a refused request) is recorded.
TEST_F(ControlPlaneTest, RefusalsAreRecordedOnceWherePlacementDecidesThem) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  s.Ok("CreateCluster", {{"clusterName", "b"}});
  const std::string a = RegisterInstance(s, {22587});
  RegisterShared(s, "quarter", 5000);  // 4 fit on one 22,587 MiB GPU
  auto not_placed = [](const PlacementCounters& c, const std::string& cluster) {
    uint64_t n = 0;
    for (const auto& [key, count] : c.tasks_not_placed)
      if (key.first == cluster) n += count;
    return n;
  };

  s.Ok("RunTask", {{"taskDefinition", "quarter"}, {"count", 3}});  // all placed
  const PlacementCounters placed = s.counters();
  EXPECT_EQ(placed.refusals->generation(), 0u);
  EXPECT_TRUE(placed.refusals->recent().empty());

  const Json overrides = {{"containerOverrides", Json::array({{{"name", "c"}, {"command", {"serve"}}}})}};
  Json r = s.Ok("RunTask", {{"taskDefinition", "quarter"}, {"count", 4}, {"overrides", overrides}});
  ASSERT_EQ(r["tasks"].size(), 1u);
  s.Ok("DescribeTasks", {{"tasks", {"arn:aws:ecs:us-east-1:000000000000:task/default/nothing"}}});  // a failure
  EXPECT_FALSE(s.Call("RunTask", {{"taskDefinition", "absent"}}).status.ok());
  const PlacementCounters one = s.counters();
  ASSERT_EQ(one.refusals->recent().size(), 1u);
  const PlacementRefusal& refusal = one.refusals->recent().front();
  EXPECT_EQ(refusal.cluster, "default");
  EXPECT_EQ(refusal.task_definition, "quarter");
  EXPECT_EQ(refusal.tasks, 3u);  // 4 asked, 1 placed
  ASSERT_EQ(refusal.overrides.container_overrides.size(), 1u);
  EXPECT_EQ(refusal.overrides.container_overrides[0].name, "c");
  ASSERT_EQ(refusal.failures.size(), r["failures"].size());
  EXPECT_EQ(refusal.failures[0].arn, a);
  EXPECT_EQ(refusal.failures.back().reason, "RESOURCE:GPU_MEMORY");
  EXPECT_EQ(one.refusals->LastHour("default", s.now_), 3u);
  EXPECT_EQ(one.refusals->LastHour("default", s.now_), not_placed(one, "default"));  // one count, read twice

  // StartTask: one task per named instance that refused; counted in its own cluster, in the minute it happened.
  const Json small = Json::array({{{"id", "GPU-small"}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 4000}}}}});
  const std::string b1 = s.Ok("RegisterContainerInstance", {{"cluster", "b"},
                                                            {"totalResources", Resources(8192, 32768)},
                                                            {"platformDevices", small}})["containerInstance"]
                                                           ["containerInstanceArn"];
  s.now_ += 30 * 60'000;
  s.Ok("StartTask", {{"cluster", "b"}, {"taskDefinition", "quarter"}, {"containerInstances", {b1}}});
  const PlacementCounters two = s.counters();
  ASSERT_EQ(two.refusals->recent().size(), 2u);
  EXPECT_EQ(two.refusals->recent().front().cluster, "b");  // newest first
  EXPECT_EQ(two.refusals->LastHour("b", s.now_), 1u);
  EXPECT_EQ(two.refusals->LastHour("b", s.now_), not_placed(two, "b"));
  EXPECT_EQ(two.refusals->LastHour("default", s.now_), 3u);
  EXPECT_EQ(two.refusals->LastHour("default", s.now_ + 31 * 60'000), 0u);  // an hour after it: gone
  EXPECT_EQ(two.refusals->LastHour("b", s.now_ + 31 * 60'000), 1u);
  EXPECT_EQ(two.refusals->generation(), 2u);
  // What was published before is never changed by a later refusal.
  EXPECT_EQ(one.refusals->recent().size(), 1u);
  EXPECT_EQ(one.refusals->generation(), 1u);
}

// The public ECS test: one GPU of 22,587 MiB.
TEST_F(ControlPlaneTest, PublicEcsTestOnOneGpu) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string inst = RegisterInstance(s, {22587});
  RegisterShared(s, "mps-25", 4096, 25);
  RegisterShared(s, "mps-50", 4096, 50);
  RegisterShared(s, "mps-75", 4096, 75);
  RegisterShared(s, "mps-full", 4096);
  RegisterShared(s, "big", 20480);
  RegisterDedicated(s, "dedicated", 1);

  Json a = s.Ok("RunTask", {{"taskDefinition", "mps-50"}});
  Json b = s.Ok("RunTask", {{"taskDefinition", "mps-full"}});
  ASSERT_EQ(a["tasks"].size(), 1u);
  ASSERT_EQ(b["tasks"].size(), 1u);
  Json gpu = Gpus(s, inst)[0];
  EXPECT_EQ(gpu["remainingMemoryInMiB"], 14395);  // 22,587 - 2 x 4,096
  EXPECT_EQ(gpu["containerCount"], 2);
  EXPECT_EQ(gpu["sharingMode"], "NVIDIA_MPS");
  Json ca = a["tasks"][0]["containers"][0], cb = b["tasks"][0]["containers"][0];
  EXPECT_EQ(ca["gpuIds"], cb["gpuIds"]);
  EXPECT_EQ(ca["gpuSharingStrategy"], Json({{"nvidiaMps", {{"memory", 4096}, {"maxComputePercent", 50}}}}));
  EXPECT_EQ(cb["gpuSharingStrategy"], Json({{"nvidiaMps", {{"memory", 4096}}}}));  // omitted stays omitted

  // A dedicated task never lands on a GPU in NVIDIA_MPS mode.
  Json d = s.Ok("RunTask", {{"taskDefinition", "dedicated"}});
  EXPECT_TRUE(d["tasks"].empty());
  ASSERT_EQ(d["failures"].size(), 1u);
  EXPECT_EQ(d["failures"][0]["reason"], "RESOURCE:GPU");
  EXPECT_EQ(d["failures"][0]["arn"], inst);

  // 14,395 - 4,096 = 10,299 < 20,480: the big one does not fit next to two... but it fits alone after a stop.
  Json big_fail = s.Ok("RunTask", {{"taskDefinition", "big"}});
  EXPECT_TRUE(big_fail["tasks"].empty());
  s.Ok("StopTask", {{"task", a["tasks"][0]["taskArn"]}});
  s.Ok("StopTask", {{"task", b["tasks"][0]["taskArn"]}});
  EXPECT_EQ(Gpus(s, inst)[0]["remainingMemoryInMiB"], 22587);
  EXPECT_EQ(Gpus(s, inst)[0]["sharingMode"], "IDLE");

  // With a 20,480 task placed, a 4,096 RunTask gets no task and one RESOURCE:GPU_MEMORY failure.
  Json big = s.Ok("RunTask", {{"taskDefinition", "big"}});
  ASSERT_EQ(big["tasks"].size(), 1u);
  Json r = s.Ok("RunTask", {{"taskDefinition", "mps-25"}});
  EXPECT_TRUE(r["tasks"].empty());
  ASSERT_EQ(r["failures"].size(), 1u);
  EXPECT_EQ(r["failures"][0]["arn"], inst);
  EXPECT_EQ(r["failures"][0]["reason"], "RESOURCE:GPU_MEMORY");
  // 22,587 - 20,480 = 2,107 MiB left.
  EXPECT_EQ(r["failures"][0]["detail"], "largest free block on any GPU is 2,107 MiB; task needs 4,096 MiB on one GPU");
}

TEST_F(ControlPlaneTest, SharedAndDedicatedShareAnInstanceOnDifferentGpus) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string inst = RegisterInstance(s, {22587, 22587});
  RegisterShared(s, "mps", 4096);
  RegisterDedicated(s, "dedicated", 1);
  Json shared = s.Ok("RunTask", {{"taskDefinition", "mps"}});
  Json dedicated = s.Ok("RunTask", {{"taskDefinition", "dedicated"}});
  ASSERT_EQ(shared["tasks"].size(), 1u);
  ASSERT_EQ(dedicated["tasks"].size(), 1u);
  EXPECT_NE(shared["tasks"][0]["containers"][0]["gpuIds"], dedicated["tasks"][0]["containers"][0]["gpuIds"]);
  Json gpus = Gpus(s, inst);
  std::set<std::string> modes = {gpus[0]["sharingMode"], gpus[1]["sharingMode"]};
  EXPECT_EQ(modes, (std::set<std::string>{"NVIDIA_MPS", "DEDICATED"}));
  // A second shared task joins the MPS GPU (best fit), never the dedicated one.
  Json shared2 = s.Ok("RunTask", {{"taskDefinition", "mps"}});
  EXPECT_EQ(shared2["tasks"][0]["containers"][0]["gpuIds"], shared["tasks"][0]["containers"][0]["gpuIds"]);
}

// A GPU requirement in the RunTask overrides replaces the definition's: here a container without a GPU asks
// for two dedicated GPUs, and a one-GPU definition for none more than the instance has.
TEST_F(ControlPlaneTest, GpuOverrideIsWhatGetsPlaced) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string inst = RegisterInstance(s, {22587, 22587, 22587});
  s.Ok("RegisterTaskDefinition", {{"family", "cpu-only"},
                                  {"containerDefinitions", Json::array({{{"name", "c"}, {"image", "busybox"},
                                                                          {"memory", 64}}})}});
  auto gpu_override = [](const std::string& n) {
    return Json{{"containerOverrides", Json::array({{{"name", "c"}, {"resourceRequirements",
                                                     Json::array({{{"type", "GPU"}, {"value", n}}})}}})}};
  };
  Json two = s.Ok("RunTask", {{"taskDefinition", "cpu-only"}, {"overrides", gpu_override("2")}});
  ASSERT_EQ(two["tasks"].size(), 1u);
  EXPECT_EQ(two["tasks"][0]["containers"][0]["gpuIds"].size(), 2u);
  Json gpus = Gpus(s, inst);
  int dedicated = 0;
  for (const auto& g : gpus) dedicated += g["sharingMode"] == "DEDICATED";
  EXPECT_EQ(dedicated, 2);
  // One GPU is left: an override asking for two fails with a GPU reason, one asking for one is placed.
  Json none = s.Ok("RunTask", {{"taskDefinition", "cpu-only"}, {"overrides", gpu_override("2")}});
  EXPECT_TRUE(none["tasks"].empty());
  ASSERT_EQ(none["failures"].size(), 1u);
  EXPECT_EQ(none["failures"][0]["reason"].get<std::string>().rfind("RESOURCE:GPU", 0), 0u) << none.dump();
  RegisterDedicated(s, "one", 1);
  Json one = s.Ok("RunTask", {{"taskDefinition", "one"}, {"overrides", gpu_override("1")}});
  ASSERT_EQ(one["tasks"].size(), 1u);
  EXPECT_EQ(one["tasks"][0]["containers"][0]["gpuIds"].size(), 1u);
  // Stopping gives the GPUs back.
  s.Ok("StopTask", {{"task", two["tasks"][0]["taskArn"]}});
  s.Ok("StopTask", {{"task", one["tasks"][0]["taskArn"]}});
}

TEST_F(ControlPlaneTest, TwoGpuContainersLandOnOneGpu) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string inst = RegisterInstance(s, {8000, 8000});
  s.Ok("RegisterTaskDefinition", {{"family", "pair"},
                                  {"containerDefinitions", Json::array({MpsContainer("a", 4000), MpsContainer("b", 2000)})}});
  Json r = s.Ok("RunTask", {{"taskDefinition", "pair"}});
  ASSERT_EQ(r["tasks"].size(), 1u);
  Json c = r["tasks"][0]["containers"];
  EXPECT_EQ(c[0]["gpuIds"], c[1]["gpuIds"]);
  Json gpus = Gpus(s, inst);
  // One GPU holds both containers: 8,000 - 6,000 = 2,000; the other is untouched.
  std::multiset<int> remaining = {gpus[0]["remainingMemoryInMiB"].get<int>(), gpus[1]["remainingMemoryInMiB"].get<int>()};
  EXPECT_EQ(remaining, (std::multiset<int>{2000, 8000}));
}

TEST_F(ControlPlaneTest, SumThatFitsNoSingleGpuFailsEvenIfInstanceTotalWould) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string inst = RegisterInstance(s, {5000, 5000});
  // 4,000 + 2,000 = 6,000 > 5,000 on either GPU, although 10,000 MiB are free on the instance.
  s.Ok("RegisterTaskDefinition", {{"family", "pair"},
                                  {"containerDefinitions", Json::array({MpsContainer("a", 4000), MpsContainer("b", 2000)})}});
  Json r = s.Ok("RunTask", {{"taskDefinition", "pair"}});
  EXPECT_TRUE(r["tasks"].empty());
  // The instance's failure, and the request's: 6,000 MiB exceed every GPU of the cluster, so it can never fit.
  ASSERT_EQ(r["failures"].size(), 2u);
  EXPECT_EQ(r["failures"][0]["reason"], "RESOURCE:GPU_MEMORY");
  EXPECT_NE(r["failures"][0]["detail"].get<std::string>().find("it can never fit here"), std::string::npos);
  EXPECT_EQ(r["failures"][1]["reason"], "RESOURCE:GPU_MEMORY");
  EXPECT_NE(r["failures"][1]["detail"].get<std::string>().find("has 5,000 MiB in all"), std::string::npos);
}

TEST_F(ControlPlaneTest, ValidationRefusalsAreEcsErrors) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterShared(s, "mps", 4096);
  // Both value and sharingStrategy.
  OperationResult both = s.Call(
      "RegisterTaskDefinition",
      {{"family", "bad"},
       {"containerDefinitions",
        Json::array({{{"name", "c"}, {"image", "x"}, {"memory", 64},
                      {"resourceRequirements",
                       Json::array({{{"type", "GPU"}, {"value", "1"}, {"sharingStrategy", {{"nvidiaMps", {{"memory", 1}}}}}}})}}})}});
  EXPECT_EQ(both.status.code(), ErrorCode::kClient);
  // count 11
  OperationResult eleven = s.Call("RunTask", {{"taskDefinition", "mps"}, {"count", 11}});
  EXPECT_EQ(eleven.status.code(), ErrorCode::kInvalidParameter);
  // sharingStrategy in overrides is refused.
  OperationResult ov = s.Call(
      "RunTask", {{"taskDefinition", "mps"},
                  {"overrides",
                   {{"containerOverrides",
                     Json::array({{{"name", "c"},
                                   {"resourceRequirements",
                                    Json::array({{{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", {{"memory", 1}}}}}}})}}})}}}});
  EXPECT_EQ(ov.status.code(), ErrorCode::kClient);
  // Reserved MPS variables in overrides are accepted (the agent's values win).
  RegisterInstance(s, {22587});
  Json ok = s.Ok("RunTask", {{"taskDefinition", "mps"},
                             {"overrides",
                              {{"containerOverrides",
                                Json::array({{{"name", "c"},
                                              {"environment", Json::array({{{"name", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"},
                                                                            {"value", "0=99999M"}}})}}})}}}});
  EXPECT_EQ(ok["tasks"].size(), 1u);
  // Unknown cluster.
  EXPECT_EQ(s.Call("RunTask", {{"cluster", "nope"}, {"taskDefinition", "mps"}}).status.code(), ErrorCode::kClusterNotFound);
  // Wrong type.
  EXPECT_EQ(s.Call("RunTask", {{"taskDefinition", "mps"}, {"count", "2"}}).status.code(), ErrorCode::kClient);
  // Unknown operation.
  EXPECT_EQ(s.Call("LaunchRockets", Json::object()).status.code(), ErrorCode::kUnknownOperation);
  EXPECT_NE(s.Call("LaunchRockets", Json::object()).status.message().find("docs/api.md"), std::string::npos);
}

// What gpupack leaves out is refused in ECS's shape, never ignored: an ECS operation it does not serve names
// itself and the list in docs/api.md; a ListTasks filter it cannot apply is refused rather than answer every task.
TEST_F(ControlPlaneTest, UnsupportedOperationsAndFiltersAreRefusedNotIgnored) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  OperationResult task_set = s.Call("CreateTaskSet", {{"service", "web"}, {"taskDefinition", "x"}});
  EXPECT_EQ(task_set.status.code(), ErrorCode::kUnsupportedFeature);
  EXPECT_EQ(task_set.status.message(),
            "CreateTaskSet is not supported: gpupack does not support task sets, service revisions and Service "
            "Connect namespaces; the ECS operations it serves are listed in docs/api.md (Operations)");
  EXPECT_EQ(s.Call("TagResource", Json::object()).status.code(), ErrorCode::kUnsupportedFeature);

  EXPECT_TRUE(s.Call("ListTasks", {{"serviceName", "web"}}).status.ok());  // services are served
  EXPECT_EQ(s.Call("ListTasks", {{"launchType", "FARGATE"}}).status.code(), ErrorCode::kUnsupportedFeature);
  EXPECT_TRUE(s.Call("ListTasks", {{"launchType", "EC2"}}).status.ok());  // every task is EC2: the filter holds
  EXPECT_TRUE(s.Call("ListTasks", {{"serviceName", nullptr}}).status.ok());  // null is an absent field
}

TEST_F(ControlPlaneTest, RestartRestoresTasksAndGpuMemoryExactly) {
  std::string inst;
  Json before_gpus;
  std::vector<Json> tasks;
  {
    EcsServer s(db_);
    s.Ok("CreateCluster", Json::object());
    inst = RegisterInstance(s, {22587, 16000});
    RegisterShared(s, "small", 1000);
    RegisterShared(s, "mid", 3000);
    for (int i = 0; i < 12; ++i) {
      Json r = s.Ok("RunTask", {{"taskDefinition", i % 3 ? "small" : "mid"}});
      for (auto& t : r["tasks"]) tasks.push_back(t);
    }
    s.Ok("StopTask", {{"task", tasks[0]["taskArn"]}});
    before_gpus = Gpus(s, inst);
  }  // the store is closed without any shutdown step beyond what a crash would leave (WAL, synchronous=FULL)
  EcsServer s(db_);
  EXPECT_EQ(Gpus(s, inst), before_gpus);
  for (size_t i = 0; i < tasks.size(); ++i) {
    Json d = s.Ok("DescribeTasks", {{"tasks", Json::array({tasks[i]["taskArn"]})}});
    ASSERT_EQ(d["tasks"].size(), 1u);
    EXPECT_EQ(d["tasks"][0]["lastStatus"], i == 0 ? "STOPPED" : "PENDING");
    EXPECT_EQ(d["tasks"][0]["containers"][0]["gpuIds"], tasks[i]["containers"][0]["gpuIds"]);
  }
}

// LoadStatus: what a control plane loading `db` says (the server's start).
Status LoadStatus(const std::string& db) {
  auto store = SqliteStore::Open(db);
  if (!store.ok()) return store.status();
  GroupCommitter committer(**store);
  ControlPlane cp(ControlPlaneOptions{}, **store, committer);
  return cp.Load();
}

// Records that decode on their own but contradict each other (what a damaged file, a hand edit or two servers on
// one database leave) are refused on load with a message naming the record, rather than served: before, each of
// these loaded and was served (a reservation of 1,000,000,000 MiB left its GPU nearly 10^9 MiB below zero).
TEST_F(ControlPlaneTest, InconsistentRecordsAreRefusedOnLoadNamingTheRecord) {
  const std::string good = (dir_ / "good.db").string();
  std::string inst, shared, dedicated;
  {
    EcsServer s(good);
    s.Ok("CreateCluster", Json::object());
    inst = RegisterInstance(s, {22587, 16000});
    RegisterShared(s, "mps", 4000);
    RegisterDedicated(s, "whole", 1);
    shared = s.Ok("RunTask", {{"taskDefinition", "mps"}})["tasks"][0]["taskArn"];
    dedicated = s.Ok("RunTask", {{"taskDefinition", "whole"}})["tasks"][0]["taskArn"];
  }
  ASSERT_TRUE(LoadStatus(good).ok());
  auto task_in = [](Snapshot& snap, const std::string& arn) -> Task& {
    for (auto& t : snap.tasks)
      if (t.arn == arn) return t;
    throw std::runtime_error("no task " + arn);
  };
  struct Case {
    const char* name;
    std::function<void(Snapshot&, WriteBatch&)> damage;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"a reservation larger than its GPU",
       [&](Snapshot& snap, WriteBatch& b) {
         Task& t = task_in(snap, shared);
         t.gpu_reservations.at(0).memory_mib = 1'000'000'000;
         b.PutTask(t);
       },
       "tasks '" + shared + "' reserves 1000000000 MiB on GPU"},
      {"a task whose instance is gone", [&](Snapshot&, WriteBatch& b) { b.DeleteInstance(inst); },
       "tasks '" + shared + "' holds resources on container instance '" + inst + "', which is not stored"},
      {"a GPU listed twice",
       [&](Snapshot& snap, WriteBatch& b) {
         ContainerInstance i = snap.instances.at(0);
         i.gpus.push_back(i.gpus.at(0));
         b.PutInstance(i);
       },
       "container_instances '" + inst + "' lists GPU "},
      {"more memory reserved than registered",
       [&](Snapshot& snap, WriteBatch& b) {
         ContainerInstance i = snap.instances.at(0);
         i.registered.memory = 100;
         b.PutInstance(i);
       },
       "container_instances '" + inst + "': its tasks reserve 128 MiB of memory of the 100 it registers"},
      {"a dedicated GPU held by two tasks",
       [&](Snapshot& snap, WriteBatch& b) {
         Task copy = task_in(snap, dedicated);
         copy.arn += "0";
         copy.id += "0";
         b.PutTask(copy);
       },
       "whole, yet tasks " + dedicated + "0 hold it too"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string db = (dir_ / "damaged.db").string();
    fs::remove(db);
    fs::copy_file(good, db);
    {
      auto store = SqliteStore::Open(db);
      ASSERT_TRUE(store.ok()) << store.status().message();
      auto snap = (*store)->Load();
      ASSERT_TRUE(snap.ok()) << snap.status().message();
      WriteBatch b;
      c.damage(*snap, b);
      ASSERT_TRUE((*store)->Commit(b).ok());
      ASSERT_TRUE((*store)->Load().ok()) << "every record still decodes";
    }
    Status loaded = LoadStatus(db);
    EXPECT_EQ(loaded.code(), ErrorCode::kServer) << "loaded and would be served";
    EXPECT_NE(loaded.message().find(c.want), std::string::npos) << loaded.message();
    EXPECT_NE(loaded.message().find("Restore a backup"), std::string::npos) << loaded.message();
  }
}

// CollectingStore hides a store's own LoadStreaming: ControlPlane::Load then goes through Store's default,
// which collects every task in Snapshot::tasks first (the path before tasks were streamed).
class CollectingStore : public Store {
 public:
  explicit CollectingStore(Store& inner) : inner_(inner) {}
  Result<Snapshot> Load() override { return inner_.Load(); }
  Status Commit(const WriteBatch& batch) override { return inner_.Commit(batch); }

 private:
  Store& inner_;
};

// StreamFaultStore hands its tasks over and then fails the load (fail_after_tasks), or hides every task
// (drop_tasks).
class StreamFaultStore : public Store {
 public:
  explicit StreamFaultStore(Store& inner) : inner_(inner) {}
  Result<Snapshot> Load() override { return inner_.Load(); }
  Result<Snapshot> LoadStreaming(const TaskSink& on_task) override {
    if (drop_tasks) return inner_.LoadStreaming([](Task&&) { return Status::Ok(); });
    auto snap = inner_.LoadStreaming(on_task);
    if (fail_after_tasks) return Status::Server("storage load failed: the disk went away");
    return snap;
  }
  Status Commit(const WriteBatch& batch) override { return inner_.Commit(batch); }
  bool fail_after_tasks = false;
  bool drop_tasks = false;

 private:
  Store& inner_;
};

// Plane is a control plane on a given store, loaded, answering calls synchronously.
class Plane {
 public:
  explicit Plane(Store& store) : committer_(store), cp_(Options(), store, committer_) { load_status = cp_.Load(); }
  Json Ok(const std::string& op, const Json& body) {
    std::promise<OperationResult> p;
    Execute(cp_, op, body, [&](OperationResult r) { p.set_value(std::move(r)); });
    OperationResult r = p.get_future().get();
    EXPECT_TRUE(r.status.ok()) << op << ": " << r.status.message();
    return r.body;
  }
  ControlPlane& cp() { return cp_; }
  Status load_status;

 private:
  static ControlPlaneOptions Options() {
    ControlPlaneOptions o;
    o.seed = 7;
    o.placement.place_on_disconnected = true;  // the test plays the agent
    o.clock = [] { return EpochMs{1'700'000'000'000}; };
    return o;
  }
  GroupCommitter committer_;
  ControlPlane cp_;
};

// Tasks streamed from the store into the control plane give the same state as tasks collected first.
TEST_F(ControlPlaneTest, StreamedLoadGivesTheSameStateAsCollectedLoad) {
  std::vector<std::string> insts;
  Json task_arns = Json::array();
  {
    EcsServer s(db_);
    s.Ok("CreateCluster", Json::object());
    insts.push_back(RegisterInstance(s, {22587, 16000}));
    insts.push_back(RegisterInstance(s, {40000}));
    RegisterShared(s, "small", 1000);
    RegisterShared(s, "mid", 3000);
    RegisterDedicated(s, "whole", 1);
    for (int i = 0; i < 15; ++i) {
      Json r = s.Ok("RunTask", {{"taskDefinition", i % 5 == 4 ? "whole" : i % 3 ? "small" : "mid"},
                                {"clientToken", "token-" + std::to_string(i)}});
      for (auto& t : r["tasks"]) task_arns.push_back(t["taskArn"]);
    }
    ASSERT_GE(task_arns.size(), 10u);
    s.Ok("SubmitTaskStateChange", {{"task", task_arns[1]}, {"status", "RUNNING"}});
    s.Ok("StopTask", {{"task", task_arns[0]}});
    s.Ok("SubmitTaskStateChange", {{"task", task_arns[2]}, {"status", "RUNNING"}});
    s.Ok("SubmitTaskStateChange", {{"task", task_arns[2]}, {"status", "STOPPED"}});
  }
  auto store = SqliteStore::Open(db_);
  ASSERT_TRUE(store.ok()) << store.status().message();
  CollectingStore collecting(**store);
  Plane streamed(**store), collected(collecting);
  ASSERT_TRUE(streamed.load_status.ok()) << streamed.load_status.message();
  ASSERT_TRUE(collected.load_status.ok()) << collected.load_status.message();

  const Json describe_tasks = {{"tasks", task_arns}};
  const Json tasks = streamed.Ok("DescribeTasks", describe_tasks);
  ASSERT_EQ(tasks["tasks"].size(), task_arns.size());
  EXPECT_EQ(tasks, collected.Ok("DescribeTasks", describe_tasks));
  const Json describe_instances = {{"containerInstances", insts}};
  const Json instances = streamed.Ok("DescribeContainerInstances", describe_instances);
  ASSERT_EQ(instances["containerInstances"].size(), insts.size());
  EXPECT_EQ(instances, collected.Ok("DescribeContainerInstances", describe_instances));
  for (const char* status : {"RUNNING", "PENDING", "STOPPED"}) {
    const Json list = {{"desiredStatus", status}};
    EXPECT_EQ(streamed.Ok("ListTasks", list), collected.Ok("ListTasks", list)) << status;
  }
  EXPECT_EQ(streamed.Ok("DescribeClusters", Json::object()), collected.Ok("DescribeClusters", Json::object()));
  // A repeated clientToken answers with the same tasks on both.
  const Json retry = {{"taskDefinition", "small"}, {"clientToken", "token-1"}};
  EXPECT_EQ(streamed.Ok("RunTask", retry)["tasks"][0]["taskArn"], collected.Ok("RunTask", retry)["tasks"][0]["taskArn"]);
}

// A load that fails after the store handed some tasks over leaves none of them behind.
TEST_F(ControlPlaneTest, FailedStreamedLoadLeavesNoTaskBehind) {
  std::string inst, task;
  Json empty_gpus;
  {
    EcsServer s(db_);
    s.Ok("CreateCluster", Json::object());
    inst = RegisterInstance(s, {22587});
    empty_gpus = Gpus(s, inst);
    RegisterShared(s, "small", 1000);
    task = s.Ok("RunTask", {{"taskDefinition", "small"}})["tasks"][0]["taskArn"];
  }
  auto store = SqliteStore::Open(db_);
  ASSERT_TRUE(store.ok()) << store.status().message();
  StreamFaultStore faulty(**store);
  faulty.fail_after_tasks = true;
  Plane p(faulty);
  EXPECT_EQ(p.load_status.code(), ErrorCode::kServer);
  EXPECT_EQ(p.load_status.message(), "storage load failed: the disk went away");
  // Load again from a store that now yields no task: the task handed over by the failed load must be gone.
  faulty.fail_after_tasks = false;
  faulty.drop_tasks = true;
  ASSERT_TRUE(p.cp().Load().ok());
  const Json d = p.Ok("DescribeTasks", {{"tasks", Json::array({task})}});
  EXPECT_TRUE(d["tasks"].empty()) << d.dump();
  EXPECT_EQ(p.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({inst})}})["containerInstances"][0]
                ["gpuDevices"],
            empty_gpus);
}

TEST_F(ControlPlaneTest, StoppedTaskReleasesMemoryExactlyOnce) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string inst = RegisterInstance(s, {10000});
  RegisterShared(s, "mps", 4000);
  Json a = s.Ok("RunTask", {{"taskDefinition", "mps"}});
  Json b = s.Ok("RunTask", {{"taskDefinition", "mps"}});
  std::string arn = a["tasks"][0]["taskArn"];
  s.Ok("SubmitTaskStateChange", {{"task", arn}, {"status", "RUNNING"}});
  EXPECT_EQ(Gpus(s, inst)[0]["remainingMemoryInMiB"], 2000);  // 10,000 - 2 x 4,000
  s.Ok("StopTask", {{"task", arn}});
  // RUNNING: the agent must confirm; memory is still held until it does.
  EXPECT_EQ(Gpus(s, inst)[0]["remainingMemoryInMiB"], 2000);
  s.Ok("SubmitTaskStateChange", {{"task", arn}, {"status", "STOPPED"}, {"reason", "done"}});
  EXPECT_EQ(Gpus(s, inst)[0]["remainingMemoryInMiB"], 6000);
  // A repeated STOPPED report and a late StopTask free nothing more.
  s.Ok("SubmitTaskStateChange", {{"task", arn}, {"status", "STOPPED"}});
  s.Ok("StopTask", {{"task", arn}});
  EXPECT_EQ(Gpus(s, inst)[0]["remainingMemoryInMiB"], 6000);
  EXPECT_EQ(Gpus(s, inst)[0]["containerCount"], 1);
  Json d = s.Ok("DescribeTasks", {{"tasks", Json::array({arn})}});
  EXPECT_EQ(d["tasks"][0]["stopCode"], "UserInitiated");
  EXPECT_EQ(d["tasks"][0]["lastStatus"], "STOPPED");
}

// Remaining: an instance's remainingResources as {CPU, MEMORY}.
std::pair<int64_t, int64_t> Remaining(EcsServer& s, const std::string& instance_arn) {
  Json body = s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({instance_arn})}});
  std::pair<int64_t, int64_t> out{-1, -1};
  for (const auto& r : body["containerInstances"][0]["remainingResources"]) {
    if (r["name"] == "CPU") out.first = r["integerValue"];
    if (r["name"] == "MEMORY") out.second = r["integerValue"];
  }
  return out;
}

// Re-registration keeps the instance's tasks, so it may not shrink the host's CPU or memory below what they
// reserved: remaining resources would go negative and stay so after a restart. Shrinking to exactly what is
// held is fine. The GPU case (a shared GPU smaller than its tasks' memory) is the fuzz regression
// operations/reregister-shrinks-gpu-below-declared.
TEST_F(ControlPlaneTest, ReRegistrationCannotShrinkCpuOrMemoryBelowWhatTasksHold) {
  std::string inst;
  {
    EcsServer s(db_);
    s.Ok("CreateCluster", Json::object());
    inst = RegisterInstance(s, {}, 8192, 32768);
    s.Ok("RegisterTaskDefinition",
         {{"family", "host"},
          {"containerDefinitions", Json::array({{{"name", "c"}, {"image", "busybox"}, {"cpu", 2048}, {"memory", 8192}}})}});
    s.Ok("RunTask", {{"taskDefinition", "host"}, {"count", 2}});
    EXPECT_EQ(Remaining(s, inst), std::make_pair(int64_t{4096}, int64_t{16384}));
    auto reregister = [&](int cpu, int mem) {
      return s.Call("RegisterContainerInstance", {{"containerInstanceArn", inst},
                                                  {"totalResources", Resources(cpu, mem)},
                                                  {"platformDevices", Json::array()}});
    };
    OperationResult cpu = reregister(4095, 32768);
    EXPECT_EQ(cpu.status.code(), ErrorCode::kInvalidParameter) << cpu.status.message();
    EXPECT_NE(cpu.status.message().find("4096 CPU units reserved"), std::string::npos) << cpu.status.message();
    OperationResult mem = reregister(8192, 16383);
    EXPECT_EQ(mem.status.code(), ErrorCode::kInvalidParameter) << mem.status.message();
    EXPECT_NE(mem.status.message().find("16384 MiB of memory reserved"), std::string::npos) << mem.status.message();
    EXPECT_EQ(Remaining(s, inst), std::make_pair(int64_t{4096}, int64_t{16384}));  // refused: nothing changed
    OperationResult exact = reregister(4096, 16384);
    EXPECT_TRUE(exact.status.ok()) << exact.status.message();
    EXPECT_EQ(Remaining(s, inst), std::make_pair(int64_t{0}, int64_t{0}));
  }
  EcsServer s(db_);
  EXPECT_EQ(Remaining(s, inst), std::make_pair(int64_t{0}, int64_t{0}));
}

TEST_F(ControlPlaneTest, ClientTokenIsIdempotent) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterInstance(s, {22587});
  RegisterShared(s, "mps", 1000);
  Json first = s.Ok("RunTask", {{"taskDefinition", "mps"}, {"count", 2}, {"clientToken", "abc"}});
  Json again = s.Ok("RunTask", {{"taskDefinition", "mps"}, {"count", 2}, {"clientToken", "abc"}});
  ASSERT_EQ(first["tasks"].size(), 2u);
  EXPECT_EQ(first["tasks"][0]["taskArn"], again["tasks"][0]["taskArn"]);
  EXPECT_EQ(first["tasks"][1]["taskArn"], again["tasks"][1]["taskArn"]);
  OperationResult other = s.Call("RunTask", {{"taskDefinition", "mps"}, {"count", 3}, {"clientToken", "abc"}});
  EXPECT_EQ(other.status.code(), ErrorCode::kConflict);
  Json list = s.Ok("ListTasks", Json::object());
  EXPECT_EQ(list["taskArns"].size(), 2u);
}

// A clientToken is remembered for 24 hours (docs/api.md), in memory and on disk: within them a repeat answers
// the first request's tasks, and names a task that was stopped and purged (1 hour after stopping) as a MISSING
// failure instead of answering nothing; after them the purge forgets the token and the same token starts new
// tasks. Before, tokens were kept forever: a reuse after a day was a conflict, and a repeat of a purged task's
// token answered 200 with no tasks and no failures.
TEST_F(ControlPlaneTest, ClientTokensExpireAfter24HoursAndARepeatNamesPurgedTasks) {
  constexpr EpochMs kHour = 3'600'000;
  const Json request = {{"taskDefinition", "mps"}, {"clientToken", "tok"}};
  std::string first_arn;
  {
    EcsServer s(db_);
    s.Ok("CreateCluster", Json::object());
    RegisterInstance(s, {22587});
    RegisterShared(s, "mps", 1000);
    Json first = s.Ok("RunTask", request);
    ASSERT_EQ(first["tasks"].size(), 1u);
    first_arn = first["tasks"][0]["taskArn"];
    s.Ok("RunTask", {{"taskDefinition", "mps"}, {"clientToken", "forgotten"}});
    s.Ok("StopTask", {{"task", first_arn}});  // PENDING: stopped at once
    s.now_ += 2 * kHour;  // past the STOPPED task's 1 h retention: the next write purges it
    s.Ok("CreateCluster", Json::object());
    Json d = s.Ok("DescribeTasks", {{"tasks", Json::array({first_arn})}});
    EXPECT_EQ(d["failures"].size(), 1u);
    Json again = s.Ok("RunTask", request);
    EXPECT_TRUE(again["tasks"].empty());
    ASSERT_EQ(again["failures"].size(), 1u) << again.dump();
    EXPECT_EQ(again["failures"][0]["arn"], first_arn);
    EXPECT_EQ(again["failures"][0]["reason"], "MISSING");
    // Still within 24 h: another request with the token is a conflict.
    OperationResult other = s.Call("RunTask", {{"taskDefinition", "mps"}, {"count", 2}, {"clientToken", "tok"}});
    EXPECT_EQ(other.status.code(), ErrorCode::kConflict);
    // After 24 h the purge forgets both tokens, and the same request starts a new task.
    s.now_ += 23 * kHour;
    s.Ok("CreateCluster", Json::object());
    size_t tokens = 99;
    s.Inspect([&](const ClusterState& st) { tokens = st.ClientTokenCount(); });
    EXPECT_EQ(tokens, 0u);
    Json later = s.Ok("RunTask", request);
    ASSERT_EQ(later["tasks"].size(), 1u) << later.dump();
    EXPECT_NE(later["tasks"][0]["taskArn"], first_arn);
  }
  // The purge reached the store: after a restart only the new use of "tok" is known.
  EcsServer s(db_);
  size_t tokens = 99;
  bool forgotten_known = true;
  s.Inspect([&](const ClusterState& st) {
    tokens = st.ClientTokenCount();
    forgotten_known = st.FindClientToken("default", "forgotten") != nullptr;
  });
  EXPECT_EQ(tokens, 1u);
  EXPECT_FALSE(forgotten_known);
}

// Task groups are interned as dense ids for placement (spread by instance); an id and its group index entries
// are freed once the group's last task releases its resources, so distinct `group` strings do not accumulate.
TEST_F(ControlPlaneTest, TaskGroupsAreForgottenWithTheirLastTask) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterInstance(s, {22587});
  RegisterInstance(s, {22587});
  RegisterShared(s, "mps", 256);
  auto counts = [&] {
    std::pair<size_t, size_t> out;
    s.Inspect([&](const ClusterState& st) { out = {st.GroupCount(), st.GroupIndexEntries()}; });
    return out;
  };
  std::vector<std::string> arns;
  for (int i = 0; i < 40; ++i) {
    Json r = s.Ok("RunTask", {{"taskDefinition", "mps"}, {"group", "group-" + std::to_string(i % 20)}});
    ASSERT_EQ(r["tasks"].size(), 1u);
    arns.push_back(r["tasks"][0]["taskArn"]);
  }
  EXPECT_EQ(counts().first, 20u);
  for (int i = 0; i < 20; ++i) s.Ok("StopTask", {{"task", arns[i]}});  // one task of each group left
  EXPECT_EQ(counts().first, 20u);
  for (int i = 20; i < 40; ++i) s.Ok("StopTask", {{"task", arns[i]}});
  EXPECT_EQ(counts(), std::make_pair(size_t{0}, size_t{0}));
  // A freed id is reused, and spread by instance still sees a group's tasks.
  const Json spread = {{"taskDefinition", "mps"}, {"group", "again"},
                       {"placementStrategy", Json::array({{{"type", "spread"}, {"field", "instanceId"}}})}};
  Json a = s.Ok("RunTask", spread);
  Json b = s.Ok("RunTask", spread);
  ASSERT_EQ(a["tasks"].size(), 1u);
  ASSERT_EQ(b["tasks"].size(), 1u);
  EXPECT_NE(a["tasks"][0]["containerInstanceArn"], b["tasks"][0]["containerInstanceArn"]);
  EXPECT_EQ(counts(), std::make_pair(size_t{1}, size_t{1}));
}

// The retention purge (once a minute of the server's clock) forgets exactly the tasks that stopped over an hour
// before: not one that stopped later, not one that runs, not one asked to stop whose agent has not reported yet
// (desiredStatus STOPPED: ListTasks lists it with the stopped ones). It reads them from the index of STOPPED tasks
// by stopped_at (ClusterState::StoppedTasks), not from a walk of every task: a task reported STOPPED twice is in
// it once, a restart files the loaded ones again, and nothing of a purged task is left anywhere (ListTasks,
// DescribeTasks, the index).
TEST_F(ControlPlaneTest, TheRetentionPurgeForgetsExactlyTheTasksStoppedOverAnHourAgoAcrossARestart) {
  constexpr EpochMs kMinute = 60'000;
  using Filed = std::set<std::pair<EpochMs, std::string>>;
  auto filed = [](EcsServer& s) {
    Filed out;
    s.Inspect([&](const ClusterState& st) { out = st.StoppedTasks(); });
    return out;
  };
  auto listed_stopped = [](EcsServer& s) {
    const Json arns = s.Ok("ListTasks", {{"desiredStatus", "STOPPED"}})["taskArns"];
    return std::set<std::string>(arns.begin(), arns.end());
  };
  auto described = [](EcsServer& s, const std::vector<std::string>& arns) {
    const Json d = s.Ok("DescribeTasks", {{"tasks", arns}});
    std::map<std::string, std::string> out;  // ARN -> lastStatus, "MISSING" for a failure
    for (const Json& t : d["tasks"]) out[t["taskArn"]] = t["lastStatus"];
    for (const Json& f : d["failures"]) out[f["arn"]] = f["reason"];
    return out;
  };
  std::string old_stop, reported, young, stopping, running;
  EpochMs t0 = 0;
  {
    EcsServer s(db_);
    t0 = s.now_;
    s.Ok("CreateCluster", Json::object());
    RegisterInstance(s, {81920});
    RegisterShared(s, "mps", 1000);
    auto run = [&] { return s.Ok("RunTask", {{"taskDefinition", "mps"}})["tasks"][0]["taskArn"].get<std::string>(); };
    old_stop = run(), reported = run(), young = run(), stopping = run(), running = run();
    for (const auto& arn : {reported, young, stopping, running})
      s.Ok("SubmitTaskStateChange", {{"task", arn}, {"status", "RUNNING"}});
    s.Ok("StopTask", {{"task", old_stop}});  // PENDING: stopped at once
    s.Ok("SubmitTaskStateChange", {{"task", reported}, {"status", "STOPPED"}});
    s.Ok("SubmitTaskStateChange", {{"task", reported}, {"status", "STOPPED"}, {"reason", "again"}});
    s.Ok("StopTask", {{"task", stopping}});  // RUNNING, no agent to stop it: still RUNNING until a report
    EXPECT_EQ(filed(s), (Filed{{t0, old_stop}, {t0, reported}}));
    s.now_ = t0 + 30 * kMinute;
    s.Ok("SubmitTaskStateChange", {{"task", young}, {"status", "STOPPED"}});
    s.Ok("SubmitTaskStateChange", {{"task", reported}, {"status", "STOPPED"}, {"reason", "late"}});  // stays at t0
    EXPECT_EQ(filed(s), (Filed{{t0, old_stop}, {t0, reported}, {t0 + 30 * kMinute, young}}));
    EXPECT_EQ(listed_stopped(s), (std::set<std::string>{old_stop, reported, young, stopping}));

    s.now_ = t0 + 62 * kMinute;  // old_stop and reported stopped 62 minutes ago, young 32
    s.Ok("CreateCluster", Json::object());
    EXPECT_EQ(filed(s), (Filed{{t0 + 30 * kMinute, young}}));
    EXPECT_EQ(listed_stopped(s), (std::set<std::string>{young, stopping}));
    EXPECT_EQ(described(s, {old_stop, reported, young, stopping, running}),
              (std::map<std::string, std::string>{{old_stop, "MISSING"}, {reported, "MISSING"}, {young, "STOPPED"},
                                                  {stopping, "RUNNING"}, {running, "RUNNING"}}));
  }
  EcsServer s(db_);
  s.now_ = t0 + 62 * kMinute;
  EXPECT_EQ(filed(s), (Filed{{t0 + 30 * kMinute, young}})) << "the load files the STOPPED tasks it reads";
  s.now_ = t0 + 70 * kMinute;
  s.Ok("SubmitTaskStateChange", {{"task", stopping}, {"status", "STOPPED"}});  // its agent reports at last
  EXPECT_EQ(filed(s), (Filed{{t0 + 30 * kMinute, young}, {t0 + 70 * kMinute, stopping}}));
  s.now_ = t0 + 91 * kMinute;  // young stopped 61 minutes ago, stopping 21
  s.Ok("CreateCluster", Json::object());
  EXPECT_EQ(filed(s), (Filed{{t0 + 70 * kMinute, stopping}}));
  EXPECT_EQ(listed_stopped(s), (std::set<std::string>{stopping}));
  EXPECT_EQ(described(s, {young, stopping, running}),
            (std::map<std::string, std::string>{{young, "MISSING"}, {stopping, "STOPPED"}, {running, "RUNNING"}}));
  size_t tasks = 0;
  s.Inspect([&](const ClusterState& st) { tasks = st.TaskCount(); });
  EXPECT_EQ(tasks, 2u);
}

// ListTasks pages through each cluster's tasks oldest first (createdAt, then ARN), with filters, across stops
// that move tasks from the RUNNING list to the STOPPED one, and answers the same after a restart.
TEST_F(ControlPlaneTest, ListTasksPagesOldestFirstThroughStopsFiltersAndARestart) {
  std::vector<std::string> all, by_ci;
  {
    EcsServer s(db_);
    s.Ok("CreateCluster", Json::object());
    RegisterInstance(s, {81920}, 1 << 20, 1 << 20);
    RegisterShared(s, "mps", 256);
    for (int call = 0; call < 4; ++call) {
      Json body = {{"taskDefinition", "mps"}, {"count", 10}};
      if (call % 2 == 1) body["startedBy"] = "ci";
      const Json ran = s.Ok("RunTask", body);
      for (const Json& t : ran["tasks"]) {
        all.push_back(t["taskArn"]);
        if (call % 2 == 1) by_ci.push_back(t["taskArn"]);
      }
    }
  }
  EcsServer s(db_);
  // Oldest first: createdAt, then ARN, as DescribeTasks reports them.
  auto oldest_first = [&](std::vector<std::string> arns) {
    std::map<std::string, double> created;
    for (size_t i = 0; i < arns.size(); i += 100) {
      Json batch = Json::array();
      for (size_t j = i; j < std::min(arns.size(), i + 100); ++j) batch.push_back(arns[j]);
      const Json described = s.Ok("DescribeTasks", {{"tasks", batch}});
      for (const Json& t : described["tasks"]) created[t["taskArn"]] = t["createdAt"];
    }
    std::sort(arns.begin(), arns.end(), [&](const std::string& a, const std::string& b) {
      return std::make_pair(created[a], a) < std::make_pair(created[b], b);
    });
    return arns;
  };
  auto pages = [&](Json body) {
    std::vector<std::string> out;
    body["maxResults"] = 7;
    for (int page = 0; page < 20; ++page) {
      Json r = s.Ok("ListTasks", body);
      EXPECT_LE(r["taskArns"].size(), 7u);
      for (const Json& a : r["taskArns"]) out.push_back(a);
      if (!r.contains("nextToken")) break;
      body["nextToken"] = r["nextToken"];
    }
    return out;
  };
  EXPECT_EQ(pages(Json::object()), oldest_first(all));
  EXPECT_EQ(pages({{"startedBy", "ci"}}), oldest_first(by_ci));

  std::vector<std::string> stopped, running;
  for (size_t i = 0; i < all.size(); ++i) (i % 3 == 0 ? stopped : running).push_back(all[i]);
  for (const auto& arn : stopped) s.Ok("StopTask", {{"task", arn}});
  EXPECT_EQ(pages(Json::object()), oldest_first(running));
  EXPECT_EQ(pages({{"desiredStatus", "STOPPED"}}), oldest_first(stopped));
  std::vector<std::string> ci_stopped;
  for (const auto& arn : by_ci)
    if (std::find(stopped.begin(), stopped.end(), arn) != stopped.end()) ci_stopped.push_back(arn);
  EXPECT_EQ(pages({{"desiredStatus", "STOPPED"}, {"startedBy", "ci"}}), oldest_first(ci_stopped));
  EXPECT_EQ(pages({{"family", "other"}}), std::vector<std::string>{});
}

using testing_support::GatedStore;

// Regression (found by bench/crash_safety.mjs): a write that changes nothing itself (a RunTask repeating a
// clientToken, a StopTask or STOPPED report repeated by a retry) was answered at once from memory, while the
// write that made that memory state was still in commit; a crash in between lost a task the retry had
// acknowledged, and the token then made a second one. Such answers now wait for the earlier commits.
TEST(ControlPlaneDurability, RepeatedWritesAreAnsweredOnlyOnceTheWriteTheyRepeatIsDurable) {
  GatedStore store;
  std::optional<Json> last_tasks;
  {
    GroupCommitter committer(store);
    ControlPlaneOptions o;
    o.seed = 3;
    o.placement.place_on_disconnected = true;  // the test plays the agent
    ControlPlane cp(o, store, committer);
    ASSERT_TRUE(cp.Load().ok());
    auto call = [&](const std::string& op, const Json& body) {
      std::promise<OperationResult> p;
      Execute(cp, op, body, [&](OperationResult r) { p.set_value(std::move(r)); });
      OperationResult r = p.get_future().get();
      EXPECT_TRUE(r.status.ok()) << op << ": " << r.status.message();
      return r.body;
    };
    // Execute answers into `slot`; the flag says whether it has answered yet.
    struct Answer {
      std::atomic<bool> answered{false};
      std::promise<OperationResult> result;
    };
    auto start = [&](const std::string& op, const Json& body, Answer& a) {
      Execute(cp, op, body, [&a](OperationResult r) {
        a.result.set_value(std::move(r));
        a.answered = true;
      });
    };
    call("CreateCluster", Json::object());
    call("RegisterContainerInstance",
         {{"totalResources", Resources(8192, 32768)},
          {"platformDevices", Json::array({{{"id", "GPU-gated"}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 22587}}}}})}});
    call("RegisterTaskDefinition", {{"family", "mps"}, {"containerDefinitions", Json::array({MpsContainer("c", 1000)})}});
    const Json token_request = {{"taskDefinition", "mps"}, {"clientToken", "retry-me"}};

    store.Close();
    Answer first, retry;
    start("RunTask", token_request, first);
    start("RunTask", token_request, retry);
    EXPECT_FALSE(first.answered);
    EXPECT_FALSE(retry.answered) << "the retry acknowledged a task whose placement is not durable yet";
    store.Open();
    OperationResult a = first.result.get_future().get(), b = retry.result.get_future().get();
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    ASSERT_EQ(a.body["tasks"].size(), 1u);
    EXPECT_EQ(a.body["tasks"], b.body["tasks"]);
    const Json task = a.body["tasks"][0]["taskArn"];

    store.Close();
    Answer stop, stop_retry;
    start("StopTask", {{"task", task}}, stop);
    start("StopTask", {{"task", task}}, stop_retry);
    EXPECT_FALSE(stop_retry.answered) << "the retried StopTask acknowledged a stop that is not durable yet";
    store.Open();
    EXPECT_EQ(stop_retry.result.get_future().get().body["task"]["lastStatus"], "STOPPED");
    stop.result.get_future().get();
    last_tasks = call("DescribeTasks", {{"tasks", Json::array({task})}})["tasks"];
  }
  // What was acknowledged is what a restart finds.
  GroupCommitter committer(store);
  ControlPlane cp(ControlPlaneOptions{}, store, committer);
  ASSERT_TRUE(cp.Load().ok());
  std::promise<OperationResult> p;
  Execute(cp, "DescribeTasks", {{"tasks", Json::array({(*last_tasks)[0]["taskArn"]})}},
             [&](OperationResult r) { p.set_value(std::move(r)); });
  EXPECT_EQ(p.get_future().get().body["tasks"][0]["lastStatus"], "STOPPED");
}

TEST_F(ControlPlaneTest, ComputeAwarePlacementIsOptIn) {
  EcsServer s(db_);
  s.Ok("CreateCluster", {{"clusterName", "c"}});
  Json devices = Json::array({{{"id", "GPU-compute"}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 22587}}}}});
  s.Ok("RegisterContainerInstance", {{"cluster", "c"}, {"totalResources", Resources(8192, 32768)}, {"platformDevices", devices}});
  RegisterShared(s, "m75", 1000, 75);
  // Default: compute ignored, two 75 % tasks share the GPU.
  EXPECT_EQ(s.Ok("RunTask", {{"cluster", "c"}, {"taskDefinition", "m75"}, {"count", 2}})["tasks"].size(), 2u);
  s.Ok("UpdateClusterSettings", {{"cluster", "c"}, {"settings", Json::array({{{"name", "gpupack.computeAwarePlacement"}, {"value", "enabled"}}})}});
  Json r = s.Ok("RunTask", {{"cluster", "c"}, {"taskDefinition", "m75"}});
  EXPECT_TRUE(r["tasks"].empty());
  EXPECT_EQ(r["failures"][0]["reason"], "RESOURCE:GPU_COMPUTE");
}

TEST_F(ControlPlaneTest, ConstraintsAndExplain) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string a100 = RegisterInstance(s, {40000}, 8192, 32768, Json::array({{{"name", "gpu-model"}, {"value", "A100"}}}));
  std::string a10 = RegisterInstance(s, {22587}, 8192, 32768, Json::array({{{"name", "gpu-model"}, {"value", "A10G"}}}));
  RegisterShared(s, "mps", 4096);
  Json r = s.Ok("RunTask", {{"taskDefinition", "mps"},
                            {"placementConstraints", Json::array({{{"type", "memberOf"}, {"expression", "attribute:gpu-model == A10G"}}})}});
  ASSERT_EQ(r["tasks"].size(), 1u);
  EXPECT_EQ(r["tasks"][0]["containerInstanceArn"], a10);
  // distinctInstance with the same group: the second task goes to the other instance, the third fails.
  Json d = s.Ok("RunTask", {{"taskDefinition", "mps"}, {"count", 3}, {"group", "g"},
                            {"placementConstraints", Json::array({{{"type", "distinctInstance"}}})}});
  EXPECT_EQ(d["tasks"].size(), 2u);
  ASSERT_EQ(d["failures"].size(), 3u);  // one per instance, then the request's own: 1 of 3 not placed
  EXPECT_EQ(d["failures"][0]["reason"], "ATTRIBUTE");
  EXPECT_EQ(d["failures"][2]["reason"], "ATTRIBUTE");
  EXPECT_EQ(d["failures"][2]["detail"].get<std::string>().rfind("1 of 3 tasks were not placed (2 placed)", 0), 0u);
  // Explain: binpack gpuMemory prefers the fuller GPU, and says why the other was not chosen.
  Json e = s.Ok("ExplainPlacement", {{"taskDefinition", "mps"},
                                     {"placementStrategy", Json::array({{{"type", "binpack"}, {"field", "gpuMemory"}}})}});
  ASSERT_EQ(e["instances"].size(), 2u);
  // A10G: 22,587 - 2 x 4,096 = 14,395 free -> 10,299 left after; A100: 40,000 - 4,096 -> 31,808 left after.
  EXPECT_EQ(e["chosenContainerInstanceArn"], a10);
  EXPECT_EQ(e["instances"][1]["rawScores"][0], 10299.0);
  EXPECT_EQ(e["instances"][0]["rawScores"][0], 31808.0);
  EXPECT_EQ(e["instances"][1]["scores"][0],
            Json({{"strategy", "binpack:gpuMemory"}, {"value", 10299},
                  {"text", "10,299 MiB left on the best-fitting GPU after placement (least wins)"}}));
  EXPECT_EQ(e["instances"][1]["gpus"][0]["detail"], "10,299 MiB would remain (chosen)");
}

// binpack(fragmentation) learns its target workload from the cluster's RunTask demands (failed ones too): after
// six 6,000 MiB requests, a 3,000 MiB task leaves the 6,000 MiB free on a's first GPU whole and opens a's second
// GPU, where binpack(gpuMemory) fills the first. Alone or after another strategy; failures keep their reasons.
TEST_F(ControlPlaneTest, BinpackFragmentationLearnsFromRunTask) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterShared(s, "six", 6000);
  RegisterShared(s, "four", 4000);
  RegisterShared(s, "three", 3000);
  const Json frag = Json::array({{{"type", "binpack"}, {"field", "fragmentation"}}});
  Json none = s.Ok("RunTask", {{"taskDefinition", "six"}, {"count", 6}, {"placementStrategy", frag}});
  EXPECT_TRUE(none["tasks"].empty());
  EXPECT_EQ(none["failures"][0]["reason"], "MISSING");
  const std::string a = RegisterInstance(s, {10000, 10000});
  const std::string b = RegisterInstance(s, {10000, 10000});
  Json four = s.Ok("RunTask", {{"taskDefinition", "four"},
                               {"placementStrategy", Json::array({{{"type", "binpack"}, {"field", "gpuMemory"}}})}});
  ASSERT_EQ(four["tasks"].size(), 1u);
  EXPECT_EQ(four["tasks"][0]["containerInstanceArn"], a);
  const Json a_gpus = Gpus(s, a);
  EXPECT_EQ(four["tasks"][0]["containers"][0]["gpuIds"], Json::array({a_gpus[0]["gpuId"]}));
  Json e = s.Ok("ExplainPlacement", {{"taskDefinition", "three"},
                                     {"placementStrategy", Json::array({{{"type", "binpack"}, {"field", "gpuMemory"}}})}});
  EXPECT_EQ(e["chosenContainerInstanceArn"], a);
  Json three = s.Ok("RunTask", {{"taskDefinition", "three"}, {"placementStrategy", frag}});
  ASSERT_EQ(three["tasks"].size(), 1u);
  EXPECT_EQ(three["tasks"][0]["containerInstanceArn"], a);
  EXPECT_EQ(three["tasks"][0]["containers"][0]["gpuIds"], Json::array({a_gpus[1]["gpuId"]}));
  // After another strategy.
  Json spread = s.Ok("RunTask", {{"taskDefinition", "three"},
                                 {"placementStrategy", Json::array({{{"type", "spread"}, {"field", "instanceId"}},
                                                                    {{"type", "binpack"}, {"field", "fragmentation"}}})}});
  ASSERT_EQ(spread["tasks"].size(), 1u);
  EXPECT_EQ(spread["tasks"][0]["containerInstanceArn"], b);
  // Nothing fits: every instance's reason and detail, as with any strategy.
  RegisterShared(s, "huge", 20000);
  Json huge = s.Ok("RunTask", {{"taskDefinition", "huge"}, {"placementStrategy", frag}});
  EXPECT_TRUE(huge["tasks"].empty());
  // Two instances, then the cluster's own entry: the task can never fit any GPU registered.
  ASSERT_EQ(huge["failures"].size(), 3u) << huge["failures"].dump();
  EXPECT_EQ(huge["failures"][0]["reason"], "RESOURCE:GPU_MEMORY");
  EXPECT_NE(huge["failures"][0]["detail"].get<std::string>().find("it can never fit here"), std::string::npos);
  EXPECT_NE(huge["failures"][2]["detail"].get<std::string>().find("can never be placed in this cluster"),
            std::string::npos);
  // The planner's fgd is not RunTask's.
  OperationResult bad = s.Call("RunTask", {{"taskDefinition", "three"},
                                           {"placementStrategy", Json::array({{{"type", "fgd"}}})}});
  EXPECT_FALSE(bad.status.ok());
}

TEST_F(ControlPlaneTest, DrainingInstancesTakeNoNewTasks) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  std::string inst = RegisterInstance(s, {22587});
  RegisterShared(s, "mps", 4096);
  s.Ok("UpdateContainerInstancesState", {{"containerInstances", Json::array({inst})}, {"status", "DRAINING"}});
  Json r = s.Ok("RunTask", {{"taskDefinition", "mps"}});
  EXPECT_TRUE(r["tasks"].empty());
  EXPECT_EQ(r["failures"][0]["reason"], "STATUS");
}

// gpupack.instanceAcceptance manual (opt-in): a new instance is REGISTERING and takes no task (RunTask answers
// STATUS, as for DRAINING) until an administrator sets it ACTIVE; its agent works meanwhile; re-registering keeps
// its status, REGISTERING or ACTIVE; a restart keeps both the setting and the status. Automatic, the default,
// registers ACTIVE as ever.
TEST_F(ControlPlaneTest, ManualAcceptanceHoldsNewInstancesOutOfPlacementUntilAnAdministratorAcceptsThem) {
  auto status = [](EcsServer& s, const std::string& arn) {
    return s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({arn})}})["containerInstances"][0]
                                                                                            ["status"];
  };
  auto acceptance = [](const Json& cluster) {
    for (const Json& setting : cluster["settings"])
      if (setting["name"] == "gpupack.instanceAcceptance") return setting["value"].get<std::string>();
    return std::string("(absent)");
  };
  auto reregister = [](EcsServer& s, const std::string& arn) {
    Json devices = Json::array();
    for (const Json& g : Gpus(s, arn))
      devices.push_back({{"id", g["gpuId"]}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", g["totalMemoryInMiB"]}}}});
    return s.Ok("RegisterContainerInstance", {{"containerInstanceArn", arn},
                                              {"totalResources", Resources(8192, 32768)},
                                              {"platformDevices", devices}})["containerInstance"]["status"];
  };
  std::string inst;
  {
    EcsServer s(db_);
    EXPECT_EQ(acceptance(s.Ok("CreateCluster", {{"clusterName", "auto"}})["cluster"]), "automatic");
    const Json created = s.Ok("CreateCluster", {{"settings", Json::array({{{"name", "gpupack.instanceAcceptance"},
                                                                             {"value", "manual"}}})}});
    EXPECT_EQ(acceptance(created["cluster"]), "manual");
    RegisterShared(s, "mps", 4096);
    inst = RegisterInstance(s, {22587});
    EXPECT_EQ(status(s, inst), "REGISTERING");
    s.Hello(inst);  // its agent's channel and heartbeats work meanwhile
    s.Heartbeat(inst, {});
    EXPECT_EQ(s.Ok("ListContainerInstances", {{"status", "REGISTERING"}})["containerInstanceArns"], Json::array({inst}));
    EXPECT_EQ(s.Ok("ListContainerInstances", {{"status", "ACTIVE"}})["containerInstanceArns"], Json::array());
    Json r = s.Ok("RunTask", {{"taskDefinition", "mps"}});
    EXPECT_TRUE(r["tasks"].empty());
    ASSERT_GE(r["failures"].size(), 1u) << r.dump();
    EXPECT_EQ(r["failures"][0]["arn"], inst);
    EXPECT_EQ(r["failures"][0]["reason"], "STATUS");
    EXPECT_NE(r["failures"][0]["detail"].get<std::string>().find("container instance is REGISTERING"), std::string::npos)
        << r.dump();
    EXPECT_EQ(reregister(s, inst), "REGISTERING");  // re-registering does not accept it
    OperationResult set = s.Call("UpdateContainerInstancesState",
                                 {{"containerInstances", Json::array({inst})}, {"status", "REGISTERING"}});
    EXPECT_EQ(set.status.message(), "status must be ACTIVE or DRAINING");
  }
  EcsServer s(db_, 8);  // a restart: the setting and the status were stored
  EXPECT_EQ(acceptance(s.Ok("DescribeClusters", {{"clusters", Json::array({"default"})}})["clusters"][0]), "manual");
  EXPECT_EQ(status(s, inst), "REGISTERING");
  s.Ok("UpdateContainerInstancesState", {{"containerInstances", Json::array({inst})}, {"status", "ACTIVE"}});
  EXPECT_EQ(status(s, inst), "ACTIVE");
  Json r = s.Ok("RunTask", {{"taskDefinition", "mps"}});
  ASSERT_EQ(r["tasks"].size(), 1u) << r.dump();
  EXPECT_EQ(r["tasks"][0]["containerInstanceArn"], inst);
  EXPECT_EQ(reregister(s, inst), "ACTIVE");  // the same host again keeps ACTIVE

  s.Ok("UpdateClusterSettings", {{"settings", Json::array({{{"name", "gpupack.instanceAcceptance"},
                                                             {"value", "automatic"}}})}});
  EXPECT_EQ(status(s, RegisterInstance(s, {22587})), "ACTIVE");
  OperationResult bad = s.Call("UpdateClusterSettings", {{"settings", Json::array({{{"name", "gpupack.instanceAcceptance"},
                                                                                    {"value", "yes"}}})}});
  EXPECT_EQ(bad.status.message(), "setting gpupack.instanceAcceptance must be 'automatic' or 'manual'");
}

// The status filters of the List calls keep ECS's meaning, including the values ECS accepts that no record here
// is ever in, and a status that is not one of ECS's is refused with the same message as ever.
TEST_F(ControlPlaneTest, StatusFiltersAndStatusErrorsOfRequests) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterShared(s, "live", 1024);  // live:1, deregistered below, and live:2
  RegisterShared(s, "live", 1024);
  RegisterShared(s, "gone", 1024);
  s.Ok("DeregisterTaskDefinition", {{"taskDefinition", "live:1"}});
  s.Ok("DeregisterTaskDefinition", {{"taskDefinition", "gone:1"}});
  auto arns = [](const Json& body, const char* key) {
    std::vector<std::string> out;
    for (const auto& v : body[key]) {
      const std::string arn = v;
      out.push_back(arn.substr(arn.rfind('/') + 1));
    }
    return out;
  };
  using Names = std::vector<std::string>;
  EXPECT_EQ(arns(s.Ok("ListTaskDefinitions", Json::object()), "taskDefinitionArns"), (Names{"live:2"}));
  EXPECT_EQ(arns(s.Ok("ListTaskDefinitions", {{"status", "INACTIVE"}}), "taskDefinitionArns"),
            (Names{"gone:1", "live:1"}));
  EXPECT_EQ(arns(s.Ok("ListTaskDefinitions", {{"status", "DELETE_IN_PROGRESS"}}), "taskDefinitionArns"), Names{});
  EXPECT_EQ(s.Ok("ListTaskDefinitionFamilies", Json::object())["families"], Json::array({"live"}));
  EXPECT_EQ(s.Ok("ListTaskDefinitionFamilies", {{"status", "INACTIVE"}})["families"], Json::array({"gone"}));
  EXPECT_EQ(s.Ok("ListTaskDefinitionFamilies", {{"status", "ALL"}})["families"], Json::array({"gone", "live"}));

  const std::string active = RegisterInstance(s, {22587});
  const std::string draining = RegisterInstance(s, {22587});
  const std::string gone = RegisterInstance(s, {22587});
  s.Ok("UpdateContainerInstancesState", {{"containerInstances", Json::array({draining})}, {"status", "DRAINING"}});
  s.Ok("DeregisterContainerInstance", {{"containerInstance", gone}});
  auto instances = [&](const Json& body) { return s.Ok("ListContainerInstances", body)["containerInstanceArns"]; };
  EXPECT_EQ(instances(Json::object()), Json::array({active, draining}));
  EXPECT_EQ(instances({{"status", "ACTIVE"}}), Json::array({active}));
  EXPECT_EQ(instances({{"status", "DRAINING"}}), Json::array({draining}));
  for (const char* none : {"REGISTERING", "DEREGISTERING", "REGISTRATION_FAILED"})
    EXPECT_EQ(instances({{"status", none}}), Json::array()) << none;

  s.Ok("RunTask", {{"taskDefinition", "live"}});
  const Json running = s.Ok("ListTasks", Json::object())["taskArns"];
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(s.Ok("ListTasks", {{"desiredStatus", "PENDING"}})["taskArns"], running);
  EXPECT_EQ(s.Ok("ListTasks", {{"desiredStatus", "STOPPED"}})["taskArns"], Json::array());
  const std::string task = running[0];

  struct Refused {
    const char* op;
    Json body;
    const char* message;
  };
  const Refused refused[] = {
      {"ListTaskDefinitions", {{"status", "ALL"}}, "status must be ACTIVE or INACTIVE"},
      {"ListTaskDefinitionFamilies", {{"status", "active"}}, "status must be ACTIVE, INACTIVE or ALL"},
      {"ListContainerInstances", {{"status", "INACTIVE"}},
       "status must be ACTIVE, DRAINING, REGISTERING, DEREGISTERING or REGISTRATION_FAILED"},
      {"UpdateContainerInstancesState", {{"containerInstances", Json::array({active})}, {"status", "INACTIVE"}},
       "status must be ACTIVE or DRAINING"},
      {"ListTasks", {{"desiredStatus", "DEPROVISIONING"}}, "desiredStatus must be RUNNING, PENDING or STOPPED"},
      {"SubmitTaskStateChange", {{"task", task}, {"status", "STOPPING"}}, "status must be PENDING, RUNNING or STOPPED"},
      {"SubmitTaskStateChange",
       {{"task", task},
        {"status", "RUNNING"},
        {"containers", Json::array({{{"containerName", "c"}, {"status", "x"}}})}},
       "containers[].status must be PENDING, RUNNING or STOPPED"},
      {"SubmitContainerStateChange", {{"task", task}, {"containerName", "c"}, {"status", "DELETED"}},
       "status must be PENDING, RUNNING or STOPPED"},
  };
  for (const auto& r : refused) {
    const OperationResult out = s.Call(r.op, r.body);
    EXPECT_EQ(out.status.code(), ErrorCode::kInvalidParameter) << r.op << " " << r.body.dump();
    EXPECT_EQ(out.status.message(), r.message) << r.op << " " << r.body.dump();
  }
  // Nothing refused changed the task.
  const Json t = s.Ok("DescribeTasks", {{"tasks", Json::array({task})}})["tasks"][0];
  EXPECT_EQ(t["lastStatus"], "PENDING");
  EXPECT_EQ(t["containers"][0]["lastStatus"], "PENDING");
}


// ---- limits on input and the size of answers (docs/security.md, "Limits on input")

// OverridesOfLength is a taskOverride whose compact JSON is exactly `units` characters as ECS counts them (UTF-16
// code units), padded with `pad` (one character: ASCII, or e.g. the euro sign, three bytes and one unit).
Json OverridesOfLength(const std::string& container, size_t units, const std::string& pad = "v") {
  Json o = {{"containerOverrides",
             Json::array({{{"name", container}, {"environment", Json::array({{{"name", "E"}, {"value", ""}}})}}})}};
  const size_t empty = o.dump().size();  // ASCII so far
  std::string value;
  for (size_t i = empty; i < units; ++i) value += pad;
  o["containerOverrides"][0]["environment"][0]["value"] = value;
  return o;
}

Json Tags(size_t count, size_t key_length, size_t value_length) {
  Json tags = Json::array();
  for (size_t i = 0; i < count; ++i) {
    std::string key = std::to_string(i) + "-";
    key += std::string(key_length - key.size(), 'k');
    tags.push_back({{"key", key}, {"value", std::string(value_length, 'v')}});
  }
  return tags;
}

TEST_F(ControlPlaneTest, InputLimitsAreEcsLimits) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterInstance(s, {22587});
  RegisterShared(s, "mps", 256);
  auto run = [&](Json extra) {
    Json body = {{"taskDefinition", "mps"}};
    for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
    return s.Call("RunTask", body);
  };
  auto refused = [](const OperationResult& r, const std::string& message) {
    EXPECT_EQ(r.status.code(), ErrorCode::kInvalidParameter) << r.status.message();
    EXPECT_NE(r.status.message().find(message), std::string::npos) << r.status.message();
  };
  // Overrides: 8,192 characters of JSON, formatting included, counted as ECS counts them.
  ASSERT_EQ(OverridesOfLength("c", 8192).dump().size(), 8192u);
  EXPECT_TRUE(run({{"overrides", OverridesOfLength("c", 8192)}}).status.ok());
  refused(run({{"overrides", OverridesOfLength("c", 8193)}}), "Container Overrides length must be at most 8192");
  EXPECT_TRUE(run({{"overrides", OverridesOfLength("c", 8192, "\u20ac")}}).status.ok());  // 3 bytes, 1 character
  refused(s.Call("ExplainPlacement", {{"taskDefinition", "mps"}, {"overrides", OverridesOfLength("c", 8193)}}),
          "Container Overrides length must be at most 8192");
  // startedBy: 128 characters, no control characters.
  EXPECT_TRUE(run({{"startedBy", std::string(128, 's')}}).status.ok());
  refused(run({{"startedBy", std::string(129, 's')}}), "startedBy can be at most 128 characters");
  refused(run({{"startedBy", std::string("a\0b", 3)}}), "startedBy must not contain control characters");
  // group: 255 characters, no control characters.
  EXPECT_TRUE(run({{"group", std::string(255, 'g')}}).status.ok());
  refused(run({{"group", std::string(256, 'g')}}), "group can be at most 255 characters");
  refused(run({{"group", "a\nb"}}), "group must not contain control characters");
  refused(s.Call("ExplainPlacement", {{"taskDefinition", "mps"}, {"group", std::string(100000, 'g')}}),
          "group can be at most 255 characters");
  // Tags: 50 per resource, keys of 128 and values of 256 characters.
  EXPECT_TRUE(run({{"tags", Tags(50, 128, 256)}}).status.ok());
  refused(run({{"tags", Tags(51, 8, 8)}}), "at most 50 entries");
  refused(run({{"tags", Tags(1000, 8, 8)}}), "at most 50 entries");
  refused(run({{"tags", Tags(1, 129, 8)}}), "Tag keys must be 1-128 characters");
  refused(run({{"tags", Tags(1, 8, 257)}}), "Tag values must be at most 256 characters");
  refused(run({{"tags", Json::array({{{"key", "k"}, {"value", std::string("a\0b", 3)}}})}}), "Tag values");
  refused(s.Call("CreateCluster", {{"clusterName", "tagged"}, {"tags", Tags(51, 8, 8)}}), "at most 50 entries");
  refused(s.Call("RegisterTaskDefinition", {{"family", "tagged"},
                                            {"containerDefinitions", Json::array({MpsContainer("c", 100)})},
                                            {"tags", Tags(51, 8, 8)}}),
          "at most 50 entries");
  // A stop reason: 255 characters.
  const std::string task = run(Json::object()).body["tasks"][0]["taskArn"];
  refused(s.Call("StopTask", {{"task", task}, {"reason", std::string(256, 'r')}}), "reason can be at most 255");
  s.Ok("StopTask", {{"task", task}, {"reason", std::string(255, 'r')}});
  EXPECT_EQ(s.Ok("DescribeTasks", {{"tasks", Json::array({task})}})["tasks"][0]["stoppedReason"],
            std::string(255, 'r'));
  // What an agent reports is cut, not refused: the report must not be lost for a long error text.
  const std::string reported = run(Json::object()).body["tasks"][0]["taskArn"];
  s.Ok("SubmitTaskStateChange", {{"task", reported}, {"status", "RUNNING"}});
  s.Ok("SubmitTaskStateChange", {{"task", reported},
                                 {"status", "STOPPED"},
                                 {"reason", std::string(100000, 'x')},
                                 {"stopCode", std::string(100000, 'y')},
                                 {"containers", Json::array({{{"containerName", "c"}, {"status", "STOPPED"},
                                                              {"reason", std::string(100000, 'z')}}})}});
  const Json t = s.Ok("DescribeTasks", {{"tasks", Json::array({reported})}})["tasks"][0];
  EXPECT_EQ(t["stoppedReason"], std::string(255, 'x'));
  EXPECT_EQ(t["stopCode"], std::string(64, 'y'));
  EXPECT_EQ(t["containers"][0]["reason"], std::string(255, 'z'));
}

// The largest DescribeTasks answer the input limits allow: 100 tasks, each of 10 containers with the longest
// names and images, the longest overrides (8,192 characters of three-byte characters), 50 of the longest tags,
// the longest startedBy and group, and reasons of control characters (each written as a six-character escape)
// cut to 255 bytes. Before the limits one such answer could be 90 MB; docs/reliability.md quotes this figure.
TEST_F(ControlPlaneTest, TheLargestDescribeTasksAnswerIsBounded) {
  constexpr size_t kLargestAnswer = 8 << 20;
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterInstance(s, {}, 8192, 1 << 20);
  Json containers = Json::array();
  for (int i = 0; i < 10; ++i)
    containers.push_back(
        {{"name", std::to_string(i) + std::string(254, 'n')}, {"image", std::string(255, 'i')}, {"memory", 6}});
  const std::string family(255, 'f');
  s.Ok("RegisterTaskDefinition", {{"family", family}, {"containerDefinitions", containers}});
  const Json overrides = OverridesOfLength(containers[0]["name"].get<std::string>(), 8192, "\u20ac");
  const std::string control(100000, '\x01');
  std::vector<std::string> tasks;
  for (int call = 0; call < 10; ++call) {
    Json ran = s.Ok("RunTask", {{"taskDefinition", family},
                                {"count", 10},
                                {"overrides", overrides},
                                {"tags", Tags(50, 128, 256)},
                                {"startedBy", std::string(128, 's')},
                                {"group", std::string(255, 'g')}});
    ASSERT_EQ(ran["tasks"].size(), 10u);
    for (const Json& t : ran["tasks"]) tasks.push_back(t["taskArn"]);
  }
  for (const std::string& task : tasks) {
    Json reports = Json::array();
    for (const Json& c : containers)
      reports.push_back({{"containerName", c["name"]}, {"status", "STOPPED"}, {"exitCode", -2147483647},
                         {"reason", control}});
    s.Ok("SubmitTaskStateChange", {{"task", task}, {"status", "RUNNING"}});
    s.Ok("SubmitTaskStateChange", {{"task", task}, {"status", "STOPPED"}, {"reason", control},
                                   {"stopCode", control}, {"containers", reports}});
  }
  const Json answer = s.Ok("DescribeTasks", {{"tasks", tasks}, {"include", Json::array({"TAGS"})}});
  ASSERT_EQ(answer["tasks"].size(), 100u);
  ASSERT_EQ(answer["tasks"][0]["tags"].size(), 50u);
  const size_t bytes = answer.dump().size();
  std::printf("the largest DescribeTasks answer: %zu bytes (%zu per task)\n", bytes, bytes / 100);
  EXPECT_LE(bytes, kLargestAnswer);
}

}  // namespace
}  // namespace gpupack::api
