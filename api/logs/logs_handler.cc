#include "api/logs/logs_handler.h"

#include <algorithm>
#include <map>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "api/http/errors.h"
#include "api/http/json_call.h"
#include "api/logs/log_index.h"
#include "api/logs/logs_dialect.h"
#include "base/json_fields.h"
#include "engine/core/read_view.h"
#include "protocol/log_limits.h"

namespace gpupack::api {

namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxEvents = 10000;             // GetLogEvents' and FilterLogEvents' largest limit
constexpr size_t kResponseBytes = 900 * 1024;     // of messages in one answer (CloudWatch: 1 MB)
constexpr int64_t kDescribeLimit = 50;            // DescribeLogStreams' and DescribeLogGroups' largest limit
constexpr size_t kMaxStreamRequests = 100;        // pages one FilterLogEvents asks of agents
constexpr std::chrono::seconds kFilterCallTime{2}; // after which one FilterLogEvents asks no more pages

LogsReply Fail(const EcsError& error, const std::string& message) {
  return LogsReply{error.http_status, ErrorBody(error, message), error.type};
}
LogsReply InvalidParameter(const std::string& m) { return Fail(ToEcsError(ErrorCode::kInvalidParameter), m); }
LogsReply NotFound(const std::string& m) { return Fail(kLogsResourceNotFound, m); }
LogsReply Unavailable(const std::string& m) { return Fail(kLogsServiceUnavailable, m); }
LogsReply Answer(const Json& body) {
  return LogsReply{200, body.dump(-1, ' ', false, Json::error_handler_t::replace), ""};
}

// ContainsIgnoringCase: whether `pattern` occurs in `text`, ASCII letters compared without case.
bool ContainsIgnoringCase(const std::string& text, const std::string& pattern) {
  auto lower = [](unsigned char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); };
  return std::search(text.begin(), text.end(), pattern.begin(), pattern.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != text.end();
}

// ---- request fields ---------------------------------------------------------------------------------------------

// Fields reads a request's members with base's reader in CloudWatch Logs' words (logs_dialect.h), keeping the
// first problem (an InvalidParameterException).
struct Fields : JsonFields {
  explicit Fields(const Json& body) : JsonFields(body, JsonPath(), LogsDialect()) {}

  std::optional<std::string> Text(const char* key) {
    std::optional<std::string> v;
    String(key, v);
    return v;
  }
  std::string Required(const char* key) {
    std::string v;
    String(key, v, /*required=*/true);
    return v;
  }
  std::optional<int64_t> Integer(const char* key, int64_t min, int64_t max) {
    std::optional<int64_t> v;
    Int64(key, v, min, max);
    return v;
  }
  bool Flag(const char* key, bool fallback) {
    Bool(key, fallback);
    return fallback;
  }
  std::vector<std::string> List(const char* key) {
    std::vector<std::string> v;
    Strings(key, v, 1000);
    return v;
  }
  // Error: the kept problem as the answer.
  LogsReply Error() const { return InvalidParameter(status().message()); }

  // Group: logGroupName, or logGroupIdentifier (a name or an ARN "...:log-group:NAME[:*]").
  std::string Group() {
    auto name = Text("logGroupName");
    auto id = Text("logGroupIdentifier");
    if (!ok()) return "";
    if (name && id) {
      Take(Status::InvalidParameter("give logGroupName or logGroupIdentifier, not both"));
      return "";
    }
    if (name) return *name;
    if (!id) {
      Take(Status::InvalidParameter("1 validation error detected: logGroupName is required"));
      return "";
    }
    std::string group = *id;
    if (const size_t at = group.find(":log-group:"); group.rfind("arn:", 0) == 0 && at != std::string::npos) {
      group = group.substr(at + 11);
      if (group.ends_with(":*")) group.resize(group.size() - 2);
    }
    return group;
  }
};

// ---- tokens -----------------------------------------------------------------------------------------------------

std::string PositionToken(char direction, int64_t position) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%c/%020lld", direction, static_cast<long long>(position));
  return buf;
}

// ParsePositionToken: "f/<n>" or "b/<n>".
std::optional<std::pair<bool, int64_t>> ParsePositionToken(const std::string& token) {
  if (token.size() < 3 || (token[0] != 'f' && token[0] != 'b') || token[1] != '/') return std::nullopt;
  int64_t v = 0;
  for (size_t i = 2; i < token.size(); ++i) {
    if (token[i] < '0' || token[i] > '9' || v > (INT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + (token[i] - '0');
  }
  return std::make_pair(token[0] == 'f', v);
}

// FilterToken: "<position>:<stream name>" (where FilterLogEvents goes on), and its reading.
std::string FilterToken(const std::string& stream, int64_t position) { return std::to_string(position) + ":" + stream; }
std::optional<std::pair<std::string, int64_t>> ParseFilterToken(const std::string& token) {
  const size_t colon = token.find(':');
  if (colon == 0 || colon == std::string::npos || colon > 19) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 0; i < colon; ++i) {
    if (token[i] < '0' || token[i] > '9') return std::nullopt;
    v = v * 10 + (token[i] - '0');
  }
  return std::make_pair(token.substr(colon + 1), v);
}

// ParseFilterPattern: plain terms, each matched as a case-sensitive substring (every one must occur); a quoted
// term may hold spaces. CloudWatch's other pattern forms (JSON {...}, space-delimited [...], ?alternatives and
// -exclusions) are refused rather than misread.
std::optional<std::vector<std::string>> ParseFilterPattern(const std::string& pattern, std::string& why) {
  std::vector<std::string> terms;
  if (pattern.size() > protocol::kMaxFilterPatternBytes) {
    why = "1 validation error detected: Value at 'filterPattern' failed to satisfy constraint: Member must have "
          "length less than or equal to " + std::to_string(protocol::kMaxFilterPatternBytes);
    return std::nullopt;
  }
  size_t i = 0;
  while (i < pattern.size()) {
    while (i < pattern.size() && std::isspace(static_cast<unsigned char>(pattern[i]))) ++i;
    if (i >= pattern.size()) break;
    const char c = pattern[i];
    if (terms.empty() && (c == '{' || c == '[')) {
      why = "filterPattern: only plain terms are supported (no JSON or space-delimited patterns)";
      return std::nullopt;
    }
    if (c == '?' || c == '-') {
      why = "filterPattern: only plain terms are supported (no ?alternatives or -exclusions)";
      return std::nullopt;
    }
    if (c == '"') {
      const size_t end = pattern.find('"', i + 1);
      if (end == std::string::npos) {
        why = "filterPattern: a quoted term is not closed";
        return std::nullopt;
      }
      if (end > i + 1) terms.push_back(pattern.substr(i + 1, end - i - 1));
      i = end + 1;
      continue;
    }
    size_t end = i;
    while (end < pattern.size() && !std::isspace(static_cast<unsigned char>(pattern[end]))) ++end;
    terms.push_back(pattern.substr(i, end - i));
    i = end;
  }
  if (terms.size() > protocol::kMaxLogTerms) {
    why = "filterPattern: at most " + std::to_string(protocol::kMaxLogTerms) + " terms, got " +
          std::to_string(terms.size());
    return std::nullopt;
  }
  return terms;
}

std::string AgentAway(const StreamRef& s, const Status& why) {
  return "the agent that holds log stream " + s.name + " (" + s.instance_arn + ") is not available: " + why.message();
}

// ---- FilterLogEvents: streams one after another, a page of each from its agent ----------------------------------

struct FilterRun {
  AgentChannel* channel;
  std::chrono::milliseconds timeout;
  std::vector<StreamRef> streams;
  size_t index = 0;
  std::optional<int64_t> position;  // in streams[index]
  std::vector<std::string> terms;
  std::optional<int64_t> start_ms, end_ms;
  size_t limit = kMaxEvents;
  size_t bytes = 0;
  size_t requests = 0;                              // asked of agents in this call
  std::chrono::steady_clock::time_point deadline;   // no request starts after it
  Json events = Json::array();
  LogsHandler::Done done;
};

void Finish(const std::shared_ptr<FilterRun>& run) {
  Json body = {{"events", std::move(run->events)}, {"searchedLogStreams", Json::array()}};
  if (run->index < run->streams.size())
    body["nextToken"] = FilterToken(run->streams[run->index].name, run->position.value_or(0));
  run->done(Answer(body));
}

void Step(const std::shared_ptr<FilterRun>& run) {
  while (run->index < run->streams.size() && run->streams[run->index].instance_arn.empty()) {
    ++run->index;  // never placed: no output
    run->position.reset();
  }
  if (run->index >= run->streams.size() || run->events.size() >= run->limit || run->bytes + 1024 > kResponseBytes)
    return Finish(run);
  // One call asks at most kMaxStreamRequests pages and starts none after its time is up: the rest is the
  // nextToken's (CloudWatch answers partial pages with a token too). The first request always goes, so a
  // token always moves on.
  if (run->requests > 0 &&
      (run->requests >= kMaxStreamRequests || std::chrono::steady_clock::now() >= run->deadline))
    return Finish(run);
  ++run->requests;
  const StreamRef& s = run->streams[run->index];
  protocol::LogsRequest req;
  req.task_arn = s.task_arn;
  req.container_name = s.container;
  req.forward = true;
  req.position = run->position;
  req.start_ms = run->start_ms;
  req.end_ms = run->end_ms;
  req.terms = run->terms;
  req.limit = static_cast<int64_t>(run->limit - run->events.size());
  req.max_bytes = std::min<int64_t>(protocol::kLogsAnswerBytes, static_cast<int64_t>(kResponseBytes - run->bytes));
  run->channel->RequestLogs(s.instance_arn, std::move(req), run->timeout, [run](Result<protocol::LogsAnswer> r) {
    const StreamRef& s = run->streams[run->index];
    if (!r.ok()) return run->done(Unavailable(AgentAway(s, r.status())));
    if (!r->error.empty()) return run->done(Unavailable(AgentAway(s, Status::Server(r->error))));
    for (size_t i = 0; i < r->events.size(); ++i) {
      const protocol::LogLine& e = r->events[i];
      run->bytes += e.message.size() + 26;
      run->events.push_back({{"logStreamName", s.name},
                             {"timestamp", e.timestamp},
                             {"message", e.message},
                             {"ingestionTime", e.timestamp},
                             {"eventId", s.name + "/" + std::to_string(r->next_backward) + "/" + std::to_string(i)}});
    }
    if (r->found && !r->at_end) {  // the page ended inside this stream: the token goes on from there
      run->position = r->next_forward;
      return Finish(run);
    }
    ++run->index;
    run->position.reset();
    Step(run);
  });
}

}  // namespace

LogsHandler::LogsHandler(ControlPlane& control_plane, AgentChannel& channel, std::chrono::milliseconds agent_timeout)
    : cp_(control_plane), channel_(channel), agent_timeout_(agent_timeout) {}

void LogsHandler::Serve(const HttpRequest& req, const SigV4Result& who, const std::string& request_id,
                        std::chrono::steady_clock::time_point start, const CallGate& gate, Responder respond) const {
  const std::string* target = req.Header("x-amz-target");
  const std::string name = target != nullptr && target->rfind(kLogsTargetPrefix, 0) == 0
                               ? target->substr(std::char_traits<char>::length(kLogsTargetPrefix))
                               : "";
  const std::string operation = "Logs." + name;
  auto reply = [&gate, operation, request_id, start, respond](LogsReply r) {
    HttpResponse resp = JsonResponse(r.http_status, std::move(r.body), request_id);
    if (!r.error_type.empty()) resp.headers.emplace_back("x-amzn-ErrorType", r.error_type);
    gate.Observe(LogsHandler::Knows(operation.substr(5)) ? operation : "unknown", resp.status,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    respond(std::move(resp));
  };
  if (!Knows(name)) {
    Handle(name, Json::object(), reply);  // answers UnknownOperationException
    return;
  }
  if (!gate.Authorize(who, name, req, request_id, respond)) return;
  auto body = ParseJsonBody(req.body, protocol::kMaxJsonDepth);
  if (!body.ok()) {
    reply(InvalidParameter(body.status().message()));
    return;
  }
  Handle(name, *body, reply);
}

bool LogsHandler::Knows(const std::string& operation) {
  return operation == "GetLogEvents" || operation == "FilterLogEvents" || operation == "DescribeLogStreams" ||
         operation == "DescribeLogGroups";
}

void LogsHandler::Handle(const std::string& operation, const Json& body, Done done) const {
  if (operation == "GetLogEvents") return GetLogEvents(body, std::move(done));
  if (operation == "FilterLogEvents") return FilterLogEvents(body, std::move(done));
  if (operation == "DescribeLogStreams") return DescribeLogStreams(body, std::move(done));
  if (operation == "DescribeLogGroups") return DescribeLogGroups(body, std::move(done));
  done(Fail(ToEcsError(ErrorCode::kUnknownOperation),
            "gpupack serves GetLogEvents, FilterLogEvents, DescribeLogStreams and DescribeLogGroups of CloudWatch "
            "Logs, not " +
                operation.substr(0, 100)));
}

void LogsHandler::GetLogEvents(const Json& body, Done done) const {
  Fields f(body);
  const std::string group = f.Group();
  const std::string stream_name = f.Required("logStreamName");
  const auto start = f.Integer("startTime", 0, INT64_MAX);
  const auto end = f.Integer("endTime", 0, INT64_MAX);
  const auto token = f.Text("nextToken");
  const auto limit = f.Integer("limit", 1, kMaxEvents);
  const bool from_head = f.Flag("startFromHead", false);
  f.Flag("unmask", false);
  if (!f.ok()) return done(f.Error());
  std::optional<std::pair<bool, int64_t>> position;
  if (token) {
    position = ParsePositionToken(*token);
    if (!position) return done(InvalidParameter("The specified nextToken is invalid."));
  }
  const auto view = cp_.applier().View();
  const auto catalog = index_.Catalog(*view);
  if (!GroupExists(*view, *catalog, group)) return done(NotFound("The specified log group does not exist."));
  const std::optional<StreamRef> found = FindStream(*view, *catalog, group, stream_name);
  if (!found) return done(NotFound("The specified log stream does not exist."));
  const StreamRef s = *found;
  if (s.instance_arn.empty()) {  // not placed yet: no output
    return done(Answer({{"events", Json::array()},
                        {"nextForwardToken", PositionToken('f', 0)},
                        {"nextBackwardToken", PositionToken('b', 0)}}));
  }
  protocol::LogsRequest req;
  req.task_arn = s.task_arn;
  req.container_name = s.container;
  req.forward = position ? position->first : from_head;
  if (position) req.position = position->second;
  req.start_ms = start;
  req.end_ms = end;
  req.limit = limit.value_or(kMaxEvents);
  req.max_bytes = protocol::kLogsAnswerBytes;
  channel_.RequestLogs(s.instance_arn, std::move(req), agent_timeout_, [s, done](Result<protocol::LogsAnswer> r) {
    if (!r.ok()) return done(Unavailable(AgentAway(s, r.status())));
    if (!r->error.empty()) return done(Unavailable(AgentAway(s, Status::Server(r->error))));
    Json events = Json::array();
    for (const protocol::LogLine& e : r->events)
      events.push_back({{"timestamp", e.timestamp}, {"message", e.message}, {"ingestionTime", e.timestamp}});
    done(Answer({{"events", std::move(events)},
                 {"nextForwardToken", PositionToken('f', r->next_forward)},
                 {"nextBackwardToken", PositionToken('b', r->next_backward)}}));
  });
}

void LogsHandler::FilterLogEvents(const Json& body, Done done) const {
  Fields f(body);
  const std::string group = f.Group();
  const std::vector<std::string> names = f.List("logStreamNames");
  const auto prefix = f.Text("logStreamNamePrefix");
  const auto start = f.Integer("startTime", 0, INT64_MAX);
  const auto end = f.Integer("endTime", 0, INT64_MAX);
  const auto pattern = f.Text("filterPattern");
  const auto token = f.Text("nextToken");
  const auto limit = f.Integer("limit", 1, kMaxEvents);
  f.Flag("interleaved", true);
  f.Flag("unmask", false);
  if (!f.ok()) return done(f.Error());
  if (!names.empty() && prefix) return done(InvalidParameter("give logStreamNames or logStreamNamePrefix, not both"));
  std::string why;
  auto terms = ParseFilterPattern(pattern.value_or(""), why);
  if (!terms) return done(InvalidParameter(why));
  std::optional<std::pair<std::string, int64_t>> resume;
  if (token) {
    resume = ParseFilterToken(*token);
    if (!resume) return done(InvalidParameter("The specified nextToken is invalid."));
  }
  const auto view = cp_.applier().View();
  const auto catalog = index_.Catalog(*view);
  if (!GroupExists(*view, *catalog, group)) return done(NotFound("The specified log group does not exist."));
  std::vector<StreamRef> streams;
  if (!names.empty()) {  // each named stream found directly, not by listing the group
    for (const std::string& name : std::set<std::string>(names.begin(), names.end()))
      if (auto s = FindStream(*view, *catalog, group, name)) streams.push_back(std::move(*s));
  } else {
    streams = GroupStreams(*view, *catalog, group);
    if (prefix) std::erase_if(streams, [&](const StreamRef& s) { return s.name.rfind(*prefix, 0) != 0; });
  }
  auto run = std::make_shared<FilterRun>();
  run->channel = &channel_;
  run->timeout = agent_timeout_;
  run->streams = std::move(streams);
  run->terms = std::move(*terms);
  run->start_ms = start;
  run->end_ms = end;
  run->limit = static_cast<size_t>(limit.value_or(kMaxEvents));
  run->done = std::move(done);
  run->deadline = std::chrono::steady_clock::now() + kFilterCallTime;
  if (resume) {
    while (run->index < run->streams.size() && run->streams[run->index].name < resume->first) ++run->index;
    if (run->index < run->streams.size() && run->streams[run->index].name == resume->first)
      run->position = resume->second;
  }
  Step(run);
}

void LogsHandler::DescribeLogStreams(const Json& body, Done done) const {
  Fields f(body);
  const std::string group = f.Group();
  const auto prefix = f.Text("logStreamNamePrefix");
  const auto order = f.Text("orderBy");
  const bool descending = f.Flag("descending", false);
  const auto token = f.Text("nextToken");
  const auto limit = f.Integer("limit", 1, kDescribeLimit);
  if (!f.ok()) return done(f.Error());
  if (order && *order != "LogStreamName" && *order != "LastEventTime")
    return done(InvalidParameter("orderBy must be LogStreamName or LastEventTime"));
  const bool by_time = order && *order == "LastEventTime";
  if (by_time && prefix) return done(InvalidParameter("Cannot order by LastEventTime with a logStreamNamePrefix."));
  const auto view = cp_.applier().View();
  const auto catalog = index_.Catalog(*view);
  if (!GroupExists(*view, *catalog, group)) return done(NotFound("The specified log group does not exist."));
  std::vector<StreamRef> streams = GroupStreams(*view, *catalog, group);
  if (prefix) std::erase_if(streams, [&](const StreamRef& s) { return s.name.rfind(*prefix, 0) != 0; });
  // LastEventTime orders by the streams' tasks' creation (the server does not ask every agent for its last event).
  if (by_time) {
    std::stable_sort(streams.begin(), streams.end(),
                     [](const StreamRef& a, const StreamRef& b) { return a.created_at < b.created_at; });
  }
  if (descending) std::reverse(streams.begin(), streams.end());
  // The token is how many streams of this order came before (a stream that appears meanwhile may shift a page).
  size_t from = 0;
  if (token) {
    try {
      from = std::stoul(*token);
    } catch (const std::exception&) {
      return done(InvalidParameter("The specified nextToken is invalid."));
    }
  }
  const size_t count = static_cast<size_t>(limit.value_or(kDescribeLimit));
  Json out = Json::array();
  for (size_t i = from; i < streams.size() && i < from + count; ++i) {
    const StreamRef& s = streams[i];
    out.push_back({{"logStreamName", s.name}, {"creationTime", s.created_at}, {"arn", s.arn}, {"storedBytes", 0}});
  }
  Json answer = {{"logStreams", std::move(out)}};
  if (from + count < streams.size()) answer["nextToken"] = std::to_string(from + count);
  done(Answer(answer));
}

void LogsHandler::DescribeLogGroups(const Json& body, Done done) const {
  Fields f(body);
  const auto prefix = f.Text("logGroupNamePrefix");
  const auto pattern = f.Text("logGroupNamePattern");
  const auto token = f.Text("nextToken");
  const auto limit = f.Integer("limit", 1, kDescribeLimit);
  const std::vector<std::string> identifiers = f.List("logGroupIdentifiers");
  f.Flag("includeLinkedAccounts", false);
  const auto log_class = f.Text("logGroupClass");
  if (!f.ok()) return done(f.Error());
  if (prefix && pattern)
    return done(InvalidParameter("LogGroupNamePrefix and LogGroupNamePattern are mutually exclusive."));
  if (log_class && *log_class != "STANDARD" && *log_class != "INFREQUENT_ACCESS")
    return done(InvalidParameter("logGroupClass must be STANDARD or INFREQUENT_ACCESS"));
  // The token names the last group of the page before ("g/<name>"): the next page starts after it, so a group
  // that appears or goes meanwhile shifts nothing.
  std::optional<std::string> after;
  if (token) {
    if (token->rfind("g/", 0) != 0) return done(InvalidParameter("The specified nextToken is invalid."));
    after = token->substr(2);
  }
  const auto view = cp_.applier().View();
  const std::map<std::string, GroupInfo> groups = AllGroups(*view, *index_.Catalog(*view));
  const size_t count = static_cast<size_t>(limit.value_or(kDescribeLimit));
  Json out = Json::array();
  std::optional<std::string> last;
  auto it = after ? groups.upper_bound(*after) : groups.begin();
  for (; it != groups.end(); ++it) {
    const std::string& name = it->first;
    if (prefix && name.rfind(*prefix, 0) != 0) continue;
    if (pattern && !ContainsIgnoringCase(name, *pattern)) continue;
    if (!identifiers.empty() && std::find_if(identifiers.begin(), identifiers.end(), [&](const std::string& id) {
          return id == name || id.ends_with(":log-group:" + name) || id.ends_with(":log-group:" + name + ":*");
        }) == identifiers.end())
      continue;
    // Only gpupack's own class: every group is STANDARD; INFREQUENT_ACCESS lists none.
    if (log_class && *log_class != "STANDARD") continue;
    if (out.size() == count) {
      last = out.back()["logGroupName"].get<std::string>();
      break;
    }
    const GroupInfo& g = it->second;
    const std::string arn = "arn:aws:logs:" + g.region + ":" + g.account + ":log-group:" + name;
    out.push_back({{"logGroupName", name},
                   {"creationTime", g.created_at},
                   {"metricFilterCount", 0},
                   {"arn", arn + ":*"},
                   {"logGroupArn", arn},
                   {"storedBytes", 0},
                   {"logGroupClass", "STANDARD"}});
  }
  Json answer = {{"logGroups", std::move(out)}};
  if (last) answer["nextToken"] = "g/" + *last;
  done(Answer(answer));
}

}  // namespace gpupack::api
