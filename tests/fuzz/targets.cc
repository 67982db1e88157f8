#include "tests/fuzz/targets.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "api/channel/agent_channel.h"
#include "api/ecs/codec.h"
#include "api/ecs/ecs_dialect.h"
#include "base/json_fields.h"
#include "cli/ecs_model.h"
#include "engine/control_plane.h"
#include "api/ecs/ecs_handler.h"
#include "api/ecs/router.h"
#include "api/paths.h"
#include "api/http/http_server.h"
#include "api/server_metrics.h"
#include "protocol/messages.h"
#include "protocol/sigv4_verifier.h"
#include "scheduler/placement.h"
#include "scheduler/query.h"
#include "scheduler/validation.h"
#include "storage/group_committer.h"
#include "storage/memory_store.h"
#include "storage/serialize.h"

namespace gpupack::fuzz {

using api::Json;
using api::OperationResult;

namespace {

// ---- shared helpers -----------------------------------------------------------------------------------------

constexpr size_t kMaxLines = 64;          // steps per operations/channel input (bounds the time per input)
constexpr EpochMs kStart = 1'700'000'000'000;
constexpr EpochMs kAdvanceMs = 2 * 3'600'000;  // `!advance`: past the STOPPED-task retention (1 h)

// Fail reports a broken invariant and aborts, so libFuzzer (or the regression test) records a crash.
[[noreturn]] void Fail(const std::string& what, const std::string& detail = "") {
  std::fprintf(stderr, "\n*** fuzz invariant broken: %s\n%s\n", what.c_str(), detail.substr(0, 4000).c_str());
  std::fflush(stderr);
  std::abort();
}

void QuietLogs() {
  static const bool once = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)once;
}

std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// ParseJson parses like the server does (api/http/json_call.cc ParseJsonBody): no exceptions, nesting limited to
// kMaxJsonDepth. Returns a discarded value when the text is not acceptable JSON.
Json ParseJson(std::string_view text) {
  bool too_deep = false;
  Json::parser_callback_t cb = [&](int depth, Json::parse_event_t, Json&) {
    if (depth > api::kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  Json j = Json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
  if (too_deep) return Json(Json::value_t::discarded);
  return j;
}

std::vector<std::string_view> Lines(std::string_view in) {
  std::vector<std::string_view> out;
  while (!in.empty() && out.size() < kMaxLines) {
    size_t nl = in.find('\n');
    std::string_view line = in.substr(0, nl);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (!line.empty()) out.push_back(line);
    if (nl == std::string_view::npos) break;
    in.remove_prefix(nl + 1);
  }
  return out;
}

// ---- query ----------------------------------------------------------------------------------------------------

struct QueryWorld {
  std::vector<ContainerInstance> instances;
  std::vector<InstanceLoad> loads;
};

const QueryWorld& TheQueryWorld() {
  static const QueryWorld world = [] {
    QueryWorld w;
    ContainerInstance a;
    a.arn = "arn:aws:ecs:us-east-1:000000000000:container-instance/default/aaaa";
    a.id = "aaaa";
    a.cluster = "default";
    a.ec2_instance_id = "i-0123456789abcdef0";
    a.instance_type = "g5.xlarge";
    a.agent_version = "1.2.3";
    a.registered_at = kStart;
    a.running_tasks_count = 2;
    a.attributes = {{"ecs.instance-type", "g5.xlarge"}, {"gpu", "a10g"}, {"stack", std::nullopt}, {"zone", "us-east-1a"}};
    ContainerInstance b = a;
    b.arn = "arn:aws:ecs:us-east-1:000000000000:container-instance/default/bbbb";
    b.id = "bbbb";
    b.ec2_instance_id = "i-00000000000000001";
    b.agent_connected = false;
    b.agent_version = "10.0";
    b.registered_at = kStart + 3'600'000;
    b.running_tasks_count = 0;
    b.attributes = {{"ecs.instance-type", "p4d.24xlarge"}, {"gpu", "a100"}, {"zone", "us-east-1b"}};
    ContainerInstance c;
    c.arn = "arn:aws:ecs:us-east-1:000000000000:container-instance/default/cccc";
    c.id = "cccc";
    c.cluster = "default";
    w.instances = {a, b, c};
    InstanceLoad la;
    la.group_counts = {{"family:mps", 2}, {"service:web", 1}};
    la.task_arns = {"t1", "t2", "t3"};
    w.loads = {la, InstanceLoad{}, InstanceLoad{}};
    return w;
  }();
  return world;
}

std::vector<bool> EvaluateAll(const query::Expression& e) {
  const QueryWorld& w = TheQueryWorld();
  std::vector<bool> out;
  for (size_t i = 0; i < w.instances.size(); ++i) out.push_back(query::Evaluate(e, w.instances[i], w.loads[i]));
  return out;
}

// ---- codec ----------------------------------------------------------------------------------------------------

const ArnContext kArn;

TaskDefinition OverrideTarget() {
  TaskDefinition td;
  td.family = "mps";
  td.revision = 1;
  ContainerDefinition main;
  main.name = "main";
  main.image = "train:1";
  main.memory = 512;
  ResourceRequirement gpu;
  gpu.type = "GPU";
  gpu.mps = MpsSharing{4096, 25};
  gpu.has_sharing_strategy = true;
  main.resource_requirements = {gpu};
  ContainerDefinition side;
  side.name = "side";
  side.image = "sidecar:1";
  side.cpu = 128;
  side.memory_reservation = 64;
  side.essential = false;
  td.containers = {main, side};
  return td;
}

void FuzzTaskDefinition(const Json& body) {
  auto td = api::ParseRegisterTaskDefinition(body);
  if (!td.ok()) {
    if (td.status().message().empty()) Fail("ParseRegisterTaskDefinition refused without a message");
    return;
  }
  // The store's document round trip is exact (storage/serialize.h).
  TaskDefinition back;
  Status s = storage_internal::FromDoc(storage_internal::ToDoc(*td), &back);
  if (!s.ok() || !(back == *td)) Fail("task definition does not survive ToDoc/FromDoc", Dump(body));
  if (!ValidateTaskDefinition(*td).ok()) return;
  TaskDemand demand = DemandOf(*td);
  if (demand.gpu_memory < 0 || demand.gpu_compute < 0 || demand.gpu_count < 0 || demand.cpu < 0 || demand.memory < 0)
    Fail("negative demand from a valid task definition", Dump(body));
  // What DescribeTaskDefinition answers can be registered again and asks for the same resources.
  Json rendered = api::ToJson(*td);
  auto again = api::ParseRegisterTaskDefinition(rendered);
  if (!again.ok()) Fail("a rendered task definition does not parse: " + again.status().message(), Dump(rendered));
  if (!ValidateTaskDefinition(*again).ok())
    Fail("a rendered task definition does not validate: " + ValidateTaskDefinition(*again).message(), Dump(rendered));
  if (!(DemandOf(*again) == demand)) Fail("a rendered task definition asks for other resources", Dump(rendered));
}

void FuzzOverride(const Json& body) {
  const Json& overrides = body.is_object() && body.contains("overrides") ? body["overrides"] : body;
  auto o = api::ParseTaskOverride(overrides, "overrides");
  if (!o.ok()) return;
  static const TaskDefinition td = OverrideTarget();
  if (!ValidateOverrides(td, *o).ok()) return;
  TaskDemand d = DemandOf(td, *o);
  if (d.cpu < 0 || d.memory < 0) Fail("negative demand from valid overrides", Dump(body));
}

void FuzzPlacement(const Json& body) {
  auto constraints = api::ParsePlacementConstraints(body, "placementConstraints");
  auto strategies = api::ParsePlacementStrategies(body, "placementStrategy");
  if (!constraints.ok() || !strategies.ok()) return;
  if (!ValidatePlacement(*constraints, *strategies).ok()) return;
  PlacementRequest req;
  req.cluster = "default";
  req.constraints = *constraints;
  req.strategies = *strategies;
  auto placer = Placer::Create(req);
  (void)placer;
}

void FuzzAttributes(const Json& body) {
  const Json& list = body.is_object() && body.contains("attributes") ? body["attributes"] : body;
  auto attrs = api::ParseAttributes(list, "attributes");
  if (attrs.ok())
    for (const auto& a : *attrs)
      if (a.name.empty()) Fail("ParseAttributes accepted an attribute without a name", Dump(body));
  (void)api::ParseTags(body);
}

// FuzzFields: the request parsers' member reads (base's JsonFields in ECS's words), each on a fresh reader.
void FuzzFields(const Json& body) {
  for (const char* key : {"cluster", "count", "force", "tasks", "nextToken", "maxResults"}) {
    std::optional<std::string> s;
    std::optional<int64_t> i;
    std::optional<bool> b;
    std::vector<std::string> list;
    JsonFields(body, JsonPath(), api::EcsDialect()).String(key, s);
    JsonFields ints(body, JsonPath(), api::EcsDialect());
    ints.Int64(key, i, JsonFields::kInt32Min, JsonFields::kInt32Max);
    if (ints.ok() && i && (*i > INT32_MAX || *i < INT32_MIN)) Fail("an Int32 read returned an out-of-range integer");
    if (!ints.ok() && ints.status().message().empty()) Fail("an Int32 read refused without a message");
    JsonFields(body, JsonPath(), api::EcsDialect()).Bool(key, b);
    JsonFields(body, JsonPath(), api::EcsDialect()).Strings(key, list, 1000);
  }
}

void FuzzReferences(std::string_view text) {
  const std::string ref(text);
  if (auto name = ClusterNameFrom(kArn, ref); name.ok()) {
    auto again = ClusterNameFrom(kArn, kArn.ClusterArn(*name));
    if (!again.ok() || *again != *name) Fail("cluster name does not round-trip through its ARN", ref);
  }
  for (const char* kind : {"task", "container-instance"}) {
    auto id = ResourceIdFrom(kArn, kind, ref);
    if (!id.ok()) continue;
    const std::string arn = std::string(kind) == "task" ? kArn.TaskArn("default", *id) : kArn.InstanceArn("default", *id);
    auto again = ResourceIdFrom(kArn, kind, arn);
    if (!again.ok() || *again != *id) Fail(std::string(kind) + " id does not round-trip through its ARN", ref);
  }
  if (auto r = TaskDefinitionRefFrom(kArn, ref); r.ok()) {
    if (r->revision < 0) Fail("negative task definition revision", ref);
    if (r->revision > 0) {
      auto again = TaskDefinitionRefFrom(kArn, kArn.TaskDefinitionArn(r->family, r->revision));
      if (!again.ok() || again->family != r->family || again->revision != r->revision)
        Fail("task definition reference does not round-trip through its ARN", ref);
    }
  }
}

// ---- the control plane fixture ------------------------------------------------------------------------------

// FakeConnection is the agent's end of one WebSocket: it records what the server sends.
class FakeConnection : public api::WebSocketConnection {
 public:
  void Send(std::string text) override {
    std::lock_guard lock(mu_);
    if (!closed_) sent_.push_back(std::move(text));
  }
  void Close() override {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  const std::string& remote_address() const override { return address_; }

  bool closed() const {
    std::lock_guard lock(mu_);
    return closed_;
  }
  std::vector<std::string> Take() {
    std::lock_guard lock(mu_);
    return std::exchange(sent_, {});
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> sent_;
  bool closed_ = false;
  const std::string address_ = "127.0.0.1:40000";
};

// Wait runs `start` with a Done callback and blocks until it is called (possibly on the committer thread).
template <typename Start>
OperationResult Wait(Start&& start) {
  std::promise<OperationResult> promise;
  auto future = promise.get_future();
  start([&promise](OperationResult r) { promise.set_value(std::move(r)); });
  return future.get();
}

// Harness: the fixture described in targets.h, the step interpreter and the invariant checks.
class Harness {
 public:
  // Harness loads the fixture (built once per process, see TheImage()) into a fresh store and control plane.
  explicit Harness(bool with_channel) : committer_(store_), cp_(Options(7), store_, committer_) {
    api::AddControlPlaneMetrics(metrics_, cp_, /*per_task=*/true);  // every family, the per-task ones included
    const Image& image = TheImage();
    WriteBatch batch;
    for (const auto& c : image.snapshot.clusters) batch.PutCluster(c);
    for (const auto& td : image.snapshot.task_definitions) batch.PutTaskDefinition(td);
    for (const auto& i : image.snapshot.instances) batch.PutInstance(i);
    for (const auto& t : image.snapshot.tasks) batch.PutTask(t);
    for (const auto& ct : image.snapshot.client_tokens) batch.PutClientToken(ct);
    if (Status s = store_.Commit(batch); !s.ok()) Fail("fixture: commit failed: " + s.message());
    if (Status s = cp_.Load(); !s.ok()) Fail("fixture: load failed: " + s.message());
    instances_ = image.instances;
    tasks_ = image.tasks;
    now_ = image.now;
    Hello(2);  // after a load the channel agent counts as away until it says hello
    if (with_channel) {
      // A heartbeat interval of an hour: the watchdog never closes the connection while an input runs.
      api::AgentChannelOptions options;
      options.heartbeat_interval = std::chrono::hours(1);
      options.push_ack_timeout = std::chrono::hours(1);  // nor re-sends or closes for an unacked push
      channel_ = std::make_unique<api::AgentChannel>(cp_, options);
      handler_ = channel_->Handler();
      Open(2);
    }
  }

  // Settle waits until every queued write has run on the writer thread and committed, and its answers were sent.
  void Settle() {
    cp_.applier().Drain();
    committer_.Flush();
  }

  ~Harness() {
    Settle();  // the committer's callbacks point at cp_
    channel_.reset();
    Settle();
  }

  api::ControlPlane& control_plane() { return cp_; }

  // Substitute replaces @I<d> and @T<d> by the ARNs known so far (unknown indexes stay as they are).
  std::string Substitute(std::string_view text) const {
    std::string out;
    out.reserve(text.size() + 64);
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '@' && i + 2 < text.size() && (text[i + 1] == 'I' || text[i + 1] == 'T') &&
          text[i + 2] >= '0' && text[i + 2] <= '9') {
        const auto& list = text[i + 1] == 'I' ? instances_ : tasks_;
        size_t n = static_cast<size_t>(text[i + 2] - '0');
        if (n < list.size()) {
          out += list[n];
          i += 2;
          continue;
        }
      }
      out.push_back(text[i]);
    }
    return out;
  }

  // Op runs one operation and checks the answer's shape; ARNs it creates become @I/@T placeholders.
  OperationResult Op(const std::string& operation, const Json& body) {
    now_ += 1000;
    OperationResult r = Wait([&](api::Router::Done done) { Execute(cp_, operation, body, std::move(done)); });
    CheckResult(operation, r, body);
    if (r.status.ok()) Remember(operation, r.body);
    return r;
  }

  // Step interprets one line of operations/channel input.
  void Step(std::string_view line) {
    if (line.substr(0, 8) == "!advance") {
      now_ += kAdvanceMs;
      return;
    }
    if (line.substr(0, 5) == "!open") {
      if (!channel_) return;
      size_t n = 0;
      for (char ch : line.substr(5))
        if (ch >= '0' && ch <= '9') n = n * 10 + static_cast<size_t>(ch - '0');
      Open(std::min<size_t>(n, 99));
      CheckInvariants(std::string(line));
      return;
    }
    if (line.substr(0, 6) == "!close") {
      CloseCurrent();
      CheckInvariants(std::string(line));
      return;
    }
    if (line.front() == '{') {
      if (channel_) {
        Message(Substitute(line));
        CheckInvariants(std::string(line));
      }
      return;
    }
    size_t cut = line.find_first_of(" {");
    std::string operation(line.substr(0, cut));
    std::string text = cut == std::string_view::npos ? "" : Substitute(line.substr(cut));
    Json body = text.find_first_not_of(" \t") == std::string::npos ? Json::object() : ParseJson(text);
    if (body.is_discarded()) return;  // invalid JSON never reaches Execute (fuzz_http covers that path)
    Op(operation, body);
    CheckInvariants(std::string(line));
  }

  // ---- the agent channel

  void Open(size_t index) {
    CloseCurrent();
    std::string arn = index < instances_.size() ? instances_[index] : "arn:aws:ecs:us-east-1:000000000000:nothing";
    api::HttpRequest req;
    req.method = "GET";
    req.target = std::string(api::kAgentChannelPath) + "?containerInstance=" + arn;
    req.remote_address = "127.0.0.1:40000";
    if (protocol::InstanceArnFromTarget(req.target) != arn) Fail("InstanceArnFromTarget does not give back the ARN", req.target);
    if (!handler_.accept(req).status.ok()) return;
    conn_ = std::make_shared<FakeConnection>();
    handler_.on_open(conn_, req);
  }

  void CloseCurrent() {
    if (!conn_) return;
    conn_->Close();
    handler_.on_close(conn_);
    Settle();  // AgentDisconnected commits in the background
    conn_.reset();
  }

  // Message sends one text message from the agent and checks the replies: every message but an "ack" gets
  // exactly one answer (welcome, ack or error) carrying the message's id, an error when the message is not a
  // typed JSON object within the nesting limit; pushes (assign, stop) may come too. A "helloPart" that is not
  // the last part of a hello is answered only when it is refused (the welcome answers the last part).
  void Message(const std::string& text) {
    if (!conn_) return;
    Json parsed = ParseJson(text);  // with the server's nesting limit: a deeper message is answered an error
    const bool is_ack = parsed.is_object() && parsed.contains("type") && parsed["type"] == "ack";
    // The id the answer must echo (only a scalar one is compared: copying a deep one would recurse here).
    const bool typed = parsed.is_object() && parsed.contains("type") && parsed["type"].is_string();
    Json id = typed && parsed.contains("id") && !parsed["id"].is_structured() ? parsed["id"] : Json();
    const bool hello_part =
        typed && parsed["type"] == "helloPart" && !(parsed.contains("last") && parsed["last"] == true);
    now_ += 1000;
    handler_.on_message(conn_, text);
    Settle();
    int answers = 0;
    for (const std::string& s : conn_->Take()) {
      Json out = Json::parse(s, nullptr, false);
      if (!out.is_object() || !out.contains("type") || !out["type"].is_string())
        Fail("the channel sent something that is not a typed JSON object", s);
      const std::string type = out["type"];
      if (type == "assign" || type == "stop") continue;
      ++answers;
      if (type != "welcome" && type != "ack" && type != "error") Fail("unexpected channel answer type", s);
      if (type == "error" && (!out.contains("message") || !out["message"].is_string() ||
                              out["message"].get<std::string>().empty()))
        Fail("a channel error without a message", s);
      // Reports and heartbeats carry integer ids (protocol/messages.h); their ack or error names it. A welcome
      // answers the connection's one hello and carries none.
      if (id.is_number_integer() && type != "welcome" && (!out.contains("id") || out["id"] != id))
        Fail("a channel answer lost the message id", s);
      if (!typed && type != "error")  // not JSON, no string type, or nested deeper than kMaxJsonDepth
        Fail("a channel message that is not a typed JSON object within the nesting limit was not refused", s);
      if (type == "error" && out["message"].get<std::string>().rfind("internal error", 0) == 0)
        Fail("a channel message raised an internal error", text + "\n-> " + s);
    }
    if (is_ack ? answers != 0 : hello_part ? answers > 1 : answers != 1)
      Fail("a channel message got " + std::to_string(answers) + " answers", text);
  }

  // ---- invariants

  // State is what the API says: every ACTIVE/DRAINING instance and every task of every ACTIVE cluster.
  struct State {
    std::map<std::string, Json> instances;  // by ARN
    std::map<std::string, Json> tasks;      // by ARN
    std::map<std::string, Json> clusters;   // by name
  };

  static OperationResult Call(api::ControlPlane& cp, const std::string& op, const Json& body) {
    return Wait([&](api::Router::Done done) { Execute(cp, op, body, std::move(done)); });
  }

  // ListAll pages through a List operation.
  static std::vector<std::string> ListAll(api::ControlPlane& cp, const std::string& op, Json body, const char* key) {
    std::vector<std::string> out;
    for (int page = 0; page < 1000; ++page) {
      OperationResult r = Call(cp, op, body);
      if (!r.status.ok()) Fail(op + " failed while checking: " + r.status.message(), Dump(body));
      for (const auto& a : r.body[key]) out.push_back(a.get<std::string>());
      if (!r.body.contains("nextToken")) return out;
      body["nextToken"] = r.body["nextToken"];
    }
    Fail(op + " pages forever");
  }

  static State Observe(api::ControlPlane& cp) {
    State st;
    for (const std::string& carn : ListAll(cp, "ListClusters", Json::object(), "clusterArns")) {
      const std::string name = carn.substr(carn.find("cluster/") + 8);
      OperationResult dc = Call(cp, "DescribeClusters", {{"clusters", {name}}});
      if (!dc.status.ok() || dc.body["clusters"].size() != 1) Fail("DescribeClusters failed while checking", name);
      st.clusters[name] = dc.body["clusters"][0];
      std::vector<std::string> arns =
          ListAll(cp, "ListContainerInstances", {{"cluster", name}, {"maxResults", 100}}, "containerInstanceArns");
      for (size_t i = 0; i < arns.size(); i += 100) {
        Json refs(std::vector<std::string>(arns.begin() + i, arns.begin() + std::min(arns.size(), i + 100)));
        OperationResult r = Call(cp, "DescribeContainerInstances", {{"cluster", name}, {"containerInstances", refs}});
        if (!r.status.ok() || !r.body["failures"].empty()) Fail("DescribeContainerInstances failed while checking", Dump(r.body));
        for (const auto& inst : r.body["containerInstances"]) st.instances[inst["containerInstanceArn"]] = inst;
      }
      std::vector<std::string> tasks;
      for (const char* desired : {"RUNNING", "STOPPED"})
        for (auto& t : ListAll(cp, "ListTasks", {{"cluster", name}, {"desiredStatus", desired}}, "taskArns"))
          tasks.push_back(std::move(t));
      for (size_t i = 0; i < tasks.size(); i += 100) {
        Json refs(std::vector<std::string>(tasks.begin() + i, tasks.begin() + std::min(tasks.size(), i + 100)));
        OperationResult r = Call(cp, "DescribeTasks", {{"cluster", name}, {"tasks", refs}});
        if (!r.status.ok() || !r.body["failures"].empty()) Fail("DescribeTasks failed while checking", Dump(r.body));
        for (const auto& t : r.body["tasks"]) st.tasks[t["taskArn"]] = t;
      }
    }
    return st;
  }

  // CheckGpus: the GPU accounting of every instance matches its non-STOPPED tasks.
  static void CheckGpus(const State& st, const std::string& after) {
    struct Held {
      int64_t shared_mib = 0;
      int dedicated = 0;
    };
    std::map<std::pair<std::string, std::string>, Held> held;  // (instance ARN, GPU id) -> what tasks declare
    std::map<std::string, int> live_tasks;                     // instance ARN -> non-STOPPED tasks
    for (const auto& [arn, t] : st.tasks) {
      if (t["lastStatus"] == "STOPPED") continue;
      const std::string inst = t["containerInstanceArn"];
      if (!st.instances.count(inst))
        Fail("after `" + after + "`: non-STOPPED task " + arn + " is on an instance that is not registered", Dump(t));
      ++live_tasks[inst];
      for (const auto& c : t["containers"]) {
        if (!c.contains("gpuIds")) continue;
        for (const auto& g : c["gpuIds"]) {
          Held& h = held[{inst, g.get<std::string>()}];
          if (c.contains("gpuSharingStrategy")) h.shared_mib += c["gpuSharingStrategy"]["nvidiaMps"]["memory"].get<int64_t>();
          else ++h.dedicated;
        }
      }
    }
    for (const auto& [arn, inst] : st.instances) {
      std::set<std::string> gpu_ids;
      for (const auto& g : inst["gpuDevices"]) {
        const std::string id = g["gpuId"];
        gpu_ids.insert(id);
        const int64_t total = g["totalMemoryInMiB"], remaining = g["remainingMemoryInMiB"];
        const Held h = held.count({arn, id}) ? held[{arn, id}] : Held{};
        const std::string where = "after `" + after + "`: GPU " + id + " of " + arn + ": total " +
                                  std::to_string(total) + ", remaining " + std::to_string(remaining) +
                                  ", tasks declare " + std::to_string(h.shared_mib) + " MiB shared and " +
                                  std::to_string(h.dedicated) + " dedicated container(s)";
        if (remaining < 0 || remaining > total) Fail("GPU remaining memory out of [0, total]", where);
        if (h.dedicated > 0) {
          if (h.dedicated > 1 || h.shared_mib > 0 || remaining != 0) Fail("a dedicated GPU is not held exactly once", where);
        } else if (total - remaining != h.shared_mib) {
          Fail("total - remaining differs from the memory of the GPU's non-STOPPED tasks", where);
        }
      }
      for (const auto& [key, h] : held)
        if (key.first == arn && !gpu_ids.count(key.second))
          Fail("after `" + after + "`: a task holds GPU " + key.second + " that " + arn + " does not have");
      const int counted = inst["runningTasksCount"].get<int>() + inst["pendingTasksCount"].get<int>();
      const int live = live_tasks.count(arn) ? live_tasks[arn] : 0;
      if (counted != live)
        Fail("after `" + after + "`: " + arn + " counts " + std::to_string(counted) + " running+pending tasks but " +
             std::to_string(live) + " are not STOPPED");
    }
  }

  // CheckInvariants is the cheap check after every step: from /metrics, every GPU's allocated memory (total -
  // remaining) lies in [0, total]. The full accounting against the tasks runs at the end (CheckReload).
  void CheckInvariants(const std::string& after) {
    Settle();
    std::map<std::string, std::pair<std::optional<int64_t>, std::optional<int64_t>>> gpus;  // labels -> (total, allocated)
    const std::string text = metrics_.Render();
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      for (const bool total : {true, false}) {
        const std::string_view name = total ? "gpupack_gpu_memory_total_bytes{" : "gpupack_gpu_memory_allocated_bytes{";
        if (line.substr(0, name.size()) != name) continue;
        const size_t space = line.rfind(' ');
        if (space == std::string_view::npos || space < name.size()) continue;
        int64_t value = 0;
        const std::string_view digits = line.substr(space + 1);
        auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
        if (ec != std::errc() || ptr != digits.data() + digits.size()) continue;  // e.g. a GPU id with a newline
        const std::string labels(line.substr(name.size(), space - name.size()));
        (total ? gpus[labels].first : gpus[labels].second) = value;
      }
    }
    for (const auto& [labels, v] : gpus)
      if (v.first && v.second && (*v.second < 0 || *v.second > *v.first))
        Fail("after `" + after + "`: GPU memory allocated out of [0, total]",
             labels + ": total " + std::to_string(*v.first) + ", allocated " + std::to_string(*v.second));
  }

  // CheckReload: a second control plane that loads the store describes the same state (nothing acknowledged
  // lived only in memory, and the rebuilt reservations equal the ones kept incrementally).
  void CheckReload() {
    Settle();
    now_ += 61'000;  // both planes purge expired STOPPED tasks on their first call, at the same time
    State before = Observe(cp_);
    CheckGpus(before, "the input");
    Settle();
    GroupCommitter committer2(store_);
    {
      api::ControlPlane cp2(Options(2), store_, committer2);
      if (Status s = cp2.Load(); !s.ok()) Fail("the store does not load: " + s.message());
      State after = Observe(cp2);
      CheckGpus(after, "reload");
      committer2.Flush();
      auto strip = [](std::map<std::string, Json> m) {
        for (auto& [_, j] : m) j.erase("agentConnected");  // a channel agent must say hello again after a restart
        return m;
      };
      Compare("instances", strip(before.instances), strip(after.instances));
      Compare("tasks", before.tasks, after.tasks);
      Compare("clusters", before.clusters, after.clusters);
    }
  }

 private:
  api::ControlPlaneOptions Options(uint64_t seed) {
    api::ControlPlaneOptions o;
    o.clock = [this] { return now_.load(); };
    o.seed = seed;
    o.placement.place_on_disconnected = true;  // the input plays the agents: placement must still run
    return o;
  }

  static void Compare(const char* what, const std::map<std::string, Json>& a, const std::map<std::string, Json>& b) {
    if (a == b) return;
    std::string detail;
    for (const auto& [k, v] : a) {
      auto it = b.find(k);
      if (it == b.end()) detail += "only in memory: " + k + "\n";
      else if (it->second != v) detail += "differs: " + k + "\n  memory: " + Dump(v) + "\n  reload: " + Dump(it->second) + "\n";
    }
    for (const auto& [k, v] : b)
      if (!a.count(k)) detail += "only after reload: " + k + "\n";
    Fail(std::string("the reloaded state differs from memory (") + what + ")", detail);
  }

  void CheckResult(const std::string& operation, const OperationResult& r, const Json& body) {
    if (r.status.ok()) {
      if (!r.body.is_object()) Fail(operation + " answered ok without a JSON object", Dump(body));
      (void)Dump(r.body);
      return;
    }
    if (r.status.message().empty()) Fail(operation + " refused without a message", Dump(body));
    if (r.status.code() == ErrorCode::kServer)
      Fail(operation + " answered ServerException: " + r.status.message(), Dump(body));
  }

  void Remember(const std::string& operation, const Json& out) {
    auto add = [](std::vector<std::string>& list, const Json& v) {
      if (v.is_string() && std::find(list.begin(), list.end(), v.get<std::string>()) == list.end())
        list.push_back(v.get<std::string>());
    };
    if ((operation == "RunTask" || operation == "StartTask") && out.contains("tasks"))
      for (const auto& t : out["tasks"]) add(tasks_, t["taskArn"]);
    if (operation == "RegisterContainerInstance" && out.contains("containerInstance"))
      add(instances_, out["containerInstance"]["containerInstanceArn"]);
  }

  OperationResult Must(const std::string& operation, const Json& body) {
    OperationResult r = Op(operation, body);
    if (!r.status.ok()) Fail("fixture: " + operation + " failed: " + r.status.message(), Dump(body));
    return r;
  }

  static Json Instance(int64_t cpu, int64_t memory, const std::vector<std::pair<std::string, MiB>>& gpus,
                       Json attributes) {
    Json devices = Json::array();
    for (const auto& [id, mib] : gpus)
      devices.push_back({{"id", id}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", mib}}}});
    return {{"cluster", "default"},
            {"totalResources",
             {{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", cpu}},
              {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", memory}}}},
            {"platformDevices", devices},
            {"attributes", attributes},
            {"versionInfo", {{"agentVersion", "1.0.0"}}}};
  }

  static Json TaskDef(const std::string& family, Json gpu) {
    Json c = {{"name", "main"}, {"image", family + ":1"}, {"memory", 512}, {"cpu", 256}};
    if (!gpu.is_null()) c["resourceRequirements"] = Json::array({gpu});
    return {{"family", family}, {"containerDefinitions", Json::array({c})}};
  }

  // Image is the fixture as stored, with the ARNs it created. Building it runs every operation of the fixture
  // (and checks it) once per process; each input then starts from a load of it.
  struct Image {
    Snapshot snapshot;
    std::vector<std::string> instances, tasks;
    EpochMs now = 0;
  };
  struct BuildTag {};

  explicit Harness(BuildTag) : committer_(store_), cp_(Options(1), store_, committer_) {
    if (!cp_.Load().ok()) Fail("fixture: Load failed");
    BuildFixture();
    CheckGpus(Observe(cp_), "fixture");
  }

  static const Image& TheImage() {
    static const Image image = [] {
      Image im;
      Harness built{BuildTag{}};
      built.Settle();
      auto snap = built.store_.Load();
      if (!snap.ok()) Fail("fixture: the store does not load");
      im.snapshot = std::move(snap).value();
      im.instances = built.instances_;
      im.tasks = built.tasks_;
      im.now = built.now_.load();
      return im;
    }();
    return image;
  }

  void Hello(size_t index) {
    OperationResult hello = Wait([&](api::Router::Done done) {
      cp_.AgentHello(instances_.at(index), protocol::Hello{},
                     [done = std::move(done)](Status s, protocol::Welcome) { done({s, {}}); });
    });
    if (!hello.status.ok()) Fail("fixture: hello failed: " + hello.status.message());
  }

  void BuildFixture() {
    Must("CreateCluster", Json::object());
    Must("CreateCluster", {{"clusterName", "spare"}});
    Must("RegisterContainerInstance",
         Instance(8192, 32768, {{"GPU-a0", 24576}, {"GPU-a1", 24576}}, {{{"name", "zone"}, {"value", "a"}}}));
    Must("RegisterContainerInstance", Instance(4096, 16384, {{"GPU-b0", 81920}}, {{{"name", "zone"}, {"value", "b"}}}));
    Must("RegisterContainerInstance",
         Instance(4096, 16384, {{"GPU-c0", 16384}},
                  {{{"name", "zone"}, {"value", "c"}}, {{"name", protocol::kChannelAttribute}}}));
    Must("RegisterTaskDefinition",
         TaskDef("mps", {{"type", "GPU"}, {"sharingStrategy", {{"nvidiaMps", {{"memory", 4096}, {"maxComputePercent", 25}}}}}}));
    Must("RegisterTaskDefinition", TaskDef("dedicated", {{"type", "GPU"}, {"value", "1"}}));
    Must("RegisterTaskDefinition", TaskDef("cpu", Json()));
    Must("RunTask", {{"taskDefinition", "mps"}, {"count", 2}, {"placementStrategy", {{{"type", "binpack"}, {"field", "gpuMemory"}}}}});
    Must("RunTask", {{"taskDefinition", "dedicated"}});
    Must("SubmitTaskStateChange", {{"task", tasks_.at(0)}, {"status", "RUNNING"}});
    Hello(2);
    Must("StartTask", {{"taskDefinition", "mps"}, {"containerInstances", {instances_.at(2)}}});
    if (tasks_.size() != 4) Fail("fixture: expected 4 tasks");
  }

  std::atomic<EpochMs> now_{kStart};
  MemoryStore store_;
  GroupCommitter committer_;
  api::ControlPlane cp_;
  MetricsRegistry metrics_;                // /metrics of cp_ (AddControlPlaneMetrics)
  std::unique_ptr<api::AgentChannel> channel_;  // after cp_: destroyed first
  api::WebSocketHandler handler_;
  std::shared_ptr<FakeConnection> conn_;
  std::vector<std::string> instances_, tasks_;
};

// ParseWire reads one HTTP/1.1 request leniently: request line, "Name: value" headers, blank line, body.
api::HttpRequest ParseWire(std::string_view in) {
  api::HttpRequest req;
  req.remote_address = "127.0.0.1:50000";
  auto next_line = [&in]() {
    size_t nl = in.find('\n');
    std::string_view line = in.substr(0, nl);
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  };
  std::string_view first = next_line();
  size_t sp = first.find(' ');
  req.method = std::string(first.substr(0, sp));
  if (sp != std::string_view::npos) {
    std::string_view rest = first.substr(sp + 1);
    req.target = std::string(rest.substr(0, rest.find(' ')));
  }
  while (!in.empty()) {
    std::string_view line = next_line();
    if (line.empty()) break;
    size_t colon = line.find(':');
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(), [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    req.headers.emplace_back(std::move(name), std::string(value));
  }
  req.body = std::string(in);
  return req;
}

// ---- sigv4 ------------------------------------------------------------------------------------------------------

// AWS's example key; the clock is fixed at the time of AWS's published test-suite requests.
const api::Credential kCredential{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "default"};
const std::chrono::system_clock::time_point kSigNow =
    std::chrono::sys_days{std::chrono::year{2015} / 8 / 30} + std::chrono::hours(12) + std::chrono::minutes(36);

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); }
bool IsUnreservedChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}
bool IsTokenChar(char c) {
  return IsUnreservedChar(c) || std::string_view("!#$%&'*+^`|").find(c) != std::string_view::npos;
}

void FuzzAuthorizationHeader(std::string_view text) {
  auto a = api::ParseAuthorization(text);
  if (!a.ok()) {
    if (a.status().message().empty()) Fail("ParseAuthorization refused without a message", std::string(text));
    return;
  }
  const auto& names = a->signed_headers;
  if (names.size() > 64) Fail("ParseAuthorization accepted more than 64 signed headers", std::string(text));
  if (!std::is_sorted(names.begin(), names.end()) || std::adjacent_find(names.begin(), names.end()) != names.end())
    Fail("signed headers not sorted and unique", std::string(text));
  for (const auto& n : names)
    if (std::any_of(n.begin(), n.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
      Fail("a signed header name is not lower case", std::string(text));
}

void FuzzCanonicalForms(std::string_view text) {
  const std::string uri = api::CanonicalUri(text);
  for (size_t i = 0; i < uri.size(); ++i) {
    if (IsUnreservedChar(uri[i]) || uri[i] == '/') continue;
    if (uri[i] == '%' && i + 2 < uri.size() && IsHex(uri[i + 1]) && IsHex(uri[i + 2])) {
      i += 2;
      continue;
    }
    Fail("CanonicalUri left a byte unencoded", std::string(text) + "\n-> " + uri);
  }
  const std::string query = api::CanonicalQueryString(text);
  if (api::CanonicalQueryString(query) != query)
    Fail("CanonicalQueryString is not idempotent", std::string(text) + "\n-> " + query);
  const std::string value = api::CanonicalHeaderValue(text);
  if (api::CanonicalHeaderValue(value) != value)
    Fail("CanonicalHeaderValue is not idempotent", std::string(text) + "\n-> " + value);
}

void FuzzDates(std::string_view text) {
  if (auto t = api::ParseAmzDate(text); t && api::FormatAmzDate(*t) != text)
    Fail("ParseAmzDate and FormatAmzDate do not round-trip", std::string(text) + " -> " + api::FormatAmzDate(*t));
  if (auto t = api::ParseHttpDate(text)) (void)api::FormatAmzDate(*t);
}

void FuzzCredentials(std::string_view text) {
  auto creds = api::ParseCredentials(text, "fuzz");
  if (!creds.ok()) return;
  std::set<std::string> ids;
  for (const auto& c : *creds) {
    if (c.access_key_id.empty() || c.secret_access_key.empty()) Fail("a credential without a key", std::string(text));
    if (!ids.insert(c.access_key_id).second) Fail("an access key id in two profiles", std::string(text));
  }
}

// SignableByClient: the request is one a client could put on the wire and sign with SignRequest (a method, a
// path and query of visible ASCII, token header names, header values without control bytes) and carries none of
// the headers the signer adds.
bool SignableByClient(const api::HttpRequest& req) {
  if (req.method.empty() || req.method.size() > 16 ||
      !std::all_of(req.method.begin(), req.method.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
    return false;
  if (req.target.empty() || req.target.front() != '/' ||
      !std::all_of(req.target.begin(), req.target.end(), [](char c) { return c > 0x20 && c < 0x7f && c != '#'; }))
    return false;
  if (req.headers.size() > 32) return false;
  for (const auto& [name, value] : req.headers) {
    if (name.empty() || name.size() > 40 || !std::all_of(name.begin(), name.end(), IsTokenChar)) return false;
    if (name == "authorization" || name == "x-amz-date" || name == "x-amz-content-sha256" ||
        name == "x-amz-security-token" || name == "date")
      return false;
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}

void FuzzSignedRequest(std::string_view wire) {
  api::HttpRequest req = ParseWire(wire);
  const api::SigV4Verifier verifier({kCredential}, "us-east-1");
  // Whatever arrives: a verdict with a reason, never a crash.
  const api::SigV4Result raw = verifier.Authenticate(req, kSigNow);
  if (!raw.status.ok() && raw.status.message().empty()) Fail("a SigV4 refusal without a message", std::string(wire));
  if (!SignableByClient(req)) return;
  // What SignRequest signs, the verifier accepts; a changed body or a stale clock it refuses.
  if (!req.Header("host")) req.headers.emplace_back("host", "127.0.0.1:8080");
  const size_t q = req.target.find('?');
  const std::string path = req.target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : req.target.substr(q + 1);
  for (auto& [name, value] : api::SignRequest(kCredential, "us-east-1", "ecs", req.method, path, query, req.headers,
                                               req.body, kSigNow)) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
    req.headers.emplace_back(std::move(lower), value);
  }
  const api::SigV4Result signed_result = verifier.Authenticate(req, kSigNow + std::chrono::minutes(4));
  if (!signed_result.status.ok())
    Fail("a request signed by SignRequest does not verify: " + signed_result.status.message(), std::string(wire));
  if (signed_result.access_key_id != kCredential.access_key_id) Fail("verified as the wrong key", std::string(wire));
  api::HttpRequest tampered = req;
  tampered.body += "x";
  if (verifier.Verify(tampered, kSigNow).ok()) Fail("a changed body still verifies", std::string(wire));
  if (verifier.Verify(req, kSigNow + std::chrono::minutes(6)).ok())
    Fail("a request outside the clock-skew window verifies", std::string(wire));
}

// ---- protocol -------------------------------------------------------------------------------------------------

// CheckRoundTrip: an accepted message serializes to text that parses back to the same message and serializes
// to the same text again.
template <typename Message, typename Parse>
void CheckRoundTrip(const Message& m, Parse parse, std::string_view input) {
  const std::string text = protocol::Serialize(m);
  auto again = parse(text);
  if (!again.ok()) Fail("a serialized message does not parse: " + again.status().message(), text);
  if (!(*again == m)) Fail("a message changed in a serialize/parse round trip", std::string(input) + "\n" + text);
  if (protocol::Serialize(*again) != text) Fail("serializing a round-tripped message gave other text", text);
}

template <typename Parse>
void FuzzMessage(std::string_view text, Parse parse) {
  auto m = parse(text);
  if (!m.ok()) {
    if (m.status().code() != ErrorCode::kInvalidParameter || m.status().message().empty())
      Fail("a message refused without InvalidParameter and a message", std::string(text));
    return;
  }
  CheckRoundTrip(*m, parse, text);
}

}  // namespace

// ---- the targets --------------------------------------------------------------------------------------------

int FuzzQuery(const uint8_t* data, size_t size) {
  QuietLogs();
  const std::string_view text = AsText(data, size);
  auto e = query::Parse(text);
  auto f = query::Parse(text, "filter");
  if (e.ok() != f.ok()) Fail("Parse accepts with one label and refuses with another", std::string(text));
  if (!e.ok()) {
    if (e.status().message().empty()) Fail("Parse refused without a message", std::string(text));
    return 0;
  }
  if (!*e) Fail("Parse answered ok with no expression", std::string(text));
  const std::vector<bool> v = EvaluateAll(**e);
  if (EvaluateAll(**f) != v) Fail("two parses of one expression evaluate differently", std::string(text));
  // Metamorphic checks, when the wrapped text is still within the length and depth limits.
  const std::string body(text);
  if (auto n = query::Parse("not (" + body + ")"); n.ok()) {
    std::vector<bool> nv = EvaluateAll(**n);
    for (size_t i = 0; i < v.size(); ++i)
      if (nv[i] == v[i]) Fail("not (E) is not the negation of E on instance " + std::to_string(i), body);
  }
  if (auto a = query::Parse("(" + body + ") and (" + body + ")"); a.ok())
    if (EvaluateAll(**a) != v) Fail("(E) and (E) differs from E", body);
  if (auto o = query::Parse("(" + body + ") or (" + body + ")"); o.ok())
    if (EvaluateAll(**o) != v) Fail("(E) or (E) differs from E", body);
  return 0;
}

int FuzzCodec(const uint8_t* data, size_t size) {
  QuietLogs();
  if (size < 1) return 0;
  const uint8_t selector = data[0] % 7;
  const std::string_view rest = AsText(data + 1, size - 1);
  if (selector == 6) {
    FuzzReferences(rest);
    return 0;
  }
  Json body = ParseJson(rest);
  if (body.is_discarded()) return 0;
  switch (selector) {
    case 0: FuzzTaskDefinition(body); break;
    case 1: FuzzOverride(body); break;
    case 2: FuzzPlacement(body); break;
    case 3: FuzzAttributes(body); break;
    case 4: FuzzFields(body); break;
    case 5:
      // The response renderers are total: whatever a request registered renders and dumps.
      if (auto td = api::ParseRegisterTaskDefinition(body); td.ok()) (void)Dump(api::ToJson(*td));
      break;
  }
  return 0;
}

int FuzzOperations(const uint8_t* data, size_t size) {
  QuietLogs();
  Harness h(/*with_channel=*/false);
  for (std::string_view line : Lines(AsText(data, size))) h.Step(line);
  h.CheckReload();
  return 0;
}

int FuzzChannel(const uint8_t* data, size_t size) {
  QuietLogs();
  Harness h(/*with_channel=*/true);
  for (std::string_view line : Lines(AsText(data, size))) h.Step(line);
  h.CheckReload();
  return 0;
}

int FuzzHttp(const uint8_t* data, size_t size) {
  QuietLogs();
  Harness h(/*with_channel=*/false);
  MetricsRegistry metrics;
  api::FrontDoor handler(h.control_plane(), metrics);
  api::HttpRequest req = ParseWire(AsText(data, size));
  req.body = h.Substitute(req.body);
  const std::string method = req.method, target = req.target, body = req.body;
  std::promise<api::HttpResponse> promise;
  auto future = promise.get_future();
  handler.Handle(std::move(req), [&promise](api::HttpResponse r) { promise.set_value(std::move(r)); });
  api::HttpResponse resp = future.get();
  const std::string where = method + " " + target + "\n" + body + "\n-> " + std::to_string(resp.status) + " " + resp.body;
  if (resp.status < 200 || resp.status > 599) Fail("HTTP status out of range", where);
  auto header = [&resp](const std::string& name) -> const std::string* {
    for (const auto& [k, v] : resp.headers)
      if (k == name) return &v;
    return nullptr;
  };
  if (!header("x-amzn-RequestId")) Fail("response without x-amzn-RequestId", where);
  const std::string path = target.substr(0, target.find('?'));
  if (method == "POST" && path == "/") {
    Json out = Json::parse(resp.body, nullptr, false);
    if (!out.is_object()) Fail("an ECS answer that is not a JSON object", where);
    if (resp.status != 200) {
      if (!out.contains("__type") || !out["__type"].is_string() || !out.contains("message") ||
          !out["message"].is_string() || out["message"].get<std::string>().empty())
        Fail("an ECS error not in ECS's shape", where);
      if (!header("x-amzn-ErrorType")) Fail("an ECS error without x-amzn-ErrorType", where);
      if (resp.status >= 500) Fail("a request answered ServerException", where);
    }
  }
  if (method == "GET" && path == "/healthz" && resp.status != 200) Fail("healthz is not healthy", where);
  h.CheckInvariants("the request");
  h.CheckReload();
  return 0;
}

int FuzzSigV4(const uint8_t* data, size_t size) {
  QuietLogs();
  if (size < 1) return 0;
  const std::string_view rest = AsText(data + 1, size - 1);
  switch (data[0] % 5) {
    case 0: FuzzAuthorizationHeader(rest); break;
    case 1: FuzzCanonicalForms(rest); break;
    case 2: FuzzDates(rest); break;
    case 3: FuzzCredentials(rest); break;
    case 4: FuzzSignedRequest(rest); break;
  }
  return 0;
}

int FuzzProtocol(const uint8_t* data, size_t size) {
  QuietLogs();
  if (size < 1) return 0;
  const std::string_view rest = AsText(data + 1, size - 1);
  if (data[0] % 2 == 0) FuzzMessage(rest, [](std::string_view t) { return protocol::ParseAgentMessage(t); });
  else FuzzMessage(rest, [](std::string_view t) { return protocol::ParseServerMessage(t); });
  return 0;
}

int FuzzEcsModel(const uint8_t* data, size_t size) {
  const std::string_view text = AsText(data, size);
  auto model = cli::ReadEcsModel(text, "input");
  if (!model.ok()) {
    if (model.status().message().rfind("input is not an ECS service model", 0) != 0)
      Fail("a refused model's message does not say what was read", model.status().message());
    return 0;
  }
  const std::string version = (*model)["metadata"]["apiVersion"].get<std::string>();
  if (!cli::IsPlainApiVersion(version)) Fail("a model with an API version that is not a date was accepted", version);
  const std::filesystem::path path = cli::ModelPath("/models", *model);
  if (path.lexically_normal() != path || path.parent_path().parent_path() != "/models/ecs")
    Fail("the install path leaves the models directory", path.string());
  cli::AddGpuSharingShapes(*model);
  if (!cli::AddGpuSharingShapes(*model).empty()) Fail("patching twice added something the second time");
  const std::string out = model->dump(1, ' ', false, cli::ModelJson::error_handler_t::replace);
  auto again = cli::ReadEcsModel(out, "the patched model");
  if (!again.ok()) Fail("the patched model does not read back", again.status().message());
  return 0;
}

}  // namespace gpupack::fuzz
