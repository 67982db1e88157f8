// The server and real agents on loopback: the channel, the process runtime, MPS gating, faults, restarts.
// Agents use simulated GPUs (fake:SPEC) and the simulated MPS daemon; everything else is real: HTTP, the
// WebSocket channel, SQLite, fork/exec.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/channel_client.h"
#include "agent/fake_gpus.h"
#include "agent/server_connection.h"
#include "api/channel/agent_channel.h"
#include "engine/control_plane.h"
#include "api/ecs/ecs_handler.h"
#include "api/http/http_server.h"
#include "storage/group_committer.h"
#include "storage/sqlite_store.h"
#include "tests/unit/in_process_server.h"
#include "tests/unit/temp_dir.h"

namespace gpupack {
namespace {

namespace fs = std::filesystem;
using agent::Json;
using namespace std::chrono_literals;

// TestServer is `gpupack server` in-process on port 0 with a short heartbeat window.
class TestServer : public testing_support::InProcessServer {
 public:
  TestServer(const std::string& db, uint16_t port = 0, api::AgentChannelOptions channel = {200ms, 3})
      : InProcessServer(db, {port, std::move(channel), nullptr}) {}

  Json Call(const std::string& op, const Json& body) {
    auto r = agent::CallEcs(*agent::ServerEndpoint::Parse(url()), op, body);
    EXPECT_TRUE(r.ok()) << op << ": " << r.status().message();
    return r.ok() ? *r : Json();
  }
};

class ChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);
    // The simulated GPUs read <dir_>/fake-gpu-processes.json on every call: the watchdog's input.
    setenv(agent::kFakeGpuDirEnv, dir_.c_str(), 1);
    server_ = std::make_unique<TestServer>((dir_ / "state.db").string());
  }
  void TearDown() override {
    agent_.reset();
    server_.reset();
    unsetenv(agent::kFakeGpuDirEnv);
  }

  agent::AgentOptions Options() {
    agent::AgentOptions o;
    o.server = server_->url();
    // The tasks' scripts write into this test's own directory (mode 0700): they run as the agent's user, named,
    // since a root agent otherwise runs them as nobody.
    o.task_user = geteuid() == 0 ? "root" : "";
    o.task_uids = task_uids_;
    o.gpus = "fake:2x22587";
    o.name = "node-a";
    o.state_dir = (dir_ / "agent").string();
    o.mps_pipe_dir = (dir_ / "mps").string();
    o.cpu = 4096;
    o.memory = 8192;
    o.stop_grace = stop_grace_;
    o.monitor_interval = 20ms;
    o.mps_probe_interval = 50ms;
    o.watchdog_interval = watchdog_interval_;
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

  // RunSleeper runs a task whose container sleeps for a minute, waits until it is RUNNING and sets `pid` to its
  // process (0 when it never wrote it).
  std::string RunSleeper(int& pid) {
    const fs::path pid_file = dir_ / "pid";
    RegisterScript("sleeper", "echo $$ > " + pid_file.string() + "; exec sleep 60");
    const std::string arn = Run("sleeper");
    WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
    pid = ReadPid(pid_file);  // waits for a whole line: the file exists, still empty, before echo writes it
    return arn;
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

  // SetGpuProcesses replaces what the simulated GPUs report (atomically: the agent may read at any moment).
  // Each entry: {pid, GPU UUID, MiB}.
  void SetGpuProcesses(const std::vector<std::tuple<int, std::string, int>>& processes) {
    Json list = Json::array();
    for (const auto& [pid, gpu, mib] : processes) list.push_back({{"pid", pid}, {"gpuUuid", gpu}, {"usedMiB", mib}});
    const fs::path tmp = dir_ / "fake-gpu-processes.json.tmp";
    std::ofstream(tmp) << list.dump();
    fs::rename(tmp, dir_ / agent::kFakeGpuProcessesFile);
  }

  // OtherGpu: a GPU of the (one) instance that is not `gpu`.
  std::string OtherGpu(const std::string& gpu) {
    Json ci = WaitInstance([](const Json&) { return true; });
    for (const auto& g : ci["gpuDevices"])
      if (g["gpuId"] != gpu) return g["gpuId"];
    ADD_FAILURE() << "the instance has no GPU other than " << gpu;
    return "";
  }

  // ReadPid waits (bounded) for `file` to hold a full line and returns the number on it, 0 if it never does.
  int ReadPid(const fs::path& file) {
    for (int i = 0; i < 500; ++i) {
      std::ifstream in(file);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.find('\n') != std::string::npos) return std::stoi(text);
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << file << " never held a pid";
    return 0;
  }

  // WaitGone waits (bounded) until a process has exited: no such process, or a zombie nobody reaped yet.
  static bool WaitGone(int pid) {
    for (int i = 0; i < 500; ++i) {
      std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      size_t paren = stat.rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // A script whose shell starts a child (in the shell's process group), writes the child's pid to `pid_file`
  // and waits: GPU memory is then "used" by that child, so attribution goes through the process tree.
  static std::string ChildScript(const fs::path& pid_file) {
    return "sleep 60 & echo $! > " + pid_file.string() + ".tmp; mv " + pid_file.string() + ".tmp " +
           pid_file.string() + "; wait";
  }

  testing_support::TempDir tmp_{"gpupack-channel"};  // tmp_: this test's directory; outlives the server and agent
  fs::path dir_ = tmp_.path();
  std::chrono::milliseconds watchdog_interval_ = 20ms;
  std::chrono::milliseconds stop_grace_ = 300ms;
  bool stop_tasks_on_exit_ = true;
  std::string task_uids_;  // the agent's --task-uids (none unless a test sets it)
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
  int pid = 0;
  const std::string arn = RunSleeper(pid);
  ASSERT_GT(pid, 0);
  server_->Call("StopTask", {{"task", arn}, {"reason", "enough"}});
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(t["stopCode"], "UserInitiated");
  EXPECT_EQ(t["stoppedReason"], "enough");
  EXPECT_EQ(t["containers"][0]["exitCode"], 128 + 15);  // SIGTERM
  EXPECT_NE(kill(pid, 0), 0);  // the process is gone
}

// A forced deregistration stops the instance's tasks on the agent too (their processes do not outlive it), the
// instance stays INACTIVE and disconnected while the agent's heartbeats go on, and it cannot register again
// under its ARN.
TEST_F(ChannelTest, AForcedDeregistrationStopsTheWorkloadAndTheInstanceStaysGone) {
  StartAgent();
  int pid = 0;
  const std::string arn = RunSleeper(pid);
  ASSERT_GT(pid, 0);
  const Json instance = WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  const std::string instance_arn = instance["containerInstanceArn"];
  server_->Call("DeregisterContainerInstance", {{"containerInstance", instance_arn}, {"force", true}});
  const Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(t["stoppedReason"], "container instance deregistered");
  for (int i = 0; i < 250 && kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_NE(kill(pid, 0), 0) << "the workload outlived its instance's deregistration";
  // Heartbeats go on for more than the channel's window: the instance stays INACTIVE and disconnected.
  std::this_thread::sleep_for(1500ms);
  const Json d = server_->Call("DescribeContainerInstances", {{"containerInstances", Json::array({instance_arn})}});
  EXPECT_EQ(d["containerInstances"][0]["status"], "INACTIVE");
  EXPECT_EQ(d["containerInstances"][0]["agentConnected"], false);
  auto again = agent::CallEcs(*agent::ServerEndpoint::Parse(server_->url()), "RegisterContainerInstance",
                              {{"containerInstanceArn", instance_arn},
                               {"totalResources", {{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", 1024}},
                                                   {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", 1024}}}}});
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("was deregistered and cannot register again"), std::string::npos)
      << again.status().message();
  // The agent tells this refusal apart by its code ("code": "InstanceDeregistered" beside the ECS type).
  EXPECT_EQ(again.status().code(), ErrorCode::kInstanceDeregistered);
}

// An agent that was down while its instance was deregistered stops what it left running when it comes back,
// and neither re-activates the instance nor registers the host as a new one.
TEST_F(ChannelTest, AnAgentDownDuringADeregistrationStopsItsTasksOnRestartAndStaysOut) {
  stop_tasks_on_exit_ = false;  // the agent "dies": its tasks keep running
  StartAgent();
  int pid = 0;
  const std::string arn = RunSleeper(pid);
  ASSERT_GT(pid, 0);
  const std::string instance_arn = WaitInstance([](const Json&) { return true; })["containerInstanceArn"];
  agent_->Stop();
  agent_.reset();
  WaitInstance([](const Json& c) { return c["agentConnected"] == false; });
  server_->Call("DeregisterContainerInstance", {{"containerInstance", instance_arn}, {"force", true}});
  ASSERT_EQ(kill(pid, 0), 0) << "the workload should still run: its agent is down";

  auto again = agent::Agent::Create(Options());
  ASSERT_TRUE(again.ok()) << again.status().message();
  agent_ = std::move(*again);
  const Status started = agent_->Start();
  EXPECT_FALSE(started.ok());
  EXPECT_NE(started.message().find("deregistered container instance"), std::string::npos) << started.message();
  EXPECT_NE(started.message().find("instance.json"), std::string::npos) << started.message();
  for (int i = 0; i < 250 && kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_NE(kill(pid, 0), 0) << "the workload outlived its instance's deregistration";
  agent_.reset();
  // No instance came back: the one there is stays INACTIVE and none was added.
  const Json list = server_->Call("ListContainerInstances", {{"status", "ACTIVE"}});
  EXPECT_TRUE(list["containerInstanceArns"].empty()) << list.dump();
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

// With --task-uids every task has a uid of its own: when the range is used up the next task fails to start, saying
// why, as other start failures do, and once a task has ended its uid serves the next. Needs root.
TEST_F(ChannelTest, ATaskThatFindsNoFreeTaskUidFailsToStartSayingSo) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run tasks as other users";
  task_uids_ = "200030-200030";
  StartAgent();
  RegisterScript("cpu-only", "exec sleep 60", /*mps_memory=*/0);
  const auto running = [](const Json& t) { return t["lastStatus"] == "RUNNING"; };
  const auto stopped = [](const Json& t) { return t["lastStatus"] == "STOPPED"; };
  const std::string holder = Run("cpu-only");
  WaitTask(holder, running);
  const Json refused = WaitTask(Run("cpu-only"), stopped);
  EXPECT_EQ(refused["stopCode"], "TaskFailedToStart");
  EXPECT_EQ(refused.value("stoppedReason", "").rfind(
                "CannotStartContainerError: process runtime: no free uid in --task-uids 200030-200030", 0),
            0u)
      << refused.dump();
  server_->Call("StopTask", {{"task", holder}});
  WaitTask(holder, stopped);
  const std::string next = Run("cpu-only");
  WaitTask(next, running);
  server_->Call("StopTask", {{"task", next}});
  WaitTask(next, stopped);
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
  // DescribeContainerInstances says so in ECS's healthStatus.
  Json impaired = WaitInstance([](const Json& c) { return c["healthStatus"]["overallStatus"] == "IMPAIRED"; });
  EXPECT_EQ(impaired["healthStatus"]["details"][0]["type"], "CONTAINER_RUNTIME");
  EXPECT_EQ(impaired["healthStatus"]["details"][0]["status"], "IMPAIRED");
  // The daemon comes back: the instance recovers.
  fs::remove(dir_ / "mps" / "fake-mps-health");
  WaitInstance([](const Json& c) { return c["healthStatus"]["overallStatus"] == "OK"; });
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
  // DescribeContainerInstances marks exactly that GPU as held.
  Json held = WaitInstance([&](const Json& c) {
    for (const auto& g : c["gpuDevices"])
      if (g["gpuId"] == gpu_a && g.value("heldAfterFault", false)) return true;
    return false;
  });
  for (const auto& g : held["gpuDevices"]) {
    if (g["gpuId"] != gpu_a) {
      EXPECT_FALSE(g.contains("heldAfterFault")) << g.dump();
    }
  }
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

// ---- The GPU memory watchdog (docs/agent-channel.md "Limits that hold") -------------------------------------------------

TEST_F(ChannelTest, WatchdogStopsATaskOverItsGpuMemoryAndLeavesItsNeighbourAlone) {
  StartAgent();
  RegisterScript("greedy", ChildScript(dir_ / "greedy.pid"), 4096);
  RegisterScript("polite", ChildScript(dir_ / "polite.pid"), 4096);
  std::string greedy = Run("greedy");
  std::string polite = Run("polite");
  Json tg = WaitTask(greedy, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  Json tp = WaitTask(polite, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  const int greedy_child = ReadPid(dir_ / "greedy.pid");
  const int polite_child = ReadPid(dir_ / "polite.pid");
  ASSERT_GT(greedy_child, 0);
  ASSERT_GT(polite_child, 0);
  const std::string gpu_g = tg["containers"][0]["gpuIds"][0];
  const std::string gpu_p = tp["containers"][0]["gpuIds"][0];
  // The greedy task's child lifted its MPS limit and uses 5,000 MiB of the 4,096 it declared; the polite one
  // uses 1,000 of its 4,096. An unrelated process (this test) uses a lot on the same GPU: nobody's task.
  SetGpuProcesses({{greedy_child, gpu_g, 5000}, {polite_child, gpu_p, 1000}, {getpid(), gpu_g, 9000}});
  Json stopped = WaitTask(greedy, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(stopped["stopCode"], "EssentialContainerExited");
  const std::string reason = stopped.value("stoppedReason", "");
  EXPECT_NE(reason.find("GPU memory limit exceeded"), std::string::npos) << reason;
  EXPECT_NE(reason.find("5000 MiB"), std::string::npos) << reason;
  EXPECT_NE(reason.find("4096 MiB"), std::string::npos) << reason;
  EXPECT_NE(reason.find(gpu_g), std::string::npos) << reason;
  const std::string creason = stopped["containers"][0].value("reason", "");
  EXPECT_EQ(creason.rfind("GpuMemoryLimitExceeded", 0), 0u) << creason;
  EXPECT_TRUE(WaitGone(greedy_child)) << "the stopped task's child " << greedy_child << " is still alive";
  // The neighbour runs on, and only its memory is still held.
  WaitInstance([](const Json& c) {
    const int remaining =
        c["gpuDevices"][0]["remainingMemoryInMiB"].get<int>() + c["gpuDevices"][1]["remainingMemoryInMiB"].get<int>();
    return remaining == 2 * 22587 - 4096;
  });
  Json dp = server_->Call("DescribeTasks", {{"tasks", Json::array({polite})}});
  EXPECT_EQ(dp["tasks"][0]["lastStatus"], "RUNNING");
  EXPECT_EQ(kill(polite_child, 0), 0);
  server_->Call("StopTask", {{"task", polite}});
  WaitTask(polite, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
}

TEST_F(ChannelTest, WatchdogStopsATaskUsingAGpuItWasNotGiven) {
  StartAgent();
  RegisterScript("stray", ChildScript(dir_ / "stray.pid"), 4096);
  std::string arn = Run("stray");
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  const int child = ReadPid(dir_ / "stray.pid");
  ASSERT_GT(child, 0);
  const std::string mine = t["containers"][0]["gpuIds"][0];
  const std::string other = OtherGpu(mine);
  ASSERT_FALSE(other.empty());
  // Well within its memory, but on the other GPU (it ignored CUDA_VISIBLE_DEVICES).
  SetGpuProcesses({{child, mine, 100}, {child, other, 10}});
  Json stopped = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(stopped["stopCode"], "EssentialContainerExited");
  const std::string reason = stopped.value("stoppedReason", "");
  EXPECT_NE(reason.find("a GPU it was not given"), std::string::npos) << reason;
  EXPECT_NE(reason.find(other), std::string::npos) << reason;
  EXPECT_EQ(stopped["containers"][0].value("reason", "").rfind("GpuMemoryLimitExceeded", 0), 0u);
  WaitInstance([](const Json& c) { return c["gpuDevices"][0]["remainingMemoryInMiB"] == 22587 &&
                                          c["gpuDevices"][1]["remainingMemoryInMiB"] == 22587; });
}

TEST_F(ChannelTest, WatchdogLeavesATaskAtItsLimitAloneAndSumsItsProcesses) {
  StartAgent();
  RegisterScript("exact", "echo $$ > " + (dir_ / "exact-shell.pid").string() + "; " + ChildScript(dir_ / "exact.pid"),
                 4096);
  RegisterScript("witness", ChildScript(dir_ / "witness.pid"), 1024);
  std::string exact = Run("exact");
  Json te = WaitTask(exact, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  const int shell = ReadPid(dir_ / "exact-shell.pid");
  const int child = ReadPid(dir_ / "exact.pid");
  ASSERT_GT(shell, 0);
  ASSERT_GT(child, 0);
  const std::string gpu = te["containers"][0]["gpuIds"][0];
  // Two processes of the task: 3,000 + 1,096 = exactly the 4,096 MiB it declared.
  SetGpuProcesses({{shell, gpu, 3000}, {child, gpu, 1096}});
  // A witness over its limit, started afterwards: once the watchdog has stopped it, it has read the exact task
  // at least as many times, and left it alone.
  std::string witness = Run("witness");
  Json tw = WaitTask(witness, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  const int witness_child = ReadPid(dir_ / "witness.pid");
  ASSERT_GT(witness_child, 0);
  SetGpuProcesses({{shell, gpu, 3000}, {child, gpu, 1096},
                   {witness_child, tw["containers"][0]["gpuIds"][0].get<std::string>(), 2048}});
  WaitTask(witness, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  for (int i = 0; i < 10; ++i) {  // and several more readings
    std::this_thread::sleep_for(20ms);
    Json d = server_->Call("DescribeTasks", {{"tasks", Json::array({exact})}});
    ASSERT_EQ(d["tasks"][0]["lastStatus"], "RUNNING") << d.dump();
  }
  // One MiB more across its two processes is over.
  SetGpuProcesses({{shell, gpu, 3000}, {child, gpu, 1097}});
  Json stopped = WaitTask(exact, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  const std::string reason = stopped.value("stoppedReason", "");
  EXPECT_NE(reason.find("4097 MiB"), std::string::npos) << reason;
  EXPECT_NE(reason.find("4096 MiB"), std::string::npos) << reason;
}

TEST_F(ChannelTest, WatchdogSetsNoMemoryLimitOnADedicatedGpuButPolicesItsOtherGpus) {
  StartAgent();
  Json c = {{"name", "main"}, {"image", "busybox"}, {"memory", 64}, {"entryPoint", {"/bin/sh", "-c"}},
            {"command", {ChildScript(dir_ / "whole.pid")}},
            {"resourceRequirements", Json::array({{{"type", "GPU"}, {"value", "1"}}})}};
  server_->Call("RegisterTaskDefinition", {{"family", "whole"}, {"containerDefinitions", Json::array({c})}});
  std::string arn = Run("whole");
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  const int child = ReadPid(dir_ / "whole.pid");
  ASSERT_GT(child, 0);
  ASSERT_EQ(t["containers"][0]["gpuIds"].size(), 1u) << t.dump();
  const std::string mine = t["containers"][0]["gpuIds"][0];
  const std::string other = OtherGpu(mine);
  ASSERT_FALSE(other.empty());
  // All of its own GPU: no limit on a dedicated GPU.
  SetGpuProcesses({{child, mine, 22587}});
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(20ms);
    Json d = server_->Call("DescribeTasks", {{"tasks", Json::array({arn})}});
    ASSERT_EQ(d["tasks"][0]["lastStatus"], "RUNNING") << d.dump();
  }
  // The GPU it was not given is another matter.
  SetGpuProcesses({{child, mine, 22587}, {child, other, 1}});
  Json stopped = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  const std::string reason = stopped.value("stoppedReason", "");
  EXPECT_NE(reason.find("a GPU it was not given"), std::string::npos) << reason;
  EXPECT_NE(reason.find(other), std::string::npos) << reason;
}

TEST_F(ChannelTest, WatchdogOffStopsNothing) {
  watchdog_interval_ = 0ms;
  StartAgent();
  RegisterScript("greedy", ChildScript(dir_ / "greedy.pid"), 4096);
  std::string arn = Run("greedy");
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  const int child = ReadPid(dir_ / "greedy.pid");
  ASSERT_GT(child, 0);
  const std::string gpu = t["containers"][0]["gpuIds"][0];
  const std::string other = OtherGpu(gpu);
  SetGpuProcesses({{child, gpu, 20000}, {child, other, 20000}});
  // Many times the watchdog interval the other tests use (20 ms) and its two strikes.
  for (int i = 0; i < 15; ++i) {
    std::this_thread::sleep_for(20ms);
    Json d = server_->Call("DescribeTasks", {{"tasks", Json::array({arn})}});
    ASSERT_EQ(d["tasks"][0]["lastStatus"], "RUNNING") << d.dump();
  }
  EXPECT_EQ(kill(child, 0), 0);
  server_->Call("StopTask", {{"task", arn}});
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
}

// ---- A slow stop holds up nothing else (the agent's tasks run side by side) ----------------------------------

// A task whose two containers ignore SIGTERM takes two stop graces to stop (SIGKILL after each). Meanwhile a second
// task starts on the same agent within 2 s, and heartbeats keep flowing: the instance reads agentConnected at every
// poll, and the channel, which the server closes after 600 ms without a heartbeat, is never reopened.
TEST_F(ChannelTest, ASlowStopHoldsUpNeitherAnotherTasksStartNorTheHeartbeats) {
  stop_grace_ = 10s;
  StartAgent();
  auto stubborn = [&](const std::string& name) {
    const std::string ready = (dir_ / ("ready-" + name)).string();
    return Json{{"name", name}, {"image", "busybox"}, {"memory", 64}, {"entryPoint", {"/bin/sh", "-c"}},
                {"command", {"trap '' TERM; touch " + ready + "; sleep 600"}}};
  };
  server_->Call("RegisterTaskDefinition", {{"family", "stubborn"},
                                           {"containerDefinitions", Json::array({stubborn("main"), stubborn("side")})}});
  Json quick = {{"name", "main"}, {"image", "busybox"}, {"memory", 64}, {"entryPoint", {"/bin/sh", "-c"}},
                {"command", {"exec sleep 60"}}};
  server_->Call("RegisterTaskDefinition", {{"family", "quick"}, {"containerDefinitions", Json::array({quick})}});
  const std::string slow = Run("stubborn");
  WaitTask(slow, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  for (int i = 0; i < 500 && !(fs::exists(dir_ / "ready-main") && fs::exists(dir_ / "ready-side")); ++i)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(fs::exists(dir_ / "ready-main") && fs::exists(dir_ / "ready-side")) << "the containers never trapped TERM";
  ASSERT_EQ(server_->channel().connections_opened(), 1u);

  const auto stop_sent = std::chrono::steady_clock::now();
  server_->Call("StopTask", {{"task", slow}, {"reason", "slowly"}});
  const std::string fast = Run("quick");
  const auto run_sent = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::duration> fast_running;
  Json slow_task;
  int polls = 0, disconnected_polls = 0;
  for (int i = 0; i < 800; ++i) {  // every 50 ms, at most 40 s: the stop takes two graces, 20 s
    Json d = server_->Call("DescribeTasks", {{"tasks", Json::array({slow, fast})}});
    ASSERT_EQ(d["tasks"].size(), 2u) << d.dump();
    for (const Json& t : d["tasks"]) {
      if (t["taskArn"] == slow) slow_task = t;
      if (t["taskArn"] == fast && t["lastStatus"] == "RUNNING" && !fast_running)
        fast_running = std::chrono::steady_clock::now() - run_sent;
    }
    Json ci = server_->Call("DescribeContainerInstances",
                            {{"containerInstances", Json::array({agent_->instance_arn()})}});
    ++polls;
    if (ci["containerInstances"][0]["agentConnected"] != true) ++disconnected_polls;
    if (slow_task["lastStatus"] == "STOPPED") break;
    std::this_thread::sleep_for(50ms);
  }
  const auto stop_took = std::chrono::steady_clock::now() - stop_sent;
  ASSERT_EQ(slow_task["lastStatus"], "STOPPED") << slow_task.dump();
  // The stop really was slow: SIGTERM was ignored and each container was killed after its grace.
  EXPECT_GE(stop_took, 2 * 10s - 1s);
  EXPECT_EQ(slow_task["containers"][0]["exitCode"], 128 + 9) << slow_task.dump();
  EXPECT_EQ(slow_task["containers"][1]["exitCode"], 128 + 9) << slow_task.dump();
  EXPECT_EQ(slow_task["stoppedReason"], "slowly");
  // The other task started meanwhile, and the agent stayed connected throughout.
  EXPECT_TRUE(fast_running.has_value()) << "the second task never reached RUNNING during the stop";
  if (fast_running) {
    EXPECT_LE(*fast_running, 2s) << std::chrono::duration_cast<std::chrono::milliseconds>(*fast_running).count() << " ms";
  }
  EXPECT_GT(polls, 100);
  EXPECT_EQ(disconnected_polls, 0) << "of " << polls << " polls";
  EXPECT_EQ(server_->channel().connections_opened(), 1u);
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

// ---- pushes are acknowledged (docs/agent-channel.md, "Rules")

// RawPeer is a channel peer written here, not the agent: it says only what the test tells it to, so it can
// leave pushes unacked. Messages queue up for Next().
class RawPeer {
 public:
  bool Connect(const std::string& url, const std::string& instance_arn) {
    auto c = agent::ChannelClient::Connect(*agent::ServerEndpoint::Parse(url),
                                           "/agent/v1/channel?containerInstance=" + agent::PercentEncode(instance_arn),
                                           {[this](std::string m) {
                                              std::lock_guard lock(mu_);
                                              inbox_.push_back(Json::parse(m, nullptr, false));
                                              cv_.notify_all();
                                            },
                                            [this] {
                                              std::lock_guard lock(mu_);
                                              closed_ = true;
                                              cv_.notify_all();
                                            }});
    if (!c.ok()) return false;
    client_ = std::move(*c);
    return true;
  }
  void Send(const Json& m) { client_->Send(m.dump()); }
  // Next waits (bounded: 10 s) for the next message; null when the connection closed or nothing came.
  Json Next() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 10s, [this] { return !inbox_.empty() || closed_; });
    if (inbox_.empty()) return Json();
    Json m = std::move(inbox_.front());
    inbox_.pop_front();
    return m;
  }
  bool closed() {
    std::lock_guard lock(mu_);
    return closed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Json> inbox_;
  bool closed_ = false;
  std::unique_ptr<agent::ChannelClient> client_;
};

// RegisterRawInstance registers an instance with one simulated GPU for a RawPeer to speak for.
std::string RegisterRawInstance(TestServer& server) {
  server.Call("CreateCluster", {{"clusterName", "default"}});
  Json devices = Json::array({{{"id", "GPU-raw-0"}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", 22587}}}}});
  Json reg = server.Call("RegisterContainerInstance", {
      {"instanceIdentityDocument", Json{{"instanceId", "raw"}}.dump()},
      {"totalResources", Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", 4096}},
                                      {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", 8192}}})},
      {"platformDevices", devices},
      {"attributes", Json::array({{{"name", "gpupack.agent-channel"}, {"value", "v1"}},
                                  {{"name", "ecs.capability.gpu-sharing-mps"}}})}});
  return reg["containerInstance"]["containerInstanceArn"];
}

// The server's refusals carry a code (protocol::RefusalCode) beside their words: a declined upgrade in its body,
// an error message in its "code". The agent decides on the code alone.
TEST_F(ChannelTest, TheServersRefusalsCarryACode) {
  const std::string instance = RegisterRawInstance(*server_);
  const agent::ServerEndpoint endpoint = *agent::ServerEndpoint::Parse(server_->url());
  // Upgrades: an instance the server does not know (register again), and a target that names none.
  agent::DeclinedUpgrade unknown;
  auto u = agent::ChannelClient::Connect(
      endpoint, protocol::ChannelTarget("arn:aws:ecs:us-east-1:000000000000:container-instance/default/nope"), {},
      5000ms, &unknown);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(unknown.http_status, 400);
  EXPECT_EQ(Json::parse(unknown.body)["code"], "UnknownInstance") << unknown.body;
  EXPECT_EQ(agent::ReadDecline(unknown).action, agent::ChannelDecline::Action::kRegister);
  agent::DeclinedUpgrade bare;
  auto b = agent::ChannelClient::Connect(endpoint, protocol::kChannelPath, {}, 5000ms, &bare);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(Json::parse(bare.body)["code"], "Malformed") << bare.body;
  EXPECT_EQ(agent::ReadDecline(bare).action, agent::ChannelDecline::Action::kRetry);
  // Messages: one that cannot be read (its id echoed), and a report of a task that is not on the instance.
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_->url(), instance));
  peer.Send({{"type", "state"}, {"id", 7}});  // no taskArn
  Json malformed = peer.Next();
  EXPECT_EQ(malformed["type"], "error") << malformed.dump();
  EXPECT_EQ(malformed["code"], "Malformed");
  EXPECT_EQ(malformed["id"], 7);
  auto parsed = protocol::ParseServerMessage(malformed.dump());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(std::get<protocol::Error>(*parsed).code, protocol::RefusalCode::kMalformed);
  peer.Send({{"type", "state"}, {"id", 8}, {"taskArn", "arn:aws:ecs:us-east-1:000000000000:task/default/nope"},
             {"status", "RUNNING"}, {"containers", Json::array()}});
  Json rejected = peer.Next();
  EXPECT_EQ(rejected["type"], "error") << rejected.dump();
  EXPECT_EQ(rejected["code"], "Rejected");
  EXPECT_EQ(rejected["id"], 8);
}

// Fields an agent sends are bounded (docs/security.md, "Limits on input"): a registration whose instanceId is
// 1 MiB across 16 GPUs made the unsigned /metrics 98 MiB (the id is every GPU series' Hostname label), and
// control characters in instanceType reached the ecs.instance-type attribute. Both are refused with a message
// that names the field and never echoes the value; so are a channel report's oversized task ARN and a
// heartbeat's held GPU id with a control character (the channel's Malformed code).
// NullListener: an agent connection's listener that knows no tasks and ignores what it is told.
class NullListener : public agent::ServerConnection::Listener {
 public:
  std::vector<protocol::TaskReport> HelloTasks() override { return {}; }
  void OnWelcome(const protocol::Welcome&, const std::set<std::string>&) override {}
  void OnAssign(protocol::Assignment, int64_t) override {}
  void OnStop(const protocol::StopOrder&, int64_t) override {}
  void OnReportAcked(const std::string&, protocol::TaskStatus) override {}
  void OnDeregistered() override {}
};

TEST_F(ChannelTest, AnAgentsOversizedOrControlCharacterFieldsAreRefusedNamingTheField) {
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  NullListener listener;
  agent::ConnectionOptions o;
  o.server = *agent::ServerEndpoint::Parse(server_->url());
  o.state_dir = (dir_ / "agent").string();
  fs::create_directories(o.state_dir);
  o.registration.cpu = 4096;
  o.registration.memory = 8192;
  for (int i = 0; i < 16; ++i) {
    agent::GpuDevice d;
    d.index = i;
    d.uuid = "GPU-big-" + std::to_string(i);
    d.name = "Fake GPU";
    d.total_mib = d.usable_mib = 24576;
    o.registration.devices.push_back(d);
  }
  o.registration.name = std::string((1 << 20) - 4096, 'i');  // as much as a 1 MiB body holds
  {
    agent::ServerConnection connection(o, listener, {});
    const Status refused = connection.Register();
    EXPECT_EQ(refused.code(), ErrorCode::kInvalidParameter) << refused.message();
    EXPECT_NE(refused.message().find("instanceIdentityDocument"), std::string::npos) << refused.message().substr(0, 300);
    EXPECT_LT(refused.message().size(), 1000u);
  }
  o.registration.name = "i-0123456789abcdef0";
  o.registration.instance_type = "g5.xlarge\nfake: 1";
  {
    agent::ServerConnection connection(o, listener, {});
    const Status refused = connection.Register();
    EXPECT_EQ(refused.code(), ErrorCode::kInvalidParameter) << refused.message();
    EXPECT_NE(refused.message().find("instanceIdentityDocument.instanceType must be 1 to 64 letters"),
              std::string::npos) << refused.message();
    EXPECT_NE(refused.message().find("byte 0x0a at offset 9"), std::string::npos) << refused.message();
  }
  EXPECT_TRUE(server_->Call("ListContainerInstances", Json::object())["containerInstanceArns"].empty());

  const std::string instance = RegisterRawInstance(*server_);
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_->url(), instance));
  peer.Send({{"type", "state"}, {"id", 9}, {"taskArn", std::string(4096, 'a')}, {"status", "RUNNING"},
             {"containers", Json::array()}});
  Json long_arn = peer.Next();
  EXPECT_EQ(long_arn["code"], "Malformed") << long_arn.dump().substr(0, 300);
  EXPECT_EQ(long_arn["id"], 9);
  EXPECT_NE(long_arn["message"].get<std::string>().find("taskArn must be 1 to 1024"), std::string::npos);
  peer.Send({{"type", "heartbeat"}, {"id", 10}, {"heldGpus", Json::array({"GPU-\x01"})}});
  Json control = peer.Next();
  EXPECT_EQ(control["code"], "Malformed") << control.dump();
  EXPECT_EQ(control["id"], 10);
}

TEST_F(ChannelTest, AgentAcksAssignAndStopPushesAndTheyLeaveThePendingSet) {
  // No re-send within the test: only the agent's acks can empty the pending set.
  api::AgentChannelOptions options{200ms, 3};
  options.push_ack_timeout = 60s;
  auto pushed = std::make_shared<std::vector<Json>>();
  auto pushed_mu = std::make_shared<std::mutex>();
  options.drop_push = [pushed, pushed_mu](const std::string&, const Json& m) {
    std::lock_guard lock(*pushed_mu);
    pushed->push_back(m);
    return false;  // an observer: every push is sent
  };
  server_.reset();
  server_ = std::make_unique<TestServer>((dir_ / "state.db").string(), 0, options);
  StartAgent();
  const std::string instance = agent_->instance_arn();
  RegisterScript("sleeper", "exec sleep 60");
  std::string arn = Run("sleeper");
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  // The agent acks an assign before it reports the task RUNNING, on the same connection: the ack is in.
  EXPECT_EQ(server_->channel().unacked_pushes(instance), 0u);
  server_->Call("StopTask", {{"task", arn}});
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(server_->channel().unacked_pushes(instance), 0u);
  std::lock_guard lock(*pushed_mu);
  ASSERT_EQ(pushed->size(), 2u);
  EXPECT_EQ((*pushed)[0]["type"], "assign");
  EXPECT_EQ((*pushed)[1]["type"], "stop");
  EXPECT_TRUE((*pushed)[0]["id"].is_number_integer());
  EXPECT_NE((*pushed)[0]["id"], (*pushed)[1]["id"]);
  EXPECT_EQ(server_->channel().push_retries(), 0u);
  EXPECT_EQ(server_->channel().connections_opened(), 1u);
}

TEST_F(ChannelTest, AnAssignLostOnALiveConnectionIsSentAgainAndTheTaskRunsWithoutAReconnect) {
  api::AgentChannelOptions options{200ms, 3};
  options.push_ack_timeout = 300ms;
  auto dropped = std::make_shared<std::atomic<int>>(0);
  options.drop_push = [dropped](const std::string&, const Json& m) {
    if (m["type"] != "assign") return false;
    int expected = 0;
    return dropped->compare_exchange_strong(expected, 1);  // the first assign never reaches the agent
  };
  server_.reset();
  server_ = std::make_unique<TestServer>((dir_ / "state.db").string(), 0, options);
  StartAgent();
  const std::string instance = agent_->instance_arn();
  ASSERT_EQ(server_->channel().connections_opened(), 1u);
  RegisterScript("sleeper", "exec sleep 60");
  std::string arn = Run("sleeper");
  // Heartbeats keep the connection up, so no reconnect (and no welcome) would deliver the task: the re-send does.
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  EXPECT_EQ(dropped->load(), 1);
  EXPECT_GE(server_->channel().push_retries(), 1u);
  EXPECT_EQ(server_->channel().push_unacked_closes(), 0u);
  EXPECT_EQ(server_->channel().connections_opened(), 1u);
  EXPECT_EQ(server_->channel().unacked_pushes(instance), 0u);
  server_->Call("StopTask", {{"task", arn}});
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
}

TEST_F(ChannelTest, APeerThatNeverAcksGetsBoundedResendsThenACloseThenReconcile) {
  // A heartbeat window of 30 s: only the unacked push may close the connection here.
  api::AgentChannelOptions options{10s, 3};
  options.push_ack_timeout = 100ms;
  options.push_attempts = 3;
  server_.reset();
  server_ = std::make_unique<TestServer>((dir_ / "state.db").string(), 0, options);
  const std::string instance = RegisterRawInstance(*server_);
  auto peer = std::make_unique<RawPeer>();
  ASSERT_TRUE(peer->Connect(server_->url(), instance));
  peer->Send({{"type", "hello"}, {"tasks", Json::array()}, {"impaired", false}});
  Json welcome = peer->Next();
  ASSERT_EQ(welcome["type"], "welcome") << welcome.dump();
  RegisterScript("sleeper", "exec sleep 60");
  std::string arn = Run("sleeper");
  // The same assign, same id, push_attempts times; then the server closes the connection.
  std::vector<Json> assigns;
  for (Json m = peer->Next(); !m.is_null(); m = peer->Next()) assigns.push_back(m);
  ASSERT_TRUE(peer->closed());
  ASSERT_EQ(assigns.size(), 3u);
  for (const Json& m : assigns) {
    EXPECT_EQ(m["type"], "assign");
    EXPECT_EQ(m["id"], assigns[0]["id"]);
    EXPECT_EQ(m["task"]["taskArn"], arn);
  }
  EXPECT_EQ(server_->channel().push_retries(), 2u);
  EXPECT_EQ(server_->channel().push_unacked_closes(), 1u);
  WaitInstance([](const Json& c) { return c["agentConnected"] == false; });
  // On reconnect the welcome's reconcile delivers the task; nothing is left pending from the old connection.
  peer = std::make_unique<RawPeer>();
  ASSERT_TRUE(peer->Connect(server_->url(), instance));
  peer->Send({{"type", "hello"}, {"tasks", Json::array()}, {"impaired", false}});
  welcome = peer->Next();
  ASSERT_EQ(welcome["type"], "welcome") << welcome.dump();
  ASSERT_EQ(welcome["assign"].size(), 1u);
  EXPECT_EQ(welcome["assign"][0]["taskArn"], arn);
  EXPECT_EQ(server_->channel().unacked_pushes(instance), 0u);
  EXPECT_EQ(server_->channel().connections_opened(), 2u);
  Json t = server_->Call("DescribeTasks", {{"tasks", Json::array({arn})}});
  EXPECT_EQ(t["tasks"][0]["lastStatus"], "PENDING");
}

// A heartbeat that changes nothing is acked from the read view, so a busy writer never delays it; one that
// changes the instance waits for the writer and is acked once durable. The writer is held busy here by a read
// of its working state that does not return until the test says so.
TEST_F(ChannelTest, AnUnchangedHeartbeatIsAckedWhileTheWriterIsBusyAndAChangedOneWaitsForIt) {
  api::AgentChannelOptions options{10s, 3};  // the heartbeat window does not close the peer within the test
  server_.reset();
  server_ = std::make_unique<TestServer>((dir_ / "state.db").string(), 0, options);
  const std::string instance = RegisterRawInstance(*server_);
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_->url(), instance));
  peer.Send({{"type", "hello"}, {"tasks", Json::array()}, {"impaired", false}});
  Json welcome = peer.Next();
  ASSERT_EQ(welcome["type"], "welcome") << welcome.dump();

  std::promise<void> release, held;
  std::future<void> busy = std::async(std::launch::async, [&] {
    server_->control_plane().applier().Inspect([&](const ClusterState&) {
      held.set_value();
      release.get_future().wait();
    });
  });
  held.get_future().wait();  // the writer is inside the read now, and stays there
  peer.Send({{"type", "heartbeat"}, {"id", 7}, {"impaired", false}, {"heldGpus", Json::array()}});
  Json ack = peer.Next();
  EXPECT_EQ(ack["type"], "ack") << ack.dump();
  EXPECT_EQ(ack["id"], 7);
  EXPECT_EQ(server_->channel().heartbeats_from_view(), 1u);

  // Impaired is a change: it needs the writer, which is busy, so no ack can come until it is released.
  peer.Send({{"type", "heartbeat"}, {"id", 8}, {"impaired", true}, {"heldGpus", Json::array()}});
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(server_->channel().heartbeats_written(), 1u);
  release.set_value();
  busy.get();
  ack = peer.Next();
  EXPECT_EQ(ack["type"], "ack") << ack.dump();
  EXPECT_EQ(ack["id"], 8);
  // The next unchanged heartbeat (impaired, as the view now shows) is acked from the view again.
  peer.Send({{"type", "heartbeat"}, {"id", 9}, {"impaired", true}, {"heldGpus", Json::array()}});
  ack = peer.Next();
  EXPECT_EQ(ack["id"], 9);
  EXPECT_EQ(server_->channel().heartbeats_from_view(), 2u);
  EXPECT_EQ(server_->channel().heartbeats_written(), 1u);
}

// An older agent acts on pushes but never acks them. Its report about the task proves it got the push: the
// server forgets the push instead of sending copies and finally closing the channel. A copy of an assign after
// such an agent finished and forgot the task would start the task a second time.
TEST_F(ChannelTest, AnAgentThatActsOnPushesWithoutAckingIsNeitherSentCopiesAfterItsReportNorClosed) {
  api::AgentChannelOptions options{10s, 3};  // the heartbeat window does not close the peer within the test
  options.push_ack_timeout = 100ms;
  options.push_attempts = 3;
  server_.reset();
  server_ = std::make_unique<TestServer>((dir_ / "state.db").string(), 0, options);
  const std::string instance = RegisterRawInstance(*server_);
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_->url(), instance));
  peer.Send({{"type", "hello"}, {"tasks", Json::array()}, {"impaired", false}});
  ASSERT_EQ(peer.Next()["type"], "welcome");
  RegisterScript("sleeper", "exec sleep 60");
  std::string arn = Run("sleeper");
  // report sends a state report and waits (bounded) for its ack, skipping any copy of a push meanwhile.
  auto report = [&](int id, const std::string& status) {
    peer.Send({{"type", "state"}, {"id", id}, {"taskArn", arn}, {"status", status},
               {"containers", Json::array({{{"containerName", "main"}, {"status", status}}})}});
    for (Json m = peer.Next(); !m.is_null(); m = peer.Next())
      if (m["type"] == "ack" && m["id"] == id) return true;
    return false;
  };
  auto settled = [&] {  // the pending set empties (bounded wait)
    for (int i = 0; i < 500 && server_->channel().unacked_pushes(instance) != 0; ++i) std::this_thread::sleep_for(20ms);
  };
  Json assign = peer.Next();
  ASSERT_EQ(assign["type"], "assign") << assign.dump();
  ASSERT_TRUE(report(1, "RUNNING"));
  settled();
  EXPECT_FALSE(peer.closed());
  EXPECT_EQ(server_->channel().push_unacked_closes(), 0u);
  EXPECT_EQ(server_->channel().connections_opened(), 1u);
  server_->Call("StopTask", {{"task", arn}});
  Json stop;
  for (stop = peer.Next(); !stop.is_null() && stop["type"] != "stop"; stop = peer.Next()) {
  }
  ASSERT_EQ(stop["type"], "stop") << stop.dump();
  ASSERT_TRUE(report(2, "STOPPED"));  // a real agent forgets the task now
  settled();
  EXPECT_EQ(server_->channel().unacked_pushes(instance), 0u);
  EXPECT_FALSE(peer.closed());
  EXPECT_EQ(server_->channel().push_unacked_closes(), 0u);
  EXPECT_EQ(server_->channel().connections_opened(), 1u);
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
}

// ---- GPU memory in use on heartbeats (docs/agent-channel.md, "GPU memory in use")

// WaitGpuMemory waits (bounded: 10 s) until the channel's figures of `arn` satisfy `pred` (none: std::nullopt).
std::optional<api::GpuMemoryUsage::Reading> WaitGpuMemory(
    const api::AgentChannel& channel, const std::string& arn,
    const std::function<bool(const std::optional<api::GpuMemoryUsage::Reading>&)>& pred) {
  std::optional<api::GpuMemoryUsage::Reading> r;
  for (int i = 0; i < 500; ++i) {
    r = channel.gpu_memory().Of(arn);
    if (pred(r)) return r;
    std::this_thread::sleep_for(20ms);
  }
  ADD_FAILURE() << "the GPU memory figures of " << arn << " never reached the expected state";
  return r;
}

// A real agent: what the simulated GPUs list for the task's process reaches the channel's figures with the
// next heartbeat, in bytes, on the task's GPU; the GPU it uses without holding it too; gone once the task stops.
TEST_F(ChannelTest, AHeartbeatCarriesEachRunningTasksGpuMemoryToTheChannelUntilTheTaskStops) {
  StartAgent();
  int pid = 0;
  const std::string arn = RunSleeper(pid);
  ASSERT_GT(pid, 0);
  Json t = WaitTask(arn, [](const Json& x) { return x["lastStatus"] == "RUNNING"; });
  const std::string gpu = t["containers"][0]["gpuIds"][0];
  // Before any process: the GPU it was given reads 0 (a reading), not "nothing reported".
  auto idle = WaitGpuMemory(server_->channel(), arn, [](const auto& r) { return r.has_value(); });
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(idle->gpus, (std::map<std::string, int64_t>{{gpu, 0}}));
  SetGpuProcesses({{pid, gpu, 1234}});
  auto used = WaitGpuMemory(server_->channel(), arn, [&gpu](const auto& r) { return r && r->gpus.count(gpu) && r->gpus.at(gpu) > 0; });
  ASSERT_TRUE(used.has_value());
  EXPECT_EQ(used->gpus, (std::map<std::string, int64_t>{{gpu, int64_t{1234} * 1048576}}));
  EXPECT_GT(used->read_at, 0);
  server_->Call("StopTask", {{"task", arn}});
  WaitTask(arn, [](const Json& x) { return x["lastStatus"] == "STOPPED"; });
  WaitGpuMemory(server_->channel(), arn, [](const auto& r) { return !r.has_value(); });
  EXPECT_EQ(server_->channel().gpu_memory().tasks(), 0u);
}

// A raw peer: only the tasks the server runs on that instance are kept, on that instance's GPUs; a heartbeat
// whose figures are malformed or past their bounds is acked and applied (its impairment counts) while its
// figures are refused; each heartbeat replaces the instance's figures; a disconnect drops them.
TEST_F(ChannelTest, ARefusedGpuMemoryFigureLosesNothingElseOfTheHeartbeatAndADisconnectDropsTheFigures) {
  api::AgentChannelOptions options{10s, 3};  // the heartbeat window does not close the peer within the test
  server_.reset();
  server_ = std::make_unique<TestServer>((dir_ / "state.db").string(), 0, options);
  const std::string instance = RegisterRawInstance(*server_);
  auto peer = std::make_unique<RawPeer>();
  ASSERT_TRUE(peer->Connect(server_->url(), instance));
  peer->Send({{"type", "hello"}, {"tasks", Json::array()}, {"impaired", false}});
  ASSERT_EQ(peer->Next()["type"], "welcome");
  RegisterScript("sleeper", "exec sleep 60");
  const std::string arn = Run("sleeper");
  Json assign = peer->Next();
  ASSERT_EQ(assign["type"], "assign") << assign.dump();
  peer->Send({{"type", "ack"}, {"id", assign["id"]}});
  // send: a message with id `id`, then its answer (skipping anything else), bounded.
  auto send = [&](const Json& m) {
    peer->Send(m);
    for (Json a = peer->Next(); !a.is_null(); a = peer->Next())
      if (a.contains("id") && a["id"] == m["id"]) return a;
    return Json();
  };
  ASSERT_EQ(send({{"type", "state"}, {"id", 1}, {"taskArn", arn}, {"status", "RUNNING"},
                  {"containers", Json::array({{{"containerName", "main"}, {"status", "RUNNING"}}})}})["type"], "ack");
  WaitTask(arn, [](const Json& x) { return x["lastStatus"] == "RUNNING"; });
  const int64_t bytes = int64_t{3000} * 1048576;
  auto heartbeat = [&](int id, bool impaired, Json used) {
    Json m = {{"type", "heartbeat"}, {"id", id}, {"impaired", impaired}, {"heldGpus", Json::array()}};
    if (!used.is_null()) m["gpuMemoryUsed"] = std::move(used);
    return send(m);
  };
  const Json good = {{"ageMs", 1500},
                     {"tasks", Json::array({{{"taskArn", arn},
                                             {"gpus", Json::array({{{"gpuId", "GPU-raw-0"}, {"bytes", bytes}},
                                                                   {{"gpuId", "GPU-elsewhere"}, {"bytes", 7}}})}},
                                            {{"taskArn", "arn:aws:ecs:us-east-1:0:task/default/not-ours"},
                                             {"gpus", Json::array({{{"gpuId", "GPU-raw-0"}, {"bytes", 9}}})}}})}};
  ASSERT_EQ(heartbeat(2, false, good)["type"], "ack");
  auto kept = server_->channel().gpu_memory().Of(arn);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->gpus, (std::map<std::string, int64_t>{{"GPU-raw-0", bytes}}));  // not a GPU of another host
  EXPECT_EQ(server_->channel().gpu_memory().tasks(), 1u);  // not a task the server does not run here
  const uint64_t generation = server_->channel().gpu_memory().generation();

  // Malformed (a number as text), then oversize (more tasks than the bound): each heartbeat is still acked and
  // its impairment applied; the figures are refused, so the instance's are dropped, not kept stale.
  Json malformed = good;
  malformed["tasks"][0]["gpus"][0]["bytes"] = "3000MiB";
  EXPECT_EQ(heartbeat(3, true, malformed)["type"], "ack");
  WaitInstance([](const Json& c) { return c["healthStatus"]["overallStatus"] == "IMPAIRED"; });
  EXPECT_EQ(server_->channel().gpu_memory_refusals(), 1u);
  EXPECT_FALSE(server_->channel().gpu_memory().Of(arn).has_value());
  EXPECT_GT(server_->channel().gpu_memory().generation(), generation);
  Json oversize = good;
  for (size_t i = 0; i < protocol::kMaxGpuMemoryTasks; ++i)
    oversize["tasks"].push_back({{"taskArn", "arn:t/" + std::to_string(i)}, {"gpus", Json::array()}});
  EXPECT_EQ(heartbeat(4, false, oversize)["type"], "ack");
  WaitInstance([](const Json& c) { return c["healthStatus"]["overallStatus"] == "OK"; });
  EXPECT_EQ(server_->channel().gpu_memory_refusals(), 2u);
  EXPECT_FALSE(server_->channel().gpu_memory().Of(arn).has_value());

  // Good again, then a heartbeat without the field (no reading): dropped; good again, then the disconnect.
  ASSERT_EQ(heartbeat(5, false, good)["type"], "ack");
  EXPECT_TRUE(server_->channel().gpu_memory().Of(arn).has_value());
  ASSERT_EQ(heartbeat(6, false, Json())["type"], "ack");
  EXPECT_FALSE(server_->channel().gpu_memory().Of(arn).has_value());
  ASSERT_EQ(heartbeat(7, false, good)["type"], "ack");
  EXPECT_TRUE(server_->channel().gpu_memory().Of(arn).has_value());
  peer.reset();
  WaitGpuMemory(server_->channel(), arn, [](const auto& r) { return !r.has_value(); });
  EXPECT_EQ(server_->channel().gpu_memory().tasks(), 0u);
  server_->Call("StopTask", {{"task", arn}});
}

// ---- log requests (docs/agent-channel.md, "Rules": a `logs` request is answered by its id, never acked)

TEST_F(ChannelTest, ALogRequestEndsOnceWithItsAnswerATimeoutOrAnAbsentAgent) {
  const std::string instance = RegisterRawInstance(*server_);
  RawPeer peer;
  ASSERT_TRUE(peer.Connect(server_->url(), instance));
  for (int i = 0; i < 100 && server_->channel().connected() == 0; ++i) std::this_thread::sleep_for(10ms);
  using Answer = Result<protocol::LogsAnswer>;
  auto answered = std::make_shared<std::promise<Answer>>();
  protocol::LogsRequest req;
  req.task_arn = "arn:t/1";
  req.container_name = "web";
  req.forward = false;
  req.terms = {"GET"};
  server_->channel().RequestLogs(instance, req, 10s, [answered](Answer a) { answered->set_value(std::move(a)); });
  const Json asked = peer.Next();
  ASSERT_EQ(asked.value("type", ""), "logs");
  EXPECT_EQ(asked["taskArn"], "arn:t/1");
  EXPECT_EQ(asked["containerName"], "web");
  EXPECT_EQ(asked["forward"], false);
  EXPECT_EQ(asked["terms"], Json::array({"GET"}));
  EXPECT_EQ(server_->channel().pending_requests(), 1u);
  // An answer with another id is ignored; the one with the request's id ends it.
  peer.Send({{"type", "logEvents"}, {"id", asked["id"].get<int64_t>() + 1000}, {"found", true}});
  peer.Send({{"type", "logEvents"},
             {"id", asked["id"]},
             {"found", true},
             {"events", Json::array({{{"timestamp", 5}, {"message", "GET /"}}})},
             {"nextForward", 20},
             {"nextBackward", 0}});
  auto future = answered->get_future();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  Answer a = future.get();
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->events, (std::vector<protocol::LogLine>{{5, "GET /"}}));
  EXPECT_EQ(a->next_forward, 20);
  EXPECT_EQ(server_->channel().pending_requests(), 0u);

  // No answer: the deadline ends it.
  auto timed_out = std::make_shared<std::promise<Answer>>();
  server_->channel().RequestLogs(instance, req, 100ms, [timed_out](Answer x) { timed_out->set_value(std::move(x)); });
  auto late = timed_out->get_future();
  ASSERT_EQ(late.wait_for(10s), std::future_status::ready);
  Answer t = late.get();
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("did not answer in time"), std::string::npos) << t.status().message();
  EXPECT_EQ(server_->channel().pending_requests(), 0u);

  // No agent: at once.
  std::optional<Answer> absent;
  server_->channel().RequestLogs("arn:aws:ecs:us-east-1:0:container-instance/default/none", req, 10s,
                                 [&absent](Answer x) { absent = std::move(x); });
  ASSERT_TRUE(absent.has_value());
  EXPECT_NE(absent->status().message().find("not connected"), std::string::npos);
}

TEST_F(ChannelTest, ChannelRefusesUnknownInstances) {
  auto c = agent::ChannelClient::Connect(*agent::ServerEndpoint::Parse(server_->url()),
                                         "/agent/v1/channel?containerInstance=arn%3Anope", {});
  EXPECT_FALSE(c.ok());
}


// ---- a hello larger than one message

// ManyTasksListener plays the agent's task manager behind a real ServerConnection: it records and acks what the
// server assigns, and its hello reports every task RUNNING with a long reason on each container.
class ManyTasksListener : public agent::ServerConnection::Listener {
 public:
  agent::ServerConnection* connection = nullptr;  // set before Start

  std::vector<protocol::TaskReport> HelloTasks() override {
    std::lock_guard lock(mu_);
    return tasks_;
  }
  void OnWelcome(const protocol::Welcome& welcome, const std::set<std::string>&) override {
    std::lock_guard lock(mu_);
    welcomes_.push_back(welcome);
  }
  void OnAssign(protocol::Assignment assignment, int64_t push_id) override {
    protocol::TaskReport r{assignment.task_arn, protocol::TaskStatus::kRunning, std::nullopt, "", {}};
    for (const auto& c : assignment.containers)
      r.containers.push_back({c.name, protocol::TaskStatus::kRunning, std::nullopt, std::string(200, 'r')});
    {
      std::lock_guard lock(mu_);
      tasks_.push_back(std::move(r));
    }
    connection->Ack(push_id);
  }
  void OnStop(const protocol::StopOrder&, int64_t push_id) override { connection->Ack(push_id); }
  void OnReportAcked(const std::string&, protocol::TaskStatus) override {}
  void OnDeregistered() override {}

  size_t tasks() {
    std::lock_guard lock(mu_);
    return tasks_.size();
  }
  std::vector<protocol::Welcome> welcomes() {
    std::lock_guard lock(mu_);
    return welcomes_;
  }

 private:
  std::mutex mu_;
  std::vector<protocol::TaskReport> tasks_;
  std::vector<protocol::Welcome> welcomes_;
};

// An agent with 360 tasks of 10 containers: its hello is over the channel's 1 MiB message limit. After a server
// restart it reconnects, its hello goes in parts, and the reconcile takes every task as RUNNING. Before the
// parts the server closed every such hello and the instance stayed disconnected.
TEST_F(ChannelTest, AnAgentWhoseHelloPassesTheMessageLimitReconnectsAndReconciles) {
  const std::string db = (dir_ / "state.db").string();
  const uint16_t port = server_->port();
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  ManyTasksListener listener;
  agent::ConnectionOptions o;
  o.server = *agent::ServerEndpoint::Parse(server_->url());
  o.state_dir = (dir_ / "agent").string();
  fs::create_directories(o.state_dir);
  o.registration.name = "many";
  o.registration.cpu = 4096;
  o.registration.memory = 65536;
  agent::ServerConnection connection(o, listener, {});
  listener.connection = &connection;
  ASSERT_TRUE(connection.Register().ok());
  connection.Start();
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  Json containers = Json::array();
  for (int i = 0; i < 10; ++i)
    containers.push_back({{"name", "container-" + std::to_string(i) + std::string(89, 'n')},
                          {"image", "busybox"},
                          {"memory", 6}});
  server_->Call("RegisterTaskDefinition", {{"family", "wide"}, {"containerDefinitions", containers}});
  std::vector<std::string> arns;
  for (int i = 0; i < 36; ++i) {
    Json ran = server_->Call("RunTask", {{"taskDefinition", "wide"}, {"count", 10}});
    ASSERT_EQ(ran["tasks"].size(), 10u) << ran.dump();
    for (const Json& t : ran["tasks"]) arns.push_back(t["taskArn"]);
  }
  for (int i = 0; i < 500 && listener.tasks() < arns.size(); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(listener.tasks(), 360u);
  const protocol::Hello hello{listener.HelloTasks(), false};
  const size_t hello_bytes = protocol::Serialize(protocol::AgentMessage(hello)).size();
  ASSERT_GT(hello_bytes, size_t{1} << 20);
  const std::vector<std::string> parts = protocol::SerializeHello(hello);
  EXPECT_GT(parts.size(), 1u);
  for (const std::string& part : parts) EXPECT_LE(part.size(), protocol::kHelloPartBytes);
  std::printf("a hello of 360 tasks x 10 containers: %zu bytes, sent as %zu parts\n", hello_bytes, parts.size());

  // The server restarts: the agent reconnects with its hello of 360 tasks.
  server_.reset();
  server_ = std::make_unique<TestServer>(db, port);
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  for (int i = 0; i < 500 && listener.welcomes().size() < 2; ++i) std::this_thread::sleep_for(20ms);
  const std::vector<protocol::Welcome> welcomes = listener.welcomes();
  ASSERT_GE(welcomes.size(), 2u);
  EXPECT_TRUE(welcomes.back().assign.empty());  // the agent lacks nothing
  EXPECT_TRUE(welcomes.back().stop.empty());    // and runs nothing the server does not know
  for (size_t begin = 0; begin < arns.size(); begin += 100) {
    Json batch = Json::array();
    for (size_t i = begin; i < std::min(arns.size(), begin + 100); ++i) batch.push_back(arns[i]);
    Json described = server_->Call("DescribeTasks", {{"tasks", batch}});
    ASSERT_EQ(described["tasks"].size(), batch.size());
    for (const Json& t : described["tasks"]) EXPECT_EQ(t["lastStatus"], "RUNNING") << t["taskArn"];
  }
  connection.Stop();
}

// ---- leadership epochs

// EpochListener plays the task manager behind a real ServerConnection: it records each welcome, assign and stop
// it is handed and acks every push.
class EpochListener : public agent::ServerConnection::Listener {
 public:
  agent::ServerConnection* connection = nullptr;  // set before Start

  std::vector<protocol::TaskReport> HelloTasks() override { return {}; }
  void OnWelcome(const protocol::Welcome& welcome, const std::set<std::string>&) override {
    std::lock_guard lock(mu_);
    welcomes_.push_back(welcome);
  }
  void OnAssign(protocol::Assignment assignment, int64_t push_id) override {
    {
      std::lock_guard lock(mu_);
      assigned_.push_back(assignment.task_arn);
    }
    connection->Ack(push_id);
  }
  void OnStop(const protocol::StopOrder& order, int64_t push_id) override {
    {
      std::lock_guard lock(mu_);
      stopped_.push_back(order.task_arn);
    }
    connection->Ack(push_id);
  }
  void OnReportAcked(const std::string&, protocol::TaskStatus) override {}
  void OnDeregistered() override {}

  size_t welcomes() {
    std::lock_guard lock(mu_);
    return welcomes_.size();
  }
  std::vector<std::string> assigned() {
    std::lock_guard lock(mu_);
    return assigned_;
  }
  std::vector<std::string> stopped() {
    std::lock_guard lock(mu_);
    return stopped_;
  }

 private:
  std::mutex mu_;
  std::vector<protocol::Welcome> welcomes_;
  std::vector<std::string> assigned_, stopped_;
};

// An agent that has seen the leader of epoch 5 ignores a server of epoch 3 (a deposed leader, played by a server
// restarted on the same database with that epoch): its welcome is not handed on, and its assign and stop are
// neither acted on nor acked, so that server keeps them unacked and sends them again. A server without an epoch
// (a single server) is heard as before, and does not lower the epoch the agent remembers.
TEST_F(ChannelTest, AnAgentIgnoresTheWelcomeAndPushesOfAnOlderEpoch) {
  const std::string db = (dir_ / "state.db").string();
  const uint16_t port = server_->port();
  auto channel_of = [](std::optional<int64_t> epoch) {
    api::AgentChannelOptions c{200ms, 3};
    c.push_ack_timeout = 100ms;
    c.push_attempts = 1000;  // keep re-sending: the connection stays while the test looks
    c.epoch = epoch;
    return c;
  };
  server_.reset();
  server_ = std::make_unique<TestServer>(db, port, channel_of(5));
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  server_->Call("RegisterTaskDefinition",
                {{"family", "small"}, {"containerDefinitions", {{{"name", "main"}, {"image", "busybox"}, {"memory", 6}}}}});
  EpochListener listener;
  agent::ConnectionOptions o;
  o.server = *agent::ServerEndpoint::Parse(server_->url());
  o.state_dir = (dir_ / "agent").string();
  fs::create_directories(o.state_dir);
  o.registration.name = "epochs";
  o.registration.cpu = 4096;
  o.registration.memory = 8192;
  agent::ServerConnection connection(o, listener, {});
  listener.connection = &connection;
  ASSERT_TRUE(connection.Register().ok());
  connection.Start();
  for (int i = 0; i < 500 && listener.welcomes() < 1; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(listener.welcomes(), 1u);
  EXPECT_EQ(connection.epoch(), 5);
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  Json ran = server_->Call("RunTask", {{"taskDefinition", "small"}});
  ASSERT_EQ(ran["tasks"].size(), 1u) << ran.dump();
  const std::string first = ran["tasks"][0]["taskArn"];
  for (int i = 0; i < 500 && listener.assigned().empty(); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(listener.assigned(), std::vector<std::string>{first});
  const std::string instance = connection.instance_arn();
  for (int i = 0; i < 500 && server_->channel().unacked_pushes(instance) > 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(server_->channel().unacked_pushes(instance), 0u);  // the leader's assign was acked

  // The deposed leader of epoch 3: welcome, assign and stop are all ignored.
  server_.reset();
  server_ = std::make_unique<TestServer>(db, port, channel_of(3));
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  ran = server_->Call("RunTask", {{"taskDefinition", "small"}});
  ASSERT_EQ(ran["tasks"].size(), 1u) << ran.dump();
  server_->Call("StopTask", {{"task", first}, {"reason", "from the deposed leader"}});
  for (int i = 0; i < 500 && server_->channel().push_retries() < 4; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_GE(server_->channel().push_retries(), 4u);  // sent again and again: never acked
  EXPECT_EQ(server_->channel().unacked_pushes(instance), 2u);
  EXPECT_EQ(listener.welcomes(), 1u);
  EXPECT_EQ(listener.assigned(), std::vector<std::string>{first});
  EXPECT_TRUE(listener.stopped().empty());
  EXPECT_EQ(connection.epoch(), 5);

  // A single server (no epoch): heard again; the epoch stays 5.
  server_.reset();
  server_ = std::make_unique<TestServer>(db, port, channel_of(std::nullopt));
  for (int i = 0; i < 500 && listener.welcomes() < 2; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(listener.welcomes(), 2u);
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  ran = server_->Call("RunTask", {{"taskDefinition", "small"}});
  ASSERT_EQ(ran["tasks"].size(), 1u) << ran.dump();
  const std::string third = ran["tasks"][0]["taskArn"];
  for (int i = 0; i < 500 && listener.assigned().size() < 2; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(listener.assigned().size(), 2u);
  EXPECT_EQ(listener.assigned().back(), third);
  EXPECT_EQ(connection.epoch(), 5);
  connection.Stop();
}

// The highest epoch survives the agent: a connection writes it to leader_epoch.json in its state directory
// before acting on the message that raised it, and a new connection on the same directory (a restarted agent)
// starts from it, so the deposed leader of epoch 3 is ignored by an agent that saw epoch 5 only in its
// previous run: no welcome, no assign handed on. A later leader (epoch 6) is heard and raises the file.
TEST_F(ChannelTest, ARestartedAgentStillIgnoresAnOlderEpoch) {
  const std::string db = (dir_ / "state.db").string();
  const uint16_t port = server_->port();
  auto channel_of = [](int64_t epoch) {
    api::AgentChannelOptions c{200ms, 3};
    c.push_ack_timeout = 100ms;
    c.push_attempts = 1000;
    c.epoch = epoch;
    return c;
  };
  server_.reset();
  server_ = std::make_unique<TestServer>(db, port, channel_of(5));
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  server_->Call("RegisterTaskDefinition",
                {{"family", "small"}, {"containerDefinitions", {{{"name", "main"}, {"image", "busybox"}, {"memory", 6}}}}});
  agent::ConnectionOptions o;
  o.server = *agent::ServerEndpoint::Parse(server_->url());
  o.state_dir = (dir_ / "agent").string();
  fs::create_directories(o.state_dir);
  o.registration.name = "epochs";
  o.registration.cpu = 4096;
  o.registration.memory = 8192;
  const fs::path epoch_file = fs::path(o.state_dir) / "leader_epoch.json";
  std::string instance;
  {
    EpochListener first;
    agent::ServerConnection connection(o, first, {});
    first.connection = &connection;
    EXPECT_EQ(connection.epoch(), 0);
    ASSERT_TRUE(connection.Register().ok());
    connection.Start();
    for (int i = 0; i < 500 && first.welcomes() < 1; ++i) std::this_thread::sleep_for(20ms);
    ASSERT_EQ(first.welcomes(), 1u);
    EXPECT_EQ(connection.epoch(), 5);
    instance = connection.instance_arn();
    connection.Stop();
  }
  ASSERT_TRUE(fs::exists(epoch_file));
  EXPECT_EQ(Json::parse(std::ifstream(epoch_file))["epoch"], 5);

  // The deposed leader of epoch 3, and a restarted agent (a new connection on the same state directory).
  server_.reset();
  server_ = std::make_unique<TestServer>(db, port, channel_of(3));
  EpochListener second;
  agent::ServerConnection restarted(o, second, {});
  second.connection = &restarted;
  EXPECT_EQ(restarted.epoch(), 5);  // before any message
  EXPECT_EQ(restarted.instance_arn(), instance);
  restarted.Start();
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  Json ran = server_->Call("RunTask", {{"taskDefinition", "small"}});
  ASSERT_EQ(ran["tasks"].size(), 1u) << ran.dump();
  for (int i = 0; i < 500 && server_->channel().push_retries() < 4; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_GE(server_->channel().push_retries(), 4u);  // sent again and again: never acked
  EXPECT_EQ(second.welcomes(), 0u);
  EXPECT_TRUE(second.assigned().empty());
  EXPECT_EQ(restarted.epoch(), 5);
  EXPECT_EQ(Json::parse(std::ifstream(epoch_file))["epoch"], 5);

  // The next leader (epoch 6): heard, and remembered.
  server_.reset();
  server_ = std::make_unique<TestServer>(db, port, channel_of(6));
  for (int i = 0; i < 500 && second.welcomes() < 1; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(second.welcomes(), 1u);
  EXPECT_EQ(restarted.epoch(), 6);
  EXPECT_EQ(Json::parse(std::ifstream(epoch_file))["epoch"], 6);
  restarted.Stop();
}

// SilentServer: an agent channel endpoint that answers the hello with a welcome (heartbeats every 100 ms) and
// then says nothing more, acks no heartbeat, and never closes: a paused or hung leader as the agent sees it.
class SilentServer {
 public:
  SilentServer() {
    api::HttpServerOptions o;
    o.port = 0;
    api::WebSocketHandler ws;
    ws.accept = [](const api::HttpRequest&) { return Status::Ok(); };
    ws.on_open = [](const std::shared_ptr<api::WebSocketConnection>&, const api::HttpRequest&) {};
    ws.on_message = [this](const std::shared_ptr<api::WebSocketConnection>& c, std::string) {
      if (welcomed_.exchange(true)) return;
      c->Send(R"({"type":"welcome","assign":[],"stop":[],"heartbeatIntervalMs":100})");
    };
    ws.on_close = [this](const std::shared_ptr<api::WebSocketConnection>&) { closed_ = true; };
    ws.idle_timeout = std::chrono::minutes(10);
    o.websockets[protocol::kChannelPath] = ws;
    auto created = api::HttpServer::Create(o, [](api::HttpRequest&&, api::Responder r) { r({503, {}, ""}); });
    EXPECT_TRUE(created.ok()) << created.status().message();
    server_ = std::move(*created);
    server_->Start();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  bool welcomed() const { return welcomed_; }
  bool closed() const { return closed_; }

 private:
  std::atomic<bool> welcomed_{false}, closed_{false};
  std::unique_ptr<api::HttpServer> server_;
};

// A server that goes silent without closing the connection (no TCP close ever comes) is left after
// kSilentHeartbeats heartbeat intervals: the agent closes that channel and connects to the next server of its
// list, whose welcome it gets.
TEST_F(ChannelTest, AnAgentLeavesASilentServerForTheNextOne) {
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  agent::ConnectionOptions o;
  o.server = *agent::ServerEndpoint::Parse(server_->url());
  o.state_dir = (dir_ / "agent").string();
  fs::create_directories(o.state_dir);
  o.registration.name = "silence";
  o.registration.cpu = 4096;
  o.registration.memory = 8192;
  {
    // Registered at the real server (instance.json), so the connection below goes straight to its channel.
    EpochListener registering;
    agent::ServerConnection c(o, registering, {});
    ASSERT_TRUE(c.Register().ok());
  }
  SilentServer silent;
  o.servers = {*agent::ServerEndpoint::Parse(silent.url()), o.server};
  EpochListener listener;
  agent::ServerConnection connection(o, listener, {});
  listener.connection = &connection;
  connection.Start();
  for (int i = 0; i < 500 && !silent.welcomed(); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(silent.welcomed());
  // Its welcome, then the real server's once the silent one is left.
  for (int i = 0; i < 500 && listener.welcomes() < 2; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(listener.welcomes(), 2u);
  EXPECT_TRUE(silent.closed());
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  connection.Stop();
}

// DecliningServer: an agent channel endpoint that declines every upgrade with `refusal` (mapped to an HTTP status
// as gpupack's server maps it: 500 for a ServerException, 400 for a client error, 403 for an authentication
// refusal, with the refusal's code and leader: api::ChannelRefusal) and answers every plain HTTP request
// (RegisterContainerInstance) 503. It counts both.
class DecliningServer {
 public:
  explicit DecliningServer(api::UpgradeAnswer refusal) : refusal_(std::move(refusal)) {
    api::HttpServerOptions o;
    o.port = 0;
    api::WebSocketHandler ws;
    ws.accept = [this](const api::HttpRequest&) {
      ++upgrades_;
      return refusal_;
    };
    ws.on_open = [](const std::shared_ptr<api::WebSocketConnection>& c, const api::HttpRequest&) { c->Close(); };
    ws.on_message = [](const std::shared_ptr<api::WebSocketConnection>&, std::string) {};
    ws.on_close = [](const std::shared_ptr<api::WebSocketConnection>&) {};
    o.websockets[protocol::kChannelPath] = ws;
    auto created = api::HttpServer::Create(o, [this](api::HttpRequest&&, api::Responder r) {
      ++requests_;
      r({503, {}, R"({"__type":"ServerException","message":"not now"})"});
    });
    EXPECT_TRUE(created.ok()) << created.status().message();
    server_ = std::move(*created);
    server_->Start();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  int upgrades() const { return upgrades_; }
  int requests() const { return requests_; }

 private:
  const api::UpgradeAnswer refusal_;
  std::atomic<int> upgrades_{0}, requests_{0};
  std::unique_ptr<api::HttpServer> server_;
};

// StandbyRefusal is a standby's refusal of the channel, as api/leadership.cc makes it: NotLeader, naming the
// leader when it knows one.
api::UpgradeAnswer StandbyRefusal(const std::string& leader_url) {
  return api::ChannelRefusal(
      Status::Server("this gpupack server is a standby; the agent channel is served by the leader" +
                     (leader_url.empty() ? std::string(", unknown now: retry") : " at " + leader_url)),
      protocol::RefusalCode::kNotLeader, leader_url);
}

// Reworded: a refusal with the same code and leader but a message that says none of what it used to (the agent
// must decide on the code alone).
api::UpgradeAnswer Reworded(api::UpgradeAnswer answer, const std::string& message) {
  answer.status = Status(answer.status.code(), message);
  return answer;
}

// A declined upgrade comes back with its HTTP status and body (bounded), and the Status carries the server's
// error type and message: a standby's names the leader.
TEST_F(ChannelTest, ADeclinedUpgradeReturnsItsStatusAndBody) {
  DecliningServer standby(StandbyRefusal("http://127.0.0.1:8081"));
  agent::DeclinedUpgrade declined;
  auto c = agent::ChannelClient::Connect(*agent::ServerEndpoint::Parse(standby.url()),
                                         protocol::ChannelTarget("arn:aws:ecs:us-east-1:0:container-instance/x"),
                                         {}, 5000ms, &declined);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(declined.http_status, 500);
  Json body = Json::parse(declined.body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << declined.body;
  EXPECT_EQ(body["__type"], "ServerException");  // a refusal at 500: the server cannot serve the channel here
  EXPECT_EQ(body["code"], "NotLeader");
  EXPECT_EQ(body["leader"], "http://127.0.0.1:8081");
  EXPECT_EQ(declined.leader, "http://127.0.0.1:8081");  // the x-gpupack-leader header
  EXPECT_NE(body["message"].get<std::string>().find("served by the leader at http://127.0.0.1:8081"),
            std::string::npos);
  EXPECT_EQ(c.status().code(), ErrorCode::kServer);
  EXPECT_EQ(c.status().message(),
            "the server refused the agent channel: ServerException: this gpupack server is a standby; the agent "
            "channel is served by the leader at http://127.0.0.1:8081");
  EXPECT_EQ(standby.requests(), 0);  // the refusal's own answer says it all: no second request

  // An unknown instance: 400 with the server's words.
  DecliningServer leader(api::ChannelRefusal(Status::InvalidParameter("containerInstance x is not registered"),
                                             protocol::RefusalCode::kUnknownInstance));
  agent::DeclinedUpgrade unknown;
  auto u = agent::ChannelClient::Connect(*agent::ServerEndpoint::Parse(leader.url()), protocol::ChannelTarget("x"),
                                         {}, 5000ms, &unknown);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(unknown.http_status, 400);
  EXPECT_NE(u.status().message().find("ClientException: containerInstance x is not registered"), std::string::npos);
  EXPECT_EQ(Json::parse(unknown.body)["code"], "UnknownInstance");
  EXPECT_EQ(unknown.leader, "");

  // A body beyond the bound is cut to DeclinedUpgrade::kMaxBody bytes.
  DecliningServer wordy(Status::Server(std::string(3 * agent::DeclinedUpgrade::kMaxBody, 'w')));
  agent::DeclinedUpgrade long_one;
  auto w = agent::ChannelClient::Connect(*agent::ServerEndpoint::Parse(wordy.url()), protocol::ChannelTarget("x"),
                                         {}, 5000ms, &long_one);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(long_one.http_status, 500);
  EXPECT_EQ(long_one.body.size(), agent::DeclinedUpgrade::kMaxBody);
}

// A standby that declines the channel naming the leader, one of the agent's configured servers, sends the agent
// there at once, past the server between them on the list: the agent's channel opens at the leader without
// registering anywhere again.
TEST_F(ChannelTest, AStandbysChannelRefusalSendsTheAgentToTheConfiguredLeaderItNames) {
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  agent::ConnectionOptions o;
  o.server = *agent::ServerEndpoint::Parse(server_->url());
  o.state_dir = (dir_ / "agent").string();
  fs::create_directories(o.state_dir);
  o.registration.name = "follower";
  o.registration.cpu = 4096;
  o.registration.memory = 8192;
  {
    EpochListener registering;  // registered at the leader (instance.json): the channel goes straight on
    agent::ServerConnection c(o, registering, {});
    ASSERT_TRUE(c.Register().ok());
  }
  // Worded so that no sentence of the old refusal is left: the code and the leader field decide.
  DecliningServer standby(Reworded(StandbyRefusal(server_->url()), "go elsewhere"));
  DecliningServer between(StandbyRefusal(""));  // next on the list after the standby: the redirect skips it
  const agent::ServerEndpoint leader = o.server;
  o.server = *agent::ServerEndpoint::Parse(standby.url());
  o.servers = {o.server, *agent::ServerEndpoint::Parse(between.url()), leader};
  EpochListener listener;
  agent::ServerConnection connection(o, listener, {});
  listener.connection = &connection;
  connection.Start();
  for (int i = 0; i < 500 && listener.welcomes() < 1; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(listener.welcomes(), 1u);
  EXPECT_GE(standby.upgrades(), 1);
  EXPECT_EQ(between.upgrades(), 0);  // followed at once, not walked to
  EXPECT_EQ(standby.requests(), 0);  // no RegisterContainerInstance at the standby
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  connection.Stop();
}

// StrangerServer: an agent channel endpoint the agent was not configured with, posing as a leader: it would open
// the channel and welcome the agent under epoch 99. It counts the TCP connections it accepts.
class StrangerServer {
 public:
  StrangerServer() {
    api::HttpServerOptions o;
    o.port = 0;
    api::WebSocketHandler ws;
    ws.accept = [](const api::HttpRequest&) { return Status::Ok(); };
    ws.on_open = [](const std::shared_ptr<api::WebSocketConnection>&, const api::HttpRequest&) {};
    ws.on_message = [](const std::shared_ptr<api::WebSocketConnection>& c, std::string) {
      c->Send(R"({"type":"welcome","assign":[],"stop":[],"heartbeatIntervalMs":5000,"epoch":99})");
    };
    ws.on_close = [](const std::shared_ptr<api::WebSocketConnection>&) {};
    o.websockets[protocol::kChannelPath] = ws;
    auto created = api::HttpServer::Create(o, [](api::HttpRequest&&, api::Responder r) { r({503, {}, ""}); });
    EXPECT_TRUE(created.ok()) << created.status().message();
    server_ = std::move(*created);
    server_->Start();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  uint64_t connections() const { return server_->stats().connections_total; }

 private:
  std::unique_ptr<api::HttpServer> server_;
};

// A standby's refusal that names a leader the agent was not configured with (a stranger, or a lying server) is
// logged and ignored: the stranger never receives a connection (no signed upgrade, no hello, nothing to run),
// the agent walks on to its next configured server and takes that one's welcome, and the epoch the agent keeps
// (in memory and in leader_epoch.json) is the configured leader's, never the stranger's.
TEST_F(ChannelTest, AStandbyNamingALeaderOffTheAgentsListSendsTheAgentNowhere) {
  const std::string db = (dir_ / "state.db").string();
  api::AgentChannelOptions channel{200ms, 3};
  channel.epoch = 2;
  server_.reset();
  server_ = std::make_unique<TestServer>(db, 0, channel);
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  agent::ConnectionOptions o;
  o.server = *agent::ServerEndpoint::Parse(server_->url());
  o.state_dir = (dir_ / "agent").string();
  fs::create_directories(o.state_dir);
  o.registration.name = "not-misled";
  o.registration.cpu = 4096;
  o.registration.memory = 8192;
  {
    EpochListener registering;  // registered at the leader (instance.json): the channel goes straight on
    agent::ServerConnection c(o, registering, {});
    ASSERT_TRUE(c.Register().ok());
  }
  StrangerServer stranger;
  DecliningServer standby(StandbyRefusal(stranger.url()));
  const agent::ServerEndpoint leader = o.server;
  o.server = *agent::ServerEndpoint::Parse(standby.url());
  o.servers = {o.server, leader};
  EpochListener listener;
  agent::ServerConnection connection(o, listener, {});
  listener.connection = &connection;
  connection.Start();
  for (int i = 0; i < 500 && listener.welcomes() < 1; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(listener.welcomes(), 1u);
  EXPECT_GE(standby.upgrades(), 1);
  EXPECT_EQ(stranger.connections(), 0u);
  EXPECT_EQ(connection.epoch(), 2);
  const fs::path epoch_file = fs::path(o.state_dir) / "leader_epoch.json";
  ASSERT_TRUE(fs::exists(epoch_file));
  EXPECT_EQ(Json::parse(std::ifstream(epoch_file))["epoch"], 2);
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  connection.Stop();
  EXPECT_EQ(stranger.connections(), 0u);
}

// An agent registers again only when a declined upgrade says the server does not know the instance: a standby
// that knows no leader, a server that fails or is full, or an authentication refusal makes it walk on (with the
// backoff) without a RegisterContainerInstance each time.
TEST_F(ChannelTest, OnlyAnUnknownInstanceMakesTheAgentRegisterAgain) {
  struct Case {
    const char* what;
    api::UpgradeAnswer refusal;
    bool registers;
  };
  using protocol::RefusalCode;
  const std::vector<Case> cases = {
      {"standby, leader unknown", StandbyRefusal(""), false},
      {"server busy", api::ChannelRefusal(Status::Server("too many agent channel connections (limit 1); retry later"),
                                          RefusalCode::kBusy),
       false},
      {"authentication",
       api::ChannelRefusal(Status(ErrorCode::kAccessDenied, "the agent key may not hold this instance's channel"),
                           RefusalCode::kUnauthorized),
       false},
      {"signature", api::ChannelRefusal(Status(ErrorCode::kInvalidSignature, "the signature does not match"),
                                        RefusalCode::kUnauthorized),
       false},
      {"unknown instance",
       api::ChannelRefusal(Status::InvalidParameter("containerInstance x is not registered"),
                           RefusalCode::kUnknownInstance),
       true},
      // The code decides, not the words or the HTTP status: an unknown instance however worded registers again,
      // and a 400 without that code does not.
      {"unknown instance, reworded",
       api::ChannelRefusal(Status::Server("something else entirely"), RefusalCode::kUnknownInstance), true},
      {"a client error of another code",
       api::ChannelRefusal(Status::InvalidParameter("containerInstance x is not registered"),
                           RefusalCode::kMalformed),
       false},
      {"no code", Status::InvalidParameter("containerInstance x is not registered"), false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    DecliningServer declining(c.refusal);
    agent::ConnectionOptions o;
    o.server = *agent::ServerEndpoint::Parse(declining.url());
    o.state_dir = (dir_ / "agent" / std::to_string(&c - cases.data())).string();
    fs::create_directories(o.state_dir);
    EpochListener listener;
    agent::ServerConnection connection(o, listener, {});
    listener.connection = &connection;
    connection.Start();
    // Three declined upgrades (the backoff between them at most 100 + 200 ms, jittered).
    for (int i = 0; i < 500 && declining.upgrades() < 3; ++i) std::this_thread::sleep_for(20ms);
    connection.Stop();
    EXPECT_GE(declining.upgrades(), 3);
    if (c.registers) {
      EXPECT_GE(declining.requests(), 1);  // RegisterContainerInstance (answered 503 here)
    } else {
      EXPECT_EQ(declining.requests(), 0);
    }
    EXPECT_FALSE(connection.deregistered());
    EXPECT_EQ(listener.welcomes(), 0u);
  }
}

TEST(ReconnectPolicyTest, ReadDeclineMapsEveryWayTheServerDeclinesToWhatTheAgentDoes) {
  using Action = agent::ChannelDecline::Action;
  auto read = [](int status, const std::string& type, const std::string& code, const std::string& message) {
    Json body = {{"__type", type}, {"message", message}};
    if (!code.empty()) body["code"] = code;
    return agent::ReadDecline({status, body.dump(), ""});
  };
  // A standby naming the leader (500: api/leadership.cc) in the body's "leader", and one that knows none. The
  // message says nothing the agent reads.
  Json named_body = {{"__type", "ServerException"}, {"code", "NotLeader"}, {"leader", "http://10.0.0.2:8080"},
                     {"message", "no words about any leader"}};
  agent::ChannelDecline named = agent::ReadDecline({500, named_body.dump(), ""});
  EXPECT_EQ(named.action, Action::kFollowLeader);
  EXPECT_EQ(named.code, protocol::RefusalCode::kNotLeader);
  EXPECT_EQ(named.leader, "http://10.0.0.2:8080");
  // The leader in the header alone is followed too.
  agent::ChannelDecline by_header =
      agent::ReadDecline({500, Json{{"__type", "ServerException"}, {"code", "NotLeader"}, {"message", "x"}}.dump(),
                          "http://10.0.0.3:8080"});
  EXPECT_EQ(by_header.action, Action::kFollowLeader);
  EXPECT_EQ(by_header.leader, "http://10.0.0.3:8080");
  EXPECT_EQ(read(500, "ServerException", "NotLeader", "the agent channel is served by the leader, unknown now: retry")
                .action,
            Action::kRetry);
  // A message that names a leader in the words the standby once used is not followed: only the field counts.
  agent::ChannelDecline prose = read(500, "ServerException", "",
                                     "this gpupack server is a standby; the agent channel is served by the leader at "
                                     "http://10.0.0.2:8080");
  EXPECT_EQ(prose.action, Action::kRetry);
  EXPECT_EQ(prose.leader, "");
  // A leader named beside another code is no redirect.
  EXPECT_EQ(agent::ReadDecline({500, Json{{"__type", "ServerException"}, {"code", "ServerError"},
                                          {"leader", "http://10.0.0.2:8080"}, {"message", "x"}}.dump(), ""})
                .leader,
            "");
  // The leader at its channel limit (503 with Retry-After) or failing.
  EXPECT_EQ(read(503, "ServerException", "Busy", "too many agent channel connections (limit 10000); retry later")
                .action,
            Action::kRetry);
  EXPECT_EQ(read(500, "ServerException", "ServerError", "the database is away").action, Action::kRetry);
  // The instance unknown, inactive (deregistered): register again, whatever the words; a target without
  // containerInstance is malformed, not unknown.
  EXPECT_EQ(read(400, "ClientException", "UnknownInstance", "containerInstance arn:x is not registered").action,
            Action::kRegister);
  EXPECT_EQ(read(400, "ClientException", "UnknownInstance", "reworded beyond recognition").action, Action::kRegister);
  EXPECT_EQ(read(400, "ClientException", "Malformed", "the agent channel needs ?containerInstance=<ARN>").action,
            Action::kRetry);
  EXPECT_EQ(read(400, "ClientException", "", "containerInstance arn:x is not registered").action, Action::kRetry);
  // Authentication and authorization: never a registration.
  for (const char* type : {"AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException",
                           "IncompleteSignatureException", "MissingAuthenticationTokenException"})
    EXPECT_EQ(read(403, type, "Unauthorized", "refused").action, Action::kAuthRefused) << type;
  // No channel endpoint (404), a code this agent does not know, or an answer that is no ECS error (a proxy's
  // 502): walk on.
  EXPECT_EQ(read(404, "ClientException", "", "no WebSocket endpoint at /agent/v1/channel").action, Action::kRetry);
  agent::ChannelDecline future = read(400, "ClientException", "SomethingNew", "x");
  EXPECT_EQ(future.action, Action::kRetry);
  EXPECT_FALSE(future.code.has_value());
  agent::ChannelDecline proxy = agent::ReadDecline({502, "<html>Bad Gateway</html>", ""});
  EXPECT_EQ(proxy.action, Action::kRetry);
  EXPECT_EQ(proxy.message, "<html>Bad Gateway</html>");
}

// ---- ReconnectPolicy: which attempt waits how long (the random source fixed; no clock involved) ----------------

// FixedRandom returns `values` in turn (the last one again when they run out): the policy's jitter made exact.
agent::ReconnectPolicy::Random FixedRandom(std::vector<double> values) {
  auto next = std::make_shared<size_t>(0);
  return [values = std::move(values), next]() {
    const double v = values[std::min(*next, values.size() - 1)];
    ++*next;
    return v;
  };
}

TEST(ReconnectPolicyTest, AWalkTriesEveryServerAtOnceAndWaitsOnlyAfterTheWholeListFailed) {
  using Outcome = agent::ReconnectPolicy::Outcome;
  agent::ReconnectPolicy policy(3, FixedRandom({0.5}));
  // The first two failures of a walk of three servers: the next server at once.
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 0ms);
  EXPECT_EQ(policy.Failed(Outcome::kAnswered), 0ms);
  // The third ends the walk: half (the random draw) of the 100 ms backoff, which then doubles.
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 50ms);
  EXPECT_EQ(policy.backoff(), 200ms);
  EXPECT_EQ(policy.tried(), 0u);
  // The next walk again tries the three at once, then waits half of 200 ms.
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 0ms);
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 0ms);
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 100ms);
  EXPECT_EQ(policy.backoff(), 400ms);
}

TEST(ReconnectPolicyTest, TheBackoffDoublesToOneSecondAndAConnectionResetsIt) {
  using Outcome = agent::ReconnectPolicy::Outcome;
  agent::ReconnectPolicy policy(1, FixedRandom({1.0}));  // the draw at its top: the wait is the backoff itself
  std::vector<int64_t> waits;
  for (int i = 0; i < 6; ++i) waits.push_back(policy.Failed(Outcome::kUnreachable).count());
  EXPECT_EQ(waits, (std::vector<int64_t>{100, 200, 400, 800, 1000, 1000}));
  EXPECT_EQ(policy.backoff(), agent::ReconnectPolicy::kCap);
  policy.Connected();
  EXPECT_EQ(policy.backoff(), 100ms);
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 100ms);
}

TEST(ReconnectPolicyTest, ASingleServersWaitIsJitteredOverTheWholeBackoff) {
  using Outcome = agent::ReconnectPolicy::Outcome;
  // Full jitter: the draw scales the whole backoff, from nothing to all of it, so agents that lost the same
  // server spread their attempts over it instead of coming back together.
  agent::ReconnectPolicy policy(1, FixedRandom({0.0, 0.25, 0.999, 0.5}));
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 0ms);    // 0 x 100 ms
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 50ms);   // 0.25 x 200 ms
  EXPECT_EQ(policy.Failed(Outcome::kAnswered), 399ms);     // 0.999 x 400 ms
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 400ms);  // 0.5 x 800 ms
  // A source that strays out of [0, 1) is clamped: never a negative wait nor one above the backoff.
  agent::ReconnectPolicy strays(1, FixedRandom({-3.0, 7.0}));
  EXPECT_EQ(strays.Failed(Outcome::kUnreachable), 0ms);
  EXPECT_EQ(strays.Failed(Outcome::kUnreachable), 200ms);
}

TEST(ReconnectPolicyTest, AClosedChannelWaitsAJitteredBaseAndStartsANewWalk) {
  using Outcome = agent::ReconnectPolicy::Outcome;
  agent::ReconnectPolicy policy(2, FixedRandom({0.3}));
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 0ms);
  EXPECT_EQ(policy.tried(), 1u);
  EXPECT_EQ(policy.Closed(), 30ms);  // 0.3 x 100 ms
  EXPECT_EQ(policy.tried(), 0u);
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 0ms);  // the walk starts over: two attempts before a wait
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 30ms);
}

TEST(ReconnectPolicyTest, ALeaderNamedByAStandbyIsFollowedAtOnceButAPingPongEnds) {
  using Outcome = agent::ReconnectPolicy::Outcome;
  agent::ReconnectPolicy policy(2, FixedRandom({1.0}));
  // The last attempt of a walk of two learns the leader's name: followed at once, one beyond the list.
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 0ms);
  EXPECT_EQ(policy.Failed(Outcome::kLeaderNamed), 0ms);
  // The leader named does not answer (a dead one a standby still names): the walk ends with a wait.
  EXPECT_EQ(policy.Failed(Outcome::kUnreachable), 100ms);
  // Standbys that keep naming each other never make a loop without waits.
  int without_wait = 0;
  while (policy.Failed(Outcome::kLeaderNamed) == 0ms && without_wait < 100) ++without_wait;
  EXPECT_EQ(without_wait, 2);
  // A leader named that is not on the list grows the walk by one.
  agent::ReconnectPolicy single(1, FixedRandom({1.0}));
  single.SetServers(2);
  EXPECT_EQ(single.Failed(Outcome::kLeaderNamed), 0ms);
  EXPECT_EQ(single.Failed(Outcome::kUnreachable), 100ms);
}

// A herd's connect lines: the first kLinesPerWindow of a window one by one, the rest summed up in one line once
// the window ended; a quiet window prints no summary.
TEST(ChannelEventLogTest, AHerdIsAFewLinesNotOneAConnection) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  auto logger = std::make_shared<spdlog::logger>("events", sink);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::info);
  api::ChannelEventLog log;
  const auto t0 = std::chrono::steady_clock::now();
  using Event = api::ChannelEventLog::Event;
  for (int i = 0; i < 60; ++i) log.Log(Event::kConnected, "arn-" + std::to_string(i), "127.0.0.1:1", i + 1, t0);
  log.Log(Event::kReconnected, "arn-0", "127.0.0.1:2", 60, t0 + 1s);
  log.Log(Event::kDisconnected, "arn-1", "", 59, t0 + 2s);
  log.Flush(59, t0 + 5s);  // the window is not over
  const std::string during = out.str();
  log.Flush(59, t0 + 11s);
  log.Flush(59, t0 + 30s);  // nothing happened since: no line
  spdlog::set_default_logger(previous);
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::string all = out.str();
  EXPECT_EQ(count(during, "connected from"), size_t(api::ChannelEventLog::kLinesPerWindow));
  EXPECT_EQ(count(during, "more agents"), 0u);
  EXPECT_EQ(count(all, "agent channel: 10 more agents connected, 1 reconnected (their previous connection closed) "
                       "and 1 disconnected in the last 11 s"), 1u) << all;
  EXPECT_EQ(count(all, "59 channels open"), 1u) << all;
  EXPECT_EQ(count(all, "more agents"), 1u) << all;
}

TEST(ReconnectPolicyTest, ClassifiesTheChannelClientsFailures) {
  using Outcome = agent::ReconnectPolicy::Outcome;
  // No answer (connection refused, no such host, a handshake that broke): unreachable.
  EXPECT_EQ(agent::ReconnectPolicy::Classify(agent::DeclinedUpgrade{}), Outcome::kUnreachable);
  // An answer: what its code says, never its words.
  EXPECT_EQ(agent::ReconnectPolicy::Classify({500, R"({"__type":"ServerException","message":"declined"})", ""}),
            Outcome::kAnswered);
  EXPECT_EQ(agent::ReconnectPolicy::Classify(
                {500, R"({"__type":"ServerException","code":"NotLeader","leader":"http://127.0.0.1:8081",)"
                      R"("message":"whatever it says"})",
                 ""}),
            Outcome::kLeaderNamed);
  EXPECT_EQ(agent::ReconnectPolicy::Classify(
                {500, R"({"__type":"ServerException","code":"NotLeader","message":"x"})", "http://127.0.0.1:8081"}),
            Outcome::kLeaderNamed);
  EXPECT_EQ(agent::ReconnectPolicy::Classify(
                {500, R"({"__type":"ServerException","code":"NotLeader","message":"served by the leader, unknown"})",
                 ""}),
            Outcome::kAnswered);
  EXPECT_EQ(agent::ReconnectPolicy::Classify(
                {500,
                 R"({"__type":"ServerException","message":"this gpupack server is a standby; the agent channel is )"
                 R"(served by the leader at http://127.0.0.1:8081"})",
                 ""}),
            Outcome::kAnswered);
}

// ---- many clients on one loop (agent::ChannelLoop: the agent swarm benchmark's way)

// Clients on one ChannelLoop each hold their own channel: each is welcomed, a refusal still comes back as the
// server's answer, and a client that goes calls its on_close once and nothing after.
TEST_F(ChannelTest, ClientsOnOneLoopEachHoldTheirChannel) {
  server_->Call("CreateCluster", {{"clusterName", "default"}});
  const agent::ServerEndpoint endpoint = *agent::ServerEndpoint::Parse(server_->url());
  agent::ChannelLoop loop(1);
  struct Peer {
    std::mutex mu;
    std::condition_variable cv;
    int welcomes = 0, closes = 0, after_close = 0;
    std::unique_ptr<agent::ChannelClient> client;
  };
  std::vector<std::unique_ptr<Peer>> peers;
  for (int i = 0; i < 3; ++i) {
    Json reg = server_->Call("RegisterContainerInstance", {
        {"instanceIdentityDocument", Json{{"instanceId", "loop-" + std::to_string(i)}}.dump()},
        {"totalResources", Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", 4096}},
                                        {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", 8192}}})},
        {"attributes", Json::array({{{"name", "gpupack.agent-channel"}, {"value", "v1"}}})}});
    const std::string arn = reg["containerInstance"]["containerInstanceArn"];
    auto p = std::make_unique<Peer>();
    Peer* raw = p.get();
    auto c = agent::ChannelClient::Connect(
        endpoint, protocol::ChannelTarget(arn),
        {[raw](std::string m) {
           std::lock_guard lock(raw->mu);
           if (raw->closes > 0) ++raw->after_close;
           if (Json::parse(m, nullptr, false).value("type", "") == "welcome") ++raw->welcomes;
           raw->cv.notify_all();
         },
         [raw] {
           std::lock_guard lock(raw->mu);
           ++raw->closes;
           raw->cv.notify_all();
         }},
        5000ms, nullptr, &loop);
    ASSERT_TRUE(c.ok()) << c.status().message();
    p->client = std::move(*c);
    p->client->Send(protocol::Serialize(protocol::AgentMessage(protocol::Hello{})));
    peers.push_back(std::move(p));
  }
  for (auto& p : peers) {
    std::unique_lock lock(p->mu);
    EXPECT_TRUE(p->cv.wait_for(lock, 10s, [&] { return p->welcomes == 1; }));
  }
  EXPECT_EQ(server_->channel().connected(), 3u);

  agent::DeclinedUpgrade unknown;
  auto refused = agent::ChannelClient::Connect(
      endpoint, protocol::ChannelTarget("arn:aws:ecs:us-east-1:000000000000:container-instance/default/nope"), {},
      5000ms, &unknown, &loop);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(Json::parse(unknown.body)["code"], "UnknownInstance") << unknown.body;

  peers[0]->client.reset();
  {
    std::lock_guard lock(peers[0]->mu);
    EXPECT_EQ(peers[0]->closes, 1);
    EXPECT_EQ(peers[0]->after_close, 0);
  }
  for (int i = 0; i < 200 && server_->channel().connected() != 2; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server_->channel().connected(), 2u);
  // The others are unaffected: their channels still carry messages both ways.
  for (size_t i = 1; i < peers.size(); ++i) {
    peers[i]->client->Send(protocol::Serialize(protocol::AgentMessage(protocol::Hello{})));
    std::unique_lock lock(peers[i]->mu);
    EXPECT_TRUE(peers[i]->cv.wait_for(lock, 10s, [&] { return peers[i]->welcomes == 2; }));
    EXPECT_EQ(peers[i]->closes, 0);
  }
  for (size_t i = 1; i < peers.size(); ++i) peers[i]->client.reset();
}

}  // namespace
}  // namespace gpupack
