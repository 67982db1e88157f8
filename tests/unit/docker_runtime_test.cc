// The docker runtime against a REAL Docker engine, and its HTTP client against a fake engine.
//
// The engine tests need GPUPACK_DOCKER_SOCKET: the socket of an engine that has gpupack-test/busybox:latest, e.g.
//   export GPUPACK_DOCKER_SOCKET=$(scripts/docker-engine.sh start /tmp/gpupack-docker | tail -1)
// Without it they are skipped (and say so). Each test uses its own gpupack.agent label and removes what it made.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent/docker_client.h"
#include "agent/gpu_injection.h"
#include "agent/runtime.h"
#include "tests/unit/fake_docker_engine.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using std::chrono::milliseconds;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using testing_support::FakeDockerEngine;
using testing_support::TempDir;

constexpr char kImage[] = "gpupack-test/busybox:latest";
constexpr auto kDeadline = std::chrono::seconds(60);
constexpr char kGpu[] = "GPU-00000000-0000-0000-0000-000000000000";

class DockerRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* socket = std::getenv("GPUPACK_DOCKER_SOCKET");
    if (socket == nullptr || *socket == '\0') {
      GTEST_SKIP() << "GPUPACK_DOCKER_SOCKET is not set: these tests need a real Docker engine with image "
                   << kImage << " (start one with scripts/docker-engine.sh start DIR and export the "
                   << "socket path it prints)";
    }
    socket_ = socket;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    label_ = "gpupack-test-" + std::to_string(getpid()) + "-" + info->name();
    runtime_ = NewRuntime(label_);
    ASSERT_NE(runtime_, nullptr);
  }

  void TearDown() override {
    for (const std::string& label : labels_) {
      auto runtime = MakeDockerRuntime({socket_, label});
      if (!runtime.ok()) continue;
      if (auto list = (*runtime)->List(); list.ok()) {
        for (const RuntimeContainer& c : *list) (void)(*runtime)->Remove(c.id);
      }
    }
  }

  std::unique_ptr<Runtime> NewRuntime(const std::string& label) {
    if (std::find(labels_.begin(), labels_.end(), label) == labels_.end()) labels_.push_back(label);
    DockerRuntimeOptions options;
    options.socket_path = socket_;
    options.agent_label = label;
    auto runtime = MakeDockerRuntime(options);
    EXPECT_TRUE(runtime.ok()) << runtime.status().message();
    return runtime.ok() ? std::move(*runtime) : nullptr;
  }

  // DevicesRuntime: a runtime whose GPU injection is `devices` over stand-ins made under dir_: device nodes that are
  // symlinks to /dev/null (the engine resolves them) and a driver root with empty libcuda.so.1 and libnvidia-ml.so.1.
  // Its one GPU is kGpu with minor 0.
  std::unique_ptr<Runtime> DevicesRuntime() {
    fs::create_directories(dir_ / "dev");
    for (const char* node : {"nvidiactl", "nvidia-uvm", "nvidia0"}) fs::create_symlink("/dev/null", dir_ / "dev" / node);
    fs::create_directories(dir_ / "driver" / "lib64");
    for (const char* lib : {"libcuda.so.1", "libnvidia-ml.so.1"}) std::ofstream(dir_ / "driver" / "lib64" / lib) << "";
    GpuInjectionOptions gpu;
    gpu.mode = "devices";
    gpu.device_dir = (dir_ / "dev").string();
    gpu.driver_root = (dir_ / "driver").string();
    GpuDevice device;
    device.uuid = kGpu;
    device.minor = 0;
    auto plan = DetectGpuInjection(socket_, gpu, {device});
    EXPECT_TRUE(plan.ok()) << plan.status().message();
    if (!plan.ok()) return nullptr;
    EXPECT_EQ(plan->mode, GpuInjectionMode::kDevices) << plan->summary;
    auto runtime = MakeDockerRuntime({socket_, label_}, std::move(*plan));
    EXPECT_TRUE(runtime.ok()) << runtime.status().message();
    return runtime.ok() ? std::move(*runtime) : nullptr;
  }

  // TaskId makes task ids, and so container names, unique to this test process (engines may be shared).
  static std::string TaskId(const std::string& base) { return base + "-" + std::to_string(getpid()); }
  static std::string Arn(const std::string& base) {
    return "arn:aws:ecs:us-east-1:123456789012:task/default/" + TaskId(base);
  }

  static ContainerSpec Spec(const std::string& task_id, const std::string& name,
                            std::vector<std::string> command) {
    ContainerSpec spec;
    spec.task_arn = Arn(task_id);
    spec.container_name = name;
    spec.image = kImage;
    spec.command = std::move(command);
    return spec;
  }

  std::string StartOk(Runtime& runtime, const ContainerSpec& spec) {
    auto id = runtime.Start(spec);
    EXPECT_TRUE(id.ok()) << id.status().message();
    return id.ok() ? *id : std::string();
  }

  // EngineJson asks the engine directly (not through the runtime under test).
  Json EngineJson(const std::string& path) {
    DockerClient client({socket_});
    auto answer = client.Request("GET", "/v1.41" + path);
    EXPECT_TRUE(answer.ok()) << answer.status().message();
    if (!answer.ok()) return Json();
    EXPECT_EQ(answer->status, 200) << answer->body;
    return Json::parse(answer->body, nullptr, false);
  }

  static ContainerStatus WaitExited(Runtime& runtime, const std::string& id) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (true) {
      auto status = runtime.Inspect(id);
      EXPECT_TRUE(status.ok()) << status.status().message();
      if (!status.ok() || status->state != ContainerState::kRunning ||
          std::chrono::steady_clock::now() > deadline) {
        return status.ok() ? *status : ContainerStatus{};
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
  }

  static bool WaitForFile(const fs::path& path) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (std::chrono::steady_clock::now() < deadline) {
      if (fs::exists(path)) return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  }

  std::string socket_;
  std::string label_;
  std::vector<std::string> labels_;
  std::unique_ptr<Runtime> runtime_;
  TempDir temp_{"gpupack-docker-test"};  // removed with everything in it after each test
  fs::path dir_ = temp_.path();  // a host directory, used as the MPS pipe directory (bind-mounted at the same path)
};

TEST_F(DockerRuntimeTest, CreatesWithEnvLabelsPipeBindAndIpcHost) {
  // A GPU container needs a way to reach its GPU: stand-in device nodes and driver libraries (devices mode).
  runtime_ = DevicesRuntime();
  ASSERT_NE(runtime_, nullptr);
  ContainerSpec spec =
      Spec("t-create", "app", {"echo probe > \"$CUDA_MPS_PIPE_DIRECTORY/probe\"; exec sleep 600"});
  spec.entry_point = {"sh", "-c"};
  spec.environment = {{"CUDA_MPS_PIPE_DIRECTORY", dir_.string()},
                      {"NVIDIA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000000"},
                      {"WITH_SPACES", "a b  c"}};
  spec.mps_pipe_dir = dir_.string();
  spec.cpu = 512;
  spec.memory = 64;
  spec.memory_reservation = 32;
  std::string id = StartOk(*runtime_, spec);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(runtime_->Inspect(id)->state, ContainerState::kRunning);
  // The pipe directory is shared with the host: the container's file appears there.
  EXPECT_TRUE(WaitForFile(dir_ / "probe"));

  Json c = EngineJson("/containers/" + id + "/json");
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c["Name"], "/gpupack-" + TaskId("t-create") + "-app");
  EXPECT_EQ(c["Config"]["Image"], kImage);
  EXPECT_EQ(c["Config"]["Entrypoint"], Json::array({"sh", "-c"}));
  EXPECT_EQ(c["Config"]["Cmd"], Json::array({spec.command[0]}));
  const auto env = c["Config"]["Env"].get<std::vector<std::string>>();
  EXPECT_THAT(env, Contains("CUDA_MPS_PIPE_DIRECTORY=" + dir_.string()));
  EXPECT_THAT(env, Contains("NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000"));
  EXPECT_THAT(env, Contains("WITH_SPACES=a b  c"));
  EXPECT_EQ(c["Config"]["Labels"], Json({{"gpupack.task", spec.task_arn},
                                         {"gpupack.container", "app"},
                                         {"gpupack.agent", label_}}));
  const Json& host = c["HostConfig"];
  EXPECT_EQ(host["IpcMode"], "host");
  EXPECT_EQ(host["NetworkMode"], "none");
  const std::string lib = (dir_ / "driver" / "lib64").string();
  EXPECT_EQ(host["Binds"], Json::array({dir_.string() + ":" + dir_.string(), lib + ":" + lib + ":ro"}));
  EXPECT_EQ(host["CpuShares"], 512);
  // The engine drops limits its kernel cannot enforce (and says so in /info).
  Json info = EngineJson("/info");
  if (info.value("MemoryLimit", false)) {
    EXPECT_EQ(host["Memory"], 64 * 1024 * 1024);
    EXPECT_EQ(host["MemoryReservation"], 32 * 1024 * 1024);
  }
  ASSERT_TRUE(runtime_->Stop(id, milliseconds(0)).ok());
}

TEST_F(DockerRuntimeTest, DevicesModeGivesTheContainerItsNodesAndDriverLibraries) {
  runtime_ = DevicesRuntime();
  ASSERT_NE(runtime_, nullptr);
  // Dedicated (no MPS): the container writes what it sees into a directory of the host's, passed as a GPU bind.
  ContainerSpec spec = Spec("t-devices", "app",
                            {"sh", "-c",
                             "test -c /dev/nvidia0 && test -c /dev/nvidiactl && test -c /dev/nvidia-uvm && "
                             "test -f \"$LD_LIBRARY_PATH/libcuda.so.1\" && echo \"$LD_LIBRARY_PATH\"; exit 4"});
  spec.environment = {{"NVIDIA_VISIBLE_DEVICES", kGpu}};
  std::string id = StartOk(*runtime_, spec);
  ContainerStatus status = WaitExited(*runtime_, id);
  EXPECT_EQ(status.exit_code, 4);
  Json c = EngineJson("/containers/" + id + "/json");
  const auto env = c["Config"]["Env"].get<std::vector<std::string>>();
  EXPECT_THAT(env, Contains("LD_LIBRARY_PATH=" + (dir_ / "driver" / "lib64").string()));
  ASSERT_EQ(c["HostConfig"]["Devices"].size(), 3u);
  EXPECT_EQ(c["HostConfig"]["Devices"][0]["PathInContainer"], "/dev/nvidia0");
  // The checks passed inside only if all of them held: the logs carry the echo.
  DockerClient client({socket_});
  auto logs = client.Request("GET", "/v1.41/containers/" + id + "/logs?stdout=1&stderr=1");
  ASSERT_TRUE(logs.ok()) << logs.status().message();
  EXPECT_THAT(logs->body, HasSubstr((dir_ / "driver" / "lib64").string()));
}

TEST_F(DockerRuntimeTest, AGpuContainerOnAnEngineThatCannotInjectIsRefusedWithTheReason) {
  GpuInjectionOptions gpu;  // this machine: no device nodes in an empty dir, no driver libraries
  gpu.device_dir = (dir_ / "no-dev").string();
  gpu.driver_root_candidates = {};
  gpu.run_ldconfig = false;
  GpuDevice device;
  device.uuid = kGpu;
  auto plan = DetectGpuInjection(socket_, gpu, {device});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  if (plan->mode == GpuInjectionMode::kNvidia) GTEST_SKIP() << "this engine has the nvidia runtime";
  ASSERT_EQ(plan->mode, GpuInjectionMode::kNone) << plan->summary;
  auto runtime = MakeDockerRuntime({socket_, label_}, std::move(*plan));
  ASSERT_TRUE(runtime.ok()) << runtime.status().message();
  ContainerSpec spec = Spec("t-refused", "app", {"true"});
  spec.environment = {{"NVIDIA_VISIBLE_DEVICES", kGpu}};
  auto id = (*runtime)->Start(spec);
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("the container needs GPU " + std::string(kGpu)));
  EXPECT_THAT(id.status().message(), HasSubstr("no GPU injection works on this host"));
  EXPECT_THAT(id.status().message(), HasSubstr("devices: no device node"));
  EXPECT_THAT(*(*runtime)->List(), IsEmpty());
  // The runtime made without a plan refuses it too; a container without a GPU runs on either.
  EXPECT_THAT(runtime_->Start(spec).status().message(), HasSubstr("made without GPU injection"));
  spec.environment = {{"NVIDIA_VISIBLE_DEVICES", "void"}};
  EXPECT_EQ(WaitExited(**runtime, StartOk(**runtime, spec)).exit_code, 0);
}

TEST_F(DockerRuntimeTest, ExitCodeAndNoBindWithoutPipeDirectory) {
  std::string id = StartOk(*runtime_, Spec("t-exit", "app", {"sh", "-c", "exit 3"}));
  ContainerStatus status = WaitExited(*runtime_, id);
  EXPECT_EQ(status.state, ContainerState::kExited);
  EXPECT_EQ(status.exit_code, 3);
  EXPECT_EQ(status.reason, "");
  Json c = EngineJson("/containers/" + id + "/json");
  EXPECT_TRUE(c["HostConfig"]["Binds"].is_null() || c["HostConfig"]["Binds"].empty());
  EXPECT_EQ(c["HostConfig"]["IpcMode"], "host");
}

TEST_F(DockerRuntimeTest, StopSendsSigtermAndWaitsForTheGracePeriod) {
  // A cooperative program: exits 0 on SIGTERM (SIGKILL would give 137). It says when its trap is set.
  ContainerSpec spec = Spec("t-stop", "polite",
                            {"sh", "-c", "trap 'exit 0' TERM; touch \"$DIR/ready\"; while :; do sleep 0.1; done"});
  spec.environment = {{"DIR", dir_.string()}};
  spec.mps_pipe_dir = dir_.string();
  std::string polite = StartOk(*runtime_, spec);
  ASSERT_TRUE(WaitForFile(dir_ / "ready"));
  ASSERT_TRUE(runtime_->Stop(polite, std::chrono::seconds(30)).ok());
  auto status = runtime_->Inspect(polite);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, ContainerState::kExited);
  EXPECT_EQ(status->exit_code, 0);

  // PID 1 without a handler ignores SIGTERM: the engine kills it once the grace period is over.
  std::string stubborn = StartOk(*runtime_, Spec("t-stop", "stubborn", {"sleep", "600"}));
  const auto begin = std::chrono::steady_clock::now();
  ASSERT_TRUE(runtime_->Stop(stubborn, milliseconds(1000)).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - begin, milliseconds(1000));
  status = runtime_->Inspect(stubborn);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state, ContainerState::kExited);
  EXPECT_EQ(status->exit_code, 128 + 9);

  // Idempotent.
  EXPECT_TRUE(runtime_->Stop(stubborn, milliseconds(1000)).ok());
  EXPECT_TRUE(runtime_->Stop("gpupack-no-such-container", milliseconds(1000)).ok());
}

TEST_F(DockerRuntimeTest, ANewRuntimeListsItsContainersByLabel) {
  std::string running = StartOk(*runtime_, Spec("t-list", "runs", {"sleep", "600"}));
  std::string exited = StartOk(*runtime_, Spec("t-list", "exits", {"sh", "-c", "exit 3"}));
  EXPECT_EQ(WaitExited(*runtime_, exited).exit_code, 3);
  auto other = NewRuntime(label_ + "-other");
  ASSERT_NE(other, nullptr);
  std::string foreign = StartOk(*other, Spec("t-list-other", "app", {"sleep", "600"}));
  ASSERT_FALSE(foreign.empty());

  // The agent restarts: a new runtime object with the same label finds exactly its own containers.
  auto restarted = NewRuntime(label_);
  ASSERT_NE(restarted, nullptr);
  auto list = restarted->List();
  ASSERT_TRUE(list.ok()) << list.status().message();
  ASSERT_EQ(list->size(), 2u);
  std::vector<std::string> ids;
  for (const RuntimeContainer& c : *list) {
    ids.push_back(c.id);
    EXPECT_EQ(c.task_arn, Arn("t-list"));
    if (c.id == running) {
      EXPECT_EQ(c.container_name, "runs");
      EXPECT_EQ(c.status.state, ContainerState::kRunning);
    } else {
      EXPECT_EQ(c.container_name, "exits");
      EXPECT_EQ(c.status.state, ContainerState::kExited);
      EXPECT_EQ(c.status.exit_code, 3);
    }
  }
  EXPECT_THAT(ids, UnorderedElementsAre(running, exited));

  // Nothing is started twice: the same task's container cannot be created again while it exists.
  EXPECT_EQ(restarted->Start(Spec("t-list", "runs", {"sleep", "600"})).status().code(), ErrorCode::kConflict);
  ASSERT_TRUE(restarted->Stop(running, milliseconds(0)).ok());
  ASSERT_TRUE(restarted->Remove(running).ok());
  EXPECT_TRUE(restarted->Remove(running).ok());  // idempotent
  EXPECT_EQ(restarted->Inspect(running)->state, ContainerState::kMissing);
  list = restarted->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].id, exited);
}

TEST_F(DockerRuntimeTest, AMissingImageIsAClearError) {
  ContainerSpec spec = Spec("t-image", "app", {"true"});
  spec.image = "gpupack-test/no-such-image:latest";
  auto id = runtime_->Start(spec);
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("gpupack-test/no-such-image:latest"));
  EXPECT_THAT(id.status().message(), HasSubstr("No such image"));
  EXPECT_THAT(*runtime_->List(), IsEmpty());
}

TEST_F(DockerRuntimeTest, AMissingExecutableIsAClearErrorAndLeavesNoContainer) {
  auto id = runtime_->Start(Spec("t-exec", "app", {"/no/such/binary"}));
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(id.status().message(), HasSubstr("cannot start container gpupack-" + TaskId("t-exec") + "-app"));
  EXPECT_THAT(id.status().message(), HasSubstr("/no/such/binary"));
  EXPECT_THAT(*runtime_->List(), IsEmpty());
}

TEST_F(DockerRuntimeTest, InvalidIdsAreRejected) {
  EXPECT_EQ(runtime_->Inspect("../../info").status().code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(runtime_->Remove("a?b").code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(runtime_->Inspect("gpupack-no-such-container")->state, ContainerState::kMissing);
  EXPECT_EQ(runtime_->Name(), "docker");
}

// ---- Without an engine ------------------------------------------------------------------------------------

TEST(DockerRuntimeNoEngineTest, UnreachableEngineAndMissingLabel) {
  auto runtime = MakeDockerRuntime({"/nonexistent/gpupack/docker.sock", "agent-1"});
  ASSERT_FALSE(runtime.ok());
  EXPECT_THAT(runtime.status().message(), HasSubstr("/nonexistent/gpupack/docker.sock"));
  EXPECT_EQ(MakeDockerRuntime({"/var/run/docker.sock", ""}).status().code(), ErrorCode::kInvalidParameter);
}

// FakeEngine serves one connection on a unix socket in its own temp dir: it reads the request, runs `answer`, then
// holds the connection until the client gives up on it.
class FakeEngine {
 public:
  explicit FakeEngine(std::function<void(int fd)> answer)
      : engine_(dir_.File("docker.sock"),
                [answer = std::move(answer)](int fd, const FakeDockerEngine::Request&) {
                  answer(fd);
                  FakeDockerEngine::HoldUntilHangUp(fd);
                },
                /*max_connections=*/1) {}
  const std::string& path() const { return engine_.path(); }

 private:
  TempDir dir_{"gpupack-fake-engine"};
  FakeDockerEngine engine_;  // after dir_: stopped before the directory goes
};

// Send writes what it can; the client may hang up first (no SIGPIPE).
void Send(int fd, const std::string& text) { FakeDockerEngine::Send(fd, text); }

TEST(DockerClientTest, AnEngineThatDoesNotAnswerTimesOut) {
  FakeEngine engine([](int) {});
  DockerClient client({engine.path(), milliseconds(300), 1 << 20});
  auto answer = client.Request("GET", "/v1.41/containers/json");
  ASSERT_FALSE(answer.ok());
  EXPECT_THAT(answer.status().message(), HasSubstr("no answer within 300 ms"));
}

TEST(DockerClientTest, ABodyOverTheLimitIsAnError) {
  std::string chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 5; ++i) chunked += "3e8\r\n" + std::string(1000, ' ') + "\r\n";  // 0x3e8 = 1000
  chunked += "0\r\n\r\n";
  const std::vector<std::string> answers = {
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n" +
          std::string(5000, ' '),
      chunked,
  };
  for (const std::string& text : answers) {
    FakeEngine engine([&](int fd) { Send(fd, text); });
    DockerClient client({engine.path(), milliseconds(10000), 1000});
    auto answer = client.Request("GET", "/v1.41/containers/json");
    ASSERT_FALSE(answer.ok()) << text.substr(0, 60);
    EXPECT_THAT(answer.status().message(), HasSubstr("larger than 1000 bytes"));
  }
}

TEST(DockerClientTest, ReadsStatusBodyAndEngineMessage) {
  FakeEngine engine([](int fd) {
    const std::string body = R"({"message":"No such image: x:latest"})";
    Send(fd, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n" + body);
  });
  DockerClient client({engine.path(), milliseconds(10000), 1 << 20});
  auto answer = client.Request("POST", "/v1.41/containers/create", R"({"Image":"x"})");
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  EXPECT_EQ(answer->status, 404);
  EXPECT_EQ(EngineMessage(*answer), "No such image: x:latest");
  EXPECT_EQ(UrlEncode(R"({"label":["a=b"]})"), "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D");
}

}  // namespace
}  // namespace gpupack::agent
