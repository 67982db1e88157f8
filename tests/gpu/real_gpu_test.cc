// Tests that need a real NVIDIA GPU, NVML and nvidia-cuda-mps-control (ctest label `gpu`; scripts/test.sh
// leaves them out unless GPUPACK_GPU_TESTS=1, so CI, which has no GPU, skips them). The same code paths run
// against fakes in CI (gpu_discovery_test, mps_daemon_test, channel_test); bench/gpu/run.sh is the end-to-end run.
// They never change a GPU setting, and quit the one MPS daemon they start.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "agent/gpu_discovery.h"
#include "agent/mps_daemon.h"

namespace gpupack::agent {
namespace {

namespace fs = std::filesystem;

// Without a GPU these tests skip, unless GPUPACK_GPU_TESTS=1 says the machine has one (then they must run).
class RealGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* required = std::getenv("GPUPACK_GPU_TESTS");
    if (!NvmlAvailable() && (required == nullptr || std::string(required) != "1"))
      GTEST_SKIP() << "no NVML here (set GPUPACK_GPU_TESTS=1 on a GPU machine to require it)";
  }
};

TEST_F(RealGpu, NvmlDiscoversGpusWithUsableMemoryAndSms) {
  auto d = MakeGpuDiscovery("nvml", "");
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto gpus = (*d)->Discover();
  ASSERT_TRUE(gpus.ok()) << gpus.status().message();
  ASSERT_FALSE(gpus->empty());
  for (const auto& g : *gpus) {
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    EXPECT_FALSE(g.name.empty());
    EXPECT_GT(g.usable_mib, 0);
    EXPECT_LE(g.usable_mib, g.total_mib);
    // usable is floor((total - reserved) bytes), the other two are floored each: they may differ by 1 MiB.
    EXPECT_NEAR(g.usable_mib, g.total_mib - g.reserved_mib, 1);
    EXPECT_GE(g.sm_count, 0);  // nvmlDeviceGetAttributes_v2 answers only for MIG instances on some drivers
  }
}

TEST_F(RealGpu, NvmlListsProcessesAndSubscribesToErrorEvents) {
  auto d = MakeGpuDiscovery("nvml", "");
  ASSERT_TRUE(d.ok()) << d.status().message();
  auto gpus = (*d)->Discover();
  ASSERT_TRUE(gpus.ok());
  auto procs = (*d)->Processes();
  ASSERT_TRUE(procs.ok()) << procs.status().message();
  for (const auto& p : *procs) {
    EXPECT_GT(p.pid, 0u);
    bool known = false;
    for (const auto& g : *gpus) known = known || g.uuid == p.gpu_uuid;
    EXPECT_TRUE(known) << p.gpu_uuid;
  }
  // No fault is happening: the first call subscribes, and nothing fatal is pending.
  for (const auto& e : (*d)->CriticalErrors()) EXPECT_FALSE(IsFatalXid(e.xid)) << "Xid " << e.xid;
}

TEST_F(RealGpu, MpsControlDaemonStartsAnswersAndQuits) {
  // A short private pipe directory (the daemon's sockets must fit in sun_path), never /tmp/nvidia-mps.
  const fs::path dir = fs::path("/tmp") / ("gpt-" + std::to_string(getpid()));
  fs::remove_all(dir);
  MpsOptions o;
  o.pipe_dir = dir.string();
  o.log_dir = (dir / "log").string();
  auto mps = MakeMpsControlDaemon(o);
  ASSERT_TRUE(mps->Start().ok());
  EXPECT_EQ(mps->Probe(), MpsHealth::kServing);
  auto servers = mps->Send("get_server_list");
  ASSERT_TRUE(servers.ok()) << servers.status().message();
  EXPECT_TRUE(ParseMpsServerList(*servers).empty()) << *servers;  // no client yet, so no server
  auto ps = mps->Send("ps");
  ASSERT_TRUE(ps.ok());
  EXPECT_TRUE(ParseMpsPs(*ps).empty()) << *ps;
  EXPECT_TRUE(mps->Stop().ok());
  EXPECT_EQ(mps->Probe(), MpsHealth::kNotServing);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpupack::agent
