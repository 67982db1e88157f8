#include "protocol/messages.h"

#include <climits>
#include <cstdio>
#include <limits>
#include <set>
#include <utility>

namespace gpupack::protocol {

namespace {

std::string Indexed(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

// CutReason shortens a reason to kMaxReasonBytes without splitting a UTF-8 character.
void CutReason(std::string& s) {
  if (s.size() <= kMaxReasonBytes) return;
  size_t n = kMaxReasonBytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
}

// Fields reads the members of one JSON object and keeps the first error: after one, every read is a no-op, so
// a parser reads all its fields and checks status() once. `path` prefixes every field name in messages.
class Fields {
 public:
  Fields(const Json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) error_ = Status::InvalidParameter(path_ + " must be an object");
  }

  const Status& status() const { return error_; }
  bool ok() const { return error_.ok(); }
  std::string Path(std::string_view key) const { return path_ + "." + std::string(key); }
  void Fail(const std::string& field, const std::string& what) {
    if (error_.ok()) error_ = Status::InvalidParameter(field + " " + what);
  }
  void Take(const Status& s) {
    if (error_.ok() && !s.ok()) error_ = s;
  }

  // Get: the member, or null when absent (an error first when required) or after an error.
  const Json* Get(const char* key, bool required) {
    if (!error_.ok()) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) Fail(Path(key), "is required");
      return nullptr;
    }
    return &*it;
  }

  void String(const char* key, std::string& out, bool required = false) {
    const Json* v = Get(key, required);
    if (v == nullptr) return;
    if (!v->is_string()) return Fail(Path(key), "must be a string");
    out = v->get<std::string>();
  }
  void Bool(const char* key, bool& out) {
    const Json* v = Get(key, false);
    if (v == nullptr) return;
    if (!v->is_boolean()) return Fail(Path(key), "must be true or false");
    out = v->get<bool>();
  }
  void Int64(const char* key, int64_t& out, bool required = false) {
    const Json* v = Get(key, required);
    if (v == nullptr) return;
    if (auto n = AsInt64(*v)) out = *n;
    else Fail(Path(key), "must be an integer");
  }
  void Int64(const char* key, std::optional<int64_t>& out) {
    int64_t n = 0;
    if (Get(key, false) == nullptr) return;
    Int64(key, n, true);
    if (ok()) out = n;
  }
  void Int(const char* key, std::optional<int>& out) {
    const Json* v = Get(key, false);
    if (v == nullptr) return;
    auto n = AsInt64(*v);
    if (!n || *n < INT_MIN || *n > INT_MAX) return Fail(Path(key), "must be a 32-bit integer");
    out = static_cast<int>(*n);
  }
  void Strings(const char* key, std::vector<std::string>& out) {
    const Json* v = Get(key, false);
    if (v == nullptr) return;
    if (!v->is_array()) return Fail(Path(key), "must be an array of strings");
    out.clear();
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) return Fail(Indexed(Path(key), i), "must be a string");
      out.push_back((*v)[i].get<std::string>());
    }
  }
  void TaskStatusField(const char* key, TaskStatus& out, bool required) {
    const Json* v = Get(key, required);
    if (v == nullptr) return;
    auto s = v->is_string() ? ParseTaskStatus(v->get<std::string>()) : std::nullopt;
    if (!s) return Fail(Path(key), "must be PENDING, RUNNING or STOPPED");
    out = *s;
  }
  void DesiredStatus(const char* key, TaskStatus& out) {
    const Json* v = Get(key, false);
    if (v == nullptr) return;
    auto s = v->is_string() ? ParseTaskStatus(v->get<std::string>()) : std::nullopt;
    if (!s || *s == TaskStatus::kPending) return Fail(Path(key), "must be RUNNING or STOPPED");
    out = *s;
  }
  void StopCodeField(const char* key, std::optional<StopCode>& out) {
    const Json* v = Get(key, false);
    if (v == nullptr) return;
    auto c = v->is_string() ? ParseStopCode(v->get<std::string>()) : std::nullopt;
    if (!c) {
      return Fail(Path(key), "must be one of TaskFailedToStart, EssentialContainerExited, UserInitiated, "
                             "ServiceSchedulerInitiated, SpotInterruption, TerminationNotice, InfrastructureHealth");
    }
    out = *c;
  }
  // Array calls `each(element, path)` for every element of an array member; it returns the element's Status.
  template <typename Each>
  void Array(const char* key, bool required, Each each) {
    const Json* v = Get(key, required);
    if (v == nullptr) return;
    if (!v->is_array()) return Fail(Path(key), "must be an array");
    for (size_t i = 0; i < v->size() && ok(); ++i) Take(each((*v)[i], Indexed(Path(key), i)));
  }

 private:
  static std::optional<int64_t> AsInt64(const Json& v) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    return std::nullopt;
  }

  const Json& j_;
  std::string path_;
  gpupack::Status error_;
};

Result<KeyValuePair> KeyValueFromJson(const Json& j, const std::string& path) {
  KeyValuePair kv;
  Fields f(j, path);
  f.String("name", kv.name, true);
  f.String("value", kv.value);
  if (!f.ok()) return f.status();
  return kv;
}

Json KeyValuesJson(const std::vector<KeyValuePair>& kvs) {
  Json out = Json::array();
  for (const auto& kv : kvs) out.push_back({{"name", kv.name}, {"value", kv.value}});
  return out;
}

Result<ContainerReport> ContainerReportFromJson(const Json& j, const std::string& path) {
  ContainerReport c;
  Fields f(j, path);
  f.String("containerName", c.name, true);
  f.TaskStatusField("status", c.status, true);
  f.Int("exitCode", c.exit_code);
  f.String("reason", c.reason);
  CutReason(c.reason);
  if (!f.ok()) return f.status();
  return c;
}

// ReadTaskReport reads a TaskReport's fields from `f` (a task object, or a state message: fields inline).
Status ReadTaskReport(Fields& f, TaskReport& r) {
  f.String("taskArn", r.task_arn, true);
  f.TaskStatusField("status", r.status, true);
  f.StopCodeField("stopCode", r.stop_code);
  f.String("reason", r.reason);
  CutReason(r.reason);
  f.Array("containers", false, [&r](const Json& e, const std::string& p) -> Status {
    auto c = ContainerReportFromJson(e, p);
    if (!c.ok()) return c.status();
    r.containers.push_back(std::move(*c));
    return Status::Ok();
  });
  return f.status();
}

void WriteTaskReport(const TaskReport& r, Json& out) {
  Json containers = Json::array();
  for (const auto& c : r.containers) containers.push_back(ToJson(c));
  out["taskArn"] = r.task_arn;
  out["status"] = Name(r.status);
  out["containers"] = std::move(containers);
  if (!r.reason.empty()) out["reason"] = r.reason;
  if (r.stop_code) out["stopCode"] = Name(*r.stop_code);
}

Result<MpsLimits> MpsLimitsFromJson(const Json& j, const std::string& path) {
  MpsLimits m;
  Fields f(j, path);
  f.Int64("memory", m.memory_mib, true);
  f.Int("maxComputePercent", m.max_compute_percent);
  if (!f.ok()) return f.status();
  return m;
}

Result<AssignedContainer> AssignedContainerFromJson(const Json& j, const std::string& path) {
  AssignedContainer c;
  Fields f(j, path);
  f.String("name", c.name, true);
  f.String("image", c.image);
  f.Bool("essential", c.essential);
  f.Strings("gpuIds", c.gpu_ids);
  if (const Json* mps = f.Get("mps", false)) {
    auto m = MpsLimitsFromJson(*mps, f.Path("mps"));
    f.Take(m.status());
    if (m.ok()) c.mps = *m;
  }
  f.Strings("entryPoint", c.entry_point);
  f.Strings("command", c.command);
  for (auto [key, list] : {std::pair{"environment", &c.environment},
                           std::pair{"overrideEnvironment", &c.override_environment}}) {
    std::vector<KeyValuePair>* out = list;
    f.Array(key, false, [out](const Json& e, const std::string& p) -> Status {
      auto kv = KeyValueFromJson(e, p);
      if (!kv.ok()) return kv.status();
      out->push_back(std::move(*kv));
      return Status::Ok();
    });
  }
  f.Int64("cpu", c.cpu);
  f.Int64("memory", c.memory);
  f.Int64("memoryReservation", c.memory_reservation);
  if (!f.ok()) return f.status();
  return c;
}

// Id reads a message's "id": required, or 0 when absent and optional (a push from a server that gives none).
void ReadId(Fields& f, int64_t& id, bool required) { f.Int64("id", id, required); }

// Envelope parses the text and checks the message's shape: the document and its "type".
Result<std::pair<Json, std::string>> Envelope(std::string_view text) {
  auto j = ParseJsonBounded(text);
  if (!j.ok()) return j.status();
  if (!j->is_object() || !j->contains("type") || !(*j)["type"].is_string())
    return Status::InvalidParameter("messages are JSON objects with a string 'type'");
  std::string type = (*j)["type"].get<std::string>();
  return std::make_pair(std::move(*j), std::move(type));
}

Status UnknownType(const std::string& type) {
  return Status::InvalidParameter("unknown message type '" + type.substr(0, 64) + "'");
}

template <typename T>
Result<T> Finish(const Fields& f, T value) {
  if (!f.ok()) return f.status();
  return value;
}

}  // namespace

// ---- vocabulary -----------------------------------------------------------------------------------------------

const char* Name(TaskStatus s) {
  switch (s) {
    case TaskStatus::kPending: return "PENDING";
    case TaskStatus::kRunning: return "RUNNING";
    case TaskStatus::kStopped: return "STOPPED";
  }
  return "PENDING";
}

std::optional<TaskStatus> ParseTaskStatus(std::string_view s) {
  if (s == "PENDING") return TaskStatus::kPending;
  if (s == "RUNNING") return TaskStatus::kRunning;
  if (s == "STOPPED") return TaskStatus::kStopped;
  return std::nullopt;
}

namespace {
constexpr std::pair<StopCode, const char*> kStopCodes[] = {
    {StopCode::kTaskFailedToStart, "TaskFailedToStart"},
    {StopCode::kEssentialContainerExited, "EssentialContainerExited"},
    {StopCode::kUserInitiated, "UserInitiated"},
    {StopCode::kServiceSchedulerInitiated, "ServiceSchedulerInitiated"},
    {StopCode::kSpotInterruption, "SpotInterruption"},
    {StopCode::kTerminationNotice, "TerminationNotice"},
    {StopCode::kInfrastructureHealth, "InfrastructureHealth"},
};
}  // namespace

const char* Name(StopCode c) {
  for (const auto& [code, name] : kStopCodes)
    if (code == c) return name;
  return "TaskFailedToStart";
}

std::optional<StopCode> ParseStopCode(std::string_view s) {
  for (const auto& [code, name] : kStopCodes)
    if (s == name) return code;
  return std::nullopt;
}

// ---- the channel's target ----------------------------------------------------------------------------------------

std::string PercentEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                            c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string ChannelTarget(const std::string& instance_arn) {
  return std::string(kChannelPath) + "?containerInstance=" + PercentEncode(instance_arn);
}

std::string InstanceArnFromTarget(const std::string& target) {
  const size_t q = target.find('?');
  if (q == std::string::npos) return "";
  const std::string query = target.substr(q + 1);
  size_t pos = 0;
  while (pos <= query.size()) {
    const size_t amp = query.find('&', pos);
    const std::string pair = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    if (pair.rfind("containerInstance=", 0) == 0) {
      const std::string raw = pair.substr(18);
      std::string out;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '%' && i + 2 < raw.size()) {
          unsigned int v = 0;
          if (std::sscanf(raw.substr(i + 1, 2).c_str(), "%2x", &v) == 1) {
            out.push_back(static_cast<char>(v));
            i += 2;
            continue;
          }
        }
        out.push_back(raw[i] == '+' ? ' ' : raw[i]);
      }
      return out;
    }
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  return "";
}

// ---- JSON ---------------------------------------------------------------------------------------------------------

Result<Json> ParseJsonBounded(std::string_view text) {
  bool too_deep = false;
  Json j = Json::parse(
      text.begin(), text.end(),
      [&too_deep](int depth, Json::parse_event_t, Json&) {
        if (depth > kMaxJsonDepth) too_deep = true;
        return !too_deep;
      },
      /*allow_exceptions=*/false);
  if (too_deep)
    return Status::InvalidParameter("messages nest at most " + std::to_string(kMaxJsonDepth) + " levels deep");
  if (j.is_discarded()) return Status::InvalidParameter("the message is not valid JSON");
  return j;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// ---- converters ---------------------------------------------------------------------------------------------------

Json ToJson(const ContainerReport& c) {
  Json j = {{"containerName", c.name}, {"status", Name(c.status)}};
  if (c.exit_code) j["exitCode"] = *c.exit_code;
  if (!c.reason.empty()) j["reason"] = c.reason;
  return j;
}

Json ToJson(const TaskReport& r) {
  Json j = Json::object();
  WriteTaskReport(r, j);
  return j;
}

Result<TaskReport> TaskReportFromJson(const Json& j, const std::string& path) {
  TaskReport r;
  Fields f(j, path);
  if (Status s = ReadTaskReport(f, r); !s.ok()) return s;
  return r;
}

Json ToJson(const AssignedContainer& c) {
  Json j = {{"name", c.name},
            {"image", c.image},
            {"essential", c.essential},
            {"gpuIds", c.gpu_ids},
            {"entryPoint", c.entry_point},
            {"command", c.command},
            {"environment", KeyValuesJson(c.environment)},
            {"overrideEnvironment", KeyValuesJson(c.override_environment)},
            {"cpu", c.cpu}};
  if (c.mps) {
    j["mps"] = {{"memory", c.mps->memory_mib}};
    if (c.mps->max_compute_percent) j["mps"]["maxComputePercent"] = *c.mps->max_compute_percent;
  }
  if (c.memory) j["memory"] = *c.memory;
  if (c.memory_reservation) j["memoryReservation"] = *c.memory_reservation;
  return j;
}

Json ToJson(const Assignment& a) {
  Json containers = Json::array();
  for (const auto& c : a.containers) containers.push_back(ToJson(c));
  return {{"taskArn", a.task_arn},
          {"cluster", a.cluster},
          {"taskDefinitionArn", a.task_definition_arn},
          {"desiredStatus", Name(a.desired_status)},
          {"containers", std::move(containers)}};
}

Result<Assignment> AssignmentFromJson(const Json& j, const std::string& path) {
  Assignment a;
  Fields f(j, path);
  f.String("taskArn", a.task_arn, true);
  f.String("cluster", a.cluster);
  f.String("taskDefinitionArn", a.task_definition_arn);
  f.DesiredStatus("desiredStatus", a.desired_status);
  f.Array("containers", false, [&a](const Json& e, const std::string& p) -> Status {
    auto c = AssignedContainerFromJson(e, p);
    if (!c.ok()) return c.status();
    a.containers.push_back(std::move(*c));
    return Status::Ok();
  });
  return Finish(f, std::move(a));
}

Json ToJson(const StopOrder& s) { return {{"taskArn", s.task_arn}, {"reason", s.reason}}; }

Result<StopOrder> StopOrderFromJson(const Json& j, const std::string& path) {
  StopOrder s;
  Fields f(j, path);
  f.String("taskArn", s.task_arn, true);
  f.String("reason", s.reason);
  return Finish(f, std::move(s));
}

// ---- agent -> server -------------------------------------------------------------------------------------------

namespace {

// BoundedName reads a required string member of at most kMaxGpuMemoryNameBytes bytes.
void BoundedName(Fields& f, const char* key, std::string& out) {
  f.String(key, out, true);
  if (f.ok() && (out.empty() || out.size() > kMaxGpuMemoryNameBytes))
    f.Fail(f.Path(key), "must be 1 to " + std::to_string(kMaxGpuMemoryNameBytes) + " bytes");
}

// BoundedCount reads a required integer member from 0 to `max`.
void BoundedCount(Fields& f, const char* key, int64_t& out, int64_t max) {
  f.Int64(key, out, true);
  if (f.ok() && (out < 0 || out > max)) f.Fail(f.Path(key), "must be an integer from 0 to " + std::to_string(max));
}

// BoundedArray checks that a required member is an array of at most `max` elements before any is read.
bool BoundedArray(Fields& f, const char* key, size_t max) {
  const Json* v = f.Get(key, true);
  if (v == nullptr) return false;
  if (!v->is_array()) {
    f.Fail(f.Path(key), "must be an array");
    return false;
  }
  if (v->size() > max) {
    f.Fail(f.Path(key), "must hold at most " + std::to_string(max) + " entries");
    return false;
  }
  return true;
}

}  // namespace

Result<GpuMemoryReading> ParseGpuMemoryReading(const Json& j, const std::string& path) {
  GpuMemoryReading m;
  Fields f(j, path);
  BoundedCount(f, "ageMs", m.age_ms, kMaxGpuMemoryAgeMs);
  if (!BoundedArray(f, "tasks", kMaxGpuMemoryTasks)) return Finish(f, std::move(m));
  std::set<std::string> tasks_seen;
  f.Array("tasks", true, [&m, &tasks_seen](const Json& e, const std::string& p) -> Status {
    TaskGpuMemory t;
    Fields tf(e, p);
    BoundedName(tf, "taskArn", t.task_arn);
    if (tf.ok() && !tasks_seen.insert(t.task_arn).second) tf.Fail(tf.Path("taskArn"), "appears twice");
    if (!BoundedArray(tf, "gpus", kMaxGpuMemoryGpus)) return tf.status();
    std::set<std::string> gpus_seen;
    tf.Array("gpus", true, [&t, &gpus_seen](const Json& ge, const std::string& gp) -> Status {
      GpuBytes g;
      Fields gf(ge, gp);
      BoundedName(gf, "gpuId", g.gpu_id);
      if (gf.ok() && !gpus_seen.insert(g.gpu_id).second) gf.Fail(gf.Path("gpuId"), "appears twice");
      BoundedCount(gf, "bytes", g.bytes, kMaxGpuMemoryBytes);
      if (!gf.ok()) return gf.status();
      t.gpus.push_back(std::move(g));
      return Status::Ok();
    });
    if (!tf.ok()) return tf.status();
    m.tasks.push_back(std::move(t));
    return Status::Ok();
  });
  return Finish(f, std::move(m));
}

Result<AgentMessage> ParseAgentMessage(std::string_view text) {
  auto env = Envelope(text);
  if (!env.ok()) return env.status();
  const auto& [j, type] = *env;
  Fields f(j, type);
  // A hello and each part of one: the tasks the agent knows and whether it is impaired.
  auto hello_fields = [&f](auto& m) {
    f.Array("tasks", false, [&m](const Json& e, const std::string& p) -> Status {
      auto r = TaskReportFromJson(e, p);
      if (!r.ok()) return r.status();
      m.tasks.push_back(std::move(*r));
      return Status::Ok();
    });
    f.Bool("impaired", m.impaired);
  };
  if (type == "hello") {
    Hello m;
    hello_fields(m);
    return Finish<AgentMessage>(f, std::move(m));
  }
  if (type == "helloPart") {
    HelloPart m;
    hello_fields(m);
    f.Bool("last", m.last);
    return Finish<AgentMessage>(f, std::move(m));
  }
  if (type == "state") {
    StateReport m;
    ReadId(f, m.id, true);
    (void)ReadTaskReport(f, m.report);
    return Finish<AgentMessage>(f, std::move(m));
  }
  if (type == "heartbeat") {
    Heartbeat m;
    ReadId(f, m.id, true);
    f.Bool("impaired", m.impaired);
    f.Strings("heldGpus", m.held_gpus);
    // gpuMemoryUsed stands apart: a bad one is dropped with a note, never the heartbeat's health with it.
    if (const Json* used = f.Get("gpuMemoryUsed", false)) {
      auto reading = ParseGpuMemoryReading(*used, f.Path("gpuMemoryUsed"));
      if (reading.ok()) m.gpu_memory = std::move(*reading);
      else m.gpu_memory_refused = reading.status().message();
    }
    return Finish<AgentMessage>(f, std::move(m));
  }
  if (type == "ack") {
    Ack m;
    ReadId(f, m.id, true);
    return Finish<AgentMessage>(f, m);
  }
  if (type == "logEvents") {
    LogsAnswer m;
    ReadId(f, m.id, true);
    f.Bool("found", m.found);
    f.Array("events", false, [&m](const Json& e, const std::string& p) -> Status {
      LogLine line;
      Fields ef(e, p);
      ef.Int64("timestamp", line.timestamp, true);
      ef.String("message", line.message, true);
      if (!ef.ok()) return ef.status();
      m.events.push_back(std::move(line));
      return Status::Ok();
    });
    f.Int64("nextForward", m.next_forward);
    f.Int64("nextBackward", m.next_backward);
    f.Bool("atEnd", m.at_end);
    f.String("error", m.error);
    return Finish<AgentMessage>(f, std::move(m));
  }
  return UnknownType(type);
}

namespace {

struct AgentWriter {
  Json operator()(const Hello& m) const {
    Json tasks = Json::array();
    for (const auto& t : m.tasks) tasks.push_back(ToJson(t));
    return {{"type", "hello"}, {"tasks", std::move(tasks)}, {"impaired", m.impaired}};
  }
  Json operator()(const HelloPart& m) const {
    Json tasks = Json::array();
    for (const auto& t : m.tasks) tasks.push_back(ToJson(t));
    return {{"type", "helloPart"}, {"tasks", std::move(tasks)}, {"impaired", m.impaired}, {"last", m.last}};
  }
  Json operator()(const StateReport& m) const {
    Json j = {{"type", "state"}, {"id", m.id}};
    WriteTaskReport(m.report, j);
    return j;
  }
  Json operator()(const Heartbeat& m) const {
    Json j = {{"type", "heartbeat"}, {"id", m.id}, {"impaired", m.impaired}, {"heldGpus", m.held_gpus}};
    if (m.gpu_memory) {
      Json tasks = Json::array();
      for (const auto& t : m.gpu_memory->tasks) {
        Json gpus = Json::array();
        for (const auto& g : t.gpus) gpus.push_back({{"gpuId", g.gpu_id}, {"bytes", g.bytes}});
        tasks.push_back({{"taskArn", t.task_arn}, {"gpus", std::move(gpus)}});
      }
      j["gpuMemoryUsed"] = {{"ageMs", m.gpu_memory->age_ms}, {"tasks", std::move(tasks)}};
    }
    return j;
  }
  Json operator()(const Ack& m) const { return {{"type", "ack"}, {"id", m.id}}; }
  Json operator()(const LogsAnswer& m) const {
    Json events = Json::array();
    for (const auto& e : m.events) events.push_back({{"timestamp", e.timestamp}, {"message", e.message}});
    Json j = {{"type", "logEvents"},          {"id", m.id},
              {"found", m.found},             {"events", std::move(events)},
              {"nextForward", m.next_forward}, {"nextBackward", m.next_backward},
              {"atEnd", m.at_end}};
    if (!m.error.empty()) j["error"] = m.error;
    return j;
  }
};

struct ServerWriter {
  Json operator()(const Welcome& m) const {
    Json assign = Json::array(), stop = Json::array();
    for (const auto& a : m.assign) assign.push_back(ToJson(a));
    for (const auto& s : m.stop) stop.push_back(ToJson(s));
    Json j = {{"type", "welcome"}, {"assign", std::move(assign)}, {"stop", std::move(stop)},
              {"heartbeatIntervalMs", m.heartbeat_interval_ms}};
    return WithEpoch(std::move(j), m.epoch);
  }
  Json operator()(const Assign& m) const {
    return WithEpoch({{"type", "assign"}, {"id", m.id}, {"task", ToJson(m.task)}}, m.epoch);
  }
  Json operator()(const Stop& m) const {
    return WithEpoch({{"type", "stop"}, {"id", m.id}, {"taskArn", m.order.task_arn}, {"reason", m.order.reason}},
                     m.epoch);
  }
  // WithEpoch adds "epoch" only when there is one, so a message without it reads as it always did.
  static Json WithEpoch(Json j, const std::optional<int64_t>& epoch) {
    if (epoch) j["epoch"] = *epoch;
    return j;
  }
  Json operator()(const Ack& m) const { return {{"type", "ack"}, {"id", m.id}}; }
  Json operator()(const Error& m) const {
    Json j = {{"type", "error"}, {"message", m.message}};
    if (m.id) j["id"] = *m.id;
    return j;
  }
  Json operator()(const LogsRequest& m) const {
    Json j = {{"type", "logs"},       {"id", m.id},        {"taskArn", m.task_arn},
              {"containerName", m.container_name}, {"forward", m.forward}, {"terms", m.terms},
              {"limit", m.limit},     {"maxBytes", m.max_bytes}};
    if (m.position) j["position"] = *m.position;
    if (m.start_ms) j["startTime"] = *m.start_ms;
    if (m.end_ms) j["endTime"] = *m.end_ms;
    return j;
  }
};

}  // namespace

std::string Serialize(const AgentMessage& m) { return Dump(std::visit(AgentWriter{}, m)); }

std::vector<std::string> SerializeHello(const Hello& hello, size_t max_bytes) {
  std::string whole = Serialize(AgentMessage(hello));
  if (whole.size() <= max_bytes) return {std::move(whole)};
  auto part = [&hello](Json tasks, bool last) {
    return Dump({{"type", "helloPart"}, {"tasks", std::move(tasks)}, {"impaired", hello.impaired}, {"last", last}});
  };
  const size_t empty = part(Json::array(), false).size();
  std::vector<std::string> parts;
  Json tasks = Json::array();
  size_t size = empty;
  for (const auto& t : hello.tasks) {
    Json j = ToJson(t);
    const size_t n = Dump(j).size() + 1;  // and its comma
    if (!tasks.empty() && size + n > max_bytes) {
      parts.push_back(part(std::move(tasks), false));
      tasks = Json::array();
      size = empty;
    }
    tasks.push_back(std::move(j));
    size += n;
  }
  parts.push_back(part(std::move(tasks), true));
  return parts;
}

// ---- server -> agent -------------------------------------------------------------------------------------------

Result<ServerMessage> ParseServerMessage(std::string_view text) {
  auto env = Envelope(text);
  if (!env.ok()) return env.status();
  const auto& [j, type] = *env;
  Fields f(j, type);
  if (type == "welcome") {
    Welcome m;
    f.Array("assign", false, [&m](const Json& e, const std::string& p) -> Status {
      auto a = AssignmentFromJson(e, p);
      if (!a.ok()) return a.status();
      m.assign.push_back(std::move(*a));
      return Status::Ok();
    });
    f.Array("stop", false, [&m](const Json& e, const std::string& p) -> Status {
      auto s = StopOrderFromJson(e, p);
      if (!s.ok()) return s.status();
      m.stop.push_back(std::move(*s));
      return Status::Ok();
    });
    f.Int64("heartbeatIntervalMs", m.heartbeat_interval_ms);
    f.Int64("epoch", m.epoch);
    return Finish<ServerMessage>(f, std::move(m));
  }
  if (type == "assign") {
    Assign m;
    ReadId(f, m.id, false);
    if (const Json* task = f.Get("task", true)) {
      auto a = AssignmentFromJson(*task, f.Path("task"));
      f.Take(a.status());
      if (a.ok()) m.task = std::move(*a);
    }
    f.Int64("epoch", m.epoch);
    return Finish<ServerMessage>(f, std::move(m));
  }
  if (type == "stop") {
    Stop m;
    ReadId(f, m.id, false);
    f.String("taskArn", m.order.task_arn, true);
    f.String("reason", m.order.reason);
    f.Int64("epoch", m.epoch);
    return Finish<ServerMessage>(f, std::move(m));
  }
  if (type == "ack") {
    Ack m;
    ReadId(f, m.id, true);
    return Finish<ServerMessage>(f, m);
  }
  if (type == "error") {
    Error m;
    int64_t id = 0;
    if (f.Get("id", false) != nullptr) {
      ReadId(f, id, true);
      m.id = id;
    }
    f.String("message", m.message, true);
    return Finish<ServerMessage>(f, std::move(m));
  }
  if (type == "logs") {
    LogsRequest m;
    ReadId(f, m.id, true);
    f.String("taskArn", m.task_arn, true);
    f.String("containerName", m.container_name, true);
    f.Bool("forward", m.forward);
    f.Int64("position", m.position);
    f.Int64("startTime", m.start_ms);
    f.Int64("endTime", m.end_ms);
    f.Strings("terms", m.terms);
    f.Int64("limit", m.limit);
    f.Int64("maxBytes", m.max_bytes);
    if (f.ok() && (m.limit < 1 || m.max_bytes < 1 || m.max_bytes > kLogsAnswerBytes))
      f.Fail("logs.limit", "and logs.maxBytes must be positive, maxBytes at most " + std::to_string(kLogsAnswerBytes));
    return Finish<ServerMessage>(f, std::move(m));
  }
  return UnknownType(type);
}

std::string Serialize(const ServerMessage& m) { return Dump(std::visit(ServerWriter{}, m)); }

}  // namespace gpupack::protocol
