#include "api/channel/agent_channel.h"

#include <algorithm>
#include <optional>
#include <set>

#include <spdlog/spdlog.h>


namespace gpupack::api {

UpgradeAnswer ChannelRefusal(Status status, protocol::RefusalCode code, const std::string& leader) {
  UpgradeAnswer answer(std::move(status));
  answer.fields.emplace_back("code", protocol::Name(code));
  if (!leader.empty()) {
    answer.fields.emplace_back("leader", leader);
    answer.headers.emplace_back(protocol::kLeaderHeader, leader);
  }
  return answer;
}

protocol::RefusalCode RefusalCodeOf(const Status& s) {
  switch (s.code()) {
    case ErrorCode::kServer: return protocol::RefusalCode::kServerError;
    case ErrorCode::kAccessDenied:
    case ErrorCode::kUnrecognizedClient:
    case ErrorCode::kInvalidSignature:
    case ErrorCode::kIncompleteSignature:
    case ErrorCode::kMissingAuthenticationToken: return protocol::RefusalCode::kUnauthorized;
    default: return protocol::RefusalCode::kRejected;
  }
}

AgentChannel::AgentChannel(ControlPlane& control_plane, AgentChannelOptions options)
    : cp_(control_plane), options_(options) {
  cp_.SetAgentNotifier([this](const std::string& arn, AgentPush push) { Push(arn, std::move(push)); });
  watchdog_ = std::thread([this] { Watchdog(); });
}

// ---- the connect and disconnect lines -------------------------------------------------------------------------

std::string ChannelEventLog::Roll(std::chrono::steady_clock::time_point now, size_t open) {
  if (now - window_start_ < kWindow) return "";
  std::string summary;
  if (quiet_[0] + quiet_[1] + quiet_[2] > 0) {
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(now - window_start_).count();
    summary = fmt::format("agent channel: {} more agents connected, {} reconnected (their previous connection "
                          "closed) and {} disconnected in the last {} s, not logged one by one (debug level does); "
                          "{} channels open",
                          quiet_[0], quiet_[1], quiet_[2], s, open);
  }
  window_start_ = now;
  lines_ = 0;
  quiet_[0] = quiet_[1] = quiet_[2] = 0;
  return summary;
}

void ChannelEventLog::Log(Event event, const std::string& instance_arn, const std::string& from, size_t open,
                          Clock::time_point now) {
  std::string summary;
  bool one_by_one = false;
  {
    std::lock_guard lock(mu_);
    summary = Roll(now, open);
    one_by_one = lines_ < kLinesPerWindow;
    if (one_by_one) ++lines_;
    else ++quiet_[static_cast<int>(event)];
  }
  if (!summary.empty()) spdlog::info("{}", summary);
  const auto level = one_by_one ? spdlog::level::info : spdlog::level::debug;
  if (!spdlog::should_log(level)) return;
  switch (event) {
    case Event::kConnected: spdlog::log(level, "agent channel: {} connected from {}", instance_arn, from); break;
    case Event::kReconnected:
      spdlog::log(level, "agent channel: {} reconnected from {}; closing its previous connection", instance_arn, from);
      break;
    case Event::kDisconnected: spdlog::log(level, "agent channel: {} disconnected", instance_arn); break;
  }
}

void ChannelEventLog::Flush(size_t open, Clock::time_point now) {
  std::string summary;
  {
    std::lock_guard lock(mu_);
    summary = Roll(now, open);
  }
  if (!summary.empty()) spdlog::info("{}", summary);
}

AgentChannel::~AgentChannel() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    requests_.clear();  // the HTTP server has stopped: nobody waits for their answers
  }
  cv_.notify_all();
  watchdog_.join();
  cp_.SetAgentNotifier(nullptr);
}

WebSocketHandler AgentChannel::Handler() {
  WebSocketHandler h;
  h.accept = [this](const HttpRequest& req) -> UpgradeAnswer {
    using protocol::RefusalCode;
    AgentKey agent_key;
    if (options_.authenticator != nullptr) {
      // Signature first: an unsigned caller learns nothing about which instances exist.
      const SigV4Result who = options_.authenticator->Authenticate(req);
      if (who.role == KeyRole::kAgent) agent_key = who.access_key_id;
      if (Status s = RequestAuthenticator::Authorize(who, kAgentChannelAction); !s.ok()) {
        ++auth_refusals_;
        const std::string& m = s.message();
        spdlog::warn("auth: refused the agent channel upgrade from {}: {}", req.remote_address,
                     m.substr(0, std::min<size_t>(m.find('\n'), 200)));
        return ChannelRefusal(std::move(s), RefusalCode::kUnauthorized);
      }
    }
    std::string arn = protocol::InstanceArnFromTarget(req.target);
    if (arn.empty())
      return ChannelRefusal(Status::InvalidParameter("the agent channel needs ?containerInstance=<ARN>"),
                            RefusalCode::kMalformed);
    // An agent key holds the channel only of an instance it registered (its assignments carry secrets).
    Status s = cp_.CheckAgentInstance(arn, agent_key);
    if (s.ok()) return s;
    if (s.code() == ErrorCode::kAccessDenied) {
      ++auth_refusals_;
      spdlog::warn("auth: refused the agent channel upgrade from {}: {}", req.remote_address, s.message());
      return ChannelRefusal(std::move(s), RefusalCode::kUnauthorized);
    }
    // CheckAgentInstance refuses with InvalidParameter only an instance it does not know (or an inactive one).
    const RefusalCode code =
        s.code() == ErrorCode::kInvalidParameter ? RefusalCode::kUnknownInstance : RefusalCodeOf(s);
    return ChannelRefusal(std::move(s), code);
  };
  h.busy_fields = {{"code", protocol::Name(protocol::RefusalCode::kBusy)}};
  h.on_open = [this](const std::shared_ptr<WebSocketConnection>& c, const HttpRequest& r) { OnOpen(c, r); };
  h.on_message = [this](const std::shared_ptr<WebSocketConnection>& c, std::string m) { OnMessage(c, std::move(m)); };
  h.on_close = [this](const std::shared_ptr<WebSocketConnection>& c) { OnClose(c); };
  h.idle_timeout = options_.heartbeat_interval * options_.missed_heartbeats;
  return h;
}

size_t AgentChannel::connected() const {
  std::lock_guard lock(mu_);
  return by_instance_.size();
}

size_t AgentChannel::unacked_pushes(const std::string& instance_arn) const {
  std::lock_guard lock(mu_);
  auto it = by_instance_.find(instance_arn);
  if (it == by_instance_.end()) return 0;
  auto p = peers_.find(it->second);
  return p == peers_.end() ? 0 : p->second.unacked.size();
}

void AgentChannel::OnOpen(const std::shared_ptr<WebSocketConnection>& conn, const HttpRequest& req) {
  std::string arn = protocol::InstanceArnFromTarget(req.target);
  std::shared_ptr<WebSocketConnection> replaced;
  size_t open = 0;
  {
    std::lock_guard lock(mu_);
    auto it = by_instance_.find(arn);
    if (it != by_instance_.end()) {
      replaced = peers_[it->second].conn;
      peers_.erase(it->second);
    }
    // The new connection starts with no pending push: the welcome's reconcile covers the old one's.
    peers_[conn.get()] = Peer{conn, arn, std::chrono::steady_clock::now(), false, false, {}, {}, 0, false};
    by_instance_[arn] = conn.get();
    open = by_instance_.size();
  }
  ++connections_opened_;
  if (replaced) {
    events_.Log(ChannelEventLog::Event::kReconnected, arn, conn->remote_address(), open);
    replaced->Close();
  } else {
    events_.Log(ChannelEventLog::Event::kConnected, arn, conn->remote_address(), open);
  }
}

void AgentChannel::Reply(const std::shared_ptr<WebSocketConnection>& conn, const protocol::ServerMessage& message) {
  conn->Send(protocol::Serialize(message));
}

void AgentChannel::OnMessage(const std::shared_ptr<WebSocketConnection>& conn, std::string text) {
  std::string arn;
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.get());
    if (it == peers_.end()) return;
    it->second.last_seen = std::chrono::steady_clock::now();
    arn = it->second.instance_arn;
  }
  auto parsed = protocol::ParseAgentMessage(text);
  if (!parsed.ok()) {
    // Echo the message's id when it has one, so the agent can tell which report was refused.
    // An ack is never answered, not even a malformed one.
    protocol::Error error{std::nullopt, parsed.status().message(), protocol::RefusalCode::kMalformed};
    if (auto j = protocol::ParseJsonBounded(text); j.ok() && j->is_object()) {
      if (j->value("type", Json()) == "ack") return;
      if (j->contains("id") && (*j)["id"].is_number_integer()) error.id = (*j)["id"].get<int64_t>();
    }
    Reply(conn, error);
    return;
  }
  // A report or heartbeat is answered with an ack of its id once durable, or an error naming it.
  auto answer = [this, conn](int64_t id) {
    return [this, conn, id](Status s) {
      if (s.ok()) Reply(conn, protocol::Ack{id});
      else Reply(conn, protocol::Error{id, s.message(), RefusalCodeOf(s)});
    };
  };
  if (auto* hello = std::get_if<protocol::Hello>(&*parsed)) {
    OnHello(conn, arn, std::move(*hello));
  } else if (auto* part = std::get_if<protocol::HelloPart>(&*parsed)) {
    OnHelloPart(conn, arn, std::move(*part), text.size());
  } else if (auto* state = std::get_if<protocol::StateReport>(&*parsed)) {
    if (state->report.status == protocol::TaskStatus::kStopped) gpu_memory_.DropTask(state->report.task_arn);
    cp_.AgentReport(arn, state->report, answer(state->id));
  } else if (auto* heartbeat = std::get_if<protocol::Heartbeat>(&*parsed)) {
    KeepGpuMemory(conn, arn, *heartbeat);
    OnHeartbeat(conn, arn, *heartbeat);
  } else if (auto* logs = std::get_if<protocol::LogsAnswer>(&*parsed)) {
    OnLogsAnswer(conn, std::move(*logs));  // never answered
  } else if (auto* ack = std::get_if<protocol::Ack>(&*parsed)) {
    // The agent recorded a push: stop re-sending it. An unknown id (already acked, or from a replaced
    // connection) is ignored; an ack is never answered.
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.get());
    if (it != peers_.end()) it->second.unacked.erase(ack->id);
  }
}

// OnHello reconciles (ControlPlane::AgentHello) and answers the welcome. A hello replaces parts gathered so far.
void AgentChannel::OnHello(const std::shared_ptr<WebSocketConnection>& conn, const std::string& arn,
                           protocol::Hello hello) {
  // Pushes sent on this connection so far come from operations that ran before the hello's reconcile, which
  // sees their outcome: the welcome carries whatever of them the agent still lacks, so they need no ack.
  std::vector<int64_t> covered;
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.get());
    if (it != peers_.end()) {
      for (const auto& [push_id, _] : it->second.unacked) covered.push_back(push_id);
      it->second.hello_parts.clear();
      it->second.hello_part_bytes = 0;
      ++it->second.writes_in_flight;
    }
  }
  cp_.AgentHello(arn, hello, [this, conn, covered = std::move(covered)](Status s, protocol::Welcome welcome) {
    WriteSettled(conn.get());
    if (!s.ok()) return Reply(conn, protocol::Error{std::nullopt, s.message(), RefusalCodeOf(s)});
    welcome.heartbeat_interval_ms = options_.heartbeat_interval.count();
    welcome.epoch = epoch();
    {
      std::lock_guard lock(mu_);
      auto it = peers_.find(conn.get());
      if (it != peers_.end()) {
        it->second.hello_done = true;
        for (int64_t push_id : covered) it->second.unacked.erase(push_id);
      }
    }
    Reply(conn, welcome);
  });
}

// OnHeartbeat acks a heartbeat that changes nothing straight from the read view: the common case, which then
// never waits behind placements in the writer's queue. One that changes something (or that follows a write of
// this connection the view may not show yet) goes through the writer and is acked once durable.
void AgentChannel::OnHeartbeat(const std::shared_ptr<WebSocketConnection>& conn, const std::string& arn,
                               const protocol::Heartbeat& heartbeat) {
  bool settled = false;  // nothing of this connection is on its way to the view
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.get());
    if (it == peers_.end()) return;
    settled = it->second.hello_done && it->second.writes_in_flight == 0;
  }
  if (settled && cp_.HeartbeatChangesNothing(arn, heartbeat)) {
    ++heartbeats_from_view_;
    Reply(conn, protocol::Ack{heartbeat.id});
    return;
  }
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.get());
    if (it == peers_.end()) return;
    ++it->second.writes_in_flight;
  }
  ++heartbeats_written_;
  cp_.AgentHeartbeat(arn, heartbeat, [this, conn, id = heartbeat.id](Status s) {
    WriteSettled(conn.get());
    if (s.ok()) Reply(conn, protocol::Ack{id});
    else Reply(conn, protocol::Error{id, s.message(), RefusalCodeOf(s)});
  });
}

void AgentChannel::WriteSettled(WebSocketConnection* conn) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(conn);
  if (it != peers_.end() && it->second.writes_in_flight > 0) --it->second.writes_in_flight;
}

// OnHelloPart gathers a hello's parts on the connection, at most max_hello_bytes of them; the last part makes
// the hello. Past the bound the connection is answered an error and closed.
void AgentChannel::OnHelloPart(const std::shared_ptr<WebSocketConnection>& conn, const std::string& arn,
                               protocol::HelloPart part, size_t bytes) {
  std::optional<protocol::Hello> hello;
  bool too_large = false;
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.get());
    if (it == peers_.end()) return;
    Peer& peer = it->second;
    peer.hello_part_bytes += bytes;
    if (peer.hello_part_bytes > options_.max_hello_bytes) {
      too_large = true;
      peer.hello_parts.clear();
      peer.hello_part_bytes = 0;
    } else {
      for (auto& t : part.tasks) peer.hello_parts.push_back(std::move(t));
      if (part.last) {
        hello = protocol::Hello{std::move(peer.hello_parts), part.impaired};
        peer.hello_parts.clear();
        peer.hello_part_bytes = 0;
      }
    }
  }
  if (too_large) {
    spdlog::warn("agent channel: {} sent a hello of more than {} bytes; disconnecting it", arn,
                 options_.max_hello_bytes);
    Reply(conn, protocol::Error{std::nullopt,
                                "the hello's parts pass " + std::to_string(options_.max_hello_bytes) + " bytes",
                                protocol::RefusalCode::kTooLarge});
    conn->Close();
    return;
  }
  if (hello) OnHello(conn, arn, std::move(*hello));
}

void AgentChannel::OnClose(const std::shared_ptr<WebSocketConnection>& conn) {
  std::string arn;
  size_t open = 0;
  std::vector<RequestDone> orphaned;  // requests sent on this connection: no answer will come
  {
    std::lock_guard lock(mu_);
    for (auto it = requests_.begin(); it != requests_.end();) {
      if (it->second.conn != conn.get()) {
        ++it;
        continue;
      }
      orphaned.push_back(std::move(it->second.done));
      it = requests_.erase(it);
    }
  }
  FailRequests(std::move(orphaned), "the agent's connection closed before it answered");
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.get());
    if (it == peers_.end()) return;  // replaced by a newer connection: the instance stays connected
    arn = it->second.instance_arn;
    peers_.erase(it);
    auto bi = by_instance_.find(arn);
    if (bi != by_instance_.end() && bi->second == conn.get()) by_instance_.erase(bi);
    open = by_instance_.size();
  }
  events_.Log(ChannelEventLog::Event::kDisconnected, arn, "", open);
  gpu_memory_.DropInstance(arn);
  cp_.AgentDisconnected(arn);
}

// ---- GPU memory in use ------------------------------------------------------------------------------------------

void AgentChannel::KeepGpuMemory(const std::shared_ptr<WebSocketConnection>& conn, const std::string& instance_arn,
                                 const protocol::Heartbeat& heartbeat) {
  if (!heartbeat.gpu_memory_refused.empty()) {
    ++gpu_memory_refusals_;
    bool first = false;
    {
      std::lock_guard lock(mu_);
      auto it = peers_.find(conn.get());
      if (it != peers_.end() && !it->second.gpu_memory_warned) first = it->second.gpu_memory_warned = true;
    }
    if (first)  // once per connection: the agent sends one every heartbeat
      spdlog::warn("agent channel: {} sent GPU memory figures that were refused (the rest of its heartbeat was "
                   "applied): {}", instance_arn, heartbeat.gpu_memory_refused.substr(0, 300));
  }
  std::map<std::string, GpuMemoryUsage::Reading> kept;
  if (heartbeat.gpu_memory) {
    const std::shared_ptr<const ReadView> view = cp_.applier().View();
    const ContainerInstance* instance = view->FindInstance(instance_arn);
    const EpochMs read_at = cp_.applier().Now() - heartbeat.gpu_memory->age_ms;
    for (const auto& t : heartbeat.gpu_memory->tasks) {
      const Task* task = view->FindTask(t.task_arn);
      if (instance == nullptr || task == nullptr || task->container_instance_arn != instance_arn ||
          task->last_status == TaskStatus::kStopped)
        continue;  // not a task of this instance that runs (the parser already refused one listed twice)
      GpuMemoryUsage::Reading r{read_at, {}};
      for (const auto& g : t.gpus) {
        const bool ours = std::any_of(instance->gpus.begin(), instance->gpus.end(),
                                      [&g](const Gpu& gpu) { return gpu.id == g.gpu_id; });
        if (ours) r.gpus[g.gpu_id] = g.bytes;
      }
      kept.emplace(t.task_arn, std::move(r));
    }
  }
  gpu_memory_.Replace(instance_arn, std::move(kept));
}

void GpuMemoryUsage::Replace(const std::string& instance_arn, std::map<std::string, Reading> tasks) {
  std::lock_guard lock(mu_);
  auto& current = by_instance_[instance_arn];
  bool changed = current.size() != tasks.size();
  for (auto it = current.begin(); !changed && it != current.end(); ++it) {
    auto next = tasks.find(it->first);
    changed = next == tasks.end() || next->second.gpus != it->second.gpus;
  }
  for (const auto& [task, _] : current) instance_of_.erase(task);
  for (const auto& [task, _] : tasks) {
    // A task another instance reported last (it moved: a stale figure there) is taken from that instance.
    auto other = instance_of_.find(task);
    if (other != instance_of_.end() && other->second != instance_arn) by_instance_[other->second].erase(task);
    instance_of_[task] = instance_arn;
  }
  current = std::move(tasks);
  if (current.empty()) by_instance_.erase(instance_arn);
  if (changed) ++generation_;
}

void GpuMemoryUsage::DropTask(const std::string& task_arn) {
  std::lock_guard lock(mu_);
  auto it = instance_of_.find(task_arn);
  if (it == instance_of_.end()) return;
  auto inst = by_instance_.find(it->second);
  if (inst != by_instance_.end()) {
    inst->second.erase(task_arn);
    if (inst->second.empty()) by_instance_.erase(inst);
  }
  instance_of_.erase(it);
  ++generation_;
}

void GpuMemoryUsage::DropInstance(const std::string& instance_arn) {
  std::lock_guard lock(mu_);
  auto inst = by_instance_.find(instance_arn);
  if (inst == by_instance_.end()) return;
  for (const auto& [task, _] : inst->second) instance_of_.erase(task);
  by_instance_.erase(inst);
  ++generation_;
}

std::optional<GpuMemoryUsage::Reading> GpuMemoryUsage::Of(const std::string& task_arn) const {
  std::lock_guard lock(mu_);
  auto it = instance_of_.find(task_arn);
  if (it == instance_of_.end()) return std::nullopt;
  auto inst = by_instance_.find(it->second);
  if (inst == by_instance_.end()) return std::nullopt;
  auto task = inst->second.find(task_arn);
  if (task == inst->second.end()) return std::nullopt;
  return task->second;
}

size_t GpuMemoryUsage::tasks() const {
  std::lock_guard lock(mu_);
  return instance_of_.size();
}

uint64_t GpuMemoryUsage::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

namespace {

int64_t& PushId(AgentPush& push) {
  return std::visit([](auto& p) -> int64_t& { return p.id; }, push);
}

protocol::ServerMessage AsMessage(const AgentPush& push) {
  return std::visit([](const auto& p) -> protocol::ServerMessage { return p; }, push);
}

const char* PushType(const AgentPush& push) { return std::holds_alternative<protocol::Assign>(push) ? "assign" : "stop"; }

}  // namespace

void AgentChannel::RequestLogs(const std::string& instance_arn, protocol::LogsRequest request,
                               std::chrono::milliseconds timeout,
                               std::function<void(Result<protocol::LogsAnswer>)> done) {
  request.id = next_request_id_++;
  std::shared_ptr<WebSocketConnection> conn;
  {
    std::lock_guard lock(mu_);
    auto it = by_instance_.find(instance_arn);
    if (!stopping_ && it != by_instance_.end()) {
      Peer& peer = peers_[it->second];
      if (!peer.closing) {
        conn = peer.conn;
        // Kept before it is sent, so the answer cannot arrive before the request is pending.
        requests_[request.id] =
            PendingRequest{conn.get(), instance_arn, std::chrono::steady_clock::now() + timeout, std::move(done)};
      }
    }
  }
  if (!conn) {
    done(Status::Server("the agent of " + instance_arn + " is not connected"));
    return;
  }
  conn->Send(protocol::Serialize(protocol::ServerMessage(std::move(request))));
}

size_t AgentChannel::pending_requests() const {
  std::lock_guard lock(mu_);
  return requests_.size();
}

void AgentChannel::OnLogsAnswer(const std::shared_ptr<WebSocketConnection>& conn, protocol::LogsAnswer answer) {
  RequestDone done;
  {
    std::lock_guard lock(mu_);
    auto it = requests_.find(answer.id);
    // An unknown id (timed out already) or one sent on another connection is ignored.
    if (it == requests_.end() || it->second.conn != conn.get()) return;
    done = std::move(it->second.done);
    requests_.erase(it);
  }
  done(std::move(answer));
}

void AgentChannel::FailRequests(std::vector<RequestDone> done, const std::string& why) {
  for (auto& d : done) d(Status::Server(why));
}

void AgentChannel::Push(const std::string& instance_arn, AgentPush push) {
  const int64_t id = next_push_id_++;
  PushId(push) = id;
  std::visit([e = epoch()](auto& p) { p.epoch = e; }, push);
  std::shared_ptr<WebSocketConnection> conn;
  {
    std::lock_guard lock(mu_);
    auto it = by_instance_.find(instance_arn);
    if (it == by_instance_.end()) return;
    Peer& peer = peers_[it->second];
    // Kept before it is sent, so an ack cannot arrive before the push is pending.
    peer.unacked[id] = Unacked{push, std::chrono::steady_clock::now(), 1};
    conn = peer.conn;
  }
  SendPush(conn, instance_arn, push);
}

void AgentChannel::SendPush(const std::shared_ptr<WebSocketConnection>& conn, const std::string& instance_arn,
                            const AgentPush& message) {
  std::string text = protocol::Serialize(AsMessage(message));
  if (options_.drop_push && options_.drop_push(instance_arn, Json::parse(text, nullptr, false))) return;
  conn->Send(std::move(text));
}

// Watchdog closes connections whose agent has been silent for missed_heartbeats intervals; closing marks the
// instance disconnected (OnClose). It also sends again the pushes left unacked for push_ack_timeout while they
// still matter (ControlPlane::ResendPushIfWanted: no report about the task has been applied yet), forgets those
// that no longer do (the agent acted on them without acking: an older agent), and closes a connection whose
// push still matters after push_attempts sends.
void AgentChannel::Watchdog() {
  std::unique_lock lock(mu_);
  const auto window = options_.heartbeat_interval * options_.missed_heartbeats;
  const auto tick = std::max(std::chrono::milliseconds(20),
                             std::min(options_.heartbeat_interval, options_.push_ack_timeout) / 4);
  struct Due {
    std::shared_ptr<WebSocketConnection> conn;
    std::string instance_arn;
    int64_t id;
    AgentPush message;
    bool last;  // sent push_attempts times already
  };
  while (!stopping_) {
    cv_.wait_for(lock, tick);
    if (stopping_) break;
    auto now = std::chrono::steady_clock::now();
    const size_t open = by_instance_.size();  // for the connect lines' summary, logged outside the lock
    std::vector<RequestDone> expired;
    for (auto it = requests_.begin(); it != requests_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      expired.push_back(std::move(it->second.done));
      it = requests_.erase(it);
    }
    if (!expired.empty()) {
      lock.unlock();
      FailRequests(std::move(expired), "the agent did not answer in time");
      lock.lock();
    }
    std::vector<std::shared_ptr<WebSocketConnection>> silent;
    std::vector<Due> due;
    for (auto& [_, peer] : peers_) {
      if (now - peer.last_seen > window) {
        silent.push_back(peer.conn);
        continue;
      }
      if (peer.closing) continue;
      for (auto& [push_id, u] : peer.unacked) {
        if (now - u.sent < options_.push_ack_timeout) continue;
        const bool last = u.sends >= options_.push_attempts;
        if (!last) ++u.sends;
        u.sent = now;
        due.push_back({peer.conn, peer.instance_arn, push_id, u.message, last});
      }
    }
    lock.unlock();
    events_.Flush(open);
    for (auto& c : silent) {
      spdlog::warn("agent channel: no heartbeat from {} for {} ms; disconnecting it", c->remote_address(),
                   window.count());
      c->Close();
    }
    std::vector<std::pair<WebSocketConnection*, int64_t>> settled;  // pushes that no longer matter
    std::set<WebSocketConnection*> closed;
    // One check for every due push, on the writer thread; the copies are queued there (see
    // ControlPlane::ResendPushesIfWanted).
    std::vector<ControlPlane::PushCheck> checks;
    checks.reserve(due.size());
    for (auto& d : due)
      checks.push_back({d.instance_arn, &d.message, [this, &d] {
                          if (d.last) return;
                          ++push_retries_;
                          spdlog::info("agent channel: {} has not acked {} {}; sending it again", d.instance_arn,
                                       PushType(d.message), d.id);
                          SendPush(d.conn, d.instance_arn, d.message);  // only queues it
                        }});
    const std::vector<bool> wanted = cp_.ResendPushesIfWanted(checks);
    for (size_t i = 0; i < due.size(); ++i) {
      Due& d = due[i];
      if (closed.count(d.conn.get())) continue;
      if (!wanted[i]) {
        settled.emplace_back(d.conn.get(), d.id);
      } else if (d.last) {
        closed.insert(d.conn.get());
        ++push_unacked_closes_;
        spdlog::warn("agent channel: {} acked no {} after {} sends; disconnecting it (it reconciles on reconnect)",
                     d.instance_arn, PushType(d.message), options_.push_attempts);
        d.conn->Close();
      }
    }
    lock.lock();
    for (auto [conn, push_id] : settled)
      if (auto it = peers_.find(conn); it != peers_.end()) it->second.unacked.erase(push_id);
    for (WebSocketConnection* conn : closed)
      if (auto it = peers_.find(conn); it != peers_.end()) it->second.closing = true;
  }
}

}  // namespace gpupack::api
