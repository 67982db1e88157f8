// FakeGpus: the GpuDiscovery behind `--gpus fake:SPEC`, for hosts without GPUs and for tests.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu_discovery.h"

namespace gpupack::agent {

// FakeGpuUuid is the UUID of fake GPU `index` of a host seeded with `seed`:
// "GPU-fakeHHHH-HHHH-HHHH-0000-NNNNNNNNNNNN" where the 12 H are hex digits of a hash of the seed (all 0 for an
// empty seed) and N is the index, zero-padded decimal. Stable across runs and builds.
std::string FakeGpuUuid(const std::string& seed, int index);

// The processes file: a JSON array that FakeGpus::Processes() reads on every call, so a test or a script can
// make a fake GPU "use" memory from outside the agent (the watchdog's input):
//   [{"pid": 4242, "gpuUuid": "GPU-fake...", "usedMiB": 5000}, {"pid": 4243, "gpuIndex": 1, "usedMiB": 10}]
// (`gpuIndex` instead of `gpuUuid` names the fake GPU by index). A missing file means no processes.
inline constexpr char kFakeGpuProcessesFile[] = "fake-gpu-processes.json";
// MakeGpuDiscovery("fake:SPEC") reads <$GPUPACK_FAKE_GPU_DIR>/fake-gpu-processes.json when that variable is set.
inline constexpr char kFakeGpuDirEnv[] = "GPUPACK_FAKE_GPU_DIR";

struct FakeGpuOptions {
  std::string processes_file;  // empty: Processes() returns only what SetProcesses injected
};

// FakeGpus: SPEC "<count>x<MiB>[,<count>x<MiB>...]" gives GPUs named "Fake GPU" with total = usable = MiB,
// reserved 0 and 80 SMs, indexed in order. Thread-safe (a test may inject processes while the agent reads them).
class FakeGpus final : public GpuDiscovery {
 public:
  // Create parses SPEC (without the "fake:" prefix); a bad one is InvalidParameter naming the problem.
  static Result<std::unique_ptr<FakeGpus>> Create(const std::string& spec, const std::string& seed,
                                                  FakeGpuOptions options = {});

  std::string Describe() const override;  // "fake:<SPEC>"
  Result<std::vector<GpuDevice>> Discover() override;
  // Processes returns the injected processes when SetProcesses was called, else the processes file's, else none.
  Result<std::vector<GpuProcess>> Processes() override;

  void SetProcesses(std::vector<GpuProcess> processes);
  void ClearProcesses();  // back to the processes file
  const std::vector<GpuDevice>& devices() const { return devices_; }

 private:
  FakeGpus(std::string spec, std::vector<GpuDevice> devices, FakeGpuOptions options);
  Result<std::vector<GpuProcess>> ReadProcessesFile() const;

  const std::string spec_;
  const std::vector<GpuDevice> devices_;
  const FakeGpuOptions options_;
  mutable std::mutex mu_;
  std::optional<std::vector<GpuProcess>> injected_;  // guarded by mu_
};

}  // namespace gpupack::agent
