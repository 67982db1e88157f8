// Services end to end below HTTP: the ECS service operations and the service scheduler on a real SQLite file.
// The tests play the agents (SubmitTaskStateChange), one report at a time, and check the service's bounds after
// every step.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "tests/unit/ecs_test_server.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::api {
namespace {

class ServicesTest : public ::testing::Test {
 protected:
  testing_support::TempDir tmp_{"gpupack-svc"};
  std::string db_ = tmp_.path() + "/state.db";
};

Json Describe(EcsServer& s, const std::string& service) {
  Json d = s.Ok("DescribeServices", {{"services", Json::array({service})}, {"include", Json::array({"TAGS"})}});
  EXPECT_EQ(d["services"].size(), 1u) << d.dump();
  return d["services"].empty() ? Json::object() : d["services"][0];
}

// Tasks: every task of the service not yet STOPPED, by ARN.
std::map<std::string, Json> Tasks(EcsServer& s, const std::string& service) {
  std::map<std::string, Json> out;
  for (const char* desired : {"RUNNING", "STOPPED"}) {  // tasks being stopped are listed as desired STOPPED
    Json list = s.Ok("ListTasks", {{"serviceName", service}, {"desiredStatus", desired}});
    if (list["taskArns"].empty()) continue;
    Json d = s.Ok("DescribeTasks", {{"tasks", list["taskArns"]}});
    for (const auto& t : d["tasks"])
      if (t["lastStatus"] != "STOPPED") out[t["taskArn"]] = t;
  }
  return out;
}

bool HasEvent(const Json& svc, const std::string& part) {
  for (const auto& e : svc["events"])
    if (e["message"].get<std::string>().find(part) != std::string::npos) return true;
  return false;
}

void Report(EcsServer& s, const std::string& task, const std::string& status, const std::string& reason = "") {
  Json body = {{"task", task}, {"status", status}};
  if (!reason.empty()) body["reason"] = reason;
  s.Ok("SubmitTaskStateChange", body);
}

// Counts: tasks of the service by what an agent sees (live = not STOPPED; running = RUNNING and not stopping).
struct Counts {
  int live = 0, running = 0, stopping = 0;
};
Counts CountOf(const std::map<std::string, Json>& tasks) {
  Counts c;
  for (const auto& [arn, t] : tasks) {
    ++c.live;
    if (t["desiredStatus"] == "STOPPED") ++c.stopping;
    else if (t["lastStatus"] == "RUNNING") ++c.running;
  }
  return c;
}

// Settle plays the agents one report at a time (a task asked to stop reports STOPPED first, else a PENDING
// task reports RUNNING), calling `check` after each, until the service has nothing left to do. Returns the
// number of reports.
int Settle(EcsServer& s, const std::string& service, const std::function<void(const Counts&)>& check, int limit = 200) {
  for (int step = 0; step < limit; ++step) {
    auto tasks = Tasks(s, service);
    check(CountOf(tasks));
    std::string stop, run;
    for (const auto& [arn, t] : tasks) {
      if (t["desiredStatus"] == "STOPPED" && stop.empty()) stop = arn;
      if (t["desiredStatus"] == "RUNNING" && t["lastStatus"] == "PENDING" && run.empty()) run = arn;
    }
    if (!stop.empty()) Report(s, stop, "STOPPED", "stopped by the agent");
    else if (!run.empty()) Report(s, run, "RUNNING");
    else return step;
  }
  ADD_FAILURE() << "service " << service << " did not settle";
  return limit;
}

TEST_F(ServicesTest, ACreatedServiceReachesSteadyStateAndReplacesAStoppedTask) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterInstance(s, {20000});
  RegisterShared(s, "web", 2000);
  Json created = s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 3},
                                        {"tags", Json::array({{{"key", "team"}, {"value", "ml"}}})}});
  const Json& svc = created["service"];
  EXPECT_EQ(svc["serviceName"], "web");
  EXPECT_EQ(svc["serviceArn"], "arn:aws:ecs:us-east-1:000000000000:service/default/web");
  EXPECT_EQ(svc["status"], "ACTIVE");
  EXPECT_EQ(svc["schedulingStrategy"], "REPLICA");
  EXPECT_EQ(svc["deploymentConfiguration"]["maximumPercent"], 200);
  EXPECT_EQ(svc["deploymentConfiguration"]["minimumHealthyPercent"], 100);
  EXPECT_EQ(svc["tags"][0]["key"], "team");

  Json d = Describe(s, "web");
  EXPECT_EQ(d["desiredCount"], 3);
  EXPECT_EQ(d["pendingCount"], 3);
  EXPECT_EQ(d["runningCount"], 0);
  ASSERT_EQ(d["deployments"].size(), 1u);
  const std::string deployment = d["deployments"][0]["id"];
  EXPECT_EQ(deployment.rfind("ecs-svc/", 0), 0u);
  EXPECT_EQ(deployment.size(), 8u + 19u);
  EXPECT_EQ(d["deployments"][0]["status"], "PRIMARY");
  EXPECT_EQ(d["deployments"][0]["rolloutState"], "IN_PROGRESS");
  EXPECT_TRUE(HasEvent(d, "(service web) has started 3 tasks: (task "));

  auto tasks = Tasks(s, "web");
  ASSERT_EQ(tasks.size(), 3u);
  for (const auto& [arn, t] : tasks) {
    EXPECT_EQ(t["group"], "service:web");
    EXPECT_EQ(t["startedBy"], deployment);
  }
  Settle(s, "web", [](const Counts& c) { EXPECT_LE(c.live, 3); });
  d = Describe(s, "web");
  EXPECT_EQ(d["runningCount"], 3);
  EXPECT_EQ(d["pendingCount"], 0);
  EXPECT_EQ(d["deployments"][0]["rolloutState"], "COMPLETED");
  EXPECT_EQ(d["events"][0]["message"], "(service web) has reached a steady state.");
  EXPECT_TRUE(HasEvent(d, "(service web) (deployment " + deployment + ") deployment completed."));

  // A replica that exits on its own is replaced; the service is back at desiredCount.
  const std::string victim = Tasks(s, "web").begin()->first;
  Report(s, victim, "STOPPED", "Essential container in task exited");
  tasks = Tasks(s, "web");
  EXPECT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks.count(victim), 0u);
  EXPECT_EQ(Describe(s, "web")["pendingCount"], 1);
  Settle(s, "web", [](const Counts& c) { EXPECT_LE(c.live, 3); });
  d = Describe(s, "web");
  EXPECT_EQ(d["runningCount"], 3);
  EXPECT_EQ(d["deployments"][0]["failedTasks"], 1);

  // A standalone task cannot join a service's group.
  OperationResult sneak = s.Call("RunTask", {{"taskDefinition", "web"}, {"group", "service:web"}});
  EXPECT_EQ(sneak.status.code(), ErrorCode::kInvalidParameter);
}

TEST_F(ServicesTest, ADrainedInstanceHasItsReplicasMovedWithoutDroppingBelowMinimumHealthy) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  const std::string a = RegisterInstance(s, {10000});
  RegisterShared(s, "web", 4000);
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 2}});
  Settle(s, "web", [](const Counts&) {});
  for (const auto& [arn, t] : Tasks(s, "web")) EXPECT_EQ(t["containerInstanceArn"], a);
  const std::string b = RegisterInstance(s, {10000});

  s.Ok("UpdateContainerInstancesState", {{"containerInstances", Json::array({a})}, {"status", "DRAINING"}});
  const int reports = Settle(s, "web", [](const Counts& c) {
    EXPECT_GE(c.running, 2);  // minimumHealthyPercent 100
    EXPECT_LE(c.live - c.stopping, 4);  // maximumPercent 200
  });
  EXPECT_GE(reports, 4);  // two replacements RUNNING, two old tasks STOPPED
  auto tasks = Tasks(s, "web");
  ASSERT_EQ(tasks.size(), 2u);
  for (const auto& [arn, t] : tasks) EXPECT_EQ(t["containerInstanceArn"], b);
  Json inst = s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({a})}});
  EXPECT_EQ(inst["containerInstances"][0]["runningTasksCount"], 0);
  EXPECT_EQ(inst["containerInstances"][0]["pendingTasksCount"], 0);
  EXPECT_EQ(Describe(s, "web")["runningCount"], 2);
}

TEST_F(ServicesTest, ReplicasOnAGpuHeldAfterAFaultAreReplacedElsewhere) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  const std::string a = RegisterInstance(s, {10000});
  RegisterShared(s, "web", 4000);
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 2}});
  Settle(s, "web", [](const Counts&) {});
  const std::string b = RegisterInstance(s, {10000});
  const std::string gpu = Gpus(s, a)[0]["gpuId"];
  s.Heartbeat(a, {gpu});  // the agent holds the GPU after a fault; the tasks on it are still there
  EXPECT_EQ(Tasks(s, "web").size(), 4u);  // two replacements placed on the other instance
  Settle(s, "web", [](const Counts& c) { EXPECT_GE(c.running, 2); });
  auto tasks = Tasks(s, "web");
  ASSERT_EQ(tasks.size(), 2u);
  for (const auto& [arn, t] : tasks) EXPECT_EQ(t["containerInstanceArn"], b);
  EXPECT_EQ(Describe(s, "web")["runningCount"], 2);
}

TEST_F(ServicesTest, ARollingDeploymentKeepsWithinItsPercentsAndCompletes) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterInstance(s, {40000});
  RegisterShared(s, "web", 2000);
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 4},
                         {"deploymentConfiguration", {{"minimumHealthyPercent", 50}, {"maximumPercent", 100}}}});
  Settle(s, "web", [](const Counts&) {});
  RegisterShared(s, "web", 3000);  // revision 2
  Json updated = s.Ok("UpdateService", {{"service", "web"}, {"taskDefinition", "web:2"}});
  ASSERT_EQ(updated["service"]["deployments"].size(), 2u);
  EXPECT_EQ(updated["service"]["deployments"][0]["status"], "PRIMARY");
  EXPECT_EQ(updated["service"]["deployments"][1]["status"], "ACTIVE");
  const std::string primary = updated["service"]["deployments"][0]["id"];

  Settle(s, "web", [](const Counts& c) {
    EXPECT_GE(c.running, 2);                  // 50% of 4
    EXPECT_LE(c.live - c.stopping, 4);        // 100% of 4
  });
  Json d = Describe(s, "web");
  ASSERT_EQ(d["deployments"].size(), 1u);
  EXPECT_EQ(d["deployments"][0]["id"], primary);
  EXPECT_EQ(d["deployments"][0]["rolloutState"], "COMPLETED");
  EXPECT_EQ(d["runningCount"], 4);
  for (const auto& [arn, t] : Tasks(s, "web")) {
    EXPECT_EQ(t["taskDefinitionArn"], "arn:aws:ecs:us-east-1:000000000000:task-definition/web:2");
    EXPECT_EQ(t["startedBy"], primary);
  }
}

TEST_F(ServicesTest, MissingReplicasWaitForCapacityAndArePlacedWhenItFrees) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  const std::string inst = RegisterInstance(s, {10000});
  RegisterShared(s, "big", 8000);
  RegisterShared(s, "web", 4000);
  Json big = s.Ok("RunTask", {{"taskDefinition", "big"}});
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 2}});
  Json d = Describe(s, "web");
  EXPECT_EQ(d["pendingCount"], 0);
  EXPECT_EQ(d["runningCount"], 0);
  const std::string id = inst.substr(inst.rfind('/') + 1);
  EXPECT_EQ(d["events"][0]["message"],
            "(service web) was unable to place a task because no container instance met all of its requirements. "
            "The closest matching (container-instance " + id + ") has insufficient GPU memory available.");
  // The standalone task stops: both replicas fit now, and are placed by that write.
  s.Ok("StopTask", {{"task", big["tasks"][0]["taskArn"]}});
  EXPECT_EQ(Tasks(s, "web").size(), 2u);
  Settle(s, "web", [](const Counts&) {});
  EXPECT_EQ(Describe(s, "web")["runningCount"], 2);
}

TEST_F(ServicesTest, ScaledToZeroAndDeletedTheServiceStopsItsTasksAndTurnsInactive) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterInstance(s, {20000});
  RegisterShared(s, "web", 2000);
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 2}});
  Settle(s, "web", [](const Counts&) {});
  OperationResult refused = s.Call("DeleteService", {{"service", "web"}});
  EXPECT_EQ(refused.status.code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(refused.status.message(), "The service cannot be stopped while it is scaled above 0.");

  s.Ok("UpdateService", {{"service", "web"}, {"desiredCount", 0}});
  Settle(s, "web", [](const Counts&) {});
  EXPECT_TRUE(Tasks(s, "web").empty());
  EXPECT_EQ(Describe(s, "web")["runningCount"], 0);
  Json deleted = s.Ok("DeleteService", {{"service", "web"}});
  EXPECT_EQ(deleted["service"]["status"], "DRAINING");  // as ECS answers it
  EXPECT_EQ(Describe(s, "web")["status"], "INACTIVE");  // nothing was left to stop
  EXPECT_TRUE(s.Ok("ListServices", Json::object())["serviceArns"].empty());
  EXPECT_EQ(s.Call("UpdateService", {{"service", "web"}, {"desiredCount", 1}}).status.code(),
            ErrorCode::kServiceNotActive);
  // The name is free again.
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 1}});
  EXPECT_EQ(Describe(s, "web")["status"], "ACTIVE");

  // force: a scaled service is deleted at once, DRAINING until its RUNNING task has stopped.
  Settle(s, "web", [](const Counts&) {});
  EXPECT_EQ(s.Ok("DeleteService", {{"service", "web"}, {"force", true}})["service"]["status"], "DRAINING");
  Settle(s, "web", [](const Counts&) {});
  EXPECT_EQ(Describe(s, "web")["status"], "INACTIVE");
}

TEST_F(ServicesTest, ARestartInTheMiddleOfADeploymentGoesOnWithoutStartingATaskTwice) {
  std::set<std::string> seen;
  {
    EcsServer s(db_);
    s.Ok("CreateCluster", Json::object());
    RegisterInstance(s, {40000});
    RegisterShared(s, "web", 2000);
    s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 3}});
    Settle(s, "web", [](const Counts&) {});
    RegisterShared(s, "web", 2500);
    s.Ok("UpdateService", {{"service", "web"}, {"taskDefinition", "web:2"}});
    // Half way: the new tasks are placed, none RUNNING yet.
    for (const auto& [arn, t] : Tasks(s, "web")) seen.insert(arn);
    EXPECT_EQ(seen.size(), 6u);
  }  // no shutdown beyond what a crash leaves
  EcsServer s(db_);
  for (const auto& [arn, t] : Tasks(s, "web")) EXPECT_TRUE(seen.count(arn)) << "started again after the restart: " << arn;
  Settle(s, "web", [](const Counts& c) { EXPECT_LE(c.live - c.stopping, 6); });
  auto tasks = Tasks(s, "web");
  EXPECT_EQ(tasks.size(), 3u);
  for (const auto& [arn, t] : tasks) EXPECT_TRUE(seen.count(arn));  // the replacements placed before the restart
  Json d = Describe(s, "web");
  EXPECT_EQ(d["runningCount"], 3);
  EXPECT_EQ(d["deployments"].size(), 1u);
  EXPECT_EQ(d["deployments"][0]["rolloutState"], "COMPLETED");
}

TEST_F(ServicesTest, ATaskThatKeepsFailingIsRestartedWithABackOff) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterInstance(s, {20000});
  RegisterShared(s, "web", 2000);
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 1}});
  for (int failure = 1; failure <= 4; ++failure) {
    auto tasks = Tasks(s, "web");
    ASSERT_EQ(tasks.size(), 1u) << "failure " << failure;
    Report(s, tasks.begin()->first, "STOPPED", "Essential container in task exited");
    s.now_ += 1000;
  }
  // The fourth failure in a row: no restart for 10 s.
  EXPECT_TRUE(Tasks(s, "web").empty());
  Json d = Describe(s, "web");
  EXPECT_TRUE(HasEvent(d, "(service web) is unable to consistently start tasks successfully."));
  s.now_ += 5'000;
  s.Ok("CreateCluster", Json::object());  // any write: the back-off has not ended
  EXPECT_TRUE(Tasks(s, "web").empty());
  s.now_ += 6'000;
  s.Ok("CreateCluster", Json::object());
  EXPECT_EQ(Tasks(s, "web").size(), 1u);
}

TEST_F(ServicesTest, TheCircuitBreakerFailsADeploymentAndRollsBack) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterInstance(s, {20000});
  RegisterShared(s, "web", 2000);
  s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 1},
                         {"deploymentConfiguration",
                          {{"deploymentCircuitBreaker", {{"enable", true}, {"rollback", true}}}}}});
  Settle(s, "web", [](const Counts&) {});
  const std::string first = Describe(s, "web")["deployments"][0]["id"];
  RegisterShared(s, "web", 2100);
  s.Ok("UpdateService", {{"service", "web"}, {"taskDefinition", "web:2"}});
  // Every task of revision 2 fails before it runs: three failures trip the breaker.
  for (int i = 0; i < 3; ++i) {
    std::string failing;
    for (const auto& [arn, t] : Tasks(s, "web"))
      if (t["taskDefinitionArn"].get<std::string>().ends_with("web:2")) failing = arn;
    ASSERT_FALSE(failing.empty()) << i;
    Report(s, failing, "STOPPED", "CannotPullContainerError");
  }
  Json d = Describe(s, "web");
  // The FAILED deployment had no task left and is gone; a new PRIMARY one returns to revision 1 beside the first.
  ASSERT_EQ(d["deployments"].size(), 2u);
  EXPECT_EQ(d["deployments"][0]["taskDefinition"], "arn:aws:ecs:us-east-1:000000000000:task-definition/web:1");
  EXPECT_NE(d["deployments"][0]["id"], first);
  EXPECT_EQ(d["deployments"][1]["id"], first);
  EXPECT_EQ(d["taskDefinition"], "arn:aws:ecs:us-east-1:000000000000:task-definition/web:1");
  EXPECT_TRUE(HasEvent(d, "deployment failed: tasks failed to start."));
  EXPECT_TRUE(HasEvent(d, "rolling back to arn:aws:ecs:us-east-1:000000000000:task-definition/web:1"));
  Settle(s, "web", [](const Counts& c) { EXPECT_GE(c.running, 1); });
  d = Describe(s, "web");
  EXPECT_EQ(d["runningCount"], 1);
  EXPECT_EQ(d["deployments"].size(), 1u);
}

TEST_F(ServicesTest, ADaemonServiceRunsOneTaskPerActiveInstance) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  const std::string a = RegisterInstance(s, {10000});
  RegisterInstance(s, {10000});
  RegisterShared(s, "agent", 1000);
  Json created = s.Ok("CreateService", {{"serviceName", "node"}, {"taskDefinition", "agent"},
                                        {"schedulingStrategy", "DAEMON"}});
  EXPECT_EQ(created["service"]["schedulingStrategy"], "DAEMON");
  EXPECT_EQ(created["service"]["deploymentConfiguration"]["minimumHealthyPercent"], 0);
  EXPECT_EQ(created["service"]["deploymentConfiguration"]["maximumPercent"], 100);
  EXPECT_EQ(Tasks(s, "node").size(), 2u);
  RegisterInstance(s, {10000});
  EXPECT_EQ(Tasks(s, "node").size(), 3u);
  Settle(s, "node", [](const Counts&) {});
  EXPECT_EQ(Describe(s, "node")["desiredCount"], 3);
  s.Ok("UpdateContainerInstancesState", {{"containerInstances", Json::array({a})}, {"status", "DRAINING"}});
  Settle(s, "node", [](const Counts&) {});
  auto tasks = Tasks(s, "node");
  EXPECT_EQ(tasks.size(), 2u);
  for (const auto& [arn, t] : tasks) EXPECT_NE(t["containerInstanceArn"], a);
  Json d = Describe(s, "node");
  EXPECT_EQ(d["desiredCount"], 2);
  EXPECT_EQ(d["runningCount"], 2);
}

TEST_F(ServicesTest, RequestsAreCheckedAsEcsChecksThem) {
  EcsServer s(db_);
  s.Ok("CreateCluster", Json::object());
  RegisterShared(s, "web", 2000);
  auto code = [&](const Json& body) { return s.Call("CreateService", body).status; };
  EXPECT_EQ(code({{"serviceName", "web"}, {"taskDefinition", "web"}}).message(),
            "desiredCount is required for a REPLICA service.");
  EXPECT_EQ(code({{"serviceName", "w b"}, {"taskDefinition", "web"}, {"desiredCount", 1}}).code(),
            ErrorCode::kInvalidParameter);
  EXPECT_EQ(code({{"serviceName", "web"}, {"taskDefinition", "nope"}, {"desiredCount", 1}}).code(), ErrorCode::kClient);
  Status lb = code({{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 1},
                    {"loadBalancers", Json::array({{{"targetGroupArn", "x"}}})}});
  EXPECT_EQ(lb.code(), ErrorCode::kUnsupportedFeature);
  EXPECT_NE(lb.message().find("loadBalancers is not supported"), std::string::npos);
  EXPECT_EQ(code({{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 1},
                  {"deploymentController", {{"type", "EXTERNAL"}}}})
                .code(),
            ErrorCode::kUnsupportedFeature);
  EXPECT_EQ(code({{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 1},
                  {"deploymentConfiguration", {{"minimumHealthyPercent", 100}, {"maximumPercent", 100}}}})
                .code(),
            ErrorCode::kInvalidParameter);
  EXPECT_EQ(code({{"serviceName", "d"}, {"taskDefinition", "web"}, {"schedulingStrategy", "DAEMON"},
                  {"placementStrategy", Json::array({{{"type", "spread"}, {"field", "instanceId"}}})}})
                .message(),
            "Placement strategies are not supported with the DAEMON scheduling strategy.");

  // clientToken: the same token answers the same service; another request of the same name is refused.
  Json first = s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 0},
                                      {"clientToken", "t1"}});
  Json again = s.Ok("CreateService", {{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 0},
                                      {"clientToken", "t1"}});
  EXPECT_EQ(again["service"]["createdAt"], first["service"]["createdAt"]);
  EXPECT_EQ(code({{"serviceName", "web"}, {"taskDefinition", "web"}, {"desiredCount", 0}}).message(),
            "Creation of service was not idempotent.");

  EXPECT_EQ(s.Call("UpdateService", {{"service", "nope"}}).status.code(), ErrorCode::kServiceNotFound);
  Json missing = s.Ok("DescribeServices", {{"services", Json::array({"web", "nope"})}});
  EXPECT_EQ(missing["services"].size(), 1u);
  EXPECT_EQ(missing["failures"][0]["reason"], "MISSING");
  EXPECT_EQ(missing["failures"][0]["arn"], "arn:aws:ecs:us-east-1:000000000000:service/default/nope");
  EXPECT_FALSE(missing["services"][0].contains("tags"));  // only with include TAGS
  EXPECT_EQ(s.Call("DescribeServices", {{"services", Json::array({"a", "b", "c", "d", "e", "f", "g", "h", "i",
                                                                   "j", "k"})}})
                .status.code(),
            ErrorCode::kInvalidParameter);
  Json cluster = s.Ok("DescribeClusters", {{"include", Json::array({"STATISTICS"})}})["clusters"][0];
  EXPECT_EQ(cluster["activeServicesCount"], 1);
  bool counted = false;
  for (const auto& st : cluster["statistics"])
    if (st["name"] == "activeEC2ServiceCount") counted = st["value"] == "1";
  EXPECT_TRUE(counted) << cluster.dump();
  Json listed = s.Ok("ListServices", {{"schedulingStrategy", "REPLICA"}});
  EXPECT_EQ(listed["serviceArns"], Json::array({"arn:aws:ecs:us-east-1:000000000000:service/default/web"}));
  EXPECT_TRUE(s.Ok("ListServices", {{"schedulingStrategy", "DAEMON"}})["serviceArns"].empty());
}

}  // namespace
}  // namespace gpupack::api
