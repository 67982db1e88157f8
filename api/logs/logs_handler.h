// LogsHandler: the CloudWatch Logs JSON 1.1 API over the containers' output, served on the ECS port
// (`POST /`, `X-Amz-Target: Logs_20140328.<operation>`; docs/api.md "Logs"). It answers GetLogEvents,
// FilterLogEvents, DescribeLogStreams and DescribeLogGroups (which log tools call first); the events stay on the
// agent that ran the task (agent/log_store.h) and are fetched over the agent channel (AgentChannel::RequestLogs),
// a page per request.
//
// Names and where groups and streams are found: log_index.h. A stream exists while the server keeps its task
// (STOPPED tasks: the applier's retention); a group while a task definition names it, and "/gpupack/<cluster>"
// while the cluster exists.
//
// Bounds (docs/api.md "Logs"): a filterPattern of at most protocol::kMaxFilterPatternBytes and kMaxLogTerms
// terms (InvalidParameterException past them); one FilterLogEvents asks agents for at most 100 pages and starts
// none after 2 s, answering a nextToken for the rest; each page costs its agent a bounded scan (log_store.h).
//
// Errors (api/http/errors.h): ResourceNotFoundException (unknown group or stream), InvalidParameterException (a
// bad field or token, or a filter pattern beyond plain terms), ServiceUnavailableException (HTTP 503: the agent
// that holds the stream is not connected or did not answer within `agent_timeout`).
//
// Thread-safe: it reads the control plane's read view and calls the channel; nothing of its own changes.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/auth/call_gate.h"
#include "api/channel/agent_channel.h"
#include "api/http/http_server.h"
#include "api/logs/log_index.h"
#include "engine/control_plane.h"

namespace gpupack::api {

inline constexpr const char* kLogsTargetPrefix = "Logs_20140328.";

// LogsReply: one answer: the HTTP status, the JSON body, and for an error its __type (else empty).
struct LogsReply {
  int http_status = 200;
  std::string body;
  std::string error_type;
};

class LogsHandler {
 public:
  using Done = std::function<void(LogsReply)>;

  LogsHandler(ControlPlane& control_plane, AgentChannel& channel,
              std::chrono::milliseconds agent_timeout = std::chrono::seconds(5));

  // Serve answers one call over HTTP (`POST /` with a Logs target; `who` authenticated it when the server checks
  // signatures): authorized like an ECS read through `gate`, answered in the same JSON 1.1 shape and counted in
  // the same metrics (operation "Logs.<name>"). `respond` is called once, maybe on another thread.
  void Serve(const HttpRequest& req, const SigV4Result& who, const std::string& request_id,
             std::chrono::steady_clock::time_point start, const CallGate& gate, Responder respond) const;

  // Knows: GetLogEvents, FilterLogEvents, DescribeLogStreams, DescribeLogGroups.
  static bool Knows(const std::string& operation);
  // Handle runs one operation (the target without kLogsTargetPrefix) and calls `done` once, maybe on another
  // thread (the one that got the agent's answer).
  void Handle(const std::string& operation, const nlohmann::json& body, Done done) const;

 private:
  void GetLogEvents(const nlohmann::json& body, Done done) const;
  void FilterLogEvents(const nlohmann::json& body, Done done) const;
  void DescribeLogStreams(const nlohmann::json& body, Done done) const;
  void DescribeLogGroups(const nlohmann::json& body, Done done) const;

  ControlPlane& cp_;
  AgentChannel& channel_;
  const std::chrono::milliseconds agent_timeout_;
  LogIndex index_;  // the catalog of log groups of the last view read (thread-safe)
};

}  // namespace gpupack::api
