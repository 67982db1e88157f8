// Capacity providers and the queue of tasks waiting for capacity, end to end below HTTP on a real SQLite file:
// the provider operations, placement only on a provider's instances, PROVISIONING in order as capacity frees,
// the per-cluster limit, the timeout, StopTask of a waiting task, priorities, and a restart with tasks waiting.
// The tests play the agents (SubmitTaskStateChange).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/operations/operations.h"
#include "tests/unit/ecs_test_server.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::api {
namespace {

class CapacityProvidersTest : public ::testing::Test {
 protected:
  testing_support::TempDir tmp_{"gpupack-cp"};
  std::string db_ = tmp_.path() + "/state.db";
};

Json ProviderAttribute(const std::string& provider) {
  return Json::array({{{"name", kCapacityProviderAttribute}, {"value", provider}}});
}

Json Strategy(const std::string& provider, int weight = 1, int base = 0) {
  return Json::array({{{"capacityProvider", provider}, {"weight", weight}, {"base", base}}});
}

// SetUpProviders: cluster "default" with providers "team-a" and "team-b" associated; no default strategy.
void SetUpProviders(EcsServer& s) {
  s.Ok("CreateCluster", Json::object());
  s.Ok("CreateCapacityProvider", {{"name", "team-a"}});
  s.Ok("CreateCapacityProvider", {{"name", "team-b"}});
  s.Ok("PutClusterCapacityProviders", {{"cluster", "default"},
                                       {"capacityProviders", Json::array({"team-a", "team-b"})},
                                       {"defaultCapacityProviderStrategy", Json::array()}});
}

Json Described(EcsServer& s, const std::string& arn) {
  Json d = s.Ok("DescribeTasks", {{"tasks", Json::array({arn})}});
  EXPECT_EQ(d["tasks"].size(), 1u) << d.dump();
  return d["tasks"].empty() ? Json::object() : d["tasks"][0];
}

std::string RunThrough(EcsServer& s, const std::string& family, const std::string& provider, Json tags = Json::array()) {
  Json r = s.Ok("RunTask", {{"taskDefinition", family}, {"capacityProviderStrategy", Strategy(provider)},
                            {"tags", tags}});
  EXPECT_EQ(r["tasks"].size(), 1u) << r.dump();
  EXPECT_TRUE(r["failures"].empty()) << r.dump();
  return r["tasks"].empty() ? "" : r["tasks"][0]["taskArn"].get<std::string>();
}

void Stopped(EcsServer& s, const std::string& task) {
  s.Ok("SubmitTaskStateChange", {{"task", task}, {"status", "STOPPED"}, {"reason", "done"}});
}

TEST_F(CapacityProvidersTest, ProvidersAreCreatedDescribedAssociatedAndDeletedAsEcsDoes) {
  EcsServer s(db_);
  SetUpProviders(s);
  Json d = s.Ok("DescribeCapacityProviders", {{"capacityProviders", Json::array({"team-a", "nope"})}});
  ASSERT_EQ(d["capacityProviders"].size(), 1u);
  EXPECT_EQ(d["capacityProviders"][0]["name"], "team-a");
  EXPECT_EQ(d["capacityProviders"][0]["status"], "ACTIVE");
  EXPECT_EQ(d["capacityProviders"][0]["capacityProviderArn"],
            "arn:aws:ecs:us-east-1:000000000000:capacity-provider/team-a");
  ASSERT_EQ(d["failures"].size(), 1u);
  EXPECT_EQ(d["failures"][0]["reason"], "MISSING");
  EXPECT_EQ(s.Ok("DescribeCapacityProviders", Json::object())["capacityProviders"].size(), 2u);

  EXPECT_EQ(s.Call("CreateCapacityProvider", {{"name", "team-a"}}).status.code(), ErrorCode::kClient);
  EXPECT_EQ(s.Call("CreateCapacityProvider", {{"name", "ecs-mine"}}).status.code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(s.Call("CreateCapacityProvider", {{"name", "x"}, {"autoScalingGroupProvider", {{"a", 1}}}}).status.code(),
            ErrorCode::kUnsupportedFeature);

  // The cluster shows its providers and default strategy; a default naming a provider it lacks is refused.
  s.Ok("PutClusterCapacityProviders", {{"cluster", "default"},
                                       {"capacityProviders", Json::array({"team-a", "team-b"})},
                                       {"defaultCapacityProviderStrategy", Strategy("team-a", 2, 1)}});
  Json c = s.Ok("DescribeClusters", {{"clusters", Json::array({"default"})}})["clusters"][0];
  EXPECT_EQ(c["capacityProviders"], Json::array({"team-a", "team-b"}));
  EXPECT_EQ(c["defaultCapacityProviderStrategy"][0]["capacityProvider"], "team-a");
  EXPECT_EQ(c["defaultCapacityProviderStrategy"][0]["weight"], 2);
  EXPECT_EQ(c["defaultCapacityProviderStrategy"][0]["base"], 1);
  EXPECT_EQ(s.Call("PutClusterCapacityProviders", {{"cluster", "default"},
                                                   {"capacityProviders", Json::array({"team-b"})},
                                                   {"defaultCapacityProviderStrategy", Strategy("team-a")}})
                .status.code(),
            ErrorCode::kInvalidParameter);

  // Deleting a provider a cluster has is refused; once removed it turns INACTIVE and stays describable.
  EXPECT_EQ(s.Call("DeleteCapacityProvider", {{"capacityProvider", "team-b"}}).status.code(), ErrorCode::kClient);
  s.Ok("PutClusterCapacityProviders", {{"cluster", "default"},
                                       {"capacityProviders", Json::array({"team-a"})},
                                       {"defaultCapacityProviderStrategy", Json::array()}});
  Json deleted = s.Ok("DeleteCapacityProvider", {{"capacityProvider", "team-b"}});
  EXPECT_EQ(deleted["capacityProvider"]["status"], "INACTIVE");
  EXPECT_EQ(deleted["capacityProvider"]["updateStatus"], "DELETE_COMPLETE");
}

TEST_F(CapacityProvidersTest, TasksOfEachProviderArePlacedOnlyOnItsOwnInstances) {
  EcsServer s(db_);
  SetUpProviders(s);
  const std::string a = RegisterInstance(s, {20000}, 8192, 32768, ProviderAttribute("team-a"));
  const std::string b = RegisterInstance(s, {20000}, 8192, 32768, ProviderAttribute("team-b"));
  RegisterShared(s, "job", 1000);
  EXPECT_EQ(s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({a})}})["containerInstances"][0]
                ["capacityProviderName"],
            "team-a");
  for (int i = 0; i < 4; ++i) {
    Json ta = Described(s, RunThrough(s, "job", "team-a"));
    EXPECT_EQ(ta["containerInstanceArn"], a);
    EXPECT_EQ(ta["capacityProviderName"], "team-a");
    EXPECT_EQ(ta["lastStatus"], "PENDING");
    Json tb = Described(s, RunThrough(s, "job", "team-b"));
    EXPECT_EQ(tb["containerInstanceArn"], b);
    EXPECT_EQ(tb["capacityProviderName"], "team-b");
  }
  // A task without a provider keeps today's behaviour: no capacityProviderName, placed now.
  Json plain = s.Ok("RunTask", {{"taskDefinition", "job"}});
  ASSERT_EQ(plain["tasks"].size(), 1u);
  EXPECT_FALSE(plain["tasks"][0].contains("capacityProviderName"));
}

TEST_F(CapacityProvidersTest, AFullProviderQueuesTasksInProvisioningAndPlacesThemInOrderAsTasksStop) {
  EcsServer s(db_);
  SetUpProviders(s);
  RegisterInstance(s, {10000}, 8192, 32768, ProviderAttribute("team-a"));
  RegisterShared(s, "big", 6000);  // one at a time on the 10,000 MiB GPU
  const std::string first = RunThrough(s, "big", "team-a");
  EXPECT_EQ(Described(s, first)["lastStatus"], "PENDING");
  std::vector<std::string> waiting;
  for (int i = 0; i < 3; ++i) {
    waiting.push_back(RunThrough(s, "big", "team-a"));
    Json t = Described(s, waiting.back());
    EXPECT_EQ(t["lastStatus"], "PROVISIONING");
    EXPECT_EQ(t["desiredStatus"], "RUNNING");
    EXPECT_EQ(t["capacityProviderName"], "team-a");
    EXPECT_FALSE(t.contains("containerInstanceArn"));
  }
  // Listed among the cluster's tasks desired RUNNING, as ECS lists PROVISIONING tasks.
  EXPECT_EQ(s.Ok("ListTasks", Json::object())["taskArns"].size(), 4u);
  std::string running = first;
  for (size_t i = 0; i < waiting.size(); ++i) {
    Stopped(s, running);
    EXPECT_EQ(Described(s, waiting[i])["lastStatus"], "PENDING") << "task " << i << " is next in line";
    for (size_t j = i + 1; j < waiting.size(); ++j) EXPECT_EQ(Described(s, waiting[j])["lastStatus"], "PROVISIONING");
    running = waiting[i];
  }
  s.Inspect([](const ClusterState& st) { EXPECT_EQ(st.WaitingTotal(), 0u); });
}

TEST_F(CapacityProvidersTest, AnInstanceThatJoinsTheProviderTakesTheWaitingTasks) {
  EcsServer s(db_);
  SetUpProviders(s);
  RegisterShared(s, "job", 4000);
  const std::string t1 = RunThrough(s, "job", "team-b"), t2 = RunThrough(s, "job", "team-b");
  EXPECT_EQ(Described(s, t1)["lastStatus"], "PROVISIONING");
  RegisterInstance(s, {20000}, 8192, 32768, ProviderAttribute("team-a"));  // another provider's: no change
  EXPECT_EQ(Described(s, t1)["lastStatus"], "PROVISIONING");
  const std::string b = RegisterInstance(s, {10000}, 8192, 32768, ProviderAttribute("team-b"));
  EXPECT_EQ(Described(s, t1)["containerInstanceArn"], b);
  EXPECT_EQ(Described(s, t2)["containerInstanceArn"], b);
}

TEST_F(CapacityProvidersTest, TheWaitingLimitRefusesWithLimitExceededAndPlacesNothing) {
  testing_support::TempDir tmp{"gpupack-cp-limit"};
  EcsServer s(tmp.path() + "/state.db", 7, true, std::nullopt,
           [](PlacementPolicy& p) { p.max_provisioning_per_cluster = 2; });
  SetUpProviders(s);
  RegisterShared(s, "job", 4000);
  RunThrough(s, "job", "team-a");
  RunThrough(s, "job", "team-b");  // the limit is per cluster, whatever the provider
  OperationResult r = s.Call("RunTask", {{"taskDefinition", "job"}, {"capacityProviderStrategy", Strategy("team-a")}});
  EXPECT_EQ(r.status.code(), ErrorCode::kLimitExceeded);
  EXPECT_NE(r.status.message().find("PROVISIONING"), std::string::npos) << r.status.message();
  s.Inspect([](const ClusterState& st) { EXPECT_EQ(st.WaitingCount("default"), 2u); });
  // Without a provider the limit does not apply: today's answer, RESOURCE failures.
  Json plain = s.Ok("RunTask", {{"taskDefinition", "job"}});
  EXPECT_TRUE(plain["tasks"].empty());
  EXPECT_FALSE(plain["failures"].empty());
}

TEST_F(CapacityProvidersTest, AWaitingTaskStopsAfterTheTimeoutWithTaskFailedToStart) {
  EcsServer s(db_);
  SetUpProviders(s);
  RegisterShared(s, "job", 4000);
  const std::string t = RunThrough(s, "job", "team-a");
  s.now_ += 30 * 60'000 - 1;
  s.Ok("CreateCluster", Json::object());  // any write looks at the waiting tasks' time
  EXPECT_EQ(Described(s, t)["lastStatus"], "PROVISIONING");
  s.now_ += 1;
  s.Ok("CreateCluster", Json::object());
  Json stopped = Described(s, t);
  EXPECT_EQ(stopped["lastStatus"], "STOPPED");
  EXPECT_EQ(stopped["stopCode"], "TaskFailedToStart");
  EXPECT_NE(stopped["stoppedReason"].get<std::string>().find("Timeout waiting for capacity"), std::string::npos);
  s.Inspect([](const ClusterState& st) { EXPECT_EQ(st.WaitingTotal(), 0u); });
}

TEST_F(CapacityProvidersTest, StopTaskOfAWaitingTaskRemovesItFromTheLine) {
  EcsServer s(db_);
  SetUpProviders(s);
  RegisterShared(s, "job", 6000);
  const std::string t1 = RunThrough(s, "job", "team-a"), t2 = RunThrough(s, "job", "team-a");
  Json stopped = s.Ok("StopTask", {{"task", t1}, {"reason", "no longer needed"}})["task"];
  EXPECT_EQ(stopped["lastStatus"], "STOPPED");
  EXPECT_EQ(stopped["stopCode"], "UserInitiated");
  EXPECT_EQ(stopped["stoppedReason"], "no longer needed");
  const std::string inst = RegisterInstance(s, {10000}, 8192, 32768, ProviderAttribute("team-a"));
  EXPECT_EQ(Described(s, t1)["lastStatus"], "STOPPED");  // never placed
  EXPECT_EQ(Described(s, t2)["containerInstanceArn"], inst);
}

TEST_F(CapacityProvidersTest, AHigherPriorityTaskPassesTheLineFirstComeFirstServedWithinAPriority) {
  EcsServer s(db_);
  SetUpProviders(s);
  RegisterInstance(s, {10000}, 8192, 32768, ProviderAttribute("team-a"));
  RegisterShared(s, "big", 6000);
  const std::string running = RunThrough(s, "big", "team-a");
  const std::string low1 = RunThrough(s, "big", "team-a"), low2 = RunThrough(s, "big", "team-a");
  const std::string high = RunThrough(s, "big", "team-a", Json::array({{{"key", kPriorityTag}, {"value", "10"}}}));
  EXPECT_EQ(Described(s, high)["lastStatus"], "PROVISIONING");
  Stopped(s, running);
  EXPECT_EQ(Described(s, high)["lastStatus"], "PENDING");
  EXPECT_EQ(Described(s, low1)["lastStatus"], "PROVISIONING");
  Stopped(s, high);
  EXPECT_EQ(Described(s, low1)["lastStatus"], "PENDING");
  EXPECT_EQ(Described(s, low2)["lastStatus"], "PROVISIONING");
  EXPECT_EQ(s.Call("RunTask", {{"taskDefinition", "big"}, {"capacityProviderStrategy", Strategy("team-a")},
                               {"tags", Json::array({{{"key", kPriorityTag}, {"value", "high"}}})}})
                .status.code(),
            ErrorCode::kInvalidParameter);
}

TEST_F(CapacityProvidersTest, WaitingTasksSurviveARestartAndStartOnceInOrder) {
  std::vector<std::string> waiting;
  std::string running;
  {
    EcsServer s(db_);
    SetUpProviders(s);
    RegisterInstance(s, {10000}, 8192, 32768, ProviderAttribute("team-a"));
    RegisterShared(s, "big", 6000);
    running = RunThrough(s, "big", "team-a");
    for (int i = 0; i < 3; ++i) waiting.push_back(RunThrough(s, "big", "team-a"));
  }
  EcsServer s(db_);  // the same file, a new server
  for (const auto& t : waiting) EXPECT_EQ(Described(s, t)["lastStatus"], "PROVISIONING");
  s.Inspect([](const ClusterState& st) { EXPECT_EQ(st.WaitingCount("default"), 3u); });
  // New tasks join the end of the line, behind the ones loaded.
  const std::string later = RunThrough(s, "big", "team-a");
  waiting.push_back(later);
  for (size_t i = 0; i < waiting.size(); ++i) {
    Stopped(s, running);
    EXPECT_EQ(Described(s, waiting[i])["lastStatus"], "PENDING") << i;
    running = waiting[i];
  }
  // Each task was placed exactly once: one PENDING (the last) and the others STOPPED, none twice.
  Json all = s.Ok("ListTasks", Json::object());
  EXPECT_EQ(all["taskArns"].size(), 1u);
}

TEST_F(CapacityProvidersTest, StrategyRulesLaunchTypeExclusionAndTheClusterDefault) {
  EcsServer s(db_);
  SetUpProviders(s);
  RegisterShared(s, "job", 4000);
  OperationResult both = s.Call("RunTask", {{"taskDefinition", "job"}, {"launchType", "EC2"},
                                            {"capacityProviderStrategy", Strategy("team-a")}});
  EXPECT_EQ(both.status.code(), ErrorCode::kInvalidParameter);
  EXPECT_NE(both.status.message().find("Specifying both a launch type and capacity provider strategy"),
            std::string::npos);
  s.Ok("CreateCapacityProvider", {{"name", "loose"}});
  EXPECT_EQ(s.Call("RunTask", {{"taskDefinition", "job"}, {"capacityProviderStrategy", Strategy("loose")}})
                .status.code(),
            ErrorCode::kInvalidParameter);  // not associated with the cluster
  EXPECT_EQ(s.Call("RunTask", {{"taskDefinition", "job"}, {"capacityProviderStrategy", Strategy("team-a", 0)}})
                .status.code(),
            ErrorCode::kInvalidParameter);  // no weight and no base

  // The cluster's default applies when a RunTask gives neither; a launchType opts out of it.
  s.Ok("PutClusterCapacityProviders", {{"cluster", "default"},
                                       {"capacityProviders", Json::array({"team-a", "team-b"})},
                                       {"defaultCapacityProviderStrategy", Strategy("team-b")}});
  Json d = s.Ok("RunTask", {{"taskDefinition", "job"}});
  ASSERT_EQ(d["tasks"].size(), 1u);
  EXPECT_EQ(d["tasks"][0]["capacityProviderName"], "team-b");
  EXPECT_EQ(d["tasks"][0]["lastStatus"], "PROVISIONING");
  Json ec2 = s.Ok("RunTask", {{"taskDefinition", "job"}, {"launchType", "EC2"}});
  EXPECT_TRUE(ec2["tasks"].empty());
  EXPECT_FALSE(ec2["failures"].empty());
  // A provider with tasks waiting cannot leave the cluster.
  EXPECT_EQ(s.Call("PutClusterCapacityProviders", {{"cluster", "default"},
                                                   {"capacityProviders", Json::array({"team-a"})},
                                                   {"defaultCapacityProviderStrategy", Json::array()}})
                .status.code(),
            ErrorCode::kResourceInUse);
}

// ProvidersForTasks: base first, then weights interleaved (smooth weighted round robin).
TEST(ProvidersForTasks, BaseThenWeights) {
  const std::vector<CapacityProviderStrategyItem> strategy = {{"a", 1, 2}, {"b", 3, 0}};
  // 2 to a (base); then weights 1:3, each round of 4 gives a once and b three times. Running credits (a, b),
  // +(1, 3) per task, the largest goes (ties: the first listed) and gives back 4:
  // (1, 3) -> b: (1, -1); (2, 2) -> a: (-2, 2); (-1, 5) -> b: (-1, 1); (0, 4) -> b: (0, 0).
  EXPECT_EQ(ProvidersForTasks(strategy, 6), (std::vector<std::string>{"a", "a", "b", "a", "b", "b"}));
  EXPECT_EQ(ProvidersForTasks({{"only", 0, 1}}, 3), (std::vector<std::string>{"only", "only", "only"}));
  EXPECT_EQ(ProvidersForTasks({{"x", 1, 0}, {"y", 1, 0}}, 4), (std::vector<std::string>{"x", "y", "x", "y"}));
}

}  // namespace
}  // namespace gpupack::api
