#include "agent/agent.h"

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/channel_client.h"
#include "agent/environment.h"
#include "agent/gpu_discovery.h"
#include "agent/mps_daemon.h"
#include "agent/runtime.h"

namespace gpupack::agent {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kAgentVersion = "gpupack-agent 0.1.0";
constexpr const char* kChannelAttribute = "gpupack.agent-channel";  // api/control_plane.h
constexpr const char* kMpsCapability = "ecs.capability.gpu-sharing-mps";
constexpr const char* kMpsDown = "MPS control daemon is not responding";

// One container of a task as the agent tracks it.
struct LocalContainer {
  std::string name;
  std::string runtime_id;
  std::string status = "PENDING";  // PENDING | RUNNING | STOPPED
  std::optional<int> exit_code;
  std::string reason;
  bool essential = true;
  std::vector<std::string> gpu_ids;
};

// One task the agent was given; persisted until its STOPPED report is acknowledged.
struct LocalTask {
  std::string arn;
  Json assignment;
  std::string status = "PENDING";  // PENDING | RUNNING | STOPPED
  std::string stop_code;
  std::string reason;
  std::vector<LocalContainer> containers;
};

Json ToJson(const LocalTask& t) {
  Json cs = Json::array();
  for (const auto& c : t.containers) {
    Json j = {{"name", c.name}, {"runtimeId", c.runtime_id}, {"status", c.status}, {"reason", c.reason},
              {"essential", c.essential}, {"gpuIds", c.gpu_ids}};
    if (c.exit_code) j["exitCode"] = *c.exit_code;
    cs.push_back(std::move(j));
  }
  return {{"taskArn", t.arn}, {"assignment", t.assignment}, {"status", t.status}, {"stopCode", t.stop_code},
          {"reason", t.reason}, {"containers", cs}};
}

std::optional<LocalTask> FromJson(const Json& j) {
  if (!j.is_object() || !j.contains("taskArn") || !j["taskArn"].is_string()) return std::nullopt;
  LocalTask t;
  t.arn = j["taskArn"];
  t.assignment = j.value("assignment", Json::object());
  t.status = j.value("status", "PENDING");
  t.stop_code = j.value("stopCode", "");
  t.reason = j.value("reason", "");
  for (const auto& c : j.value("containers", Json::array())) {
    LocalContainer lc;
    lc.name = c.value("name", "");
    lc.runtime_id = c.value("runtimeId", "");
    lc.status = c.value("status", "PENDING");
    lc.reason = c.value("reason", "");
    lc.essential = c.value("essential", true);
    lc.gpu_ids = c.value("gpuIds", std::vector<std::string>{});
    if (c.contains("exitCode") && c["exitCode"].is_number_integer()) lc.exit_code = c["exitCode"].get<int>();
    t.containers.push_back(std::move(lc));
  }
  return t;
}

std::string TaskId(const std::string& arn) { return arn.substr(arn.rfind('/') + 1); }

// WriteFileAtomically writes via a temporary file and rename, so a crash leaves the old or the new content.
bool WriteFileAtomically(const fs::path& path, const std::string& content) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << content;
    out.flush();
    if (!out) return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  return !ec;
}

std::vector<KeyValuePair> KeyValues(const Json& list) {
  std::vector<KeyValuePair> out;
  if (!list.is_array()) return out;
  for (const auto& e : list)
    if (e.is_object()) out.push_back({e.value("name", ""), e.value("value", "")});
  return out;
}

int64_t HostMemoryMiB() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemTotal:") return kb / 1024;
  return 0;
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "gpupack-agent";
  return buf;
}

}  // namespace

struct Agent::Impl {
  AgentOptions options;
  ServerEndpoint server;
  std::unique_ptr<GpuDiscovery> gpus;
  std::vector<GpuDevice> devices;
  std::unique_ptr<MpsSupervisor> mps;
  std::unique_ptr<Runtime> runtime;
  RuntimeKind runtime_kind = RuntimeKind::kProcess;
  bool fake_gpus = false;

  // Worker-thread state.
  std::string instance_arn;  // also read by instance_arn() after Start (set before the worker starts)
  std::map<std::string, LocalTask> tasks;
  std::unique_ptr<ChannelClient> channel;
  std::map<int64_t, std::pair<std::string, std::string>> pending_acks;  // id -> (task ARN, status)
  std::set<std::string> hello_stopped;  // tasks the last hello reported STOPPED: the welcome acknowledges them
  int64_t next_id = 1;
  std::chrono::milliseconds heartbeat_interval{5000};
  Clock::time_point next_heartbeat{}, next_probe{}, next_connect{};
  std::chrono::milliseconds backoff{100};
  std::set<std::string> held_gpus;
  std::map<std::string, int> watchdog_strikes;  // task ARN -> readings in a row over its limits
  Clock::time_point next_watchdog{}, next_fault_check{}, next_recovery_check{};
  bool watchdog_warned = false;
  bool last_mps_serving = true;
  bool registered_capability = false;

  // Events from the channel's io thread.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Json> events;  // guarded by mu
  bool stopping = false;    // guarded by mu
  std::thread worker;

  // ---- setup

  Status Register() {
    Json devices_json = Json::array();
    for (const auto& d : devices)
      devices_json.push_back({{"id", d.uuid}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", d.usable_mib}}}});
    Json attrs = Json::array({{{"name", kChannelAttribute}, {"value", "v1"}}});
    bool serving = mps->Probe() == MpsHealth::kServing;
    if (serving) attrs.push_back({{"name", kMpsCapability}});
    registered_capability = serving;
    last_mps_serving = serving;
    if (!devices.empty()) attrs.push_back({{"name", "gpupack.gpu-model"}, {"value", devices[0].name}});
    for (const auto& [k, v] : options.attributes) attrs.push_back({{"name", k}, {"value", v}});
    int64_t cpu = options.cpu > 0 ? options.cpu : static_cast<int64_t>(std::thread::hardware_concurrency()) * 1024;
    int64_t mem = options.memory > 0 ? options.memory : HostMemoryMiB() * 95 / 100;
    Json identity = {{"instanceId", options.name}};
    if (!options.instance_type.empty()) identity["instanceType"] = options.instance_type;
    Json body = {{"cluster", options.cluster},
                 {"instanceIdentityDocument", identity.dump()},
                 {"totalResources", Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", cpu}},
                                                 {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", mem}}})},
                 {"platformDevices", devices_json},
                 {"attributes", attrs},
                 {"versionInfo", {{"agentVersion", kAgentVersion}}}};
    if (!instance_arn.empty()) body["containerInstanceArn"] = instance_arn;
    auto r = CallEcs(server, "RegisterContainerInstance", body);
    if (!r.ok() && r.status().code() == ErrorCode::kClusterNotFound) {
      // Like the ECS agent with the default cluster: create the cluster it was told to join.
      auto created = CallEcs(server, "CreateCluster", Json{{"clusterName", options.cluster}});
      if (!created.ok()) return created.status();
      r = CallEcs(server, "RegisterContainerInstance", body);
    }
    if (!r.ok() && !instance_arn.empty() && r.status().code() == ErrorCode::kInvalidParameter) {
      spdlog::warn("agent: the server no longer knows {}; registering as a new instance", instance_arn);
      instance_arn.clear();
      body.erase("containerInstanceArn");
      r = CallEcs(server, "RegisterContainerInstance", body);
    }
    if (!r.ok()) return r.status();
    instance_arn = (*r)["containerInstance"]["containerInstanceArn"];
    WriteFileAtomically(fs::path(options.state_dir) / "instance.json", Json{{"containerInstanceArn", instance_arn}}.dump());
    spdlog::info("agent: registered {} with {} GPU(s) in cluster {}", instance_arn, devices.size(), options.cluster);
    return Status::Ok();
  }

  void LoadState() {
    std::ifstream in(fs::path(options.state_dir) / "instance.json");
    if (in) {
      Json j = Json::parse(in, nullptr, false);
      if (j.is_object() && j.contains("containerInstanceArn") && j["containerInstanceArn"].is_string())
        instance_arn = j["containerInstanceArn"];
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(fs::path(options.state_dir) / "tasks", ec)) {
      if (entry.path().extension() != ".json") continue;
      std::ifstream f(entry.path());
      auto t = FromJson(Json::parse(f, nullptr, false));
      if (t) tasks[t->arn] = std::move(*t);
      else spdlog::warn("agent: ignoring unreadable task record {}", entry.path().string());
    }
  }

  void Persist(const LocalTask& t) {
    WriteFileAtomically(fs::path(options.state_dir) / "tasks" / (TaskId(t.arn) + ".json"), ToJson(t).dump());
  }

  void Forget(const std::string& arn) {
    std::error_code ec;
    fs::remove(fs::path(options.state_dir) / "tasks" / (TaskId(arn) + ".json"), ec);
    tasks.erase(arn);
  }

  // ---- the channel

  void Post(Json event) {
    {
      std::lock_guard lock(mu);
      events.push_back(std::move(event));
    }
    cv.notify_one();
  }

  void Connect() {
    if (channel && channel->open()) return;
    if (Clock::now() < next_connect) return;
    channel.reset();
    auto c = ChannelClient::Connect(server, "/agent/v1/channel?containerInstance=" + PercentEncode(instance_arn),
                                    {[this](std::string m) {
                                       Json j = Json::parse(m, nullptr, false);
                                       if (j.is_object()) Post(std::move(j));
                                     },
                                     [this] { Post(Json{{"type", "_closed"}}); }});
    if (!c.ok()) {
      spdlog::warn("agent: channel: {}; retrying in {} ms", c.status().message(), backoff.count());
      if (c.status().message().find("refused") != std::string::npos) {
        // The server may have forgotten the instance (a new database): register again.
        if (Status s = Register(); !s.ok()) spdlog::warn("agent: re-registration failed: {}", s.message());
      }
      next_connect = Clock::now() + backoff;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
      return;
    }
    channel = std::move(*c);
    backoff = std::chrono::milliseconds(100);
    pending_acks.clear();
    hello_stopped.clear();
    Json reported = Json::array();
    for (const auto& [arn, t] : tasks) {
      reported.push_back(Report(t));
      if (t.status == "STOPPED") hello_stopped.insert(arn);
    }
    channel->Send(Json{{"type", "hello"}, {"tasks", reported}, {"impaired", mps->impaired()}}.dump());
    spdlog::info("agent: channel open; reported {} task(s)", tasks.size());
  }

  Json Report(const LocalTask& t) {
    Json containers = Json::array();
    for (const auto& c : t.containers) {
      Json j = {{"containerName", c.name}, {"status", c.status}};
      if (c.exit_code) j["exitCode"] = *c.exit_code;
      if (!c.reason.empty()) j["reason"] = c.reason;
      containers.push_back(std::move(j));
    }
    Json r = {{"taskArn", t.arn}, {"status", t.status}, {"containers", containers}};
    if (!t.reason.empty()) r["reason"] = t.reason;
    if (!t.stop_code.empty()) r["stopCode"] = t.stop_code;
    return r;
  }

  void SendState(const LocalTask& t) {
    if (!channel || !channel->open()) return;  // the next hello reports it
    Json m = Report(t);
    m["type"] = "state";
    m["id"] = next_id;
    pending_acks[next_id++] = {t.arn, t.status};
    channel->Send(m.dump());
  }

  void SendHeartbeat() {
    next_heartbeat = Clock::now() + heartbeat_interval;
    if (!channel || !channel->open()) return;
    Json held = Json::array();
    for (const auto& g : held_gpus) held.push_back(g);
    channel->Send(Json{{"type", "heartbeat"}, {"id", next_id++}, {"impaired", mps->impaired()}, {"heldGpus", held}}.dump());
  }

  // Ack tells the server a push (assign, stop) is recorded, so it stops re-sending it. A push without an id
  // (an older server) needs none; a lost ack only makes the server send the push again, which changes nothing.
  void Ack(const Json& push) {
    if (!push.contains("id") || !push["id"].is_number_integer() || !channel || !channel->open()) return;
    channel->Send(Json{{"type", "ack"}, {"id", push["id"]}}.dump());
  }

  void Handle(const Json& m) {
    std::string type = m.value("type", "");
    if (type == "_closed") {
      spdlog::warn("agent: channel closed; reconnecting");
      channel.reset();
      next_connect = Clock::now() + backoff;
    } else if (type == "welcome") {
      if (m.contains("heartbeatIntervalMs") && m["heartbeatIntervalMs"].is_number_integer())
        heartbeat_interval = std::chrono::milliseconds(std::max<int64_t>(50, m["heartbeatIntervalMs"].get<int64_t>()));
      // The welcome comes once the hello's reports are durable on the server: a task the hello reported STOPPED
      // is acknowledged like a STOPPED state report, so its record goes (else every later hello reports it again).
      for (const auto& arn : hello_stopped)
        if (auto t = tasks.find(arn); t != tasks.end() && t->second.status == "STOPPED") Forget(arn);
      hello_stopped.clear();
      for (const auto& s : m.value("stop", Json::array())) StopTask(s.value("taskArn", ""), s.value("reason", ""), "");
      for (const auto& a : m.value("assign", Json::array())) StartTask(a);
      // Containers the runtime runs that belong to no task we know are orphans: stop them.
      if (auto listed = runtime->List(); listed.ok()) {
        for (const auto& c : *listed)
          if (!tasks.count(c.task_arn)) {
            spdlog::info("agent: stopping orphan container {} of unknown task {}", c.id, c.task_arn);
            (void)runtime->Stop(c.id, options.stop_grace);
            (void)runtime->Remove(c.id);
          }
      }
      SendHeartbeat();
    } else if (type == "assign") {
      StartTask(m.value("task", Json::object()), m);  // acks it once the task is persisted
    } else if (type == "stop") {
      // A task it knows is acked before it is stopped (that takes up to stop_grace): the server's desired status
      // is durable, so a stop lost with this agent comes back in the welcome. One it does not know is reported
      // STOPPED first, then acked.
      const std::string arn = m.value("taskArn", "");
      const bool known = tasks.count(arn) > 0;
      if (known) Ack(m);
      StopTask(arn, m.value("reason", "Task stopped by user"), "UserInitiated");
      if (!known) Ack(m);
    } else if (type == "ack" || type == "error") {
      if (!m.contains("id") || !m["id"].is_number_integer()) return;
      auto it = pending_acks.find(m["id"].get<int64_t>());
      if (it == pending_acks.end()) return;
      auto [arn, status] = it->second;
      pending_acks.erase(it);
      if (type == "error") spdlog::warn("agent: server refused the report for {}: {}", arn, m.value("message", ""));
      auto t = tasks.find(arn);
      if (status == "STOPPED" && t != tasks.end() && t->second.status == "STOPPED") Forget(arn);
    }
  }

  // ---- tasks

  // Fail ends a task that could not start: stops what did start, reports STOPPED with TaskFailedToStart.
  void Fail(LocalTask& t, const std::string& reason) {
    spdlog::warn("agent: task {} failed to start: {}", t.arn, reason);
    for (auto& c : t.containers) {
      if (!c.runtime_id.empty() && c.status == "RUNNING") {
        (void)runtime->Stop(c.runtime_id, options.stop_grace);
        (void)runtime->Remove(c.runtime_id);
      }
      c.status = "STOPPED";
      if (c.reason.empty()) c.reason = reason;
    }
    t.status = "STOPPED";
    t.stop_code = "TaskFailedToStart";
    t.reason = reason;
    Persist(t);
    SendState(t);
  }

  // StartTask starts an assigned task; `push` is the assign message to ack (null for a welcome's assign).
  void StartTask(const Json& a, const Json& push = Json()) {
    std::string arn = a.value("taskArn", "");
    if (arn.empty() || tasks.count(arn)) return Ack(push);  // never start a task twice
    LocalTask t;
    t.arn = arn;
    t.assignment = a;
    for (const auto& c : a.value("containers", Json::array())) {
      LocalContainer lc;
      lc.name = c.value("name", "");
      lc.essential = c.value("essential", true);
      lc.gpu_ids = c.value("gpuIds", std::vector<std::string>{});
      t.containers.push_back(std::move(lc));
    }
    Persist(t);  // from here a restarted agent knows the task and will not start it again
    Ack(push);
    auto& task = tasks[arn] = std::move(t);
    if (a.value("desiredStatus", "RUNNING") == "STOPPED") return Fail(task, "stopped before it started");

    const Json& containers = a["containers"];
    bool shared = false;
    for (const auto& c : containers) shared = shared || c.contains("mps");
    if (shared) {
      // A container started without the daemon would silently run without limits.
      if (mps->Probe() != MpsHealth::kServing) return Fail(task, kMpsDown);
    }
    for (const auto& c : task.containers)
      for (const auto& g : c.gpu_ids)
        if (held_gpus.count(g)) return Fail(task, "GPU " + g + " is held after a fault until its MPS server is healthy");

    for (size_t i = 0; i < containers.size(); ++i) {
      const Json& c = containers[i];
      GpuAssignment gpu;
      gpu.gpu_uuids = c.value("gpuIds", std::vector<std::string>{});
      if (c.contains("mps")) {
        MpsSharing m;
        m.memory_mib = c["mps"].value("memory", 0);
        if (c["mps"].contains("maxComputePercent")) m.max_compute_percent = c["mps"]["maxComputePercent"].get<int>();
        gpu.mps = m;
      }
      ContainerSpec spec;
      spec.task_arn = arn;
      spec.container_name = task.containers[i].name;
      spec.image = c.value("image", "");
      spec.entry_point = c.value("entryPoint", std::vector<std::string>{});
      spec.command = c.value("command", std::vector<std::string>{});
      spec.environment = ContainerEnvironment(KeyValues(c.value("environment", Json::array())),
                                              KeyValues(c.value("overrideEnvironment", Json::array())), gpu,
                                              options.mps_pipe_dir, runtime_kind);
      if (runtime_kind == RuntimeKind::kProcess)
        spec.environment = WithHostDefaults(std::move(spec.environment), [](const char* n) { return std::getenv(n); });
      spec.mps_pipe_dir = gpu.mps ? options.mps_pipe_dir : "";
      spec.cpu = c.value("cpu", 0);
      if (c.contains("memory")) spec.memory = c["memory"].get<int64_t>();
      if (c.contains("memoryReservation")) spec.memory_reservation = c["memoryReservation"].get<int64_t>();
      auto id = runtime->Start(spec);
      if (!id.ok()) {
        task.containers[i].reason = "CannotStartContainerError: " + id.status().message();
        return Fail(task, "CannotStartContainerError: " + id.status().message());
      }
      task.containers[i].runtime_id = *id;
      task.containers[i].status = "RUNNING";
      Persist(task);
    }
    task.status = "RUNNING";
    Persist(task);
    SendState(task);
    spdlog::info("agent: task {} RUNNING", arn);
  }

  // StopTask stops every container of a task (SIGTERM, grace, SIGKILL) and reports STOPPED.
  void StopTask(const std::string& arn, const std::string& reason, const std::string& stop_code) {
    auto it = tasks.find(arn);
    if (it == tasks.end()) {
      // Unknown here (already gone): tell the server it is stopped so it releases the memory.
      if (!arn.empty()) {
        LocalTask gone;
        gone.arn = arn;
        gone.status = "STOPPED";
        gone.reason = reason;
        gone.stop_code = stop_code;
        SendState(gone);
      }
      return;
    }
    LocalTask& t = it->second;
    if (t.status == "STOPPED") return SendState(t);
    for (auto& c : t.containers) {
      if (c.runtime_id.empty() || c.status == "STOPPED") {
        c.status = "STOPPED";
        continue;
      }
      (void)runtime->Stop(c.runtime_id, options.stop_grace);
      if (auto st = runtime->Inspect(c.runtime_id); st.ok()) {
        c.exit_code = st->exit_code;
        if (c.reason.empty()) c.reason = st->reason;
      }
      (void)runtime->Remove(c.runtime_id);
      c.status = "STOPPED";
    }
    t.status = "STOPPED";
    if (t.stop_code.empty()) t.stop_code = stop_code;
    if (t.reason.empty()) t.reason = reason;
    Persist(t);
    SendState(t);
    spdlog::info("agent: task {} STOPPED ({})", arn, reason);
  }

  // Monitor inspects running containers: an essential container's exit stops its task.
  void Monitor() {
    std::vector<std::string> to_stop;
    for (auto& [arn, t] : tasks) {
      if (t.status != "RUNNING") continue;
      bool changed = false;
      for (auto& c : t.containers) {
        if (c.status != "RUNNING") continue;
        auto st = runtime->Inspect(c.runtime_id);
        if (!st.ok() || st->state == ContainerState::kRunning) continue;
        c.status = "STOPPED";
        c.exit_code = st->exit_code;
        c.reason = st->state == ContainerState::kMissing ? "the container disappeared" : st->reason;
        changed = true;
        if (c.essential) {
          t.stop_code = "EssentialContainerExited";
          t.reason = "Essential container in task exited";
          to_stop.push_back(arn);
        }
      }
      if (changed) {
        Persist(t);
        if (std::find(to_stop.begin(), to_stop.end(), arn) == to_stop.end()) SendState(t);
      }
    }
    for (const auto& arn : to_stop) StopTask(arn, "Essential container in task exited", "EssentialContainerExited");
  }

  // CheckMps probes the daemon on schedule; health changes re-register the capability attribute and send a
  // heartbeat at once so the server stops (or resumes) placing here.
  void CheckMps() {
    if (Clock::now() < next_probe) return;
    next_probe = Clock::now() + options.mps_probe_interval;
    bool was_impaired = mps->impaired();
    bool serving = mps->Probe() == MpsHealth::kServing;
    if (serving != last_mps_serving) {
      last_mps_serving = serving;
      spdlog::warn("agent: MPS control daemon is {}", serving ? "serving again" : "not responding");
    }
    if (was_impaired != mps->impaired()) {
      spdlog::warn("agent: instance {} impaired", mps->impaired() ? "is" : "is no longer");
      SendHeartbeat();
    }
    if (serving != registered_capability) {  // ecs.capability.gpu-sharing-mps only while the daemon answers
      if (Status s = Register(); !s.ok()) spdlog::warn("agent: re-registration failed: {}", s.message());
    }
  }

  // ---- the GPU memory watchdog (DESIGN §6 "Limits that hold")

  // Watchdog reads every GPU process's memory, attributes each process to a container through the runtime,
  // and stops a task whose container, `watchdog_strikes` readings in a row, uses more memory than it declared
  // on its shared GPU or uses a GPU it was not given. Dedicated GPUs are the task's own: no memory limit.
  void Watchdog() {
    if (options.watchdog_interval.count() <= 0 || Clock::now() < next_watchdog) return;
    next_watchdog = Clock::now() + options.watchdog_interval;
    bool any_running = false;
    for (const auto& [arn, t] : tasks) any_running = any_running || t.status == "RUNNING";
    if (!any_running) {
      watchdog_strikes.clear();
      return;
    }
    auto processes = gpus->Processes();
    if (!processes.ok()) {
      if (!watchdog_warned) spdlog::warn("agent: watchdog cannot read GPU processes: {}", processes.status().message());
      watchdog_warned = true;
      return;
    }
    watchdog_warned = false;
    std::vector<uint32_t> pids;
    for (const auto& p : *processes) pids.push_back(p.pid);
    const auto owners = runtime->Owners(pids);
    // runtime id -> {GPU UUID -> MiB}
    std::map<std::string, std::map<std::string, MiB>> used;
    for (const auto& p : *processes)
      if (auto it = owners.find(p.pid); it != owners.end()) used[it->second][p.gpu_uuid] += p.used_mib;

    std::vector<std::pair<std::string, std::string>> to_stop;  // (task ARN, reason)
    std::set<std::string> over;
    for (auto& [arn, t] : tasks) {
      if (t.status != "RUNNING") continue;
      const Json& assigned = t.assignment.contains("containers") ? t.assignment["containers"] : Json::array();
      for (size_t i = 0; i < t.containers.size(); ++i) {
        LocalContainer& c = t.containers[i];
        if (c.status != "RUNNING") continue;
        auto u = used.find(c.runtime_id);
        if (u == used.end()) continue;
        std::optional<MiB> declared;
        if (i < assigned.size() && assigned[i].contains("mps") && assigned[i]["mps"].is_object())
          declared = assigned[i]["mps"].value("memory", MiB{0});
        std::string violation;
        for (const auto& [gpu, mib] : u->second) {
          bool given = std::find(c.gpu_ids.begin(), c.gpu_ids.end(), gpu) != c.gpu_ids.end();
          if (!given) {
            violation = "container " + c.name + " uses " + std::to_string(mib) + " MiB on GPU " + gpu +
                        ", a GPU it was not given";
          } else if (declared && mib > *declared) {
            violation = "container " + c.name + " uses " + std::to_string(mib) + " MiB on GPU " + gpu +
                        ", more than the " + std::to_string(*declared) + " MiB it declared";
          }
          if (!violation.empty()) break;
        }
        if (violation.empty()) continue;
        over.insert(arn);
        if (++watchdog_strikes[arn] >= std::max(1, options.watchdog_strikes)) {
          c.reason = "GpuMemoryLimitExceeded: " + violation;
          to_stop.emplace_back(arn, "GPU memory limit exceeded: " + violation +
                                        " (its MPS limits were lifted from inside the container); the agent's "
                                        "watchdog stopped the task");
        }
        break;
      }
    }
    for (auto it = watchdog_strikes.begin(); it != watchdog_strikes.end();)
      it = over.count(it->first) ? std::next(it) : watchdog_strikes.erase(it);
    for (const auto& [arn, reason] : to_stop) {
      spdlog::warn("agent: watchdog: task {}: {}", arn, reason);
      watchdog_strikes.erase(arn);
      tasks[arn].stop_code = "EssentialContainerExited";  // as ECS reports a container the OOM killer ended
      tasks[arn].reason = reason;
      StopTask(arn, reason, "EssentialContainerExited");
    }
  }

  // ---- GPU faults (DESIGN §6 "Faults")

  // FaultedGpus: the GPUs that hit a fatal error since the last look. Simulated GPUs: the file
  // <pipe>/fake-gpu-fault-<uuid> exists. Real ones: a fatal Xid event from NVML, or (checked on the MPS probe's
  // schedule, for drivers without events) an MPS server in FAULT state, which names the GPUs of its clients.
  std::set<std::string> FaultedGpus() {
    std::set<std::string> out;
    if (fake_gpus) {
      for (const auto& d : devices)
        if (fs::exists(fs::path(options.mps_pipe_dir) / ("fake-gpu-fault-" + d.uuid))) out.insert(d.uuid);
      return out;
    }
    for (const auto& e : gpus->CriticalErrors()) {
      spdlog::warn("agent: GPU {} reported Xid {}{}", e.gpu_uuid, e.xid, IsFatalXid(e.xid) ? " (fatal)" : "");
      if (IsFatalXid(e.xid) && !e.gpu_uuid.empty()) out.insert(e.gpu_uuid);
    }
    if (Clock::now() >= next_fault_check) {
      next_fault_check = Clock::now() + options.mps_probe_interval;
      for (const auto& gpu : MpsFaultedGpus()) out.insert(gpu);
    }
    return out;
  }

  // MpsFaultedGpus asks the control daemon for its servers' status; a FAULT server's clients name the GPUs.
  std::set<std::string> MpsFaultedGpus() {
    std::set<std::string> out;
    auto list = mps->Send("get_server_list");
    if (!list.ok()) return out;
    std::vector<int> faulted;
    for (int server : ParseMpsServerList(*list)) {
      auto status = mps->Send("get_server_status " + std::to_string(server));
      if (status.ok() && MpsServerFaulted(*status)) faulted.push_back(server);
    }
    if (faulted.empty()) return out;
    auto ps = mps->Send("ps");
    if (!ps.ok()) return out;
    for (const auto& row : ParseMpsPs(*ps))
      if (std::find(faulted.begin(), faulted.end(), row.server_pid) != faulted.end())
        for (const auto& d : devices)
          if (MpsDeviceMatches(row.device, d.uuid)) out.insert(d.uuid);
    return out;
  }

  // GpuRecovered: a held GPU is released once nothing is left on it and MPS serves again. Simulated GPUs: the
  // fault file is gone and the daemon answers. Real ones: the daemon answers, no server is in FAULT, no MPS
  // client runs on the GPU any more (the server takes new clients only then) and none of our tasks holds it.
  bool GpuRecovered(const std::string& uuid) {
    if (fake_gpus) {
      return !fs::exists(fs::path(options.mps_pipe_dir) / ("fake-gpu-fault-" + uuid)) &&
             mps->Probe() == MpsHealth::kServing;
    }
    for (const auto& [arn, t] : tasks)
      if (t.status != "STOPPED")
        for (const auto& c : t.containers)
          if (std::find(c.gpu_ids.begin(), c.gpu_ids.end(), uuid) != c.gpu_ids.end()) return false;
    if (mps->Probe() != MpsHealth::kServing) return false;
    if (!MpsFaultedGpus().empty()) return false;
    auto ps = mps->Send("ps");
    if (!ps.ok()) return false;
    for (const auto& row : ParseMpsPs(*ps))
      if (MpsDeviceMatches(row.device, uuid)) return false;
    return true;
  }

  // CheckGpuFaults: a GPU that faulted takes down every MPS client on it: stop exactly the tasks on that GPU
  // (with a reason naming it) and hold it until it has recovered; other GPUs are untouched.
  void CheckGpuFaults() {
    const std::set<std::string> faulted = FaultedGpus();
    // Real GPUs: recovery asks the control daemon, so it is checked at most every 500 ms, for every held GPU.
    const bool recovery_due = fake_gpus || Clock::now() >= next_recovery_check;
    if (recovery_due && !fake_gpus && !held_gpus.empty())
      next_recovery_check = Clock::now() + std::chrono::milliseconds(500);
    for (const auto& d : devices) {
      bool held = held_gpus.count(d.uuid) > 0;
      if (faulted.count(d.uuid) && !held) {
        held_gpus.insert(d.uuid);
        spdlog::error("agent: GPU {} hit a fatal error; stopping its tasks and holding it", d.uuid);
        std::vector<std::string> victims;
        for (const auto& [arn, t] : tasks)
          if (t.status != "STOPPED")
            for (const auto& c : t.containers)
              if (std::find(c.gpu_ids.begin(), c.gpu_ids.end(), d.uuid) != c.gpu_ids.end()) {
                victims.push_back(arn);
                break;
              }
        for (const auto& arn : victims) {
          tasks[arn].stop_code = "InfrastructureHealth";
          tasks[arn].reason = "GPU " + d.uuid +
                              " hit a fatal error: its MPS server faulted and every client on it failed; the agent "
                              "stopped the task and holds the GPU until MPS is healthy again";
          StopTask(arn, tasks[arn].reason, "InfrastructureHealth");
        }
        SendHeartbeat();
      } else if (held && !faulted.count(d.uuid) && recovery_due) {
        if (GpuRecovered(d.uuid)) {
          held_gpus.erase(d.uuid);
          spdlog::info("agent: GPU {} is healthy again; releasing it", d.uuid);
          SendHeartbeat();
        }
      }
    }
  }

  void Adopt() {
    // Containers that ended while the agent was away are noticed by the first Monitor(); tasks whose
    // containers the runtime no longer has at all are stopped with that reason.
    std::vector<RuntimeContainer> listed;
    bool starting = false;
    for (const auto& [arn, t] : tasks) starting = starting || t.status == "PENDING";
    if (starting) {
      if (auto l = runtime->List(); l.ok()) listed = std::move(*l);
    }
    for (auto& [arn, t] : tasks)
      if (t.status == "PENDING") {
        // The agent died while starting it: some containers may run, even one whose id it had not recorded yet
        // (killed between the runtime's Start and the Persist after it). Stop them all; the task failed to
        // start. A container left running here would use its GPU with no reservation on the server.
        for (auto& c : t.containers)
          for (const auto& rc : listed)
            if (c.runtime_id.empty() && rc.task_arn == arn && rc.container_name == c.name) {
              c.runtime_id = rc.id;
              c.status = "RUNNING";
            }
        Fail(t, "the agent restarted while starting the task");
      }
  }

  void Loop() {
    Adopt();
    for (;;) {
      std::deque<Json> batch;
      {
        std::unique_lock lock(mu);
        cv.wait_for(lock, options.monitor_interval, [this] { return stopping || !events.empty(); });
        if (stopping) break;
        batch.swap(events);
      }
      try {
        for (const auto& e : batch) Handle(e);
        Connect();
        CheckGpuFaults();  // before Monitor: tasks a fault ended are stopped with the fault as their reason
        Monitor();
        CheckMps();
        Watchdog();
        if (Clock::now() >= next_heartbeat) SendHeartbeat();
      } catch (const std::exception& e) {
        spdlog::error("agent: worker: {}", e.what());
      }
    }
    if (options.stop_tasks_on_exit) {
      std::vector<std::string> arns;
      for (const auto& [arn, t] : tasks) arns.push_back(arn);
      for (const auto& arn : arns) StopTask(arn, "the agent was shut down", "UserInitiated");
      // Give the reports a moment to reach the server.
      for (int i = 0; i < 20 && channel && channel->open() && !pending_acks.empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
        std::deque<Json> batch;
        {
          std::lock_guard lock(mu);
          batch.swap(events);
        }
        for (const auto& e : batch) Handle(e);
      }
    }
    channel.reset();
  }
};

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Agent::~Agent() { Stop(); }

Result<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  auto impl = std::make_unique<Impl>();
  if (options.name.empty()) options.name = HostName();
  auto server = ServerEndpoint::Parse(options.server);
  if (!server.ok()) return server.status();
  impl->server = *server;
  impl->server.signing = options.signing;
  auto gpus = MakeGpuDiscovery(options.gpus, options.name);
  if (!gpus.ok()) return gpus.status();
  impl->gpus = std::move(*gpus);
  impl->fake_gpus = options.gpus.rfind("fake:", 0) == 0;
  std::error_code ec;
  fs::create_directories(fs::path(options.state_dir) / "tasks", ec);
  if (ec) return Status::InvalidParameter("--state-dir " + options.state_dir + ": " + ec.message());
  MpsOptions mps;
  mps.control_program = options.mps_control_program;
  mps.pipe_dir = options.mps_pipe_dir;
  mps.log_dir = options.mps_pipe_dir + "/log";
  impl->mps = impl->fake_gpus ? MakeFakeMps(mps) : MakeMpsControlDaemon(mps);
  if (options.runtime == "process") {
    auto rt = MakeProcessRuntime({options.state_dir + "/runtime", options.state_dir + "/logs"});
    if (!rt.ok()) return rt.status();
    impl->runtime = std::move(*rt);
    impl->runtime_kind = RuntimeKind::kProcess;
  } else if (options.runtime == "docker") {
    auto rt = MakeDockerRuntime({options.docker_socket, options.name});
    if (!rt.ok()) return rt.status();
    impl->runtime = std::move(*rt);
    impl->runtime_kind = RuntimeKind::kDocker;
  } else {
    return Status::InvalidParameter("--runtime must be process or docker (got " + options.runtime + ")");
  }
  impl->options = std::move(options);
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Status Agent::Start() {
  Impl& a = *impl_;
  auto devices = a.gpus->Discover();
  if (!devices.ok()) return devices.status();
  a.devices = *devices;
  if (Status s = a.mps->Start(); !s.ok())
    spdlog::warn("agent: MPS control daemon did not start: {} (shared tasks will be refused until it does)", s.message());
  a.LoadState();
  if (Status s = a.Register(); !s.ok()) return s;
  a.next_probe = Clock::now() + a.options.mps_probe_interval;
  a.worker = std::thread([&a] { a.Loop(); });
  return Status::Ok();
}

void Agent::Stop() {
  Impl& a = *impl_;
  {
    std::lock_guard lock(a.mu);
    if (a.stopping) return;
    a.stopping = true;
  }
  a.cv.notify_all();
  if (a.worker.joinable()) a.worker.join();
  if (Status s = a.mps->Stop(); !s.ok()) spdlog::warn("agent: MPS quit: {}", s.message());
}

std::string Agent::instance_arn() const { return impl_->instance_arn; }

}  // namespace gpupack::agent
