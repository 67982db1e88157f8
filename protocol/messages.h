// The agent channel's messages as types (docs/agent-channel.md). The server (api/) and the node agent (agent/)
// both speak through this library: ParseAgentMessage / ParseServerMessage turn one WebSocket text frame into a
// typed message, or a Status::InvalidParameter that names the offending field; Serialize writes one back. The
// wire format is the channel's as it has always been: field names, "type" strings and shapes.
//
//   agent -> server                                   server -> agent
//   {"type":"hello","tasks":[...],"impaired":b}       {"type":"welcome","assign":[...],"stop":[...],
//                                                       "heartbeatIntervalMs":n,"epoch"?}
//   {"type":"state","id":n,<TaskReport fields>}       {"type":"ack","id":n}
//   {"type":"heartbeat","id":n,"impaired","heldGpus", {"type":"ack","id":n}
//    "gpuMemoryUsed"?}
//   {"type":"ack","id":n}                             {"type":"assign","id":n,"task":{<Assignment>}}
//                                                     {"type":"stop","id":n,"taskArn","reason"}
//                                                     {"type":"error","message","code"?,"id"?}
//   {"type":"helloPart","tasks":[...],"impaired":b,"last":b}   (a hello too large for one message, in parts)
//   {"type":"logEvents","id":n,"found":b,"events":[...],...}   {"type":"logs","id":n,"taskArn","containerName",...}
//   (the answer to a log request)                              (a request for one page of a container's output)
//
// Parsing: the text must be a JSON object with a string "type"; nesting deeper than kMaxJsonDepth is refused
// while parsing, before a deep document is built (copying or printing one recurses once per level). Every
// field's type is checked; a field that is missing takes its default unless it is required (each struct below
// says which). Unknown fields are ignored, so either side may add one without breaking the other. Errors name
// the field with its path, e.g. "state.containers[0].status must be PENDING, RUNNING or STOPPED".
//
// Serializing never throws: invalid UTF-8 in a string is replaced with U+FFFD.
//
// Pure functions and value types: thread-safe. JSON only (nlohmann_json); no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack::protocol {

using Json = nlohmann::json;

inline constexpr const char* kChannelPath = "/agent/v1/channel";
// kLeaderHeader: the response header in which a standby's refusal of the channel names the leader's URL (also
// the body's "leader" field, see RefusalCode).
inline constexpr const char* kLeaderHeader = "x-gpupack-leader";
// The instance attribute an agent registers (value "v1") to say it holds a channel: the server pushes to it.
inline constexpr const char* kChannelAttribute = "gpupack.agent-channel";
inline constexpr const char* kChannelVersion = "v1";
// The attribute an agent registers while its MPS control daemon answers: shared GPU tasks are placed only there.
inline constexpr const char* kMpsCapability = "ecs.capability.gpu-sharing-mps";
// kInstanceDeregisteredCode: the "code" beside __type (InvalidParameterException) of the server's refusal to
// re-register a deregistered instance (ErrorCode::kInstanceDeregistered); an agent that gets it stops what it
// runs for that instance and registers no more (agent/server_connection.h).
inline constexpr const char* kInstanceDeregisteredCode = "InstanceDeregistered";
inline constexpr int kMaxJsonDepth = 64;
// kMaxReasonBytes: a reported reason (a task's or a container's) is cut to this many bytes, at a character
// boundary, when parsed: never refused, so a long error text cannot lose a report, and never stored longer.
inline constexpr size_t kMaxReasonBytes = 255;

// ChannelTarget is the upgrade request's target: kChannelPath + "?containerInstance=" + the ARN percent-encoded.
std::string ChannelTarget(const std::string& instance_arn);
// InstanceArnFromTarget is the inverse: containerInstance=<ARN> of the target's query, percent-decoded ('+' is
// a space); "" when absent.
std::string InstanceArnFromTarget(const std::string& target);

// ---- vocabulary ---------------------------------------------------------------------------------------------

enum class TaskStatus { kPending, kRunning, kStopped };
const char* Name(TaskStatus s);  // "PENDING" | "RUNNING" | "STOPPED"
std::optional<TaskStatus> ParseTaskStatus(std::string_view s);

// StopCode: ECS's stop codes (and their spelling), plus InfrastructureHealth for a task a GPU fault ended.
enum class StopCode {
  kTaskFailedToStart,
  kEssentialContainerExited,
  kUserInitiated,
  kServiceSchedulerInitiated,
  kSpotInterruption,
  kTerminationNotice,
  kInfrastructureHealth,
};
const char* Name(StopCode c);  // "TaskFailedToStart", "EssentialContainerExited", ...
std::optional<StopCode> ParseStopCode(std::string_view s);

// RefusalCode: why the server refused the channel or a message on it, as a value for the agent to decide on
// (the message is for people and may change). Wire: the string "code" of a declined upgrade's body
// {"__type","message","code","leader"?} (a standby's refusal names the leader in "leader" and in the
// kLeaderHeader header when it knows it) and of an error message {"type":"error","message","code","id"?}.
//   "UnknownInstance"  the server does not know the instance (never registered, forgotten, deregistered): the
//                      agent registers again
//   "NotLeader"        a standby: the channel is served by the leader ("leader" names it when known)
//   "Unauthorized"     the signature, the key, or the key's right to this instance is refused
//   "Malformed"        the request or message could not be read (no containerInstance, not JSON, a bad field)
//   "TooLarge"         a hello's parts passed the server's bound
//   "Busy"             the server holds as many channels as it may: retry later
//   "Rejected"         the message was read but cannot be applied (e.g. a report of a task not on the instance)
//   "ServerError"      the server failed (a commit, its database): retry
// A code a peer does not know reads as none (nullopt): a newer server's code never fails an older agent's parse.
enum class RefusalCode {
  kUnknownInstance,
  kNotLeader,
  kUnauthorized,
  kMalformed,
  kTooLarge,
  kBusy,
  kRejected,
  kServerError,
};
const char* Name(RefusalCode c);  // "UnknownInstance", "NotLeader", ...
std::optional<RefusalCode> ParseRefusalCode(std::string_view s);

// ---- what the agent reports ---------------------------------------------------------------------------------

// ContainerReport, wire {"containerName","status","exitCode"?,"reason"?} (reason omitted when empty).
// Required: containerName, status.
struct ContainerReport {
  std::string name;
  TaskStatus status = TaskStatus::kPending;
  std::optional<int> exit_code;
  std::string reason;
  bool operator==(const ContainerReport&) const = default;
};

// TaskReport, wire {"taskArn","status","containers":[...],"reason"?,"stopCode"?} (reason omitted when empty).
// Required: taskArn, status.
struct TaskReport {
  std::string task_arn;
  TaskStatus status = TaskStatus::kPending;
  std::optional<StopCode> stop_code;
  std::string reason;
  std::vector<ContainerReport> containers;
  bool operator==(const TaskReport&) const = default;
};

// ---- what the server assigns ---------------------------------------------------------------------------------

// MpsLimits, wire "mps": {"memory","maxComputePercent"?}. Required: memory.
struct MpsLimits {
  int64_t memory_mib = 0;
  std::optional<int> max_compute_percent;
  bool operator==(const MpsLimits&) const = default;
};

// AssignedContainer, wire {"name","image","essential","gpuIds","mps"?,"entryPoint","command","environment",
// "overrideEnvironment","cpu","memory"?,"memoryReservation"?}; environment entries are {"name","value"}.
// Required: name (the server leaves out entryPoint, command, environment and cpu when the task definition is
// gone, and overrideEnvironment without an override: they default to empty and 0; essential defaults to true).
struct AssignedContainer {
  std::string name, image;
  bool essential = true;
  std::vector<std::string> gpu_ids;
  std::optional<MpsLimits> mps;
  std::vector<std::string> entry_point, command;
  std::vector<KeyValuePair> environment, override_environment;
  int64_t cpu = 0;
  std::optional<int64_t> memory, memory_reservation;
  bool operator==(const AssignedContainer&) const = default;
};

// Assignment, wire {"taskArn","cluster","taskDefinitionArn","desiredStatus","containers":[...]}: what an agent
// needs to start a task. desired_status is RUNNING or STOPPED (stopped before it started). Required: taskArn.
struct Assignment {
  std::string task_arn, cluster, task_definition_arn;
  TaskStatus desired_status = TaskStatus::kRunning;
  std::vector<AssignedContainer> containers;
  bool operator==(const Assignment&) const = default;
};

// StopOrder, wire {"taskArn","reason"}. Required: taskArn.
struct StopOrder {
  std::string task_arn;
  std::string reason;
  bool operator==(const StopOrder&) const = default;
};

// ---- agent -> server -----------------------------------------------------------------------------------------

// Hello opens every connection: every task the agent knows. {"type":"hello","tasks":[...],"impaired":b}
struct Hello {
  std::vector<TaskReport> tasks;
  bool impaired = false;
  bool operator==(const Hello&) const = default;
};
// StateReport: one task changed. {"type":"state","id":n,<TaskReport fields inline>}. Required: id.
struct StateReport {
  int64_t id = 0;
  TaskReport report;
  bool operator==(const StateReport&) const = default;
};
// GpuBytes, wire {"gpuId","bytes"}: GPU memory in use on one GPU, in bytes. Required: both.
struct GpuBytes {
  std::string gpu_id;
  int64_t bytes = 0;
  bool operator==(const GpuBytes&) const = default;
};
// TaskGpuMemory, wire {"taskArn","gpus":[...]}: one running task's GPU memory in use, per GPU (the sum of its
// containers' processes on that GPU). Required: taskArn, gpus.
struct TaskGpuMemory {
  std::string task_arn;
  std::vector<GpuBytes> gpus;
  bool operator==(const TaskGpuMemory&) const = default;
};
// GpuMemoryReading, wire "gpuMemoryUsed": {"ageMs":n,"tasks":[...]}: the agent's latest reading of the GPU
// memory its running tasks use, as NVML lists it per MPS client process (the reading the agent's GPU memory
// watchdog takes), `ageMs` old when the heartbeat left. Required: ageMs, tasks. Bounded: at most
// kMaxGpuMemoryTasks tasks, each at most once and with at most kMaxGpuMemoryGpus GPUs, each at most once;
// numbers are integers from 0 (ageMs at most kMaxGpuMemoryAgeMs, bytes at most kMaxGpuMemoryBytes); a task ARN
// is at most kMaxGpuMemoryNameBytes bytes, a GPU id too.
struct GpuMemoryReading {
  int64_t age_ms = 0;
  std::vector<TaskGpuMemory> tasks;
  bool operator==(const GpuMemoryReading&) const = default;
};
inline constexpr size_t kMaxGpuMemoryTasks = 1024;
inline constexpr size_t kMaxGpuMemoryGpus = 32;
inline constexpr size_t kMaxGpuMemoryNameBytes = 256;
inline constexpr int64_t kMaxGpuMemoryAgeMs = 24LL * 3600 * 1000;
inline constexpr int64_t kMaxGpuMemoryBytes = int64_t{1} << 50;  // 1 PiB
// Heartbeat: {"type":"heartbeat","id":n,"impaired":b,"heldGpus":[...],"gpuMemoryUsed"?}. Required: id.
// gpuMemoryUsed is optional and additive: an agent without a reading (none taken, NVML unreadable, an older
// agent) leaves it out, and a server older than the field ignores it. A present but malformed or oversize one is
// refused alone: the heartbeat parses without it (gpu_memory stays absent) and gpu_memory_refused says why.
struct Heartbeat {
  int64_t id = 0;
  bool impaired = false;
  std::vector<std::string> held_gpus;
  std::optional<GpuMemoryReading> gpu_memory = std::nullopt;
  std::string gpu_memory_refused = {};  // parsing's note, never serialized, so not compared
  bool operator==(const Heartbeat& o) const {
    return id == o.id && impaired == o.impaired && held_gpus == o.held_gpus && gpu_memory == o.gpu_memory;
  }
};
// ParseGpuMemoryReading reads a "gpuMemoryUsed" value (`path` names it in errors), holding it to the bounds above.
Result<GpuMemoryReading> ParseGpuMemoryReading(const Json& j, const std::string& path);
// HelloPart: a hello larger than kHelloPartBytes (an agent with hundreds of tasks of many containers) goes as
// parts, {"type":"helloPart","tasks":[...],"impaired":b,"last":b}, each one message within the server's message
// limit. The server gathers the parts' tasks on the connection and takes the last part as the hello. Parts have
// a type of their own so that a server that does not know them answers each with an error and never mistakes
// one part for the whole hello (its reconcile would stop the tasks of the other parts).
struct HelloPart {
  std::vector<TaskReport> tasks;
  bool impaired = false;
  bool last = false;
  bool operator==(const HelloPart&) const = default;
};
inline constexpr size_t kHelloPartBytes = 256 << 10;
// Ack, both directions: {"type":"ack","id":n}. The agent acks a push once recorded; the server acks a report once
// durable and a heartbeat once applied. Required: id.
struct Ack {
  int64_t id = 0;
  bool operator==(const Ack&) const = default;
};

// ---- server -> agent -----------------------------------------------------------------------------------------

// epoch (welcome, assign, stop): the leadership term of the server that sent it (docs/ha.md), a number that only
// grows; absent (nullopt) when the server has none (a single server on SQLite, or a server older than the field).
// Serialize leaves it out when absent, so a peer of any version parses the message. An agent never acts on a
// push whose epoch is lower than the highest it has seen (agent/server_connection.h).

// Welcome answers the hello: {"type":"welcome","assign":[...],"stop":[...],"heartbeatIntervalMs":n,"epoch"?}.
struct Welcome {
  std::vector<Assignment> assign;
  std::vector<StopOrder> stop;
  int64_t heartbeat_interval_ms = 5000;
  std::optional<int64_t> epoch = std::nullopt;
  bool operator==(const Welcome&) const = default;
};
// Assign: {"type":"assign","id":n,"task":{...},"epoch"?}. Required: task. id 0 = none given (nothing to ack).
struct Assign {
  int64_t id = 0;
  Assignment task;
  std::optional<int64_t> epoch = std::nullopt;
  bool operator==(const Assign&) const = default;
};
// Stop: {"type":"stop","id":n,"taskArn","reason","epoch"?}. Required: taskArn. id 0 = none given (nothing to ack).
struct Stop {
  int64_t id = 0;
  StopOrder order;
  std::optional<int64_t> epoch = std::nullopt;
  bool operator==(const Stop&) const = default;
};
// Error answers a message the server could not apply: {"type":"error","message","code"?,"id"?} (id: the
// message's; code: why, RefusalCode's name, left out when none; one the agent does not know reads as none).
struct Error {
  std::optional<int64_t> id;
  std::string message;
  std::optional<RefusalCode> code = std::nullopt;
  bool operator==(const Error&) const = default;
};

// ---- log requests (server -> agent, answered agent -> server) --------------------------------------------------

// LogsRequest asks for one page of a container's output stream (agent/log_store.h):
// {"type":"logs","id":n,"taskArn","containerName","forward":b,"position"?,"startTime"?,"endTime"?,"terms":[...],
//  "limit":n,"maxBytes":n}. Forward: the events at or after `position` (none: the head); backward: the newest
// ones ending at or before it (none: the end). Only events with startTime <= timestamp < endTime whose message
// holds every term. Required: id, taskArn, containerName. The id is the server's correlation id: the agent
// answers a LogsAnswer with it, and a request is never acked or re-sent.
struct LogsRequest {
  int64_t id = 0;
  std::string task_arn, container_name;
  bool forward = true;
  std::optional<int64_t> position;
  std::optional<int64_t> start_ms, end_ms;
  std::vector<std::string> terms;
  int64_t limit = 10000;
  int64_t max_bytes = 512 * 1024;
  bool operator==(const LogsRequest&) const = default;
};
// LogLine, wire {"timestamp","message"}: one event.
struct LogLine {
  int64_t timestamp = 0;
  std::string message;
  bool operator==(const LogLine&) const = default;
};
// LogsAnswer: {"type":"logEvents","id":n,"found":b,"events":[...],"nextForward":n,"nextBackward":n,"atEnd":b,
// "error"?}. found: the agent has the stream; error: it could not read it (found is then false). Required: id.
struct LogsAnswer {
  int64_t id = 0;
  bool found = false;
  std::vector<LogLine> events;
  int64_t next_forward = 0, next_backward = 0;
  bool at_end = false;
  std::string error;
  bool operator==(const LogsAnswer&) const = default;
};
// kLogsAnswerBytes: what a LogsRequest's maxBytes may ask at most, so the answer fits a channel message (1 MiB).
inline constexpr int64_t kLogsAnswerBytes = 768 * 1024;

using AgentMessage = std::variant<Hello, StateReport, Heartbeat, Ack, HelloPart, LogsAnswer>;
using ServerMessage = std::variant<Welcome, Assign, Stop, Ack, Error, LogsRequest>;

Result<AgentMessage> ParseAgentMessage(std::string_view text);
Result<ServerMessage> ParseServerMessage(std::string_view text);
std::string Serialize(const AgentMessage& m);
std::string Serialize(const ServerMessage& m);
// SerializeHello: the hello as one "hello" message when it fits in `max_bytes` (what every agent sent before
// parts, so a server of any version understands it), else as "helloPart" messages of at most `max_bytes` each
// (a single task larger than that goes alone in its part).
std::vector<std::string> SerializeHello(const Hello& hello, size_t max_bytes = kHelloPartBytes);

// ParseJsonBounded parses `text` refusing nesting deeper than kMaxJsonDepth before building it; the error says
// what is wrong (not JSON, too deep). The message parsers start with it.
Result<Json> ParseJsonBounded(std::string_view text);
// Dump is Json::dump with invalid UTF-8 replaced (never throws).
std::string Dump(const Json& j);

// ---- Json converters (the agent persists Assignment and TaskReport in its state directory with them) ----------
// `path` names the value in error messages ("hello.tasks[2]", "record.assignment").
Json ToJson(const ContainerReport& c);
Json ToJson(const TaskReport& r);
Result<TaskReport> TaskReportFromJson(const Json& j, const std::string& path);
Json ToJson(const AssignedContainer& c);
Json ToJson(const Assignment& a);
Result<Assignment> AssignmentFromJson(const Json& j, const std::string& path);
Json ToJson(const StopOrder& s);
Result<StopOrder> StopOrderFromJson(const Json& j, const std::string& path);

}  // namespace gpupack::protocol
