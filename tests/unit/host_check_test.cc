// HostCheck (`gpupack agent --check`): each item against fakes of what it looks at: fake GPUs, the fake
// libnvidia-ml.so.1 (tests/unit/fake_nvml.cc), MPS control programs written as shell scripts, directories in a
// temp dir, and a fake Docker engine on a unix socket that answers /version and /info.
#include "agent/host_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "agent/gpu_discovery.h"
#include "tests/unit/fake_docker_engine.h"
#include "tests/unit/scoped_env.h"
#include "tests/unit/temp_dir.h"

#ifndef GPUPACK_FAKE_NVML
#error "tests/CMakeLists.txt defines GPUPACK_FAKE_NVML, the path of the fake libnvidia-ml.so.1"
#endif

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using testing_support::FakeDockerEngine;
using testing_support::TempDir;

// Script writes an executable shell script into `dir` and returns its path.
std::string Script(const TempDir& dir, const std::string& name, const std::string& body) {
  const std::string p = dir.Write(name, "#!/bin/sh\n" + body);
  chmod(p.c_str(), 0755);
  return p;
}

using testing_support::ScopedEnv;

// Item: a copy of the item called `name` (callers often pass a temporary checklist).
HostCheckItem Item(const std::vector<HostCheckItem>& items, const std::string& name) {
  for (const HostCheckItem& item : items)
    if (item.name == name) return item;
  ADD_FAILURE() << "no item named " << name;
  return {"(missing)", false, "no item named " + name, ""};
}

// Options: fake GPUs and directories inside `dir`, so everything passes unless a test changes it.
HostCheckOptions Options(const TempDir& dir) {
  HostCheckOptions o;
  o.agent.gpus = "fake:2x22587";
  o.agent.mps_pipe_dir = dir.path() + "/mps";
  o.agent.state_dir = dir.path() + "/state";
  o.device_dir = dir.path() + "/dev";
  o.timeout = std::chrono::milliseconds(2000);
  return o;
}

TEST(HostCheckTest, FakeGpusPassAndSaySo) {
  TempDir dir;
  auto items = RunHostCheck(Options(dir));
  EXPECT_TRUE(HostCheckPassed(items)) << FormatHostCheck(items);
  EXPECT_THAT(Item(items, "NVML").detail, HasSubstr("fake GPUs"));
  EXPECT_THAT(Item(items, "NVML").detail, HasSubstr("2 GPUs"));
  EXPECT_THAT(Item(items, "device nodes").detail, HasSubstr("fake GPUs"));
  EXPECT_THAT(Item(items, "MPS control").detail, HasSubstr("fake GPUs"));
  EXPECT_THAT(Item(items, "MPS pipe dir").detail, HasSubstr("the agent creates it"));
  EXPECT_EQ(items.size(), 6u) << "the process runtime has no docker items";
  const std::string text = FormatHostCheck(items);
  EXPECT_THAT(text, HasSubstr("  ok    NVML"));
  EXPECT_THAT(text, HasSubstr("6 checks, 0 failed"));
  EXPECT_THAT(text, Not(HasSubstr("FAIL")));
}

TEST(HostCheckTest, ABadFakeSpecFails) {
  TempDir dir;
  HostCheckOptions o = Options(dir);
  o.agent.gpus = "fake:lots";
  auto items = RunHostCheck(o);
  EXPECT_FALSE(HostCheckPassed(items));
  EXPECT_FALSE(Item(items, "NVML").ok);
  EXPECT_THAT(Item(items, "NVML").fix, HasSubstr("fake:2x22587"));
}

TEST(HostCheckTest, MissingNvmlFailsWithWhatToInstall) {
  TempDir dir;
  ScopedEnv nvml(kNvmlLibraryEnv, dir.path() + "/no-such-libnvidia-ml.so.1");
  HostCheckOptions o = Options(dir);
  o.agent.gpus = "nvml";
  auto items = RunHostCheck(o);
  const HostCheckItem gpus = Item(items, "NVML");
  EXPECT_FALSE(gpus.ok);
  EXPECT_THAT(gpus.fix, HasSubstr("NVIDIA driver"));
  const std::string text = FormatHostCheck(items);
  EXPECT_THAT(text, HasSubstr("  FAIL  NVML"));
  EXPECT_THAT(text, HasSubstr("fix: install the NVIDIA driver"));
}

TEST(HostCheckTest, NvmlGpusAndTheirDeviceNodes) {
  TempDir dir;
  ScopedEnv nvml(kNvmlLibraryEnv, GPUPACK_FAKE_NVML);
  HostCheckOptions o = Options(dir);
  o.agent.gpus = "nvml";
  auto items = RunHostCheck(o);
  const HostCheckItem gpus = Item(items, "NVML");
  ASSERT_TRUE(gpus.ok) << gpus.detail;
  EXPECT_THAT(gpus.detail, HasSubstr("2 GPUs"));
  EXPECT_THAT(gpus.detail, HasSubstr("NVIDIA H200, 143,220 MiB usable"));
  EXPECT_THAT(gpus.detail, Not(HasSubstr("fake GPUs")));
  // No device nodes in the empty device directory: all three named.
  const HostCheckItem nodes = Item(items, "device nodes");
  EXPECT_FALSE(nodes.ok);
  EXPECT_THAT(nodes.detail, HasSubstr(o.device_dir + "/nvidiactl"));
  EXPECT_THAT(nodes.detail, HasSubstr(o.device_dir + "/nvidia-uvm"));
  EXPECT_THAT(nodes.detail, HasSubstr(o.device_dir + "/nvidia7"));  // the A10G's minor number, not its index
  EXPECT_THAT(nodes.fix, HasSubstr("nvidia-modprobe"));
}

TEST(HostCheckTest, MpsControlProgram) {
  TempDir dir;
  ScopedEnv nvml(kNvmlLibraryEnv, GPUPACK_FAKE_NVML);
  HostCheckOptions o = Options(dir);
  o.agent.gpus = "nvml";

  o.agent.mps_control_program = "gpupack-no-such-mps-control";
  EXPECT_FALSE(Item(RunHostCheck(o), "MPS control").ok);

  // What nvidia-cuda-mps-control answers when no daemon listens on the pipe directory: ok, the agent starts one.
  o.agent.mps_control_program =
      Script(dir, "no-daemon", "cat >/dev/null\necho 'Cannot find MPS control daemon process'\nexit 1\n");
  auto item = Item(RunHostCheck(o), "MPS control");
  EXPECT_TRUE(item.ok) << item.detail;
  EXPECT_THAT(item.detail, HasSubstr("no daemon on " + o.agent.mps_pipe_dir));

  // A daemon answers: adopted.
  o.agent.mps_control_program = Script(dir, "serving",
                                     "read cmd\n[ \"$cmd\" = get_default_active_thread_percentage ] && "
                                     "[ \"$CUDA_MPS_PIPE_DIRECTORY\" = '" +
                                         o.agent.mps_pipe_dir + "' ] && echo 100.0\n");
  item = Item(RunHostCheck(o), "MPS control");
  EXPECT_TRUE(item.ok) << item.detail;
  EXPECT_THAT(item.detail, HasSubstr("a daemon answers"));

  // The program cannot run (a missing library makes the loader exit 127) or says something unexpected.
  o.agent.mps_control_program = Script(dir, "broken", "echo 'error while loading shared libraries' >&2\nexit 127\n");
  item = Item(RunHostCheck(o), "MPS control");
  EXPECT_FALSE(item.ok);
  EXPECT_THAT(item.detail, HasSubstr("exit 127"));
  o.agent.mps_control_program = Script(dir, "odd", "echo 'permission denied'\nexit 1\n");
  EXPECT_FALSE(Item(RunHostCheck(o), "MPS control").ok);

  // A hung daemon: bounded by the timeout, and the fix says to stop it.
  o.timeout = std::chrono::milliseconds(300);
  o.agent.mps_control_program = Script(dir, "hung", "exec sleep 30\n");
  item = Item(RunHostCheck(o), "MPS control");
  EXPECT_FALSE(item.ok);
  EXPECT_THAT(item.fix, HasSubstr("hung"));
}

TEST(HostCheckTest, Directories) {
  TempDir dir;
  HostCheckOptions o = Options(dir);
  fs::create_directories(o.agent.mps_pipe_dir + "/log");
  auto items = RunHostCheck(o);
  EXPECT_EQ(Item(items, "MPS pipe dir").detail, o.agent.mps_pipe_dir + " is writable");
  EXPECT_EQ(Item(items, "MPS log dir").detail, o.agent.mps_pipe_dir + "/log is writable");

  std::ofstream(dir.path() + "/file") << "x";
  o.agent.state_dir = dir.path() + "/file/state";  // under a regular file: can never be created
  EXPECT_FALSE(Item(RunHostCheck(o), "state dir").ok);

  o = Options(dir);
  o.agent.mps_pipe_dir = "/tmp/nvidia-mps";
  EXPECT_THAT(Item(RunHostCheck(o), "MPS pipe dir").detail, HasSubstr("every CUDA program"));
  o.agent.mps_pipe_dir = dir.path() + "/" + std::string(90, 'p');
  EXPECT_THAT(Item(RunHostCheck(o), "MPS pipe dir").detail, HasSubstr("longer than 80"));
}

// FakeEngine answers every connection on a unix socket in `dir`: GET /version and GET /info with the bodies given.
class FakeEngine : public FakeDockerEngine {
 public:
  FakeEngine(const TempDir& dir, std::string info)
      : FakeDockerEngine(dir.File("docker.sock"), [info = std::move(info)](int fd, const Request& request) {
          std::string body = R"({"message":"page not found"})";
          std::string status = "404 Not Found";
          if (request.line.rfind("GET /version ", 0) == 0) {
            body = R"({"Version":"28.2.2","ApiVersion":"1.50","MinAPIVersion":"1.24"})";
            status = "200 OK";
          } else if (request.line.rfind("GET /info ", 0) == 0) {
            body = info;
            status = "200 OK";
          }
          Reply(fd, status, body);
        }) {}
};

TEST(HostCheckTest, DockerEngineAndGpuInjection) {
  TempDir dir;
  ScopedEnv nvml(kNvmlLibraryEnv, GPUPACK_FAKE_NVML);
  HostCheckOptions o = Options(dir);
  o.agent.runtime = "docker";

  {  // Fake GPUs need no GPU runtime; the item still says what the engine has.
    FakeEngine engine(dir, R"({"DefaultRuntime":"runc","Runtimes":{"runc":{}}})");
    o.agent.docker_socket = engine.path();
    auto items = RunHostCheck(o);
    EXPECT_TRUE(HostCheckPassed(items)) << FormatHostCheck(items);
    EXPECT_THAT(Item(items, "docker engine").detail, HasSubstr("Docker Engine 28.2.2"));
    EXPECT_THAT(Item(items, "GPU injection").detail, HasSubstr("fake GPUs: not needed"));
    EXPECT_THAT(Item(items, "GPU injection").detail, HasSubstr("runtimes: runc"));
    EXPECT_THAT(Item(items, "GPU injection").detail, HasSubstr("a GPU task is refused unless a mode works"));

    // Real GPUs behind an engine without the NVIDIA runtime or CDI, and no device nodes: containers would see no GPU.
    o.agent.gpus = "nvml";
    const HostCheckItem injection = Item(RunHostCheck(o), "GPU injection");
    EXPECT_FALSE(injection.ok);
    EXPECT_THAT(injection.detail, HasSubstr("no nvidia runtime"));
    EXPECT_THAT(injection.detail, HasSubstr("devices: no device node " + o.device_dir + "/nvidiactl"));
    EXPECT_THAT(injection.detail, HasSubstr("the agent registers no GPUs"));
    EXPECT_THAT(injection.fix, HasSubstr("nvidia-container-toolkit"));
    EXPECT_THAT(injection.fix, HasSubstr("--driver-root"));
  }
  {  // The nvidia runtime need not be the default: the runtime names it in every GPU container's create call.
    fs::remove(dir.path() + "/docker.sock");
    FakeEngine engine(dir,
                      R"({"DefaultRuntime":"runc","Runtimes":{"runc":{},"nvidia":{}},"CDISpecDirs":["/etc/cdi"]})");
    const HostCheckItem injection = Item(RunHostCheck(o), "GPU injection");
    EXPECT_TRUE(injection.ok) << injection.detail;
    EXPECT_THAT(injection.detail, HasSubstr("nvidia: the engine's nvidia runtime"));
    EXPECT_THAT(injection.detail, HasSubstr("CDI spec dirs: /etc/cdi"));
  }
  {  // --docker-gpu devices on that engine: no device nodes here, so it fails and says so.
    fs::remove(dir.path() + "/docker.sock");
    FakeEngine engine(dir, R"({"DefaultRuntime":"nvidia","Runtimes":{"runc":{},"nvidia":{}}})");
    o.agent.docker_gpu = "devices";
    const HostCheckItem forced = Item(RunHostCheck(o), "GPU injection");
    EXPECT_FALSE(forced.ok);
    EXPECT_THAT(forced.detail, HasSubstr("--docker-gpu devices"));
    o.agent.docker_gpu = "auto";
    const HostCheckItem injection = Item(RunHostCheck(o), "GPU injection");
    EXPECT_TRUE(injection.ok) << injection.detail;
    EXPECT_THAT(injection.detail, HasSubstr("NVIDIA_VISIBLE_DEVICES"));
  }
  // No engine at all: both docker items fail, the second says why it was not asked.
  o.agent.docker_socket = dir.path() + "/none.sock";
  auto items = RunHostCheck(o);
  EXPECT_FALSE(Item(items, "docker engine").ok);
  EXPECT_THAT(Item(items, "docker engine").fix, HasSubstr("--docker-socket"));
  EXPECT_THAT(Item(items, "GPU injection").detail, HasSubstr("not checked"));
}

// A real engine (CI starts one, scripts/docker-engine.sh) with fake GPUs passes.
TEST(HostCheckTest, RealEngineWhenGiven) {
  const char* socket = std::getenv("GPUPACK_DOCKER_SOCKET");
  if (socket == nullptr || *socket == '\0') GTEST_SKIP() << "GPUPACK_DOCKER_SOCKET is not set";
  TempDir dir;
  HostCheckOptions o = Options(dir);
  o.agent.runtime = "docker";
  o.agent.docker_socket = socket;
  auto items = RunHostCheck(o);
  EXPECT_TRUE(HostCheckPassed(items)) << FormatHostCheck(items);
}

}  // namespace
}  // namespace gpupack::agent
