// GPU injection (agent/gpu_injection.h): which mode a host gets, and the create call the docker runtime sends for
// each mode, against a fake engine that records every request. No GPU and no real engine needed: device nodes are
// symlinks to /dev/null in a temp directory, driver libraries empty files.
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "agent/gpu_injection.h"
#include "agent/runtime.h"
#include "tests/unit/fake_docker_engine.h"
#include "tests/unit/temp_dir.h"

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kH200[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kA10G[] = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

using testing_support::FakeDockerEngine;
using testing_support::TempDir;

// Node makes <dir>/dev/<name> a character device (a symlink to /dev/null).
std::string Node(const TempDir& dir, const std::string& name) {
  const fs::path p = fs::path(dir.path()) / "dev" / name;
  fs::create_directories(p.parent_path());
  fs::create_symlink("/dev/null", p);
  return p.string();
}

std::vector<GpuDevice> TwoGpus() {
  GpuDevice h200;
  h200.index = 0;
  h200.uuid = kH200;
  h200.minor = 3;
  GpuDevice a10g;
  a10g.index = 1;
  a10g.uuid = kA10G;
  a10g.minor = 7;
  return {h200, a10g};
}

EngineGpuSupport Engine(std::vector<std::string> runtimes, std::vector<std::string> cdi_dirs = {},
                        std::string api = "1.43") {
  EngineGpuSupport e;
  e.runtimes = std::move(runtimes);
  e.cdi_spec_dirs = std::move(cdi_dirs);
  e.api_version = std::move(api);
  return e;
}

// DevicesHost: a temp dir with the device nodes of both GPUs and a driver root holding the two libraries.
GpuInjectionOptions DevicesHost(const TempDir& dir) {
  for (const char* node : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia3", "nvidia7"}) Node(dir, node);
  dir.Write("driver/lib64/libcuda.so.1");
  dir.Write("driver/lib64/libnvidia-ml.so.1");
  GpuInjectionOptions o;
  o.device_dir = dir.path() + "/dev";
  o.driver_root_candidates = {dir.path() + "/no-such-root", dir.path() + "/driver"};
  o.run_ldconfig = false;
  return o;
}

GpuInjection Choose(const GpuInjectionOptions& o, const EngineGpuSupport& e) {
  auto plan = ChooseGpuInjection(o, e, TwoGpus());
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? *plan : GpuInjection();
}

TEST(GpuInjectionTest, AutoPrefersNvidiaThenCdiThenDevices) {
  TempDir dir;
  GpuInjectionOptions o = DevicesHost(dir);
  dir.Write("cdi/nvidia.yaml",
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n"
            "    - path: /dev/nvidia3\n- name: " + std::string(kA10G) + "\n  containerEdits: {}\n- name: all\n");

  GpuInjection nvidia = Choose(o, Engine({"runc", "nvidia"}, {dir.path() + "/cdi"}, "1.50"));
  EXPECT_EQ(nvidia.mode, GpuInjectionMode::kNvidia);

  GpuInjection cdi = Choose(o, Engine({"runc"}, {dir.path() + "/cdi"}, "1.50"));
  EXPECT_EQ(cdi.mode, GpuInjectionMode::kCdi);
  EXPECT_EQ(cdi.gpus[kH200].cdi_name, "nvidia.com/gpu=0");     // named by index
  EXPECT_EQ(cdi.gpus[kA10G].cdi_name, "nvidia.com/gpu=" + std::string(kA10G));  // by UUID
  EXPECT_EQ(cdi.api_version, "1.44");
  EXPECT_THAT(cdi.summary, HasSubstr("not nvidia: the engine has no nvidia runtime"));

  // The same specs on an engine older than 1.44, or with CDI off: devices.
  for (const EngineGpuSupport& e : {Engine({"runc"}, {dir.path() + "/cdi"}, "1.43"), Engine({"runc"}, {}, "1.50")}) {
    GpuInjection devices = Choose(o, e);
    EXPECT_EQ(devices.mode, GpuInjectionMode::kDevices) << devices.summary;
    EXPECT_THAT(devices.library_binds, ElementsAre(dir.path() + "/driver/lib64:" + dir.path() + "/driver/lib64:ro"));
    EXPECT_EQ(devices.library_path, dir.path() + "/driver/lib64");
    EXPECT_THAT(devices.summary, HasSubstr("driver root " + dir.path() + "/driver"));
  }
  EXPECT_THAT(Choose(o, Engine({"runc"}, {dir.path() + "/cdi"}, "1.43")).summary,
              HasSubstr("CDI device requests need 1.44"));
  EXPECT_THAT(Choose(o, Engine({"runc"}, {}, "1.50")).summary, HasSubstr("CDI is off"));
}

TEST(GpuInjectionTest, CdiNeedsASpecForEveryGpuJsonOrYaml) {
  TempDir dir;
  GpuInjectionOptions o;
  o.mode = "cdi";
  dir.Write("cdi/other.json", R"({"cdiVersion":"0.6.0","kind":"vendor.com/fpga","devices":[{"name":"0"}]})");
  GpuInjection none = Choose(o, Engine({"runc"}, {dir.path() + "/cdi"}, "1.47"));
  EXPECT_EQ(none.mode, GpuInjectionMode::kNone);
  EXPECT_THAT(none.summary, HasSubstr("--docker-gpu cdi"));
  EXPECT_THAT(none.summary, HasSubstr("no nvidia.com/gpu spec in " + dir.path() + "/cdi"));
  EXPECT_THAT(none.summary, Not(HasSubstr("devices:")));  // a mode that was asked for is the only one tried

  dir.Write("cdi/nvidia.json",
            R"({"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devices":[{"name":")" + std::string(kH200) + R"("}]})");
  GpuInjection half = Choose(o, Engine({"runc"}, {dir.path() + "/cdi"}, "1.47"));
  EXPECT_EQ(half.mode, GpuInjectionMode::kNone);
  EXPECT_THAT(half.summary, HasSubstr("name no device for " + std::string(kA10G)));

  dir.Write("run/nvidia-a10g.yaml", "kind: 'nvidia.com/gpu'\ndevices:\n  - name: '1'\n");
  GpuInjection both = Choose(o, Engine({"runc"}, {dir.path() + "/cdi", dir.path() + "/run"}, "1.47"));
  EXPECT_EQ(both.mode, GpuInjectionMode::kCdi) << both.summary;
  EXPECT_EQ(both.gpus[kH200].cdi_name, "nvidia.com/gpu=" + std::string(kH200));
  EXPECT_EQ(both.gpus[kA10G].cdi_name, "nvidia.com/gpu=1");
}

TEST(GpuInjectionTest, DevicesNeedTheNodesAndTheDriverLibraries) {
  TempDir dir;
  GpuInjectionOptions o;
  o.mode = "devices";
  o.device_dir = dir.path() + "/dev";
  o.driver_root_candidates = {dir.path() + "/driver"};
  o.run_ldconfig = false;
  Node(dir, "nvidiactl");
  Node(dir, "nvidia3");
  dir.Write("dev/nvidia-uvm");  // a plain file is no device node
  GpuInjection missing = Choose(o, Engine({"runc", "nvidia"}));
  EXPECT_EQ(missing.mode, GpuInjectionMode::kNone);
  EXPECT_THAT(missing.summary, HasSubstr("devices: no device node " + dir.path() + "/dev/nvidia-uvm, " +
                                         dir.path() + "/dev/nvidia7"));
  EXPECT_THAT(missing.summary, Not(HasSubstr("nvidia:")));

  fs::remove(dir.path() + "/dev/nvidia-uvm");
  Node(dir, "nvidia-uvm");
  Node(dir, "nvidia7");
  GpuInjection no_libs = Choose(o, Engine({"runc"}));
  EXPECT_EQ(no_libs.mode, GpuInjectionMode::kNone);
  EXPECT_THAT(no_libs.summary, HasSubstr("no driver libraries (libcuda.so.1 and libnvidia-ml.so.1) under " +
                                         dir.path() + "/driver"));
  EXPECT_THAT(no_libs.summary, HasSubstr("give --driver-root"));

  // ldconfig's cache names the directory when no known root has them.
  dir.Write("ldlibs/libcuda.so.1");
  dir.Write("ldlibs/libnvidia-ml.so.1");
  o.ldconfig_listing = "3 libs found in cache `/etc/ld.so.cache'\n"
                       "\tlibnvidia-ml.so.1 (libc6,x86-64) => " + dir.path() + "/ldlibs/libnvidia-ml.so.1\n"
                       "\tlibcuda.so.1 (libc6,x86-64) => " + dir.path() + "/ldlibs/libcuda.so.1\n"
                       "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n";
  GpuInjection from_ldconfig = Choose(o, Engine({"runc"}));
  EXPECT_EQ(from_ldconfig.mode, GpuInjectionMode::kDevices) << from_ldconfig.summary;
  EXPECT_EQ(from_ldconfig.library_path, dir.path() + "/ldlibs");

  // A given root wins, and one without the libraries is a clear failure.
  o.driver_root = dir.path() + "/nothing-here";
  GpuInjection bad_root = Choose(o, Engine({"runc"}));
  EXPECT_EQ(bad_root.mode, GpuInjectionMode::kNone);
  EXPECT_THAT(bad_root.summary, HasSubstr("--driver-root " + dir.path() + "/nothing-here holds no libcuda.so.1"));
  dir.Write("given/lib/libcuda.so.1");
  dir.Write("given/lib/libnvidia-ml.so.1");
  o.driver_root = dir.path() + "/given";
  EXPECT_EQ(Choose(o, Engine({"runc"})).library_path, dir.path() + "/given/lib");
}

TEST(GpuInjectionTest, NothingWorksSaysWhyForEveryModeAndBadFlagsAreErrors) {
  TempDir dir;
  GpuInjectionOptions o;
  o.device_dir = dir.path() + "/dev";
  o.run_ldconfig = false;
  GpuInjection none = Choose(o, Engine({"runc"}, {}, "1.50"));
  EXPECT_EQ(none.mode, GpuInjectionMode::kNone);
  EXPECT_THAT(none.summary, HasSubstr("no GPU injection works on this host (--docker-gpu auto)"));
  EXPECT_THAT(none.summary, HasSubstr("nvidia: the engine has no nvidia runtime (runtimes: runc)"));
  EXPECT_THAT(none.summary, HasSubstr("cdi: the engine lists no CDI spec directories"));
  EXPECT_THAT(none.summary, HasSubstr("devices: no device node " + dir.path() + "/dev/nvidiactl"));

  o.mode = "gpu";
  auto bad = ChooseGpuInjection(o, Engine({"runc"}), TwoGpus());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--docker-gpu must be auto, nvidia, cdi or devices"));
}

// Simulated GPUs (--gpus fake:...): the environment the agent set is all a container gets; the create body is
// left as it was, and a GPU that is not one of the agent's is still refused.
TEST(GpuInjectionTest, EnvironmentOnlyAddsNothingButRefusesAnUnknownGpu) {
  GpuInjection plan = EnvironmentOnlyInjection(TwoGpus());
  EXPECT_EQ(plan.mode, GpuInjectionMode::kEnvironmentOnly);
  EXPECT_EQ(GpuInjectionModeName(plan.mode), "environment-only");
  EXPECT_THAT(plan.summary, HasSubstr("no GPU device"));
  const Json before = {{"Env", {std::string("NVIDIA_VISIBLE_DEVICES=") + kH200}}, {"HostConfig", Json::object()}};
  Json body = before;
  ASSERT_TRUE(InjectGpus(plan, {kH200}, body).ok());
  EXPECT_EQ(body, before);
  EXPECT_THAT(InjectGpus(plan, {"GPU-not-ours"}, body).message(), HasSubstr("not a GPU of this host"));
}

TEST(GpuInjectionTest, VisibleGpusReadsNvidiaVisibleDevices) {
  EXPECT_THAT(VisibleGpus({{"NVIDIA_VISIBLE_DEVICES", "void"}}), IsEmpty());
  EXPECT_THAT(VisibleGpus({{"A", "b"}}), IsEmpty());
  EXPECT_THAT(VisibleGpus({{"NVIDIA_VISIBLE_DEVICES", "none"}}), IsEmpty());
  EXPECT_THAT(VisibleGpus({{"NVIDIA_VISIBLE_DEVICES", std::string(kH200) + "," + kA10G}}),
              ElementsAre(kH200, kA10G));
  EXPECT_THAT(VisibleGpus({{"NVIDIA_VISIBLE_DEVICES", "x"}, {"NVIDIA_VISIBLE_DEVICES", kA10G}}), ElementsAre(kA10G));
}

// RecordingEngine answers GET /version (API 1.47), POST .../containers/create (201 with an id) and
// POST .../start (204) on a unix socket, and records each request line with its body.
class RecordingEngine {
 public:
  struct Request {
    std::string line;  // "POST /v1.41/containers/create?name=... HTTP/1.1"
    std::string body;
  };

  explicit RecordingEngine(const TempDir& dir)
      : engine_(dir.File("docker.sock"), [this](int fd, const FakeDockerEngine::Request& r) { Answer(fd, r); }) {}
  const std::string& path() const { return engine_.path(); }
  std::vector<Request> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  // LastCreate is the body of the last create call (null when none).
  Json LastCreate() const {
    const auto all = requests();
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (it->line.find("/containers/create") != std::string::npos) return Json::parse(it->body);
    return Json();
  }

 private:
  void Answer(int fd, const FakeDockerEngine::Request& r) {
    {
      std::lock_guard lock(mu_);
      requests_.push_back(Request{r.line, r.body});
    }
    std::string status = "404 Not Found", body = R"({"message":"page not found"})";
    if (r.line.rfind("GET /version ", 0) == 0) {
      status = "200 OK";
      body = R"({"Version":"26.1.0","ApiVersion":"1.47","MinAPIVersion":"1.24"})";
    } else if (r.line.find("/containers/create") != std::string::npos) {
      status = "201 Created";
      body = R"({"Id":"0123456789abcdef0123456789abcdef","Warnings":[]})";
    } else if (r.line.find("/start ") != std::string::npos) {
      status = "204 No Content";
      body = "";
    }
    FakeDockerEngine::Reply(fd, status, body);
  }

  mutable std::mutex mu_;
  std::vector<Request> requests_;  // guarded by mu_
  FakeDockerEngine engine_;        // last: its thread stops before the rest goes
};

// SharedSpec: a container sharing the H200 through MPS, as the agent builds it for the docker runtime.
ContainerSpec SharedSpec(const std::string& pipe_dir) {
  ContainerSpec spec;
  spec.task_arn = "arn:aws:ecs:us-east-1:123456789012:task/default/t1";
  spec.container_name = "main";
  spec.image = "busybox";
  spec.environment = {{"LD_LIBRARY_PATH", "/opt/app/lib"},
                      {"CUDA_MPS_PIPE_DIRECTORY", pipe_dir},
                      {"NVIDIA_VISIBLE_DEVICES", kH200},
                      {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4096M"}};
  spec.mps_pipe_dir = pipe_dir;
  return spec;
}

// DedicatedSpec: both GPUs, whole, without MPS.
ContainerSpec DedicatedSpec() {
  ContainerSpec spec;
  spec.task_arn = "arn:aws:ecs:us-east-1:123456789012:task/default/t2";
  spec.container_name = "main";
  spec.image = "busybox";
  spec.environment = {{"NVIDIA_VISIBLE_DEVICES", std::string(kH200) + "," + kA10G}};
  return spec;
}

std::unique_ptr<Runtime> RuntimeWith(const RecordingEngine& engine, GpuInjection plan) {
  DockerRuntimeOptions options;
  options.socket_path = engine.path();
  options.agent_label = "agent-1";
  auto runtime = MakeDockerRuntime(options, std::move(plan));
  EXPECT_TRUE(runtime.ok()) << runtime.status().message();
  return runtime.ok() ? std::move(*runtime) : nullptr;
}

TEST(GpuInjectionRuntimeTest, NvidiaModeNamesTheRuntimeAndKeepsTheUuidInTheEnvironment) {
  TempDir dir;
  RecordingEngine engine(dir);
  auto runtime = RuntimeWith(engine, Choose(GpuInjectionOptions{}, Engine({"runc", "nvidia"})));
  ASSERT_NE(runtime, nullptr);
  ASSERT_TRUE(runtime->Start(SharedSpec("/run/gpupack-mps")).ok());
  const Json body = engine.LastCreate();
  EXPECT_EQ(body["HostConfig"]["Runtime"], "nvidia");
  EXPECT_EQ(body["HostConfig"]["IpcMode"], "host");
  EXPECT_EQ(body["HostConfig"]["Binds"], Json::array({"/run/gpupack-mps:/run/gpupack-mps"}));
  EXPECT_THAT(body["Env"], Contains("NVIDIA_VISIBLE_DEVICES=" + std::string(kH200)));
  EXPECT_THAT(body["Env"], Contains("LD_LIBRARY_PATH=/opt/app/lib"));  // untouched
  EXPECT_FALSE(body["HostConfig"].contains("Devices"));
  EXPECT_FALSE(body["HostConfig"].contains("DeviceRequests"));
  EXPECT_THAT(engine.requests().back().line, HasSubstr("/v1.41/containers/"));
}

TEST(GpuInjectionRuntimeTest, CdiModeSendsADeviceRequestOnApi144) {
  TempDir dir;
  dir.Write("cdi/nvidia.yaml", "kind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n- name: \"1\"\n");
  RecordingEngine engine(dir);
  auto runtime = RuntimeWith(engine, Choose(GpuInjectionOptions{}, Engine({"runc"}, {dir.path() + "/cdi"}, "1.47")));
  ASSERT_NE(runtime, nullptr);
  ASSERT_TRUE(runtime->Start(DedicatedSpec()).ok());
  const Json body = engine.LastCreate();
  EXPECT_EQ(body["HostConfig"]["DeviceRequests"],
            Json::parse(R"([{"Driver":"cdi","DeviceIDs":["nvidia.com/gpu=0","nvidia.com/gpu=1"]}])"));
  EXPECT_FALSE(body["HostConfig"].contains("Runtime"));
  EXPECT_FALSE(body["HostConfig"].contains("Binds"));  // dedicated: no MPS pipe directory
  bool created_on_144 = false;
  for (const auto& r : engine.requests())
    if (r.line.rfind("POST /v1.44/containers/create?name=", 0) == 0) created_on_144 = true;
  EXPECT_TRUE(created_on_144) << "CDI device requests need API 1.44";
}

TEST(GpuInjectionRuntimeTest, DevicesModePassesNodesLibrariesAndLibraryPath) {
  TempDir dir;
  GpuInjectionOptions o = DevicesHost(dir);
  o.extra_binds = {"/usr:/usr:ro"};
  RecordingEngine engine(dir);
  auto runtime = RuntimeWith(engine, Choose(o, Engine({"runc"})));
  ASSERT_NE(runtime, nullptr);

  ASSERT_TRUE(runtime->Start(SharedSpec("/run/gpupack-mps")).ok());
  Json body = engine.LastCreate();
  const std::string dev = dir.path() + "/dev/";
  auto node = [&dev](const std::string& name) {
    return Json{{"PathOnHost", dev + name}, {"PathInContainer", "/dev/" + name}, {"CgroupPermissions", "rwm"}};
  };
  EXPECT_EQ(body["HostConfig"]["Devices"],
            Json::array({node("nvidia3"), node("nvidiactl"), node("nvidia-uvm"), node("nvidia-uvm-tools")}));
  const std::string lib = dir.path() + "/driver/lib64";
  EXPECT_EQ(body["HostConfig"]["Binds"],
            Json::array({"/run/gpupack-mps:/run/gpupack-mps", lib + ":" + lib + ":ro", "/usr:/usr:ro"}));
  EXPECT_THAT(body["Env"], Contains("LD_LIBRARY_PATH=" + lib + ":/opt/app/lib"));  // the driver's first
  EXPECT_THAT(body["Env"], Contains("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M"));
  EXPECT_EQ(body["HostConfig"]["IpcMode"], "host");
  EXPECT_FALSE(body["HostConfig"].contains("Runtime"));

  // Dedicated: both GPUs' nodes, no pipe directory, LD_LIBRARY_PATH added.
  ASSERT_TRUE(runtime->Start(DedicatedSpec()).ok());
  body = engine.LastCreate();
  EXPECT_EQ(body["HostConfig"]["Devices"].size(), 5u);
  EXPECT_EQ(body["HostConfig"]["Devices"][1]["PathInContainer"], "/dev/nvidia7");
  EXPECT_EQ(body["HostConfig"]["Binds"], Json::array({lib + ":" + lib + ":ro", "/usr:/usr:ro"}));
  EXPECT_THAT(body["Env"], Contains("LD_LIBRARY_PATH=" + lib));

  // A node that went away since the plan was made: refused, naming the node and the GPU, nothing created.
  const size_t before = engine.requests().size();
  fs::remove(dev + "nvidia7");
  auto refused = runtime->Start(DedicatedSpec());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("docker GPU injection devices: no device node " + dev + "nvidia7 for GPU " + kA10G));
  EXPECT_EQ(engine.requests().size(), before);
}

TEST(GpuInjectionRuntimeTest, WithoutAWorkingModeAGpuContainerIsRefusedAndOthersRun) {
  TempDir dir;
  RecordingEngine engine(dir);
  GpuInjectionOptions o;
  o.device_dir = dir.path() + "/dev";
  o.run_ldconfig = false;
  auto runtime = RuntimeWith(engine, Choose(o, Engine({"runc"})));
  ASSERT_NE(runtime, nullptr);
  auto refused = runtime->Start(SharedSpec("/run/gpupack-mps"));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("the container needs GPU " + std::string(kH200)));
  EXPECT_THAT(refused.status().message(), HasSubstr("no GPU injection works on this host"));
  EXPECT_THAT(refused.status().message(), HasSubstr("nvidia: the engine has no nvidia runtime"));
  for (const auto& r : engine.requests()) EXPECT_THAT(r.line, Not(HasSubstr("/containers/create")));

  // A GPU this host does not have (the plan knows every GPU) is refused in every mode.
  auto nvidia = RuntimeWith(engine, Choose(o, Engine({"nvidia"})));
  ContainerSpec stranger = DedicatedSpec();
  stranger.environment = {{"NVIDIA_VISIBLE_DEVICES", "GPU-not-here"}};
  EXPECT_THAT(nvidia->Start(stranger).status().message(), HasSubstr("GPU GPU-not-here is not a GPU of this host"));

  ContainerSpec plain = DedicatedSpec();
  plain.environment = {{"NVIDIA_VISIBLE_DEVICES", "void"}};
  ASSERT_TRUE(runtime->Start(plain).ok());
  EXPECT_FALSE(engine.LastCreate()["HostConfig"].contains("Devices"));
}

}  // namespace
}  // namespace gpupack::agent
