#include "api/agent_channel.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "api/ecs_handler.h"  // kMaxJsonDepth

namespace gpupack::api {

std::string InstanceArnFromQuery(const std::string& target) {
  size_t q = target.find('?');
  if (q == std::string::npos) return "";
  std::string query = target.substr(q + 1);
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    std::string pair = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    if (pair.rfind("containerInstance=", 0) == 0) {
      std::string raw = pair.substr(18), out;
      for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] == '%' && i + 2 < raw.size() + 0 && i + 2 <= raw.size() - 1 + 1) {
          int v = 0;
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

AgentChannel::AgentChannel(ControlPlane& control_plane, AgentChannelOptions options)
    : cp_(control_plane), options_(options) {
  cp_.SetAgentNotifier([this](const std::string& arn, Json message) { Push(arn, std::move(message)); });
  watchdog_ = std::thread([this] { Watchdog(); });
}

AgentChannel::~AgentChannel() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  cp_.SetAgentNotifier(nullptr);
}

WebSocketHandler AgentChannel::Handler() {
  WebSocketHandler h;
  h.accept = [this](const HttpRequest& req) -> Status {
    if (options_.authenticator != nullptr) {
      // Signature first: an unsigned caller learns nothing about which instances exist.
      if (Status s = options_.authenticator->Check(req, kAgentChannelAction); !s.ok()) {
        ++auth_refusals_;
        const std::string& m = s.message();
        spdlog::warn("auth: refused the agent channel upgrade from {}: {}", req.remote_address,
                     m.substr(0, std::min<size_t>(m.find('\n'), 200)));
        return s;
      }
    }
    std::string arn = InstanceArnFromQuery(req.target);
    if (arn.empty()) return Status::InvalidParameter("the agent channel needs ?containerInstance=<ARN>");
    return cp_.CheckAgentInstance(arn);
  };
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
  std::string arn = InstanceArnFromQuery(req.target);
  std::shared_ptr<WebSocketConnection> replaced;
  {
    std::lock_guard lock(mu_);
    auto it = by_instance_.find(arn);
    if (it != by_instance_.end()) {
      replaced = peers_[it->second].conn;
      peers_.erase(it->second);
    }
    // The new connection starts with no pending push: the welcome's reconcile covers the old one's.
    peers_[conn.get()] = Peer{conn, arn, std::chrono::steady_clock::now(), false, false, {}};
    by_instance_[arn] = conn.get();
  }
  ++connections_opened_;
  if (replaced) {
    spdlog::info("agent channel: {} reconnected; closing its previous connection", arn);
    replaced->Close();
  }
  spdlog::info("agent channel: {} connected from {}", arn, conn->remote_address());
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
  // Nesting is limited as for request bodies (kMaxJsonDepth): copying or printing a deeper document (the id is
  // echoed, hello's tasks are copied) recurses once per level and a 1 MiB message would overflow the stack.
  bool too_deep = false;
  Json msg = Json::parse(text, [&too_deep](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  }, /*allow_exceptions=*/false);
  if (too_deep) {
    conn->Send(Json{{"type", "error"}, {"message", "messages nest at most " + std::to_string(kMaxJsonDepth) +
                                                       " levels deep"}}.dump());
    return;
  }
  if (!msg.is_object() || !msg.contains("type") || !msg["type"].is_string()) {
    conn->Send(Json{{"type", "error"}, {"message", "messages are JSON objects with a string 'type'"}}.dump());
    return;
  }
  const std::string type = msg["type"];
  Json id = msg.contains("id") ? msg["id"] : Json();
  auto reply = [conn, id](OperationResult r) {
    Json out = r.status.ok() ? r.body : Json{{"type", "error"}, {"message", r.status.message()}};
    if (!id.is_null()) out["id"] = id;
    conn->Send(out.dump(-1, ' ', false, Json::error_handler_t::replace));
  };
  if (type == "hello") {
    // Pushes sent on this connection so far come from operations that ran before the hello's reconcile, which
    // sees their outcome: the welcome carries whatever of them the agent still lacks, so they need no ack.
    std::vector<int64_t> covered;
    {
      std::lock_guard lock(mu_);
      auto it = peers_.find(conn.get());
      if (it != peers_.end())
        for (const auto& [push_id, _] : it->second.unacked) covered.push_back(push_id);
    }
    cp_.AgentHello(arn, msg, [this, conn, reply, covered = std::move(covered)](OperationResult r) {
      if (r.status.ok()) {
        r.body["heartbeatIntervalMs"] = options_.heartbeat_interval.count();
        std::lock_guard lock(mu_);
        auto it = peers_.find(conn.get());
        if (it != peers_.end()) {
          it->second.hello_done = true;
          for (int64_t push_id : covered) it->second.unacked.erase(push_id);
        }
      }
      reply(std::move(r));
    });
  } else if (type == "state") {
    cp_.AgentStateChange(arn, msg, reply);
  } else if (type == "heartbeat") {
    cp_.AgentHeartbeat(arn, msg, reply);
  } else if (type == "ack") {
    // The agent recorded a push: stop re-sending it. An unknown id (already acked, or from a replaced
    // connection) is ignored; an ack is never answered.
    if (!id.is_number_integer()) return;
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.get());
    if (it != peers_.end()) it->second.unacked.erase(id.get<int64_t>());
  } else {
    reply({Status::InvalidParameter("unknown message type '" + type.substr(0, 64) + "'"), {}});
  }
}

void AgentChannel::OnClose(const std::shared_ptr<WebSocketConnection>& conn) {
  std::string arn;
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(conn.get());
    if (it == peers_.end()) return;  // replaced by a newer connection: the instance stays connected
    arn = it->second.instance_arn;
    peers_.erase(it);
    auto bi = by_instance_.find(arn);
    if (bi != by_instance_.end() && bi->second == conn.get()) by_instance_.erase(bi);
  }
  spdlog::info("agent channel: {} disconnected", arn);
  cp_.AgentDisconnected(arn);
}

void AgentChannel::Push(const std::string& instance_arn, Json message) {
  message["id"] = next_push_id_++;
  std::shared_ptr<WebSocketConnection> conn;
  {
    std::lock_guard lock(mu_);
    auto it = by_instance_.find(instance_arn);
    if (it == by_instance_.end()) return;
    Peer& peer = peers_[it->second];
    // Kept before it is sent, so an ack cannot arrive before the push is pending.
    peer.unacked[message["id"].get<int64_t>()] = Unacked{message, std::chrono::steady_clock::now(), 1};
    conn = peer.conn;
  }
  SendPush(conn, instance_arn, message);
}

void AgentChannel::SendPush(const std::shared_ptr<WebSocketConnection>& conn, const std::string& instance_arn,
                            const Json& message) {
  if (options_.drop_push && options_.drop_push(instance_arn, message)) return;
  conn->Send(message.dump(-1, ' ', false, Json::error_handler_t::replace));
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
    Json message;
    bool last;  // sent push_attempts times already
  };
  while (!stopping_) {
    cv_.wait_for(lock, tick);
    if (stopping_) break;
    auto now = std::chrono::steady_clock::now();
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
    for (auto& c : silent) {
      spdlog::warn("agent channel: no heartbeat from {} for {} ms; disconnecting it", c->remote_address(),
                   window.count());
      c->Close();
    }
    std::vector<std::pair<WebSocketConnection*, int64_t>> settled;  // pushes that no longer matter
    std::set<WebSocketConnection*> closed;
    for (auto& d : due) {
      if (closed.count(d.conn.get())) continue;
      const bool wanted = cp_.ResendPushIfWanted(d.instance_arn, d.message, [&] {
        if (d.last) return;
        ++push_retries_;
        spdlog::info("agent channel: {} has not acked {} {}; sending it again", d.instance_arn,
                     d.message.value("type", ""), d.id);
        SendPush(d.conn, d.instance_arn, d.message);  // only queues it, under the control plane's lock
      });
      if (!wanted) {
        settled.emplace_back(d.conn.get(), d.id);
      } else if (d.last) {
        closed.insert(d.conn.get());
        ++push_unacked_closes_;
        spdlog::warn("agent channel: {} acked no {} after {} sends; disconnecting it (it reconciles on reconnect)",
                     d.instance_arn, d.message.value("type", ""), options_.push_attempts);
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
