// DockerRuntime: containers through the Docker Engine API (docs/agent-channel.md), over the engine's unix socket.
//
// Every container gpupack creates is named `gpupack-<task id>-<container>` (sanitized) and carries the labels
// gpupack.task (task ARN), gpupack.container (container name) and gpupack.agent (this agent's label), so a
// restarted agent finds its own containers with one list-by-label call and two agents on one engine keep
// apart. The runtime id is the engine's container id. Images are not pulled: a missing image is an error that
// carries the engine's message (it becomes TaskFailedToStart).
//
// GPUs: a container's GPUs are the UUIDs of NVIDIA_VISIBLE_DEVICES in its environment (the agent sets it for
// every container, "void" for none). The runtime's GpuInjection plan (agent/gpu_injection.h) adds what the host
// needs for them to the create call; a GPU container the plan cannot serve is refused before anything is created,
// with the mode and what is missing (TaskFailedToStart), so no container runs without its GPU.
//
// Logs: each container's output is copied into the agent's log store (agent/log_store.h) from the engine's
// `GET /containers/{id}/logs?stdout=1&stderr=1&timestamps=1&since=...` (the multiplexed stream demultiplexed,
// each line with the engine's timestamp): before the server reads it (CollectLogs) and before the container is
// removed, so the output outlives the container. Each stream keeps the engine timestamp it copied up to in
// `.docker-since` beside its files, so a restarted agent goes on where the last copy ended. The engine's own
// json-file log is bounded like the store (LogConfig max-size and max-file).
//
// Thread-safe: it holds no state besides its options (const after construction) and every engine request has a
// connection of its own (DockerClient), so calls for different containers may run at once; calls for the same
// container must not overlap (the agent runs each task's work one event at a time). A new instance after an agent
// restart sees everything an earlier one created.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/docker_client.h"
#include "base/atomic_file.h"
#include "agent/gpu_injection.h"
#include "agent/proc_tree.h"
#include "agent/runtime.h"

namespace gpupack::agent {
namespace {

using Json = nlohmann::json;

constexpr char kLabelTask[] = "gpupack.task";
constexpr char kLabelContainer[] = "gpupack.container";
constexpr char kLabelAgent[] = "gpupack.agent";

// SanitizedName keeps [A-Za-z0-9_.-] and turns anything else into '_' (Docker's container name alphabet).
std::string SanitizedName(std::string_view raw) {
  std::string out;
  for (char c : raw.substr(0, 200)) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-';
    out.push_back(ok ? c : '_');
  }
  return out;
}

std::string TaskIdOf(const std::string& task_arn) {
  auto slash = task_arn.rfind('/');
  return slash == std::string::npos ? task_arn : task_arn.substr(slash + 1);
}

// ValidId accepts what the engine hands out as ids and names, so a caller cannot smuggle in a path or query.
bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 256) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
  });
}

std::optional<std::pair<int, int>> ParseVersion(const std::string& text) {
  int major = 0, minor = 0;
  if (std::sscanf(text.c_str(), "%d.%d", &major, &minor) != 2) return std::nullopt;
  return std::make_pair(major, minor);
}

std::string JsonString(const Json& object, const char* key) {
  if (!object.is_object()) return {};
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// ParseEngineTime reads the engine's RFC 3339 timestamp with nanoseconds ("2024-05-01T10:00:00.123456789Z") as
// nanoseconds since the epoch; nullopt when it is not one.
std::optional<int64_t> ParseEngineTime(std::string_view text) {
  if (text.size() < 20 || text.back() != 'Z') return std::nullopt;
  struct tm tm {};
  int fields = std::sscanf(std::string(text.substr(0, 19)).c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon,
                           &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec);
  if (fields != 6) return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  int64_t nanos = 0;
  size_t i = 19;
  if (i < text.size() && text[i] == '.') {
    int64_t scale = 100000000;
    for (++i; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      nanos += (text[i] - '0') * scale;
      scale /= 10;
    }
  }
  if (i != text.size() - 1) return std::nullopt;
  return static_cast<int64_t>(timegm(&tm)) * 1000000000 + nanos;
}

// EngineLine: one line of the engine's log answer with its timestamp (ns).
struct EngineLine {
  int64_t nanos = 0;
  std::string message;
};

// DemuxLogs splits the engine's log answer into lines: the multiplexed stream of a container without a TTY (8-byte
// frame headers: stream, 0, 0, 0, payload size big-endian) or the raw stream of one with a TTY; each line begins
// with its timestamp and a space (timestamps=1). Lines without a readable timestamp are skipped.
std::vector<EngineLine> DemuxLogs(const std::string& body) {
  std::string text;
  const bool framed = body.size() >= 8 && static_cast<unsigned char>(body[0]) <= 2 && body[1] == 0 && body[2] == 0 &&
                      body[3] == 0;
  if (framed) {
    size_t at = 0;
    while (at + 8 <= body.size()) {
      const auto* h = reinterpret_cast<const unsigned char*>(body.data() + at);
      const size_t size = (size_t{h[4]} << 24) | (size_t{h[5]} << 16) | (size_t{h[6]} << 8) | size_t{h[7]};
      at += 8;
      text.append(body, at, std::min(size, body.size() - at));
      at += size;
    }
  } else {
    text = body;
  }
  std::vector<EngineLine> out;
  size_t from = 0;
  while (from < text.size()) {
    size_t nl = text.find('\n', from);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view line(text.data() + from, nl - from);
    from = nl + 1;
    const size_t space = line.find(' ');
    auto nanos = space == std::string_view::npos ? std::nullopt : ParseEngineTime(line.substr(0, space));
    if (!nanos) continue;
    out.push_back(EngineLine{*nanos, std::string(line.substr(space + 1))});
  }
  return out;
}

// StatusOf maps an inspect answer's State object onto ContainerStatus.
ContainerStatus StatusOf(const Json& state) {
  ContainerStatus status;
  const std::string phase = JsonString(state, "Status");
  const bool running = state.is_object() && state.value("Running", false);
  if (running || phase == "running" || phase == "paused" || phase == "restarting") {
    status.state = ContainerState::kRunning;
    return status;
  }
  status.state = ContainerState::kExited;
  if (phase == "created") {
    status.reason = "container was created but never started";
    return status;
  }
  if (state.is_object() && state.contains("ExitCode") && state["ExitCode"].is_number_integer()) {
    status.exit_code = state["ExitCode"].get<int>();
  }
  if (state.is_object() && state.value("OOMKilled", false)) {
    status.reason = "OOMKilled";
  } else if (std::string error = JsonString(state, "Error"); !error.empty()) {
    status.reason = error;
  }
  return status;
}

class DockerRuntime final : public Runtime {
 public:
  DockerRuntime(DockerRuntimeOptions options, std::string api_version, GpuInjection injection)
      : options_(std::move(options)),
        client_(DockerClientOptions{options_.socket_path, options_.request_timeout, options_.max_response_bytes}),
        prefix_("/v" + api_version),
        injection_(std::move(injection)),
        create_prefix_(CreatePrefix(api_version, injection_)) {}

  std::string Name() const override { return "docker"; }

  Result<std::string> Start(const ContainerSpec& spec) override {
    if (spec.image.empty()) return Status::InvalidParameter("container " + spec.container_name + " has no image");
    Json body = CreateBody(spec);
    if (body.is_null()) {
      return Status::InvalidParameter("container " + spec.container_name +
                                      ": environment variable with an empty name or a '=' in its name");
    }
    if (Status gpus = InjectGpus(injection_, VisibleGpus(spec.environment), body); !gpus.ok()) return gpus;
    const std::string name = ContainerName(spec.task_arn, spec.container_name);
    auto created = client_.Request("POST", create_prefix_ + "/containers/create?name=" + UrlEncode(name), body.dump());
    if (!created.ok()) return created.status();
    if (created->status != 201) {
      if (created->status == 404) {
        return Status::Client("docker: image " + spec.image + " is not available: " + EngineMessage(*created));
      }
      return EngineError("cannot create container " + name, *created);
    }
    auto json = Json::parse(created->body, nullptr, false);
    std::string id = JsonString(json, "Id");
    if (!ValidId(id)) return Status::Server("docker: create of " + name + " answered no container id");

    auto started = Call("POST", "/containers/" + id + "/start");
    if (!started.ok() || (started->status != 204 && started->status != 304)) {
      Status why = started.ok() ? EngineError("cannot start container " + name, *started) : started.status();
      if (Status removed = Remove(id); !removed.ok()) {
        spdlog::warn("docker: removing container {} that failed to start: {}", name, removed.message());
      }
      return why;
    }
    return id;
  }

  Result<ContainerStatus> Inspect(const std::string& id) override {
    if (!ValidId(id)) return Status::InvalidParameter("docker: invalid container id '" + id + "'");
    auto answer = Call("GET", "/containers/" + id + "/json");
    if (!answer.ok()) return answer.status();
    if (answer->status == 404) {
      return ContainerStatus{ContainerState::kMissing, std::nullopt, "no such container"};
    }
    if (answer->status != 200) return EngineError("cannot inspect container " + id, *answer);
    auto json = Json::parse(answer->body, nullptr, false);
    if (!json.is_object()) return Status::Server("docker: inspect of " + id + " answered no JSON object");
    return StatusOf(json.contains("State") ? json["State"] : Json());
  }

  Status Stop(const std::string& id, std::chrono::milliseconds grace) override {
    if (!ValidId(id)) return Status::InvalidParameter("docker: invalid container id '" + id + "'");
    const int64_t seconds = grace.count() <= 0 ? 0 : (grace.count() + 999) / 1000;  // the engine counts seconds
    // The engine sends the stop signal, waits `seconds`, then SIGKILL, and answers when the container is gone.
    auto stopped = Call("POST", "/containers/" + id + "/stop?t=" + std::to_string(seconds), {},
                        options_.request_timeout + std::chrono::seconds(seconds));
    if (!stopped.ok()) return stopped.status();
    if (stopped->status == 404) return Status::Ok();  // idempotent: nothing left to stop
    if (stopped->status != 204 && stopped->status != 304) {
      return EngineError("cannot stop container " + id, *stopped);
    }
    auto status = Inspect(id);
    if (!status.ok()) return status.status();
    if (status->state != ContainerState::kRunning) return Status::Ok();
    auto killed = Call("POST", "/containers/" + id + "/kill?signal=SIGKILL");
    if (!killed.ok()) return killed.status();
    if (killed->status == 204 || killed->status == 404 || killed->status == 409) return Status::Ok();
    return EngineError("cannot kill container " + id, *killed);
  }

  Status Remove(const std::string& id) override {
    if (!ValidId(id)) return Status::InvalidParameter("docker: invalid container id '" + id + "'");
    if (!options_.log_dir.empty()) {  // the output outlives the container: copy what the store lacks first
      auto inspected = Call("GET", "/containers/" + id + "/json");
      if (inspected.ok() && inspected->status == 200) {
        const Json json = Json::parse(inspected->body, nullptr, false);
        const Json config = json.is_object() && json.contains("Config") ? json["Config"] : Json();
        const Json labels = config.is_object() && config.contains("Labels") ? config["Labels"] : Json();
        const std::string task = JsonString(labels, kLabelTask), container = JsonString(labels, kLabelContainer);
        if (!task.empty() && !container.empty()) {
          if (Status s = Collect(id, task, container); !s.ok())
            spdlog::warn("docker: the logs of {} before its removal: {}", id, s.message());
        }
      }
    }
    auto removed = Call("DELETE", "/containers/" + id + "?force=true");
    if (!removed.ok()) return removed.status();
    if (removed->status == 204 || removed->status == 404) return Status::Ok();
    return EngineError("cannot remove container " + id, *removed);
  }

  Status CollectLogs(const std::string& task_arn, const std::string& container_name) override {
    if (options_.log_dir.empty()) return Status::Ok();
    return Collect(ContainerName(task_arn, container_name), task_arn, container_name);
  }

  std::map<uint32_t, std::string> Owners(const std::vector<uint32_t>& pids) override {
    std::map<uint32_t, std::string> out;
    if (pids.empty()) return out;
    auto listed = List();
    if (!listed.ok()) return out;
    std::vector<std::string> running;
    for (const auto& c : *listed)
      if (c.status.state == ContainerState::kRunning && c.id.size() >= 12) running.push_back(c.id);
    for (uint32_t pid : pids) {
      const std::string cgroup = ReadProcCgroup(static_cast<int>(pid));
      for (const auto& id : running)
        if (cgroup.find(id) != std::string::npos) {
          out[pid] = id;
          break;
        }
    }
    return out;
  }

  Result<std::vector<RuntimeContainer>> List() override {
    Json filters = {{"label", Json::array({std::string(kLabelAgent) + "=" + options_.agent_label})}};
    auto answer = Call("GET", "/containers/json?all=1&filters=" + UrlEncode(filters.dump()));
    if (!answer.ok()) return answer.status();
    if (answer->status != 200) return EngineError("cannot list containers", *answer);
    auto json = Json::parse(answer->body, nullptr, false);
    if (!json.is_array()) return Status::Server("docker: container list answered no JSON array");
    std::vector<RuntimeContainer> out;
    for (const Json& item : json) {
      RuntimeContainer container;
      container.id = JsonString(item, "Id");
      const Json labels = item.is_object() && item.contains("Labels") ? item["Labels"] : Json();
      if (!ValidId(container.id) || JsonString(labels, kLabelAgent) != options_.agent_label) continue;
      container.task_arn = JsonString(labels, kLabelTask);
      container.container_name = JsonString(labels, kLabelContainer);
      if (JsonString(item, "State") == "running") {
        container.status.state = ContainerState::kRunning;
      } else {
        auto status = Inspect(container.id);  // the list has no exit code
        if (!status.ok()) return status.status();
        if (status->state == ContainerState::kMissing) continue;  // removed meanwhile
        container.status = std::move(*status);
      }
      out.push_back(std::move(container));
    }
    return out;
  }

 private:
  static std::string ContainerName(const std::string& task_arn, const std::string& container_name) {
    return "gpupack-" + SanitizedName(TaskIdOf(task_arn) + "-" + container_name);
  }

  // Collect copies the lines of engine container `ref` (id or name) newer than the stream's cursor into the log
  // store. One copy at a time (the log service and a removal may ask at once).
  Status Collect(const std::string& ref, const std::string& task_arn, const std::string& container_name) {
    if (!ValidId(ref)) return Status::InvalidParameter("docker: invalid container reference '" + ref + "'");
    std::lock_guard lock(collect_mu_);
    const std::string dir = LogDirectory(options_.log_dir, task_arn, container_name);
    const std::string cursor_path = dir + "/.docker-since";
    int64_t since = 0;  // ns of the last line copied
    if (std::ifstream in(cursor_path); in) in >> since;
    std::string target = "/containers/" + ref + "/logs?stdout=1&stderr=1&timestamps=1";
    if (since > 0) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%lld.%09lld", static_cast<long long>(since / 1000000000),
                    static_cast<long long>(since % 1000000000));
      target += "&since=" + std::string(buf);
    }
    // The engine may hold all its json-file log (files x file_bytes) for one copy, more than max_response_bytes
    // allows: each line comes with a frame header and its timestamp, so twice that, and a MiB to spare.
    const uint64_t kept = options_.log_limits.file_bytes * static_cast<uint64_t>(options_.log_limits.files);
    const DockerClient logs_client(DockerClientOptions{
        options_.socket_path, options_.request_timeout,
        std::max<size_t>(options_.max_response_bytes, static_cast<size_t>(2 * kept + (1u << 20)))});
    auto answer = logs_client.Request("GET", prefix_ + target);
    if (!answer.ok()) return answer.status();
    if (answer->status == 404) return Status::Ok();  // gone: what was copied is what there is
    if (answer->status != 200) return EngineError("cannot read the logs of " + ref, *answer);
    std::vector<EngineLine> lines = DemuxLogs(answer->body);
    LogWriter writer;
    if (Status s = writer.Open(dir, options_.log_limits); !s.ok()) return s;
    int64_t last = since;
    for (const EngineLine& line : lines) {
      if (line.nanos <= since) continue;  // `since` is inclusive: already copied
      writer.Append(line.nanos / 1000000, line.message.data(), line.message.size());
      last = std::max(last, line.nanos);
    }
    writer.Close();
    if (last != since) {
      // 0666 less the umask, as an ofstream made it.
      const Status s = WriteFileAtomically(cursor_path, std::to_string(last) + "\n", 0666);
      if (!s.ok()) return Status::Server("docker: " + s.message());
    }
    return Status::Ok();
  }

  Result<DockerResponse> Call(std::string_view method, const std::string& path, std::string_view body = {},
                              std::optional<std::chrono::milliseconds> timeout = std::nullopt) const {
    return client_.Request(method, prefix_ + path, body, timeout);
  }

  static Status EngineError(const std::string& what, const DockerResponse& response) {
    std::string message = "docker: " + what + ": " + EngineMessage(response);
    if (response.status == 409) return Status::Conflict(std::move(message));
    if (response.status >= 400 && response.status < 500) return Status::Client(std::move(message));
    return Status::Server(std::move(message));
  }

  // CreateBody renders POST /containers/create's body; null when the environment has an invalid name.
  Json CreateBody(const ContainerSpec& spec) const {
    // The environment: a later duplicate wins, in the order of first appearance.
    std::vector<std::string> names;
    std::map<std::string, std::string> values;
    for (const KeyValuePair& kv : spec.environment) {
      if (kv.name.empty() || kv.name.find('=') != std::string::npos) return Json();
      if (values.emplace(kv.name, kv.value).second) {
        names.push_back(kv.name);
      } else {
        values[kv.name] = kv.value;
      }
    }
    Json env = Json::array();
    for (const std::string& name : names) env.push_back(name + "=" + values[name]);

    Json host = {{"IpcMode", "host"}, {"NetworkMode", options_.network_mode}};
    if (!spec.mps_pipe_dir.empty()) host["Binds"] = Json::array({spec.mps_pipe_dir + ":" + spec.mps_pipe_dir});
    constexpr int64_t kMiB = 1024 * 1024;
    if (spec.memory && *spec.memory > 0) host["Memory"] = *spec.memory * kMiB;
    if (spec.memory_reservation && *spec.memory_reservation > 0) {
      host["MemoryReservation"] = *spec.memory_reservation * kMiB;
    }
    if (spec.cpu > 0) host["CpuShares"] = std::max<int64_t>(spec.cpu, 2);  // the kernel's minimum weight is 2
    if (!options_.log_dir.empty()) {  // the engine's own copy, bounded like the store (it is copied from there)
      host["LogConfig"] = {{"Type", "json-file"},
                           {"Config",
                            {{"max-size", std::to_string(options_.log_limits.file_bytes)},
                             {"max-file", std::to_string(options_.log_limits.files)}}}};
    }

    Json body = {{"Image", spec.image},
                 {"Env", env},
                 {"Labels",
                  {{kLabelTask, spec.task_arn},
                   {kLabelContainer, spec.container_name},
                   {kLabelAgent, options_.agent_label}}},
                 {"HostConfig", host}};
    // Only what the task sets: an Entrypoint without Cmd runs without the image's Cmd (as ECS and docker do).
    if (!spec.command.empty()) body["Cmd"] = spec.command;
    if (!spec.entry_point.empty()) body["Entrypoint"] = spec.entry_point;
    return body;
  }

  // CreatePrefix: the create call's API version: the negotiated one, or the plan's when that is newer (CDI device
  // requests need 1.44).
  static std::string CreatePrefix(const std::string& api_version, const GpuInjection& injection) {
    auto negotiated = ParseVersion(api_version);
    auto needed = ParseVersion(injection.api_version);
    return "/v" + (needed && negotiated && *needed > *negotiated ? injection.api_version : api_version);
  }

  DockerRuntimeOptions options_;
  DockerClient client_;
  std::mutex collect_mu_;  // one log copy at a time
  std::string prefix_;  // "/v1.41"
  const GpuInjection injection_;
  std::string create_prefix_;  // prefix_, or newer when the GPU injection needs it
};

}  // namespace

Result<std::unique_ptr<Runtime>> MakeDockerRuntime(DockerRuntimeOptions options) {
  GpuInjection none;
  none.summary = "the docker runtime was made without GPU injection";
  return MakeDockerRuntime(std::move(options), std::move(none));
}

Result<std::unique_ptr<Runtime>> MakeDockerRuntime(DockerRuntimeOptions options, GpuInjection injection) {
  if (options.agent_label.empty()) {
    return Status::InvalidParameter("docker runtime: agent_label is required (it keeps agents apart)");
  }
  auto wanted = ParseVersion(options.api_version);
  if (!wanted) {
    return Status::InvalidParameter("docker runtime: invalid api_version '" + options.api_version + "'");
  }

  // Negotiate: the wanted version when the engine serves it, the engine's minimum when that is newer.
  DockerClient client({options.socket_path, options.request_timeout, options.max_response_bytes});
  auto answer = client.Request("GET", "/version");
  if (!answer.ok()) return answer.status();
  if (answer->status != 200) {
    return Status::Server("docker engine at " + options.socket_path + ": version: " + EngineMessage(*answer));
  }
  auto json = Json::parse(answer->body, nullptr, false);
  auto newest = ParseVersion(JsonString(json, "ApiVersion"));
  auto oldest = ParseVersion(JsonString(json, "MinAPIVersion"));
  if (!newest) {
    return Status::Server("docker engine at " + options.socket_path + ": version answered no ApiVersion");
  }
  std::string version = options.api_version;
  if (*newest < *wanted) {
    return Status::Unsupported("docker engine at " + options.socket_path + " serves API " +
                               JsonString(json, "ApiVersion") + ", gpupack needs " + options.api_version);
  }
  if (oldest && *oldest > *wanted) version = JsonString(json, "MinAPIVersion");
  if (auto needed = ParseVersion(injection.api_version); needed && *newest < *needed) {
    return Status::Unsupported("docker engine at " + options.socket_path + " serves API " +
                               JsonString(json, "ApiVersion") + ", GPU injection " +
                               GpuInjectionModeName(injection.mode) + " needs " + injection.api_version);
  }
  spdlog::info("docker runtime: engine {} at {}, API v{}", JsonString(json, "Version"), options.socket_path,
               version);
  return std::unique_ptr<Runtime>(
      std::make_unique<DockerRuntime>(std::move(options), std::move(version), std::move(injection)));
}

}  // namespace gpupack::agent
