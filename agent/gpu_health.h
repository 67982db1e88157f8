// GpuHealth: the agent's GPU-health part. On its own thread and schedule it
//   - probes the MPS control daemon (every mps_probe_interval; a probe can take the daemon's probe timeout,
//     3 s, when it hangs): a change of impairment sends a heartbeat at once, a change of "serving" re-registers
//     the instance with or without ecs.capability.gpu-sharing-mps;
//   - detects GPU faults (every tick): a GPU that hit a fatal error is held, exactly the tasks on it are stopped
//     (InfrastructureHealth) and a heartbeat carries the held GPUs at once; a held GPU is released once it
//     has recovered;
//   - runs the GPU memory watchdog (every watchdog_interval): a task whose container, watchdog_strikes readings
//     in a row, uses more GPU memory than it declared on its shared GPU, or a GPU it was not given, is stopped.
// Stops go to the TaskManager as events (hooks.stop_task), so a slow probe or stop here never holds up a
// heartbeat (the connection reads held_gpus() and impaired(), which never wait on a probe) or a task's start (a
// start reads Held() and probes MPS itself, on its own task's turn).
//
// Thread-safety: thread-safe. Its thread reads tasks from the TaskStore and never writes them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/gpu_discovery.h"
#include "agent/managed_task.h"
#include "agent/mps_daemon.h"
#include "agent/runtime.h"
#include "agent/task_store.h"

namespace gpupack::agent {

struct GpuHealthOptions {
  std::chrono::milliseconds tick{100};  // how often faults are checked
  std::chrono::milliseconds mps_probe_interval{5000};
  std::chrono::milliseconds watchdog_interval{1000};  // 0 turns the watchdog off
  int watchdog_strikes = 2;
  // Simulated GPUs (--gpus fake): a fault is the file <mps_pipe_dir>/fake-gpu-fault-<uuid>.
  bool fake_gpus = false;
  std::string mps_pipe_dir;
};

struct GpuHealthHooks {
  std::function<void(const std::string& arn, StopRequest request)> stop_task;
  std::function<void()> heartbeat_now;
  // mps_serving: called after every scheduled probe with its outcome; the connection re-registers when the
  // capability it registered differs.
  std::function<void(bool serving)> mps_serving;
};

// TaskMemoryReading: the watchdog's latest reading of the GPU memory the running tasks use: per task ARN, per
// GPU UUID, the bytes of its containers' processes (NVML's list, attributed through Runtime::Owners); a GPU a
// task was given and uses nothing of reads 0. `taken` is when the processes were listed.
struct TaskMemoryReading {
  std::chrono::steady_clock::time_point taken;
  std::map<std::string, std::map<std::string, int64_t>> tasks;
};

// HeartbeatGpuMemory: `reading` as a heartbeat carries it (protocol::GpuMemoryReading), its age taken at `now`,
// held to the protocol's bounds (tasks and GPUs past the caps, and names past the length, are left out); none
// when there is no reading or it is older than the protocol allows.
std::optional<protocol::GpuMemoryReading> HeartbeatGpuMemory(const std::optional<TaskMemoryReading>& reading,
                                                             std::chrono::steady_clock::time_point now);

class GpuHealth final : public StartGate {
 public:
  // Everything passed by reference must outlive the object.
  GpuHealth(GpuHealthOptions options, GpuDiscovery& gpus, std::vector<GpuDevice> devices, MpsSupervisor& mps,
            Runtime& runtime, TaskStore& store);
  ~GpuHealth() override;  // Stop()

  void SetHooks(GpuHealthHooks hooks);  // before Start
  // ProbeMps probes the daemon now and records the outcome (mps_serving()); Agent::Start calls it before the
  // first registration.
  bool ProbeMps();
  void Start();
  void Stop();

  // StartGate
  bool MpsServing() override;
  bool Held(const std::string& gpu_uuid) const override;

  std::vector<std::string> held_gpus() const;
  bool impaired() const { return mps_.impaired(); }
  bool mps_serving() const { return last_serving_.load(); }
  const std::vector<GpuDevice>& devices() const { return devices_; }
  // task_memory: the watchdog's latest reading (the heartbeat carries it); none while the watchdog is off, before
  // its first reading, or when its last could not list the GPU processes.
  std::optional<TaskMemoryReading> task_memory() const;

 private:
  void Loop();
  void CheckMps();
  void CheckGpuFaults();
  std::set<std::string> FaultedGpus();
  std::set<std::string> MpsFaultedGpus();
  bool GpuRecovered(const std::string& uuid);
  bool GpuInUse(const std::string& uuid) const;
  void Watchdog();
  void KeepTaskMemory(std::optional<TaskMemoryReading> reading);

  using Clock = std::chrono::steady_clock;
  const GpuHealthOptions options_;
  GpuDiscovery& gpus_;
  const std::vector<GpuDevice> devices_;
  MpsSupervisor& mps_;
  Runtime& runtime_;
  TaskStore& store_;
  GpuHealthHooks hooks_;

  std::atomic<bool> last_serving_{true};
  mutable std::mutex mu_;
  std::set<std::string> held_;  // guarded by mu_
  std::optional<TaskMemoryReading> task_memory_;  // guarded by mu_; written by the thread's watchdog
  bool stopping_ = false;       // guarded by mu_
  std::condition_variable cv_;
  std::thread thread_;

  // The thread's own state.
  bool last_impaired_ = false;
  Clock::time_point next_probe_{}, next_watchdog_{}, next_fault_check_{}, next_recovery_check_{};
  std::map<std::string, int> strikes_;      // task ARN -> readings in a row over its limits
  std::set<std::string> watchdog_stopped_;  // tasks the watchdog asked to stop, until they are no longer RUNNING
  bool watchdog_warned_ = false;
};

}  // namespace gpupack::agent
