#include "protocol/messages.h"

#include <utility>

#include "base/percent.h"
#include "protocol/field_limits.h"
#include "protocol/fields.h"
#include "protocol/log_limits.h"

namespace gpupack::protocol {

using internal::CutReason;
using internal::Fields;
using internal::Finish;
using internal::ReadId;

namespace {

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
  if (f.ok()) f.Take(CheckField(c.name, kReportedContainerLimit, f.Path("containerName")));
  if (!f.ok()) return f.status();
  return c;
}

// ReadTaskReport reads a TaskReport's fields from `f` (a task object, or a state message: fields inline).
Status ReadTaskReport(Fields& f, TaskReport& r) {
  f.String("taskArn", r.task_arn, true);
  if (f.ok()) f.Take(CheckField(r.task_arn, kReportedTaskArnLimit, f.Path("taskArn")));
  f.TaskStatusField("status", r.status, true);
  f.StopCodeField("stopCode", r.stop_code);
  f.String("reason", r.reason);
  CutReason(r.reason);
  f.Array("containers", false, [&r](const Json& e, const std::string& p) -> Status {
    if (r.containers.size() == kMaxReportedContainers)
      return Status::InvalidParameter(p + ": a task report holds at most " + std::to_string(kMaxReportedContainers) +
                                      " containers");
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

namespace {
constexpr std::pair<RefusalCode, const char*> kRefusalCodes[] = {
    {RefusalCode::kUnknownInstance, "UnknownInstance"},
    {RefusalCode::kNotLeader, "NotLeader"},
    {RefusalCode::kUnauthorized, "Unauthorized"},
    {RefusalCode::kMalformed, "Malformed"},
    {RefusalCode::kTooLarge, "TooLarge"},
    {RefusalCode::kBusy, "Busy"},
    {RefusalCode::kRejected, "Rejected"},
    {RefusalCode::kServerError, "ServerError"},
};
}  // namespace

const char* Name(RefusalCode c) {
  for (const auto& [code, name] : kRefusalCodes)
    if (code == c) return name;
  return "ServerError";
}

std::optional<RefusalCode> ParseRefusalCode(std::string_view s) {
  for (const auto& [code, name] : kRefusalCodes)
    if (s == name) return code;
  return std::nullopt;
}

// ---- the channel's target ----------------------------------------------------------------------------------------

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
      return PercentDecode(pair.substr(18), /*plus_is_space=*/true);
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
    internal::ReadHeartbeat(f, m);
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
  Json operator()(const Heartbeat& m) const { return internal::HeartbeatJson(m); }
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
    if (m.code) j["code"] = Name(*m.code);
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
    std::string code;
    f.String("code", code);
    if (!code.empty()) m.code = ParseRefusalCode(code);
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
    size_t term_bytes = 0;
    for (const std::string& t : m.terms) term_bytes += t.size();
    if (f.ok() && (m.terms.size() > kMaxLogTerms || term_bytes > kMaxFilterPatternBytes))
      f.Fail("logs.terms", "must be at most " + std::to_string(kMaxLogTerms) + " terms of at most " +
                               std::to_string(kMaxFilterPatternBytes) + " bytes together");
    return Finish<ServerMessage>(f, std::move(m));
  }
  return UnknownType(type);
}

std::string Serialize(const ServerMessage& m) { return Dump(std::visit(ServerWriter{}, m)); }

}  // namespace gpupack::protocol
