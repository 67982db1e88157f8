// GPU discovery: the fake:SPEC parser and fake GPUs, and the NVML path run against a fake libnvidia-ml.so.1
// (tests/unit/fake_nvml.cc, built by tests/CMakeLists.txt) so the dlopen and struct layout code really runs.
#include "agent/gpu_discovery.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <optional>

#include <gtest/gtest.h>

#include "agent/fake_gpus.h"
#include "tests/unit/scoped_env.h"
#include "tests/unit/temp_dir.h"

#ifndef GPUPACK_FAKE_NVML
#error "tests/CMakeLists.txt defines GPUPACK_FAKE_NVML, the path of the fake libnvidia-ml.so.1"
#endif

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;

// ---- fake:SPEC ----------------------------------------------------------------------------------------------

TEST(FakeGpusTest, ParsesOneGroup) {
  auto d = MakeGpuDiscovery("fake:2x22587", "agent-1");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->Describe(), "fake:2x22587");
  auto gpus = (*d)->Discover();
  ASSERT_TRUE(gpus.ok());
  ASSERT_EQ(gpus->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const GpuDevice& g = (*gpus)[i];
    EXPECT_EQ(g.index, i);
    EXPECT_EQ(g.uuid, FakeGpuUuid("agent-1", i));
    EXPECT_EQ(g.name, "Fake GPU");
    EXPECT_EQ(g.total_mib, 22587);
    EXPECT_EQ(g.reserved_mib, 0);
    EXPECT_EQ(g.usable_mib, 22587);
    EXPECT_EQ(g.sm_count, 80);
    EXPECT_EQ(g.minor, i);  // fake device nodes are numbered like the GPUs
  }
}

TEST(FakeGpusTest, ParsesGroupsInOrder) {
  auto d = MakeGpuDiscovery("fake:1x81559,1x22587,2x100", "s");
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto gpus = (*d)->Discover();
  ASSERT_TRUE(gpus.ok());
  ASSERT_EQ(gpus->size(), 4u);
  const MiB want[] = {81559, 22587, 100, 100};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*gpus)[i].index, i);
    EXPECT_EQ((*gpus)[i].usable_mib, want[i]) << i;
    EXPECT_EQ((*gpus)[i].uuid, FakeGpuUuid("s", i));
  }
}

struct BadFlag {
  const char* name;
  const char* flag;
  const char* mentions;  // the message names the problem
};

void PrintTo(const BadFlag& b, std::ostream* os) { *os << b.name; }

class BadFlagTest : public testing::TestWithParam<BadFlag> {};

TEST_P(BadFlagTest, IsInvalidParameterNamingTheProblem) {
  auto d = MakeGpuDiscovery(GetParam().flag, "seed");
  ASSERT_FALSE(d.ok()) << GetParam().flag;
  EXPECT_EQ(d.status().code(), ErrorCode::kInvalidParameter);
  EXPECT_NE(d.status().message().find(GetParam().mentions), std::string::npos) << d.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadFlagTest,
    testing::Values(BadFlag{"Empty", "", "expected \"nvml\" or \"fake:"},
                    BadFlag{"Unknown", "gpu", "--gpus \"gpu\""},
                    BadFlag{"UpperCaseNvml", "NVML", "--gpus \"NVML\""},
                    BadFlag{"FakeWithoutColon", "fake", "--gpus \"fake\""},
                    BadFlag{"EmptySpec", "fake:", "SPEC is empty"},
                    BadFlag{"NoMemory", "fake:2", "group \"2\" is not <count>x<MiB>"},
                    BadFlag{"NotX", "fake:2y22587", "group \"2y22587\""},
                    BadFlag{"NoCount", "fake:x22587", "count \"\""},
                    BadFlag{"ZeroCount", "fake:0x22587", "count \"0\""},
                    BadFlag{"NegativeCount", "fake:-1x22587", "count \"-1\""},
                    BadFlag{"PlusSign", "fake:+1x22587", "count \"+1\""},
                    BadFlag{"TooManyInGroup", "fake:65x100", "count \"65\""},
                    BadFlag{"EmptyMemory", "fake:2x", "memory \"\""},
                    BadFlag{"ZeroMemory", "fake:2x0", "memory \"0\""},
                    BadFlag{"FractionalMemory", "fake:2x1.5", "memory \"1.5\""},
                    BadFlag{"MemoryWithUnit", "fake:2x22587MiB", "memory \"22587MiB\""},
                    BadFlag{"MemoryOverflow", "fake:2x99999999999999999999", "memory \"99999999999999999999\""},
                    BadFlag{"TrailingComma", "fake:2x22587,", "group \"\""},
                    BadFlag{"EmptyGroup", "fake:2x22587,,1x1", "group \"\""},
                    BadFlag{"TooManyInTotal", "fake:40x1,40x1", "more than 64 GPUs"},
                    BadFlag{"LeadingSpace", "fake: 2x22587", "count \" 2\""}),
    [](const testing::TestParamInfo<BadFlag>& info) { return std::string(info.param.name); });

TEST(FakeGpusTest, UuidsAreDeterministicAndSeeded) {
  // An empty seed gives exactly the documented shape; the index is the last group.
  EXPECT_EQ(FakeGpuUuid("", 0), "GPU-fake0000-0000-0000-0000-000000000000");
  EXPECT_EQ(FakeGpuUuid("", 7), "GPU-fake0000-0000-0000-0000-000000000007");
  // Same seed and index: same UUID (also across processes: it is a fixed hash, checked against a constant).
  EXPECT_EQ(FakeGpuUuid("agent-1", 1), FakeGpuUuid("agent-1", 1));
  // Shape: GPU-fakeHHHH-HHHH-HHHH-0000-DDDDDDDDDDDD (H hex, D decimal).
  auto shaped = [](const std::string& u) {
    const std::string pattern = "GPU-fakehhhh-hhhh-hhhh-0000-dddddddddddd";
    if (u.size() != pattern.size()) return false;
    for (size_t i = 0; i < u.size(); ++i) {
      const char p = pattern[i], c = u[i];
      const bool ok = p == 'h' ? std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(c)
                      : p == 'd' ? std::isdigit(static_cast<unsigned char>(c)) != 0
                                 : c == p;
      if (!ok) return false;
    }
    return true;
  };
  for (const char* seed : {"agent-1", "agent-2", "x", "a much longer seed with spaces"}) {
    for (int i : {0, 1, 63}) EXPECT_TRUE(shaped(FakeGpuUuid(seed, i))) << FakeGpuUuid(seed, i);
  }
  // Two agents on one host differ; two GPUs of one agent differ.
  EXPECT_NE(FakeGpuUuid("agent-1", 0), FakeGpuUuid("agent-2", 0));
  EXPECT_NE(FakeGpuUuid("agent-1", 0), FakeGpuUuid("agent-1", 1));
  EXPECT_NE(FakeGpuUuid("agent-1", 0), FakeGpuUuid("", 0));
}

TEST(FakeGpusTest, UuidIsStableAcrossBuilds) {
  // The low 48 bits of FNV-1a-64("agent-1"), pinned: a changed hash would re-identify every fake GPU of a
  // restarted agent, so it must fail a test.
  EXPECT_EQ(FakeGpuUuid("agent-1", 3), "GPU-fake2bd5-027d-d6e2-0000-000000000003");
}

TEST(FakeGpusTest, NoProcessesByDefault) {
  auto d = FakeGpus::Create("1x100", "s");
  ASSERT_TRUE(d.ok());
  auto p = (*d)->Processes();
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->empty());
}

TEST(FakeGpusTest, InjectedProcesses) {
  auto d = FakeGpus::Create("2x22587", "s");
  ASSERT_TRUE(d.ok());
  FakeGpus& fake = **d;
  fake.SetProcesses({{42, FakeGpuUuid("s", 1), 5000}, {43, FakeGpuUuid("s", 0), 1}});
  auto p = fake.Processes();
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].pid, 42u);
  EXPECT_EQ((*p)[0].gpu_uuid, FakeGpuUuid("s", 1));
  EXPECT_EQ((*p)[0].used_mib, 5000);
  fake.ClearProcesses();
  EXPECT_TRUE(fake.Processes()->empty());
}

using testing_support::TempDir;

TEST(FakeGpusTest, ProcessesFileIsReadOnEveryCall) {
  TempDir dir;
  auto d = FakeGpus::Create("2x22587", "s", {dir.path() + "/" + kFakeGpuProcessesFile});
  ASSERT_TRUE(d.ok());
  // No file yet: no processes.
  EXPECT_TRUE((*d)->Processes()->empty());
  dir.Write(kFakeGpuProcessesFile,
            R"([{"pid": 4242, "gpuUuid": ")" + FakeGpuUuid("s", 0) +
                R"(", "usedMiB": 5000}, {"pid": 4243, "gpuIndex": 1, "usedMiB": 10}])");
  auto p = (*d)->Processes();
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].pid, 4242u);
  EXPECT_EQ((*p)[0].gpu_uuid, FakeGpuUuid("s", 0));
  EXPECT_EQ((*p)[0].used_mib, 5000);
  EXPECT_EQ((*p)[1].pid, 4243u);
  EXPECT_EQ((*p)[1].gpu_uuid, FakeGpuUuid("s", 1));  // gpuIndex resolved to the fake GPU's UUID
  EXPECT_EQ((*p)[1].used_mib, 10);
  // Changed from outside: the next call sees it. Injected processes take precedence over the file.
  dir.Write(kFakeGpuProcessesFile, "[]");
  EXPECT_TRUE((*d)->Processes()->empty());
  (*d)->SetProcesses({{1, "GPU-x", 1}});
  EXPECT_EQ((*d)->Processes()->size(), 1u);
}

TEST(FakeGpusTest, BadProcessesFileIsAnErrorNamingIt) {
  TempDir dir;
  const std::string file = dir.path() + "/" + kFakeGpuProcessesFile;
  auto d = FakeGpus::Create("2x22587", "s", {file});
  ASSERT_TRUE(d.ok());
  for (const char* text : {"not json", R"({"pid": 1})", R"([{"pid": 1, "usedMiB": 3}])",
                           R"([{"pid": -1, "gpuIndex": 0, "usedMiB": 3}])", R"([{"pid": 1, "gpuIndex": 2, "usedMiB": 3}])"}) {
    dir.Write(kFakeGpuProcessesFile, text);
    auto p = (*d)->Processes();
    ASSERT_FALSE(p.ok()) << text;
    EXPECT_NE(p.status().message().find(file), std::string::npos) << p.status().message();
  }
}

using testing_support::ScopedEnv;

TEST(FakeGpusTest, MakeGpuDiscoveryReadsTheDirectoryFromTheEnvironment) {
  TempDir dir;
  ScopedEnv env(kFakeGpuDirEnv, dir.path().c_str());
  dir.Write(kFakeGpuProcessesFile, R"([{"pid": 7, "gpuIndex": 0, "usedMiB": 123}])");
  auto d = MakeGpuDiscovery("fake:1x1000", "seed");
  ASSERT_TRUE(d.ok());
  auto p = (*d)->Processes();
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].gpu_uuid, FakeGpuUuid("seed", 0));
  EXPECT_EQ((*p)[0].used_mib, 123);
}

// ---- NVML through the fake library --------------------------------------------------------------------------

// FakeNvml steers the fake library. It holds its own dlopen handle, so the library (and its state) stays
// loaded between the discovery objects of one test; dlopen of the same path returns the same instance.
class FakeNvml {
 public:
  explicit FakeNvml(const char* path) : handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) ADD_FAILURE() << dlerror();
  }
  ~FakeNvml() {
    if (handle_) {
      Call<void (*)()>("FakeNvmlReset")();
      dlclose(handle_);
    }
  }
  template <typename F>
  F Call(const char* name) {
    auto f = reinterpret_cast<F>(dlsym(handle_, name));
    if (f == nullptr) ADD_FAILURE() << "fake NVML lacks " << name;
    return f;
  }
  void Reset() { Call<void (*)()>("FakeNvmlReset")(); }
  void SetDeviceCount(unsigned n) { Call<void (*)(unsigned)>("FakeNvmlSetDeviceCount")(n); }
  void SetInitResult(int r) { Call<void (*)(int)>("FakeNvmlSetInitResult")(r); }
  void SetExtraMpsClients(unsigned n) { Call<void (*)(unsigned)>("FakeNvmlSetExtraMpsClients")(n); }
  void SetGrowth(unsigned step, unsigned cap) { Call<void (*)(unsigned, unsigned)>("FakeNvmlSetGrowth")(step, cap); }
  unsigned ComputeCalls() { return Call<unsigned (*)()>("FakeNvmlComputeCalls")(); }
  int InitRefs() { return Call<int (*)()>("FakeNvmlInitRefs")(); }
  void PushXid(unsigned device, unsigned long long xid) {
    Call<void (*)(unsigned, unsigned long long)>("FakeNvmlPushXid")(device, xid);
  }
  void SetRegisterEventsResult(int r) { Call<void (*)(int)>("FakeNvmlSetRegisterEventsResult")(r); }
  int RegisterEventsCalls() { return Call<int (*)()>("FakeNvmlRegisterEventsCalls")(); }
  int EventSets() { return Call<int (*)()>("FakeNvmlEventSets")(); }

 private:
  void* handle_;
};

class NvmlTest : public testing::Test {
 protected:
  void SetUp() override { nvml_.Reset(); }
  FakeNvml nvml_{GPUPACK_FAKE_NVML};
};

constexpr char kH200[] = "GPU-11111111-2222-3333-4444-555555555555";
constexpr char kA10G[] = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

TEST_F(NvmlTest, DiscoversTwoGpusWithUsableMemory) {
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->Describe(), "nvml (driver 550.54.15)");
  auto gpus = (*d)->Discover();
  ASSERT_TRUE(gpus.ok()) << gpus.status().message();
  ASSERT_EQ(gpus->size(), 2u);
  const GpuDevice& h200 = (*gpus)[0];
  EXPECT_EQ(h200.index, 0);
  EXPECT_EQ(h200.uuid, kH200);
  EXPECT_EQ(h200.name, "NVIDIA H200");
  EXPECT_EQ(h200.total_mib, 143771);
  EXPECT_EQ(h200.reserved_mib, 551);
  EXPECT_EQ(h200.usable_mib, 143220);  // 143771 - 551
  EXPECT_EQ(h200.sm_count, 132);       // nvmlDeviceGetAttributes_v2's multiprocessorCount
  EXPECT_EQ(h200.minor, 3);            // nvmlDeviceGetMinorNumber: /dev/nvidia3, not the index
  const GpuDevice& a10g = (*gpus)[1];
  EXPECT_EQ(a10g.index, 1);
  EXPECT_EQ(a10g.uuid, kA10G);
  EXPECT_EQ(a10g.name, "NVIDIA A10G");
  EXPECT_EQ(a10g.total_mib, 23028);
  EXPECT_EQ(a10g.reserved_mib, 440);   // 440.5 MiB, floor
  EXPECT_EQ(a10g.usable_mib, 22587);   // floor(23028 - 440.5) = floor(22587.5)
  EXPECT_EQ(a10g.sm_count, 80);
  EXPECT_EQ(a10g.minor, 7);
}

TEST_F(NvmlTest, ShutsDownWhenDestroyed) {
  {
    auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(nvml_.InitRefs(), 1);
  }
  EXPECT_EQ(nvml_.InitRefs(), 0);
}

TEST_F(NvmlTest, ProcessesAreTheUnionOfComputeAndMpsClients) {
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_TRUE(d.ok());
  auto p = (*d)->Processes();
  ASSERT_TRUE(p.ok()) << p.status().message();
  // GPU 0: compute 1000 (600 MiB) and 2001 (4096); MPS clients 2001 (4100) and 2002 (1024.5).
  // 2001 once, with the larger figure; 1024.5 MiB floors to 1024. GPU 1: 3001, memory not available -> 0.
  const std::vector<GpuProcess> want = {
      {1000, kH200, 600}, {2001, kH200, 4100}, {2002, kH200, 1024}, {3001, kA10G, 0}};
  ASSERT_EQ(p->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*p)[i].pid, want[i].pid) << i;
    EXPECT_EQ((*p)[i].gpu_uuid, want[i].gpu_uuid) << i;
    EXPECT_EQ((*p)[i].used_mib, want[i].used_mib) << i;
  }
}

TEST_F(NvmlTest, ProcessBufferGrowsOnInsufficientSize) {
  nvml_.SetExtraMpsClients(100);  // 102 MPS clients on GPU 0: more than the first buffer holds
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_TRUE(d.ok());
  auto p = (*d)->Processes();
  ASSERT_TRUE(p.ok()) << p.status().message();
  // 1000, 2001, 2002, 5000..5099 on GPU 0; 3001 on GPU 1.
  EXPECT_EQ(p->size(), 3u + 100u + 1u);
  MiB sum = 0;
  for (const auto& g : *p) {
    if (g.pid >= 5000 && g.pid < 5100) sum += g.used_mib;
  }
  EXPECT_EQ(sum, 100 * 101 / 2);  // client 5000+i uses i+1 MiB
}

TEST_F(NvmlTest, RetriesWhileProcessesStartBetweenCalls) {
  // Each compute listing call on GPU 0 sees 40 more processes, up to 100. With a first buffer of 32 entries
  // and each retry sized to the reported count + 16:
  //   call 1: 2 + 40 = 42 > 32 -> 58;  call 2: 2 + 80 = 82 > 58 -> 98;  call 3: 2 + 100 = 102 > 98 -> 118;
  //   call 4: 102 <= 118 -> done.
  nvml_.SetGrowth(40, 100);
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_TRUE(d.ok());
  auto p = (*d)->Processes();
  ASSERT_TRUE(p.ok()) << p.status().message();
  int grown = 0;
  for (const auto& g : *p) grown += g.pid >= 6000 ? 1 : 0;
  EXPECT_EQ(grown, 100);
  EXPECT_EQ(nvml_.ComputeCalls(), 4u);
}

TEST_F(NvmlTest, GivesUpWhenTheListKeepsGrowing) {
  nvml_.SetGrowth(40, 1000000);  // outruns every retry
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_TRUE(d.ok());
  auto p = (*d)->Processes();
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("kept growing"), std::string::npos) << p.status().message();
  EXPECT_EQ(nvml_.ComputeCalls(), 8u);  // bounded
}

TEST_F(NvmlTest, ZeroGpusIsAnError) {
  nvml_.SetDeviceCount(0);
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("0 GPUs"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("--gpus fake:2x22587"), std::string::npos);
  EXPECT_EQ(nvml_.InitRefs(), 0);  // shut down again
}

TEST_F(NvmlTest, InitFailureSaysWhy) {
  nvml_.SetInitResult(9);  // NVML_ERROR_DRIVER_NOT_LOADED
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("Driver Not Loaded (9)"), std::string::npos) << d.status().message();
}

TEST_F(NvmlTest, MissingLibraryIsAClearError) {
  auto d = MakeNvmlDiscovery("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("NVML not found (/nonexistent/libnvidia-ml.so.1): is the NVIDIA driver "
                                      "installed? Use --gpus fake:2x22587 on a host without GPUs"),
            std::string::npos)
      << d.status().message();
}

TEST_F(NvmlTest, LibraryPathFromEnvironment) {
  {
    ScopedEnv env(kNvmlLibraryEnv, nullptr);
    EXPECT_EQ(NvmlLibraryPath(), "libnvidia-ml.so.1");
  }
  {
    ScopedEnv env(kNvmlLibraryEnv, GPUPACK_FAKE_NVML);
    EXPECT_EQ(NvmlLibraryPath(), GPUPACK_FAKE_NVML);
    EXPECT_TRUE(NvmlAvailable());
    EXPECT_EQ(nvml_.InitRefs(), 0);  // the probe does not keep NVML initialized
    auto d = MakeGpuDiscovery("nvml", "ignored");
    ASSERT_TRUE(d.ok()) << d.status().message();
    EXPECT_EQ((*d)->Discover()->size(), 2u);
  }
  {
    ScopedEnv env(kNvmlLibraryEnv, "/nonexistent/libnvidia-ml.so.1");
    EXPECT_FALSE(NvmlAvailable());
    auto d = MakeGpuDiscovery("nvml", "ignored");
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.status().message().find("NVML not found"), std::string::npos);
  }
}

// ---- Critical-error events (Xids) ----

TEST_F(NvmlTest, CriticalErrorsReturnsPushedXidsWithTheirGpuAndDrainsThem) {
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE((*d)->CriticalErrors().empty());  // subscribes; nothing has happened yet
  EXPECT_EQ(nvml_.EventSets(), 1);
  EXPECT_EQ(nvml_.RegisterEventsCalls(), 2);  // both GPUs
  nvml_.PushXid(1, 31);
  nvml_.PushXid(0, 79);
  nvml_.PushXid(1, 45);
  auto errors = (*d)->CriticalErrors();
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].gpu_uuid, kA10G);
  EXPECT_EQ(errors[0].xid, 31u);
  EXPECT_EQ(errors[1].gpu_uuid, kH200);
  EXPECT_EQ(errors[1].xid, 79u);
  EXPECT_EQ(errors[2].gpu_uuid, kA10G);
  EXPECT_EQ(errors[2].xid, 45u);
  EXPECT_TRUE((*d)->CriticalErrors().empty());  // drained
  // Later events arrive on later calls, without subscribing again.
  nvml_.PushXid(0, 13);
  errors = (*d)->CriticalErrors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].gpu_uuid, kH200);
  EXPECT_EQ(errors[0].xid, 13u);
  EXPECT_EQ(nvml_.EventSets(), 1);
  EXPECT_EQ(nvml_.RegisterEventsCalls(), 2);
  // Processes still work alongside.
  EXPECT_TRUE((*d)->Processes().ok());
}

TEST_F(NvmlTest, AStormOfEventsIsDrainedOverSeveralCallsWithoutLosingAny) {
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_TRUE(d.ok());
  (void)(*d)->CriticalErrors();
  for (int i = 0; i < 1000; ++i) nvml_.PushXid(i % 2, 31);
  size_t total = 0;
  int calls = 0;
  for (; calls < 100; ++calls) {
    auto errors = (*d)->CriticalErrors();
    if (errors.empty()) break;
    total += errors.size();
  }
  EXPECT_EQ(total, 1000u);
  EXPECT_LT(calls, 100);
}

TEST_F(NvmlTest, EventSetIsFreedWithTheDiscovery) {
  {
    auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
    ASSERT_TRUE(d.ok());
    (void)(*d)->CriticalErrors();
    EXPECT_EQ(nvml_.EventSets(), 1);
  }
  EXPECT_EQ(nvml_.EventSets(), 0);
  EXPECT_EQ(nvml_.InitRefs(), 0);
}

TEST_F(NvmlTest, RefusedEventRegistrationYieldsNoErrorsAndDoesNotFail) {
  nvml_.SetRegisterEventsResult(3);  // NVML_ERROR_NOT_SUPPORTED, as in some containers
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE((*d)->CriticalErrors().empty());
  EXPECT_EQ(nvml_.EventSets(), 0);  // the half-made set is freed
  const int calls = nvml_.RegisterEventsCalls();
  nvml_.PushXid(0, 31);
  EXPECT_TRUE((*d)->CriticalErrors().empty());
  EXPECT_EQ(nvml_.RegisterEventsCalls(), calls);  // tried once, not on every call
  auto gpus = (*d)->Discover();
  ASSERT_TRUE(gpus.ok());
  EXPECT_EQ(gpus->size(), 2u);
}

TEST(IsFatalXidTest, GpuWideFaultsAreFatalOthersAreNot) {
  for (uint64_t xid : {31u, 13u, 43u, 79u, 48u, 94u, 95u}) EXPECT_TRUE(IsFatalXid(xid)) << xid;
  for (uint64_t xid : {0u, 45u, 1u, 8u, 1000u}) EXPECT_FALSE(IsFatalXid(xid)) << xid;
  EXPECT_FALSE(IsFatalXid(~0ULL));
}

TEST(FakeGpusTest, FakeGpusReportNoCriticalErrors) {
  auto d = MakeGpuDiscovery("fake:2x22587", "s");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE((*d)->CriticalErrors().empty());
}

// An old driver: no nvmlDeviceGetMemoryInfo_v2, no attributes, no MPS listing, only the _v2 compute listing.
TEST(NvmlLegacyTest, FallsBackToTheOlderFunctions) {
  FakeNvml legacy(GPUPACK_FAKE_NVML_LEGACY);
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML_LEGACY);
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto gpus = (*d)->Discover();
  ASSERT_TRUE(gpus.ok()) << gpus.status().message();
  ASSERT_EQ(gpus->size(), 2u);
  // v1 has no `reserved`: all of the memory is usable; the SM count is unknown.
  EXPECT_EQ((*gpus)[0].total_mib, 143771);
  EXPECT_EQ((*gpus)[0].reserved_mib, 0);
  EXPECT_EQ((*gpus)[0].usable_mib, 143771);
  EXPECT_EQ((*gpus)[0].sm_count, 0);
  EXPECT_EQ((*gpus)[0].minor, -1);  // no nvmlDeviceGetMinorNumber: unknown
  auto p = (*d)->Processes();
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 3u);  // compute processes only: 1000, 2001 (4096 MiB) and 3001
  EXPECT_EQ((*p)[1].pid, 2001u);
  EXPECT_EQ((*p)[1].used_mib, 4096);
}

// An old driver without the event functions: no critical errors, no failure, and the rest keeps working.
TEST(NvmlLegacyTest, NoEventFunctionsMeansNoCriticalErrors) {
  FakeNvml legacy(GPUPACK_FAKE_NVML_LEGACY);
  void* handle = dlopen(GPUPACK_FAKE_NVML_LEGACY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr);
  EXPECT_EQ(dlsym(handle, "nvmlEventSetCreate"), nullptr);  // the premise: the legacy library lacks them
  EXPECT_EQ(dlsym(handle, "FakeNvmlPushXid"), nullptr);
  dlclose(handle);
  auto d = MakeNvmlDiscovery(GPUPACK_FAKE_NVML_LEGACY);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE((*d)->CriticalErrors().empty());
  EXPECT_TRUE((*d)->CriticalErrors().empty());
  auto p = (*d)->Processes();
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->size(), 3u);
}

}  // namespace
}  // namespace gpupack::agent
