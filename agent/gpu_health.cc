#include "agent/gpu_health.h"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

namespace gpupack::agent {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using protocol::StopCode;
constexpr int64_t kBytesPerMiB = 1048576;
using protocol::TaskStatus;

GpuHealth::GpuHealth(GpuHealthOptions options, GpuDiscovery& gpus, std::vector<GpuDevice> devices,
                     MpsSupervisor& mps, Runtime& runtime, TaskStore& store)
    : options_(std::move(options)),
      gpus_(gpus),
      devices_(std::move(devices)),
      mps_(mps),
      runtime_(runtime),
      store_(store) {}

GpuHealth::~GpuHealth() { Stop(); }

void GpuHealth::SetHooks(GpuHealthHooks hooks) { hooks_ = std::move(hooks); }

bool GpuHealth::ProbeMps() {
  const bool serving = mps_.Probe() == MpsHealth::kServing;
  last_serving_ = serving;
  return serving;
}

void GpuHealth::Start() {
  last_impaired_ = mps_.impaired();
  next_probe_ = Clock::now() + options_.mps_probe_interval;
  thread_ = std::thread([this] { Loop(); });
}

void GpuHealth::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool GpuHealth::MpsServing() { return mps_.Probe() == MpsHealth::kServing; }

bool GpuHealth::Held(const std::string& gpu_uuid) const {
  std::lock_guard lock(mu_);
  return held_.count(gpu_uuid) > 0;
}

std::vector<std::string> GpuHealth::held_gpus() const {
  std::lock_guard lock(mu_);
  return {held_.begin(), held_.end()};
}

std::optional<protocol::GpuMemoryReading> HeartbeatGpuMemory(const std::optional<TaskMemoryReading>& reading,
                                                             Clock::time_point now) {
  if (!reading) return std::nullopt;
  const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - reading->taken).count();
  if (age > protocol::kMaxGpuMemoryAgeMs) return std::nullopt;
  // kBudget: what the figures may add to a heartbeat, well within the channel's 1 MiB message (each entry's
  // name plus its JSON's keys and number, about 40 bytes).
  constexpr size_t kBudget = 512 << 10, kPerEntry = 40;
  protocol::GpuMemoryReading out;
  out.age_ms = std::max<int64_t>(0, age);
  size_t size = 0;
  for (const auto& [arn, per_gpu] : reading->tasks) {
    if (out.tasks.size() == protocol::kMaxGpuMemoryTasks) break;
    if (arn.empty() || arn.size() > protocol::kMaxGpuMemoryNameBytes) continue;
    protocol::TaskGpuMemory task{arn, {}};
    size_t task_size = arn.size() + kPerEntry;
    for (const auto& [gpu, bytes] : per_gpu) {
      if (task.gpus.size() == protocol::kMaxGpuMemoryGpus) break;
      if (gpu.empty() || gpu.size() > protocol::kMaxGpuMemoryNameBytes) continue;
      task.gpus.push_back({gpu, std::clamp<int64_t>(bytes, 0, protocol::kMaxGpuMemoryBytes)});
      task_size += gpu.size() + kPerEntry;
    }
    if (size + task_size > kBudget) break;
    size += task_size;
    out.tasks.push_back(std::move(task));
  }
  return out;
}

std::optional<TaskMemoryReading> GpuHealth::task_memory() const {
  std::lock_guard lock(mu_);
  return task_memory_;
}

void GpuHealth::KeepTaskMemory(std::optional<TaskMemoryReading> reading) {
  std::lock_guard lock(mu_);
  task_memory_ = std::move(reading);
}

void GpuHealth::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.tick, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    try {
      CheckGpuFaults();
      CheckMps();
      Watchdog();
    } catch (const std::exception& e) {
      spdlog::error("agent: GPU health: {}", e.what());
    }
    lock.lock();
  }
}

// CheckMps probes the daemon on schedule; health changes send a heartbeat at once and re-register the capability
// attribute, so the server stops (or resumes) placing here.
void GpuHealth::CheckMps() {
  if (Clock::now() < next_probe_) return;
  next_probe_ = Clock::now() + options_.mps_probe_interval;
  const bool was_serving = last_serving_.load();
  const bool serving = ProbeMps();
  if (serving != was_serving)
    spdlog::warn("agent: MPS control daemon is {}", serving ? "serving again" : "not responding");
  // Compared with the last value this thread saw: a task's start probes too and may have moved the count.
  if (const bool impaired = mps_.impaired(); impaired != last_impaired_) {
    last_impaired_ = impaired;
    spdlog::warn("agent: instance {} impaired", impaired ? "is" : "is no longer");
    if (hooks_.heartbeat_now) hooks_.heartbeat_now();
  }
  if (hooks_.mps_serving) hooks_.mps_serving(serving);
}

// ---- GPU faults --------------------------------------------------------------------------------------------------

// FaultedGpus: the GPUs that hit a fatal error since the last look. Simulated GPUs: the file
// <pipe>/fake-gpu-fault-<uuid> exists. Real ones: a fatal Xid event from NVML, or (checked on the MPS probe's
// schedule, for drivers without events) an MPS server in FAULT state, which names the GPUs of its clients.
std::set<std::string> GpuHealth::FaultedGpus() {
  std::set<std::string> out;
  if (options_.fake_gpus) {
    for (const auto& d : devices_)
      if (fs::exists(fs::path(options_.mps_pipe_dir) / ("fake-gpu-fault-" + d.uuid))) out.insert(d.uuid);
    return out;
  }
  for (const auto& e : gpus_.CriticalErrors()) {
    spdlog::warn("agent: GPU {} reported Xid {}{}", e.gpu_uuid, e.xid, IsFatalXid(e.xid) ? " (fatal)" : "");
    if (IsFatalXid(e.xid) && !e.gpu_uuid.empty()) out.insert(e.gpu_uuid);
  }
  if (Clock::now() >= next_fault_check_) {
    next_fault_check_ = Clock::now() + options_.mps_probe_interval;
    for (const auto& gpu : MpsFaultedGpus()) out.insert(gpu);
  }
  return out;
}

// MpsFaultedGpus asks the control daemon for its servers' status; a FAULT server's clients name the GPUs.
std::set<std::string> GpuHealth::MpsFaultedGpus() {
  std::set<std::string> out;
  auto list = mps_.Send("get_server_list");
  if (!list.ok()) return out;
  std::vector<int> faulted;
  for (int server : ParseMpsServerList(*list)) {
    auto status = mps_.Send("get_server_status " + std::to_string(server));
    if (status.ok() && MpsServerFaulted(*status)) faulted.push_back(server);
  }
  if (faulted.empty()) return out;
  auto ps = mps_.Send("ps");
  if (!ps.ok()) return out;
  for (const auto& row : ParseMpsPs(*ps))
    if (std::find(faulted.begin(), faulted.end(), row.server_pid) != faulted.end())
      for (const auto& d : devices_)
        if (MpsDeviceMatches(row.device, d.uuid)) out.insert(d.uuid);
  return out;
}

// GpuInUse: a task not yet STOPPED has a container on the GPU.
bool GpuHealth::GpuInUse(const std::string& uuid) const {
  bool used = false;
  store_.Visit([&](const TaskRecord& r) {
    if (used || r.report.status == TaskStatus::kStopped) return;
    for (const auto& c : r.assignment.containers)
      if (std::find(c.gpu_ids.begin(), c.gpu_ids.end(), uuid) != c.gpu_ids.end()) used = true;
  });
  return used;
}

// GpuRecovered: a held GPU is released once nothing is left on it and MPS serves again. Simulated GPUs: the fault
// file is gone and the daemon answers. Real ones: the daemon answers, no server is in FAULT, no MPS client runs on
// the GPU any more (the server takes new clients only then) and none of our tasks holds it.
bool GpuHealth::GpuRecovered(const std::string& uuid) {
  if (options_.fake_gpus) {
    return !fs::exists(fs::path(options_.mps_pipe_dir) / ("fake-gpu-fault-" + uuid)) &&
           mps_.Probe() == MpsHealth::kServing;
  }
  if (GpuInUse(uuid)) return false;
  if (mps_.Probe() != MpsHealth::kServing) return false;
  if (!MpsFaultedGpus().empty()) return false;
  auto ps = mps_.Send("ps");
  if (!ps.ok()) return false;
  for (const auto& row : ParseMpsPs(*ps))
    if (MpsDeviceMatches(row.device, uuid)) return false;
  return true;
}

// CheckGpuFaults: a GPU that faulted takes down every MPS client on it: stop exactly the tasks on that GPU (with a
// reason naming it) and hold it until it has recovered; other GPUs are untouched. The GPU is held before its
// tasks are picked, so a task starting meanwhile either sees it held (and fails) or is among them.
void GpuHealth::CheckGpuFaults() {
  const std::set<std::string> faulted = FaultedGpus();
  // Real GPUs: recovery asks the control daemon, so it is checked at most every 500 ms, for every held GPU.
  const bool recovery_due = options_.fake_gpus || Clock::now() >= next_recovery_check_;
  if (recovery_due && !options_.fake_gpus && !held_gpus().empty())
    next_recovery_check_ = Clock::now() + std::chrono::milliseconds(500);
  for (const auto& d : devices_) {
    const bool held = Held(d.uuid);
    if (faulted.count(d.uuid) && !held) {
      {
        std::lock_guard lock(mu_);
        held_.insert(d.uuid);
      }
      spdlog::error("agent: GPU {} hit a fatal error; stopping its tasks and holding it", d.uuid);
      std::vector<std::string> victims;
      store_.Visit([&](const TaskRecord& r) {
        if (r.report.status == TaskStatus::kStopped) return;
        for (const auto& c : r.assignment.containers)
          if (std::find(c.gpu_ids.begin(), c.gpu_ids.end(), d.uuid) != c.gpu_ids.end()) {
            victims.push_back(r.arn());
            return;
          }
      });
      const std::string reason = "GPU " + d.uuid +
                                 " hit a fatal error: its MPS server faulted and every client on it failed; the "
                                 "agent stopped the task and holds the GPU until MPS is healthy again";
      for (const auto& arn : victims)
        if (hooks_.stop_task)
          hooks_.stop_task(arn, StopRequest{reason, StopCode::kInfrastructureHealth, true, "", "", false});
      if (hooks_.heartbeat_now) hooks_.heartbeat_now();
    } else if (held && !faulted.count(d.uuid) && recovery_due && GpuRecovered(d.uuid)) {
      {
        std::lock_guard lock(mu_);
        held_.erase(d.uuid);
      }
      spdlog::info("agent: GPU {} is healthy again; releasing it", d.uuid);
      if (hooks_.heartbeat_now) hooks_.heartbeat_now();
    }
  }
}

// ---- the GPU memory watchdog ------------------------------------------------------------------------------------

// Watchdog reads every GPU process's memory, attributes each process to a container through the runtime, and
// stops a task whose container, `watchdog_strikes` readings in a row, uses more memory than it declared on its
// shared GPU or uses a GPU it was not given. Dedicated GPUs are the task's own: no memory limit.
void GpuHealth::Watchdog() {
  if (options_.watchdog_interval.count() <= 0 || Clock::now() < next_watchdog_) return;
  next_watchdog_ = Clock::now() + options_.watchdog_interval;
  struct Watched {
    std::string arn, container, runtime_id;
    std::vector<std::string> gpu_ids;
    std::optional<MiB> declared;
  };
  std::vector<Watched> running;  // in task order, then container order
  std::set<std::string> running_tasks;
  store_.Visit([&](const TaskRecord& r) {
    if (r.report.status != TaskStatus::kRunning) return;
    running_tasks.insert(r.arn());
    for (size_t i = 0; i < r.report.containers.size(); ++i) {
      if (r.report.containers[i].status != TaskStatus::kRunning) continue;
      const auto& a = r.assignment.containers[i];
      std::optional<MiB> declared;
      if (a.mps) declared = a.mps->memory_mib;
      running.push_back({r.arn(), a.name, r.runtime_ids[i], a.gpu_ids, declared});
    }
  });
  for (auto it = watchdog_stopped_.begin(); it != watchdog_stopped_.end();)
    it = running_tasks.count(*it) ? std::next(it) : watchdog_stopped_.erase(it);
  const auto taken = Clock::now();
  if (running_tasks.empty()) {
    strikes_.clear();
    KeepTaskMemory(TaskMemoryReading{taken, {}});
    return;
  }
  auto processes = gpus_.Processes();
  if (!processes.ok()) {
    if (!watchdog_warned_) spdlog::warn("agent: watchdog cannot read GPU processes: {}", processes.status().message());
    watchdog_warned_ = true;
    KeepTaskMemory(std::nullopt);  // no reading: the heartbeat reports none rather than an old one
    return;
  }
  watchdog_warned_ = false;
  std::vector<uint32_t> pids;
  for (const auto& p : *processes) pids.push_back(p.pid);
  const auto owners = runtime_.Owners(pids);
  std::map<std::string, std::map<std::string, MiB>> used;  // runtime id -> {GPU UUID -> MiB}
  for (const auto& p : *processes)
    if (auto it = owners.find(p.pid); it != owners.end()) used[it->second][p.gpu_uuid] += p.used_mib;
  // The same reading per task and GPU, in bytes, for the heartbeat: the GPUs each running container was given
  // (0 when it uses none) and any other it uses.
  TaskMemoryReading reading{taken, {}};
  for (const Watched& c : running) {
    auto& per_gpu = reading.tasks[c.arn];
    for (const auto& g : c.gpu_ids) per_gpu[g] += 0;
    if (auto u = used.find(c.runtime_id); u != used.end())
      for (const auto& [gpu, mib] : u->second) per_gpu[gpu] += mib * kBytesPerMiB;
  }
  std::erase_if(reading.tasks, [](const auto& task) { return task.second.empty(); });  // no GPU given, none used
  KeepTaskMemory(std::move(reading));

  std::set<std::string> over;
  for (const Watched& c : running) {
    if (over.count(c.arn) || watchdog_stopped_.count(c.arn)) continue;  // one violation per task and reading
    auto u = used.find(c.runtime_id);
    if (u == used.end()) continue;
    std::string violation;
    for (const auto& [gpu, mib] : u->second) {
      const bool given = std::find(c.gpu_ids.begin(), c.gpu_ids.end(), gpu) != c.gpu_ids.end();
      if (!given) {
        violation = "container " + c.container + " uses " + std::to_string(mib) + " MiB on GPU " + gpu +
                    ", a GPU it was not given";
      } else if (c.declared && mib > *c.declared) {
        violation = "container " + c.container + " uses " + std::to_string(mib) + " MiB on GPU " + gpu +
                    ", more than the " + std::to_string(*c.declared) + " MiB it declared";
      }
      if (!violation.empty()) break;
    }
    if (violation.empty()) continue;
    over.insert(c.arn);
    if (++strikes_[c.arn] < std::max(1, options_.watchdog_strikes)) continue;
    const std::string reason = "GPU memory limit exceeded: " + violation +
                               " (its MPS limits were lifted from inside the container); the agent's watchdog "
                               "stopped the task";
    spdlog::warn("agent: watchdog: task {}: {}", c.arn, reason);
    watchdog_stopped_.insert(c.arn);
    // EssentialContainerExited, as ECS reports a container the OOM killer ended.
    if (hooks_.stop_task)
      hooks_.stop_task(c.arn, StopRequest{reason, StopCode::kEssentialContainerExited, true, c.container,
                                          "GpuMemoryLimitExceeded: " + violation, false, /*watchdog=*/true});
  }
  for (auto it = strikes_.begin(); it != strikes_.end();)
    it = over.count(it->first) && !watchdog_stopped_.count(it->first) ? std::next(it) : strikes_.erase(it);
}

}  // namespace gpupack::agent
