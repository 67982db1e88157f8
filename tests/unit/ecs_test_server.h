// EcsTestServer: the ECS operations on a real SQLite file below HTTP, for the control plane's and the service
// scheduler's tests (tests/unit/control_plane_test.cc, tests/unit/services_test.cc), with the helpers both use.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/ecs/router.h"
#include "engine/control_plane.h"
#include "storage/group_committer.h"
#include "storage/sqlite_store.h"

namespace gpupack::api {

// (Not `Server`: that is the real server's class in this namespace, api/server.h. Two classes of one name break the
// one-definition rule: linked with lld, a test's EcsServer was destroyed by the real server's destructor.)
// EcsServer wires a store, a committer and a control plane on a database file, like `gpupack server` does. These
// tests play the agent themselves (SubmitTaskStateChange over the ECS API), so the server places on instances
// without a connected agent, as `gpupack server --place-on-disconnected` does; `place_on_disconnected = false`
// is the server's default.
class EcsServer {
 public:
  explicit EcsServer(const std::string& db, uint64_t seed = 7, bool place_on_disconnected = true,
                  std::optional<std::vector<PlacementStrategy>> shared_default = std::nullopt,
                  std::function<void(PlacementPolicy&)> tune = nullptr) {
    auto store = SqliteStore::Open(db);
    EXPECT_TRUE(store.ok()) << store.status().message();
    store_ = std::move(store).value();
    committer_ = std::make_unique<GroupCommitter>(*store_);
    ControlPlaneOptions o;
    o.seed = seed;
    o.placement.place_on_disconnected = place_on_disconnected;
    if (shared_default) o.placement.shared_gpu_default = *shared_default;
    if (tune) tune(o.placement);
    o.clock = [this] { return now_; };
    cp_ = std::make_unique<ControlPlane>(o, *store_, *committer_);
    Status s = cp_->Load();
    EXPECT_TRUE(s.ok()) << s.message();
  }

  OperationResult Call(const std::string& op, const Json& body) {
    std::promise<OperationResult> p;
    Execute(*cp_, op, body, [&](OperationResult r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }
  // Ok calls an operation that must succeed and returns its body.
  Json Ok(const std::string& op, const Json& body) {
    OperationResult r = Call(op, body);
    EXPECT_TRUE(r.status.ok()) << op << ": " << r.status.message();
    return r.body;
  }

  // counters: the placement counters and refusal log the applier published.
  PlacementCounters counters() const { return cp_->applier().counters(); }

  // Heartbeat delivers an agent's heartbeat for `instance_arn` holding `held_gpus` after a fault.
  void Heartbeat(const std::string& instance_arn, std::vector<std::string> held_gpus) {
    protocol::Heartbeat hb;
    hb.held_gpus = std::move(held_gpus);
    std::promise<Status> p;
    cp_->AgentHeartbeat(instance_arn, hb, [&](Status s) { p.set_value(s); });
    Status s = p.get_future().get();
    EXPECT_TRUE(s.ok()) << s.message();
  }

  // Hello delivers an agent's hello for `instance_arn` reporting no tasks: its agent is connected from then on.
  // It answers the welcome.
  protocol::Welcome Hello(const std::string& instance_arn) {
    std::promise<std::pair<Status, protocol::Welcome>> p;
    cp_->AgentHello(instance_arn, protocol::Hello{}, [&](Status s, protocol::Welcome w) { p.set_value({s, std::move(w)}); });
    auto [s, welcome] = p.get_future().get();
    EXPECT_TRUE(s.ok()) << s.message();
    return welcome;
  }

  // commits: the Store::Commit calls made so far (GroupCommitter::Stats), once every batch submitted is done.
  uint64_t commits() {
    committer_->Flush();
    return committer_->stats().commits;
  }

  // Inspect runs `f` on the applier's working state (ClusterState).
  void Inspect(const std::function<void(const ClusterState&)>& f) { cp_->applier().Inspect(f); }

  EpochMs now_ = 1'700'000'000'000;

 private:
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<GroupCommitter> committer_;
  std::unique_ptr<ControlPlane> cp_;
};

inline Json Resources(int cpu, int mem) {
  return Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", cpu}},
                      {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", mem}}});
}

// RegisterInstance registers an instance with GPUs of the given sizes and returns its ARN.
inline std::string RegisterInstance(EcsServer& s, std::vector<int> gpu_mib, int cpu = 8192, int mem = 32768,
                             Json attributes = Json::array()) {
  static int n = 0;
  Json devices = Json::array();
  for (int m : gpu_mib)
    devices.push_back({{"id", "GPU-" + std::to_string(++n)}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", m}}}});
  Json body = s.Ok("RegisterContainerInstance", {{"totalResources", Resources(cpu, mem)},
                                                {"platformDevices", devices},
                                                {"attributes", attributes}});
  return body["containerInstance"]["containerInstanceArn"];
}

inline Json MpsContainer(const std::string& name, int memory, int compute = 0) {
  Json mps = {{"memory", memory}};
  if (compute) mps["maxComputePercent"] = compute;
  return {{"name", name}, {"image", "busybox"}, {"memory", 64},
          {"resourceRequirements", Json::array({{{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", mps}}}}})}};
}

inline void RegisterShared(EcsServer& s, const std::string& family, int memory, int compute = 0) {
  s.Ok("RegisterTaskDefinition", {{"family", family}, {"containerDefinitions", Json::array({MpsContainer("c", memory, compute)})}});
}

inline void RegisterDedicated(EcsServer& s, const std::string& family, int gpus) {
  s.Ok("RegisterTaskDefinition",
       {{"family", family},
        {"containerDefinitions",
         Json::array({{{"name", "c"}, {"image", "busybox"}, {"memory", 64},
                       {"resourceRequirements", Json::array({{{"type", "GPU"}, {"value", std::to_string(gpus)}}})}}})}});
}

// Gpus: the instance's gpuDevices as DescribeContainerInstances answers them.
inline Json Gpus(EcsServer& s, const std::string& instance_arn) {
  Json body = s.Ok("DescribeContainerInstances", {{"containerInstances", Json::array({instance_arn})}});
  return body["containerInstances"][0]["gpuDevices"];
}

}  // namespace gpupack::api
