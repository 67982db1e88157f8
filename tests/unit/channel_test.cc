// The server and real agents on loopback: the channel, the process runtime, MPS gating, faults, restarts.
// Agents use simulated GPUs (fake:SPEC) and the simulated MPS daemon; everything else is real: HTTP, the
// WebSocket channel, SQLite, fork/exec.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/channel_client.h"
#include "api/agent_channel.h"
#include "api/control_plane.h"
#include "api/ecs_handler.h"
#include "api/http_server.h"
#include "storage/group_committer.h"
#include "storage/sqlite_store.h"

namespace gpupack {
namespace {

namespace fs = std::filesystem;
using agent::Json;
using namespace std::chrono_literals;

// TestServer is `gpupack server` in-process on port 0 with a short heartbeat window.
class TestServer {
 public:
  TestServer(const std::string& db, uint16_t port = 0) {
    store_ = std::move(SqliteStore::Open(db)).value();
    committer_ = std::make_unique<GroupCommitter>(*store_);
    cp_ = std::make_unique<api::ControlPlane>(api::ControlPlaneOptions{}, *store_, *committer_);
    EXPECT_TRUE(cp_->Load().ok());
    channel_ = std::make_unique<api::AgentChannel>(*cp_, api::AgentChannelOptions{200ms, 3});
    handler_ = std::make_unique<api::EcsHandler>(*cp_);
    api::HttpServerOptions o;
    o.port = port;
    o.websockets[api::kAgentChannelPath] = channel_->Handler();
    http_ = std::move(api::HttpServer::Create(o, handler_->AsHandler())).value();
    http_->Start();
  }
  ~TestServer() {
    http_->Stop();
    channel_.reset();
    committer_->Flush();
  }
  uint16_t port() const { return http_->port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }

  Json Call(const std::string& op, const Json& body) {
    auto r = agent::CallEcs(*agent::ServerEndpoint::Parse(url()), op, body);
    EXPECT_TRUE(r.ok()) << op << ": " << r.status().message();
    return r.ok() ? *r : Json();
  }

 private:
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<GroupCommitter> committer_;
  std::unique_ptr<api::ControlPlane> cp_;
  std::unique_ptr<api::AgentChannel> channel_;
  std::unique_ptr<api::EcsHandler> handler_;
  std::unique_ptr<api::HttpServer> http_;
};

class ChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);
    dir_ = fs::temp_directory_path() / ("gpupack-channel-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    server_ = std::make_unique<TestServer>((dir_ / "state.db").string());
  }
  void TearDown() override {
    agent_.reset();
    server_.reset();
    fs::remove_all(dir_);
  }

  agent::AgentOptions Options() {
    agent::AgentOptions o;
    o.server = server_->url();
    o.gpus = "fake:2x22587";
    o.name = "node-a";
    o.state_dir = (dir_ / "agent").string();
    o.mps_pipe_dir = (dir_ / "mps").string();
    o.cpu = 4096;
    o.memory = 8192;
    o.stop_grace = 300ms;
    o.monitor_interval = 20ms;
    o.mps_probe_interval = 50ms;
    o.stop_tasks_on_exit = stop_tasks_on_exit_;  // so no test leaves processes behind
    return o;
  }

  void StartAgent() {
    auto a = agent::Agent::Create(Options());
    ASSERT_TRUE(a.ok()) << a.status().message();
    agent_ = std::move(*a);
    ASSERT_TRUE(agent_->Start().ok());
    WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  }

  // WaitTask polls DescribeTasks until `pred` holds (bounded: 10 s), and returns the last task seen.
  Json WaitTask(const std::string& arn, const std::function<bool(const Json&)>& pred) {
    Json t;
    if (arn.empty()) {
      ADD_FAILURE() << "no task to wait for";
      return t;
    }
    for (int i = 0; i < 500; ++i) {
      Json d = server_->Call("DescribeTasks", {{"tasks", Json::array({arn})}});
      if (d.contains("tasks") && !d["tasks"].empty()) {
        t = d["tasks"][0];
        if (pred(t)) return t;
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "task never reached the expected state; last seen: " << t.dump();
    return t;
  }
  Json WaitInstance(const std::function<bool(const Json&)>& pred) {
    Json ci;
    for (int i = 0; i < 500; ++i) {
      Json list = server_->Call("ListContainerInstances", Json::object());
      if (list.contains("containerInstanceArns") && !list["containerInstanceArns"].empty()) {
        Json d = server_->Call("DescribeContainerInstances", {{"containerInstances", list["containerInstanceArns"]}});
        ci = d["containerInstances"][0];
        if (pred(ci)) return ci;
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "instance never reached the expected state; last seen: " << ci.dump();
    return ci;
  }

  // Registers a shared task definition whose container runs `script` under /bin/sh.
  void RegisterScript(const std::string& family, const std::string& script, int mps_memory = 4096, int compute = 0,
                      Json env = Json::array()) {
    Json mps = {{"memory", mps_memory}};
    if (compute) mps["maxComputePercent"] = compute;
    Json c = {{"name", "main"}, {"image", "busybox"}, {"memory", 64}, {"entryPoint", {"/bin/sh", "-c"}},
              {"command", {script}}, {"environment", env}};
    if (mps_memory) c["resourceRequirements"] = Json::array({{{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", mps}}}}});
    server_->Call("RegisterTaskDefinition", {{"family", family}, {"containerDefinitions", Json::array({c})}});
  }

  std::string Run(const std::string& family, Json extra = Json::object()) {
    Json body = {{"taskDefinition", family}};
    body.update(extra);
    Json r = server_->Call("RunTask", body);
    EXPECT_EQ(r["tasks"].size(), 1u) << r.dump();
    return r["tasks"].empty() ? "" : r["tasks"][0]["taskArn"].get<std::string>();
  }

  std::map<std::string, std::string> ReadEnv(const fs::path& file) {
    std::map<std::string, std::string> env;
    for (int i = 0; i < 250 && !fs::exists(file); ++i) std::this_thread::sleep_for(20ms);
    std::this_thread::sleep_for(50ms);  // let the writer finish
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      size_t eq = line.find('=');
      if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return env;
  }

  fs::path dir_;
  bool stop_tasks_on_exit_ = true;
  std::unique_ptr<TestServer> server_;
  std::unique_ptr<agent::Agent> agent_;
};

TEST_F(ChannelTest, RunTaskRunsAProcessWithExactlyTheMpsEnvironmentAndReportsItsExit) {
  StartAgent();
  fs::path env_file = dir_ / "env.txt";
  // The overrides try to set the reserved variables (the definition may not); the agent's values win.
  RegisterScript("envdump", "env > " + env_file.string() + "; sleep 0.3; exit 3", 4096, 50,
                 Json::array({{{"name", "MINE"}, {"value", "1"}}, {{"name", "CUDA_VISIBLE_DEVICES"}, {"value", "7"}}}));
  std::string arn = Run("envdump", {{"overrides", {{"containerOverrides", Json::array({{{"name", "main"},
      {"environment", Json::array({{{"name", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"}, {"value", "0=99999M"}},
                                   {{"name", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"}, {"value", "100"}}})}}})}}}});
  Json running = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING" || t["lastStatus"] == "STOPPED"; });
  auto env = ReadEnv(env_file);
  std::string gpu = running["containers"][0]["gpuIds"][0];
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], gpu);
  EXPECT_EQ(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=4096M");
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50");
  EXPECT_EQ(env["CUDA_MPS_PIPE_DIRECTORY"], (dir_ / "mps").string());
  EXPECT_EQ(env["MINE"], "1");
  Json stopped = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(stopped["containers"][0]["exitCode"], 3);
  EXPECT_EQ(stopped["stopCode"], "EssentialContainerExited");
  // Its memory is back.
  Json ci = WaitInstance([](const Json& c) { return c["gpuDevices"][0]["remainingMemoryInMiB"] == 22587 &&
                                                    c["gpuDevices"][1]["remainingMemoryInMiB"] == 22587; });
  EXPECT_EQ(ci["gpuDevices"][0]["sharingMode"], "IDLE");
}

TEST_F(ChannelTest, StopTaskTerminatesTheProcess) {
  StartAgent();
  fs::path pid_file = dir_ / "pid";
  RegisterScript("sleeper", "echo $$ > " + pid_file.string() + "; exec sleep 60");
  std::string arn = Run("sleeper");
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  for (int i = 0; i < 250 && !fs::exists(pid_file); ++i) std::this_thread::sleep_for(20ms);
  int pid = 0;
  std::ifstream(pid_file) >> pid;
  ASSERT_GT(pid, 0);
  server_->Call("StopTask", {{"task", arn}, {"reason", "enough"}});
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(t["stopCode"], "UserInitiated");
  EXPECT_EQ(t["stoppedReason"], "enough");
  EXPECT_EQ(t["containers"][0]["exitCode"], 128 + 15);  // SIGTERM
  EXPECT_NE(kill(pid, 0), 0);  // the process is gone
}

TEST_F(ChannelTest, AgentRestartAdoptsRunningTasksWithoutStartingThemTwice) {
  stop_tasks_on_exit_ = false;  // the first agent "dies": its tasks keep running
  StartAgent();
  stop_tasks_on_exit_ = true;
  fs::path starts = dir_ / "starts";
  RegisterScript("once", "echo started >> " + starts.string() + "; exec sleep 60");
  std::string arn = Run("once");
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  agent_->Stop();  // tasks keep running (stop_tasks_on_exit is off), like an agent that died
  agent_.reset();
  WaitInstance([](const Json& c) { return c["agentConnected"] == false; });
  // Meanwhile RunTask answers AGENT for this instance.
  Json r = server_->Call("RunTask", {{"taskDefinition", "once"}});
  ASSERT_EQ(r["failures"].size(), 1u);
  EXPECT_EQ(r["failures"][0]["reason"], "AGENT");
  StartAgent();
  std::this_thread::sleep_for(300ms);
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  std::ifstream in(starts);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) ++n;
  EXPECT_EQ(n, 1);  // started exactly once
  server_->Call("StopTask", {{"task", arn}});
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
}

TEST_F(ChannelTest, ServerRestartWhileTasksRunReconciles) {
  StartAgent();
  RegisterScript("long", "exec sleep 60");
  RegisterScript("short", "sleep 0.5; exit 0");
  std::string long_arn = Run("long");
  std::string short_arn = Run("short");
  WaitTask(long_arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  uint16_t port = server_->port();
  server_.reset();  // the server goes away; the short task exits meanwhile
  std::this_thread::sleep_for(800ms);
  server_ = std::make_unique<TestServer>((dir_ / "state.db").string(), port);
  Json s = WaitTask(short_arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(s["containers"][0]["exitCode"], 0);
  Json l = WaitTask(long_arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  Json ci = WaitInstance([](const Json& c) { return c["agentConnected"] == true; });
  // Only the long task still holds memory: 22,587 - 4,096 on its GPU.
  int total_remaining = ci["gpuDevices"][0]["remainingMemoryInMiB"].get<int>() + ci["gpuDevices"][1]["remainingMemoryInMiB"].get<int>();
  EXPECT_EQ(total_remaining, 2 * 22587 - 4096);
  server_->Call("StopTask", {{"task", long_arn}});
  WaitTask(long_arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
}

TEST_F(ChannelTest, MpsDaemonDownRefusesSharedTasksAndImpairsTheInstance) {
  StartAgent();
  RegisterScript("shared", "exec sleep 60");
  std::ofstream(dir_ / "mps" / "fake-mps-health") << "down";
  std::string arn = Run("shared");  // placed before the agent noticed
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(t["stopCode"], "TaskFailedToStart");
  EXPECT_EQ(t["stoppedReason"], "MPS control daemon is not responding");
  WaitInstance([](const Json& c) {  // impaired: the server places nothing here
    return c["agentConnected"] == true;
  });
  Json r;
  for (int i = 0; i < 250; ++i) {
    r = server_->Call("RunTask", {{"taskDefinition", "shared"}});
    if (!r["failures"].empty()) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(r["failures"].size(), 1u) << r.dump();
  EXPECT_EQ(r["failures"][0]["reason"], "AGENT");
  EXPECT_NE(r["failures"][0]["detail"].get<std::string>().find("MPS control daemon is not responding"), std::string::npos);
  // The daemon comes back: the instance recovers.
  fs::remove(dir_ / "mps" / "fake-mps-health");
  Json ok;
  for (int i = 0; i < 250; ++i) {
    ok = server_->Call("RunTask", {{"taskDefinition", "shared"}});
    if (!ok["tasks"].empty()) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(ok["tasks"].size(), 1u);
  WaitTask(ok["tasks"][0]["taskArn"], [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
}

TEST_F(ChannelTest, GpuFaultStopsExactlyTheTasksOnThatGpu) {
  StartAgent();
  RegisterScript("big", "exec sleep 60", 15000);  // 15,000 + 15,000 > 22,587: one per GPU
  std::string a = Run("big");
  std::string b = Run("big");
  Json ta = WaitTask(a, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  Json tb = WaitTask(b, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  std::string gpu_a = ta["containers"][0]["gpuIds"][0];
  ASSERT_NE(gpu_a, tb["containers"][0]["gpuIds"][0].get<std::string>());
  std::ofstream(dir_ / "mps" / ("fake-gpu-fault-" + gpu_a)) << "fault";
  Json fa = WaitTask(a, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_NE(fa["stoppedReason"].get<std::string>().find(gpu_a), std::string::npos);
  EXPECT_EQ(fa["stopCode"], "InfrastructureHealth");
  // The other GPU's task runs on; the faulted GPU is held: a new task goes nowhere (the other GPU is full).
  std::this_thread::sleep_for(200ms);
  Json db = server_->Call("DescribeTasks", {{"tasks", Json::array({b})}});
  EXPECT_EQ(db["tasks"][0]["lastStatus"], "RUNNING");
  Json r;
  for (int i = 0; i < 250; ++i) {
    r = server_->Call("RunTask", {{"taskDefinition", "big"}});
    if (!r["failures"].empty()) break;
    server_->Call("StopTask", {{"task", r["tasks"][0]["taskArn"]}});  // raced the hold; undo and retry
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_FALSE(r["failures"].empty());
  EXPECT_NE(r["failures"][0]["detail"].get<std::string>().find("held after a fault"), std::string::npos);
  // Healthy again: the GPU is released and takes tasks.
  fs::remove(dir_ / "mps" / ("fake-gpu-fault-" + gpu_a));
  Json ok;
  for (int i = 0; i < 250; ++i) {
    ok = server_->Call("RunTask", {{"taskDefinition", "big"}});
    if (!ok["tasks"].empty()) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(ok["tasks"].size(), 1u);
  EXPECT_EQ(ok["tasks"][0]["containers"][0]["gpuIds"][0], gpu_a);
}

TEST_F(ChannelTest, ContainerThatCannotStartFailsTheTask) {
  StartAgent();
  server_->Call("RegisterTaskDefinition",
                {{"family", "missing"},
                 {"containerDefinitions", Json::array({{{"name", "main"}, {"image", "x"}, {"memory", 64},
                                                        {"entryPoint", {"/nonexistent/program"}}}})}});
  std::string arn = Run("missing");
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(t["stopCode"], "TaskFailedToStart");
  EXPECT_NE(t["stoppedReason"].get<std::string>().find("CannotStartContainerError"), std::string::npos);
}

TEST_F(ChannelTest, ChannelRefusesUnknownInstances) {
  auto c = agent::ChannelClient::Connect(*agent::ServerEndpoint::Parse(server_->url()),
                                         "/agent/v1/channel?containerInstance=arn%3Anope", {});
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace gpupack
