// ContainerEnvironment as a table: (definition env, overrides, GPU assignment, runtime) -> the exact environment.
#include "agent/environment.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gpupack::agent {
namespace {

using Env = std::vector<KeyValuePair>;

constexpr char kPipe[] = "/run/gpupack-mps/agent-1";
constexpr char kGpu0[] = "GPU-aaaa";
constexpr char kGpu1[] = "GPU-bbbb";

GpuAssignment Shared(MiB mib, std::optional<int> percent = std::nullopt) {
  return {{kGpu0}, MpsSharing{mib, percent}};
}
GpuAssignment Dedicated(std::vector<std::string> uuids) { return {std::move(uuids), std::nullopt}; }
GpuAssignment NoGpu() { return {}; }

TEST(MpsMemoryLimitTest, DeviceZeroInMiB) {
  EXPECT_EQ(MpsMemoryLimit(4096), "0=4096M");
  EXPECT_EQ(MpsMemoryLimit(22587), "0=22587M");
  EXPECT_EQ(MpsMemoryLimit(1), "0=1M");
}

struct Case {
  const char* name;
  Env definition;
  Env overrides;
  GpuAssignment gpus;
  RuntimeKind runtime;
  Env want;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ContainerEnvironmentTest : public testing::TestWithParam<Case> {};

TEST_P(ContainerEnvironmentTest, Table) {
  const Case& c = GetParam();
  EXPECT_EQ(ContainerEnvironment(c.definition, c.overrides, c.gpus, kPipe, c.runtime), c.want);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ContainerEnvironmentTest,
    testing::Values(
        // Shared, process runtime: the task's variables first, in order, then the four MPS variables appended.
        // No maxComputePercent: no thread percentage.
        Case{"SharedProcess",
             {{"A", "1"}, {"B", "2"}},
             {},
             Shared(4096),
             RuntimeKind::kProcess,
             {{"A", "1"},
              {"B", "2"},
              {"CUDA_MPS_PIPE_DIRECTORY", kPipe},
              {"CUDA_VISIBLE_DEVICES", kGpu0},
              {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4096M"}}},
        // Shared, docker: NVIDIA_VISIBLE_DEVICES instead of CUDA_VISIBLE_DEVICES; declared 50 % -> the variable.
        Case{"SharedDockerWithCompute",
             {{"A", "1"}},
             {},
             Shared(2048, 50),
             RuntimeKind::kDocker,
             {{"A", "1"},
              {"CUDA_MPS_PIPE_DIRECTORY", kPipe},
              {"NVIDIA_VISIBLE_DEVICES", kGpu0},
              {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=2048M"},
              {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"}}},
        // Overrides win over the definition and keep the definition's position; new ones are appended.
        Case{"OverridesWinOverDefinition",
             {{"A", "def"}, {"B", "def"}, {"C", "def"}},
             {{"B", "ovr"}, {"D", "ovr"}, {"A", "ovr"}},
             NoGpu(),
             RuntimeKind::kProcess,
             {{"A", "ovr"}, {"B", "ovr"}, {"C", "def"}, {"D", "ovr"}, {"CUDA_VISIBLE_DEVICES", ""}}},
        // A duplicate name inside one list: the later value wins, the first position stays.
        Case{"DuplicateInDefinition",
             {{"A", "1"}, {"B", "2"}, {"A", "3"}},
             {},
             NoGpu(),
             RuntimeKind::kDocker,
             {{"A", "3"}, {"B", "2"}, {"NVIDIA_VISIBLE_DEVICES", "void"}}},
        // The MPS variables win over what the definition AND the overrides set, in the task's positions:
        // 4096 MiB declared, the task asked for 99999 and 100 %, another pipe and another GPU.
        Case{"MpsVariablesWinOverTask",
             {{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=99999M"}, {"X", "1"}, {"CUDA_VISIBLE_DEVICES", "0,1"}},
             {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"}, {"CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"}},
             Shared(4096, 25),
             RuntimeKind::kProcess,
             {{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=4096M"},
              {"X", "1"},
              {"CUDA_VISIBLE_DEVICES", kGpu0},
              {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25"},
              {"CUDA_MPS_PIPE_DIRECTORY", kPipe}}},
        // maxComputePercent not declared: a thread percentage the task set itself is removed (the scheduler
        // counted it as 100 %).
        Case{"UndeclaredThreadPercentageRemoved",
             {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "10"}, {"A", "1"}},
             {},
             Shared(1024),
             RuntimeKind::kDocker,
             {{"A", "1"},
              {"CUDA_MPS_PIPE_DIRECTORY", kPipe},
              {"NVIDIA_VISIBLE_DEVICES", kGpu0},
              {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1024M"}}},
        // maxComputePercent 100 declared explicitly: the variable is set to 100.
        Case{"DeclaredHundredPercent",
             {},
             {},
             Shared(512, 100),
             RuntimeKind::kProcess,
             {{"CUDA_MPS_PIPE_DIRECTORY", kPipe},
              {"CUDA_VISIBLE_DEVICES", kGpu0},
              {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=512M"},
              {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"}}},
        // The other runtime's variable is the task's business: shared process keeps NVIDIA_VISIBLE_DEVICES.
        Case{"OtherRuntimeVariableKept",
             {{"NVIDIA_VISIBLE_DEVICES", "all"}},
             {},
             Shared(100),
             RuntimeKind::kProcess,
             {{"NVIDIA_VISIBLE_DEVICES", "all"},
              {"CUDA_MPS_PIPE_DIRECTORY", kPipe},
              {"CUDA_VISIBLE_DEVICES", kGpu0},
              {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=100M"}}},
        // Dedicated, two GPUs: the UUIDs comma-separated; every reserved MPS variable the task set is removed.
        Case{"DedicatedProcessRemovesMps",
             {{"CUDA_MPS_PIPE_DIRECTORY", kPipe},
              {"A", "1"},
              {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1M"},
              {"CUDA_MPS_LOG_DIRECTORY", "/x"}},
             {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "5"}, {"CUDA_VISIBLE_DEVICES", "0"}},
             Dedicated({kGpu0, kGpu1}),
             RuntimeKind::kProcess,
             {{"A", "1"}, {"CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb"}}},
        Case{"DedicatedDocker",
             {{"A", "1"}},
             {},
             Dedicated({kGpu1}),
             RuntimeKind::kDocker,
             {{"A", "1"}, {"NVIDIA_VISIBLE_DEVICES", kGpu1}}},
        // No GPU: docker hides every GPU with "void"; a task's own NVIDIA_VISIBLE_DEVICES=all does not win.
        Case{"NoGpuDockerVoid",
             {{"NVIDIA_VISIBLE_DEVICES", "all"}, {"CUDA_MPS_PIPE_DIRECTORY", kPipe}},
             {},
             NoGpu(),
             RuntimeKind::kDocker,
             {{"NVIDIA_VISIBLE_DEVICES", "void"}}},
        // No GPU, process: CUDA_VISIBLE_DEVICES set and empty (CUDA then sees no device).
        Case{"NoGpuProcessEmpty",
             {{"CUDA_VISIBLE_DEVICES", "0"}},
             {{"B", "2"}},
             NoGpu(),
             RuntimeKind::kProcess,
             {{"CUDA_VISIBLE_DEVICES", ""}, {"B", "2"}}},
        // A shared assignment without a GPU is treated as no GPU: safer than running without limits.
        Case{"SharedWithoutUuidIsNoGpu",
             {},
             {},
             GpuAssignment{{}, MpsSharing{4096, 50}},
             RuntimeKind::kDocker,
             {{"NVIDIA_VISIBLE_DEVICES", "void"}}},
        // Nothing at all, no GPU, process.
        Case{"Empty", {}, {}, NoGpu(), RuntimeKind::kProcess, {{"CUDA_VISIBLE_DEVICES", ""}}}),
    [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

// ---- WithHostDefaults: what a process container inherits from the agent ------------------------------------

// A host whose lookup knows every name it is asked for ("host:<name>") and records the questions.
struct FullHost {
  std::vector<std::string> asked;
  std::deque<std::string> values;  // the returned pointers stay valid
  std::function<const char*(const char*)> Lookup() {
    return [this](const char* name) -> const char* {
      asked.push_back(name);
      values.push_back(std::string("host:") + name);
      return values.back().c_str();
    };
  }
};

TEST(WithHostDefaultsTest, AddsEveryListedNameTheTaskLacksAfterTheTasksOwn) {
  FullHost host;
  Env got = WithHostDefaults({{"A", "1"}}, host.Lookup());
  Env want = {{"A", "1"},
              {"PATH", "host:PATH"},
              {"HOME", "host:HOME"},
              {"LANG", "host:LANG"},
              {"LC_ALL", "host:LC_ALL"},
              {"TZ", "host:TZ"},
              {"LD_LIBRARY_PATH", "host:LD_LIBRARY_PATH"}};
  EXPECT_EQ(got, want);
}

TEST(WithHostDefaultsTest, NeverOverridesATasksValueEvenAnEmptyOne) {
  FullHost host;
  Env env = {{"HOME", "/task/home"}, {"PATH", ""}, {"LD_LIBRARY_PATH", "/task/lib"}};
  Env got = WithHostDefaults(env, host.Lookup());
  Env want = {{"HOME", "/task/home"}, {"PATH", ""}, {"LD_LIBRARY_PATH", "/task/lib"},
              {"LANG", "host:LANG"},  {"LC_ALL", "host:LC_ALL"}, {"TZ", "host:TZ"}};
  EXPECT_EQ(got, want);
  // Each name appears once.
  for (const char* name : {"HOME", "PATH", "LD_LIBRARY_PATH"}) {
    EXPECT_EQ(std::count_if(got.begin(), got.end(), [&](const KeyValuePair& kv) { return kv.name == name; }), 1)
        << name;
  }
}

TEST(WithHostDefaultsTest, AsksOnlyForTheListedNamesAndNeverAddsMpsOrGpuVariables) {
  FullHost host;
  Env got = WithHostDefaults({}, host.Lookup());
  std::vector<std::string> listed(std::begin(kInheritedHostVariables), std::end(kInheritedHostVariables));
  for (const auto& name : host.asked) EXPECT_NE(std::find(listed.begin(), listed.end(), name), listed.end()) << name;
  for (const auto& kv : got) {
    EXPECT_NE(kv.name.rfind("CUDA_", 0), 0u) << kv.name;
    EXPECT_NE(kv.name.rfind("NVIDIA_", 0), 0u) << kv.name;
  }
  EXPECT_EQ(got.size(), listed.size());
}

TEST(WithHostDefaultsTest, KeepsTheMpsEnvironmentExactlyAsContainerEnvironmentMadeIt) {
  // The agent's own environment has MPS variables (e.g. it was started inside an MPS client's shell): none of
  // them reach the container, and ContainerEnvironment's values stay.
  Env mps = ContainerEnvironment({{"A", "1"}}, {}, Shared(4096, 50), kPipe, RuntimeKind::kProcess);
  auto lookup = [](const char* name) -> const char* {
    std::string n = name;
    if (n == "CUDA_MPS_PIPE_DIRECTORY") return "/tmp/nvidia-mps";
    if (n == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") return "0=99999M";
    if (n == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") return "100";
    if (n == "CUDA_MPS_LOG_DIRECTORY") return "/var/log/nvidia-mps";
    if (n == "CUDA_VISIBLE_DEVICES") return "0,1,2,3";
    if (n == "PATH") return "/usr/bin:/bin";
    return nullptr;
  };
  Env got = WithHostDefaults(mps, lookup);
  Env want = mps;
  want.push_back({"PATH", "/usr/bin:/bin"});
  EXPECT_EQ(got, want);
}

TEST(WithHostDefaultsTest, SkipsNamesTheHostDoesNotKnow) {
  auto lookup = [](const char* name) -> const char* {
    std::string n = name;
    if (n == "HOME") return "/root";
    if (n == "TZ") return "";  // known and empty: inherited as empty
    return nullptr;
  };
  EXPECT_EQ(WithHostDefaults({{"A", "1"}}, lookup), (Env{{"A", "1"}, {"HOME", "/root"}, {"TZ", ""}}));
  EXPECT_EQ(WithHostDefaults({}, [](const char*) -> const char* { return nullptr; }), Env{});
  EXPECT_EQ(WithHostDefaults({{"B", "2"}}, [](const char*) -> const char* { return nullptr; }), (Env{{"B", "2"}}));
}

}  // namespace
}  // namespace gpupack::agent
