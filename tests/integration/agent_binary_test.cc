// The real binaries: `gpupack server` and `gpupack agent` as separate processes on loopback, killed with
// SIGKILL and restarted. Simulated GPUs; the process runtime, or the docker runtime against a real engine when
// GPUPACK_DOCKER_SOCKET names one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/channel_client.h"
#include "agent/gpu_discovery.h"

namespace gpupack {
namespace {

namespace fs = std::filesystem;
using agent::Json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Child is one process of ours, killed (SIGKILL unless stopped gracefully) when the test ends.
class Child {
 public:
  Child(std::vector<std::string> argv, const fs::path& log) {
    pid_ = fork();
    if (pid_ == 0) {
      FILE* out = freopen(log.c_str(), "a", stdout);
      (void)out;
      dup2(fileno(stdout), 2);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Child() { Kill(SIGKILL); }
  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

int FreePort() {
  // Bind port 0 through a throwaway server socket to learn a free port.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

class AgentBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpupack-bin-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    port_ = FreePort();
    url_ = "http://127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override {
    // Stop every task first so no test leaves processes or containers behind.
    if (server_ && agent_) {
      auto list = Call("ListTasks", Json::object(), false);
      if (list.contains("taskArns"))
        for (const auto& arn : list["taskArns"]) Call("StopTask", {{"task", arn}}, false);
      for (int i = 0; i < 100; ++i) {
        auto l = Call("ListTasks", Json::object(), false);
        if (!l.contains("taskArns") || l["taskArns"].empty()) break;
        std::this_thread::sleep_for(50ms);
      }
    }
    agent_.reset();
    server_.reset();
    // A task's launcher outlives its agent for a moment (it records the exit with a write-then-rename), so a
    // file may appear or vanish while the directory is removed: retry instead of failing the test on it.
    std::error_code ec;
    for (int i = 0; i < 50; ++i) {
      fs::remove_all(dir_, ec);
      if (!ec) break;
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_FALSE(ec) << "cannot remove " << dir_ << ": " << ec.message();
  }

  void StartServer() {
    server_ = std::make_unique<Child>(std::vector<std::string>{GPUPACK_BIN, "server", "--listen",
                                                                "127.0.0.1:" + std::to_string(port_), "--db",
                                                                (dir_ / "state.db").string(), "--log-level", "warn"},
                                      dir_ / "server.log");
    for (int i = 0; i < 250; ++i) {
      auto r = agent::CallEcs(*agent::ServerEndpoint::Parse(url_), "ListClusters", Json::object(), 1000ms);
      if (r.ok()) return;
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << "server did not come up";
  }

  // StartAgent starts the agent with `extra` flags after the usual ones; a process agent runs its tasks as root
  // unless `extra` names --task-uids.
  void StartAgent(const std::string& runtime = "process", const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {GPUPACK_BIN, "agent", "--server", url_, "--gpus", "fake:2x22587", "--runtime",
                                     runtime, "--state-dir", (dir_ / "agent").string(), "--mps-pipe-dir",
                                     (dir_ / "mps").string(), "--name", "node-a", "--cpu", "4096", "--memory", "8192",
                                     "--stop-grace-ms", "500", "--log-level", "warn"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (runtime == "process" && std::find(extra.begin(), extra.end(), "--task-uids") == extra.end()) {
      // These tests record what their tasks did in files under the test's own directory, and check restarts
      // and reconciling, not confinement (ProcessRuntimeTest checks that): the tasks run as the agent's user.
      argv.push_back("--task-user");
      argv.push_back("root");
    }
    if (runtime == "docker") {
      argv.push_back("--docker-socket");
      argv.push_back(std::getenv("GPUPACK_DOCKER_SOCKET"));
    }
    agent_ = std::make_unique<Child>(argv, dir_ / "agent.log");
    WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  }

  Json Call(const std::string& op, const Json& body, bool expect_ok = true) {
    auto r = agent::CallEcs(*agent::ServerEndpoint::Parse(url_), op, body, 3000ms);
    if (expect_ok) {
      EXPECT_TRUE(r.ok()) << op << ": " << r.status().message();
    }
    return r.ok() ? *r : Json();
  }

  // Metrics GETs /metrics over a plain socket (bounded by a 3 s receive timeout); "" when it cannot.
  std::string Metrics() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string response;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
      if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
        char buf[4096];
        for (ssize_t n; response.size() < (4u << 20) && (n = read(fd, buf, sizeof buf)) > 0;) response.append(buf, n);
      }
    }
    close(fd);
    return response;
  }

  Json WaitTask(const std::string& arn, const std::function<bool(const Json&)>& pred) {
    Json t;
    for (int i = 0; i < 500 && !arn.empty(); ++i) {
      auto d = agent::CallEcs(*agent::ServerEndpoint::Parse(url_), "DescribeTasks", {{"tasks", Json::array({arn})}}, 1000ms);
      if (d.ok() && !(*d)["tasks"].empty()) {
        t = (*d)["tasks"][0];
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
      auto list = agent::CallEcs(*agent::ServerEndpoint::Parse(url_), "ListContainerInstances", Json::object(), 1000ms);
      if (list.ok() && !(*list)["containerInstanceArns"].empty()) {
        auto d = agent::CallEcs(*agent::ServerEndpoint::Parse(url_), "DescribeContainerInstances",
                                {{"containerInstances", (*list)["containerInstanceArns"]}}, 1000ms);
        if (d.ok()) {
          ci = (*d)["containerInstances"][0];
          if (pred(ci)) return ci;
        }
      }
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "instance never reached the expected state; last seen: " << ci.dump();
    return ci;
  }

  void RegisterScript(const std::string& family, const std::string& script) {
    Call("RegisterTaskDefinition",
         {{"family", family},
          {"containerDefinitions",
           Json::array({{{"name", "main"}, {"image", "gpupack-test/busybox:latest"}, {"memory", 64},
                         {"entryPoint", {"/bin/sh", "-c"}}, {"command", {script}},
                         {"resourceRequirements",
                          Json::array({{{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", {{"memory", 4096}}}}}}})}}})}});
  }

  // RegisterPlainScript registers a task of one container without a GPU (a shared GPU's container would keep the
  // task user: ProcessRuntimeOptions::task_uids says why).
  void RegisterPlainScript(const std::string& family, const std::string& script) {
    Call("RegisterTaskDefinition",
         {{"family", family},
          {"containerDefinitions",
           Json::array({{{"name", "main"}, {"image", "host"}, {"memory", 64}, {"entryPoint", {"/bin/sh", "-c"}},
                         {"command", {script}}}})}});
  }

  // TaskUid: the real uid of the process runtime's workload of task `arn`'s container main (its state record names
  // the pid; /proc/PID/status its uids), or -1 when there is none.
  int64_t TaskUid(const std::string& arn) {
    const std::string id = arn.substr(arn.rfind('/') + 1) + "-main";
    Json record = Json::parse(std::ifstream(dir_ / "agent" / "runtime" / (id + ".json")), nullptr, false);
    if (!record.is_object() || !record.contains("pid")) return -1;
    std::ifstream status("/proc/" + std::to_string(record["pid"].get<int>()) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Uid:", 0) == 0) return std::atoll(line.c_str() + 4);
    return -1;
  }

  std::string Run(const std::string& family) {
    Json r = Call("RunTask", {{"taskDefinition", family}});
    EXPECT_EQ(r["tasks"].size(), 1u) << r.dump();
    return r["tasks"].empty() ? "" : r["tasks"][0]["taskArn"].get<std::string>();
  }

  int Lines(const fs::path& file) {
    std::ifstream in(file);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) ++n;
    return n;
  }

  fs::path dir_;
  int port_ = 0;
  std::string url_;
  std::unique_ptr<Child> server_, agent_;
};

TEST_F(AgentBinaryTest, AgentKilledWithSigkillRestartsWithoutStartingTasksTwice) {
  StartServer();
  StartAgent();
  fs::path starts = dir_ / "starts";
  RegisterScript("once", "echo started >> " + starts.string() + "; exec sleep 60");
  std::string arn = Run("once");
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  agent_->Kill(SIGKILL);
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == false; });
  StartAgent();
  std::this_thread::sleep_for(500ms);
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  EXPECT_EQ(Lines(starts), 1);
  Call("StopTask", {{"task", arn}});
  Json stopped = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(stopped["containers"][0]["exitCode"], 143);  // SIGTERM reached the adopted process
  // The agent acked every push (assign, stop), so none cost the connection; retries are counted too.
  std::string metrics = Metrics();
  EXPECT_NE(metrics.find("\ngpupack_agent_push_unacked_closes_total 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\ngpupack_agent_push_retries_total "), std::string::npos) << metrics;
}

// --task-uids across an agent killed with SIGKILL: the agent started again adopts the task that still runs, and
// the uid that task runs as goes to no new task, which could otherwise read the adopted task's environment and
// signal it, and whose start would sweep the adopted task's files from /tmp. Needs root (tasks change to uids of
// the range).
TEST_F(AgentBinaryTest, AnAgentKilledWithSigkillGivesNoNewTaskTheUidOfATaskItAdopts) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run tasks as the uids of --task-uids";
  const std::vector<std::string> uids = {"--task-uids", "200040-200049"};
  const fs::path scratch = fs::path("/tmp") / ("gpupack-adopted-" + std::to_string(getpid()));
  StartServer();
  StartAgent("process", uids);
  RegisterPlainScript("own-uid", "echo mine > " + scratch.string() + "; exec sleep 60");
  const std::string adopted = Run("own-uid");
  WaitTask(adopted, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  const int64_t adopted_uid = TaskUid(adopted);
  EXPECT_GE(adopted_uid, 200040);
  EXPECT_LE(adopted_uid, 200049);
  for (int i = 0; i < 250 && !fs::exists(scratch); ++i) std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(fs::exists(scratch)) << "the task wrote no " << scratch;
  agent_->Kill(SIGKILL);
  WaitInstance([](const Json& ci) { return ci["agentConnected"] == false; });
  StartAgent("process", uids);
  const std::string next = Run("own-uid");
  WaitTask(next, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  WaitTask(adopted, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  EXPECT_EQ(TaskUid(adopted), adopted_uid) << "the adopted task no longer runs as its uid";
  const int64_t next_uid = TaskUid(next);
  EXPECT_GE(next_uid, 200040);
  EXPECT_LE(next_uid, 200049);
  EXPECT_NE(next_uid, adopted_uid) << "a new task got the uid of the task the restarted agent adopted";
  EXPECT_TRUE(fs::exists(scratch)) << "the new task's start swept the adopted task's file";
  std::error_code ec;
  fs::remove(scratch, ec);
}

// Regression (found by bench/crash_safety.mjs): an agent killed after the runtime started a container but before
// it recorded the container's id restarted, failed the task (TaskFailedToStart, memory released on the server)
// and left the workload running: a process on the GPU with no reservation. The state such a kill leaves is made
// here by hand: the task's record rewritten to "starting, no container id recorded" while its process runs.
TEST_F(AgentBinaryTest, AgentKilledBeforeRecordingItsContainerStopsTheContainerOnRestart) {
  StartServer();
  StartAgent();
  fs::path pid_file = dir_ / "pid";
  RegisterScript("unrecorded", "echo $$ > " + pid_file.string() + "; exec sleep 60");
  std::string arn = Run("unrecorded");
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  agent_->Kill(SIGKILL);
  fs::path record = dir_ / "agent" / "tasks" / (arn.substr(arn.rfind('/') + 1) + ".json");
  Json j = Json::parse(std::ifstream(record), nullptr, false);
  ASSERT_TRUE(j.is_object()) << record;
  j["status"] = "PENDING";
  for (auto& c : j["containers"]) {
    c["runtimeId"] = "";
    c["status"] = "PENDING";
  }
  std::ofstream(record, std::ios::trunc) << j.dump();
  // RUNNING is reported once the process is forked; its shell may not have written the pid yet (bounded wait).
  pid_t pid = 0;
  for (int i = 0; i < 250; ++i) {
    std::ifstream in(pid_file);
    std::string line;
    if (std::getline(in, line) && !in.eof()) {
      pid = std::atoi(line.c_str());
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  auto alive = [pid] {
    std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline");
    std::string text((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    return text.find("sleep") != std::string::npos;
  };
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(alive());
  StartAgent();
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(t["stopCode"], "TaskFailedToStart");
  for (int i = 0; i < 250 && alive(); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(alive()) << "the workload of a task that failed to start still runs, with no reservation";
  if (alive()) kill(pid, SIGKILL);
}

TEST_F(AgentBinaryTest, ServerKilledWithSigkillWhileTasksRunReconciles) {
  StartServer();
  StartAgent();
  RegisterScript("long", "exec sleep 60");
  RegisterScript("short", "sleep 1; exit 4");
  std::string long_arn = Run("long");
  std::string short_arn = Run("short");
  WaitTask(long_arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  server_->Kill(SIGKILL);
  std::this_thread::sleep_for(1500ms);  // the short task exits while the server is down
  StartServer();
  Json s = WaitTask(short_arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(s["containers"][0]["exitCode"], 4);
  EXPECT_EQ(s["stopCode"], "EssentialContainerExited");
  WaitTask(long_arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  Json ci = WaitInstance([](const Json& c) {
    return c["agentConnected"] == true &&
           c["gpuDevices"][0]["remainingMemoryInMiB"].get<int>() + c["gpuDevices"][1]["remainingMemoryInMiB"].get<int>() ==
               2 * 22587 - 4096;  // only the long task holds memory
  });
  EXPECT_EQ(ci["runningTasksCount"], 1);
}

// Regression (seen in the state directory bench/crash_safety.mjs --keep leaves): a task whose STOPPED report
// reached the server only in a hello (it ended while the channel was down) kept its record on the agent for
// good, and every later hello reported it again. The welcome now acknowledges what the hello reported STOPPED.
TEST_F(AgentBinaryTest, TaskReportedStoppedInAHelloIsForgottenOnceWelcomed) {
  StartServer();
  StartAgent();
  RegisterScript("brief", "sleep 1; exit 3");
  std::string arn = Run("brief");
  WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "RUNNING"; });
  server_->Kill(SIGKILL);
  std::this_thread::sleep_for(1500ms);  // the task exits while the server is down: no channel to report on
  StartServer();
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(t["containers"][0]["exitCode"], 3);
  fs::path record = dir_ / "agent" / "tasks" / (arn.substr(arn.rfind('/') + 1) + ".json");
  for (int i = 0; i < 250 && fs::exists(record); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(fs::exists(record)) << "the agent still keeps the record of a task the server has STOPPED";
}

TEST_F(AgentBinaryTest, DockerRuntimeRunsTheTaskInARealEngine) {
  if (!std::getenv("GPUPACK_DOCKER_SOCKET"))
    GTEST_SKIP() << "set GPUPACK_DOCKER_SOCKET (scripts/docker-engine.sh start DIR prints it) to run this";
  StartServer();
  StartAgent("docker");
  // A task without a GPU runs in the engine.
  Call("RegisterTaskDefinition",
       {{"family", "plain"},
        {"containerDefinitions",
         Json::array({{{"name", "main"}, {"image", "gpupack-test/busybox:latest"}, {"memory", 64},
                       {"entryPoint", {"/bin/sh", "-c"}}, {"command", {"echo $NVIDIA_VISIBLE_DEVICES; exit 5"}}}})}});
  std::string plain = Run("plain");
  Json p = WaitTask(plain, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(p["containers"][0]["exitCode"], 5) << p.dump();
  EXPECT_EQ(p["stopCode"], "EssentialContainerExited");
  // A GPU task on simulated GPUs (--gpus fake:...) runs with the GPU environment only: no device is handed to
  // the container (docs/operations.md, simulated GPUs with docker), and it runs to its own exit.
  RegisterScript("dockerenv", "exit 5");
  std::string arn = Run("dockerenv");
  Json t = WaitTask(arn, [](const Json& t) { return t["lastStatus"] == "STOPPED"; });
  EXPECT_EQ(t["stopCode"], "EssentialContainerExited") << t.dump();
  EXPECT_EQ(t["containers"][0]["exitCode"], 5) << t.dump();
}

TEST_F(AgentBinaryTest, ADockerAgentThatCanInjectNoGpuRegistersNone) {
#ifndef GPUPACK_FAKE_NVML
  GTEST_SKIP() << "built without the fake NVML";
#else
  if (!std::getenv("GPUPACK_DOCKER_SOCKET"))
    GTEST_SKIP() << "set GPUPACK_DOCKER_SOCKET (scripts/docker-engine.sh start DIR prints it) to run this";
  StartServer();
  // NVML (the fake library) lists two GPUs; devices injection (their device nodes, a driver root that holds no
  // driver libraries) cannot hand them to a container, so the agent offers none and says why.
  setenv(agent::kNvmlLibraryEnv, GPUPACK_FAKE_NVML, 1);
  fs::create_directories(dir_ / "empty-driver-root");
  agent_ = std::make_unique<Child>(
      std::vector<std::string>{GPUPACK_BIN, "agent", "--server", url_, "--gpus", "nvml", "--runtime", "docker",
                               "--docker-socket", std::getenv("GPUPACK_DOCKER_SOCKET"), "--docker-gpu", "devices",
                               "--driver-root", (dir_ / "empty-driver-root").string(), "--mps-control", "/bin/false",
                               "--state-dir", (dir_ / "agent").string(), "--mps-pipe-dir", (dir_ / "mps").string(),
                               "--name", "node-a", "--log-level", "info"},
      dir_ / "agent.log");
  unsetenv(agent::kNvmlLibraryEnv);
  Json ci = WaitInstance([](const Json& ci) { return ci["agentConnected"] == true; });
  EXPECT_TRUE(!ci.contains("gpuDevices") || ci["gpuDevices"].empty()) << ci.dump();
  std::ifstream in(dir_ / "agent.log");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(log, HasSubstr("registering no GPUs (2 found)"));
  // Why: the device nodes of the fake GPUs (minors 3 and 7), or on a host that has them, the empty driver root.
  EXPECT_THAT(log, HasSubstr("no GPU injection works on this host (--docker-gpu devices): devices: "));
#endif
}

}  // namespace
}  // namespace gpupack
