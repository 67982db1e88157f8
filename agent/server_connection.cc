#include "agent/server_connection.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include <spdlog/spdlog.h>

#include "base/atomic_file.h"

namespace gpupack::agent {

namespace fs = std::filesystem;
using protocol::TaskStatus;

namespace {

constexpr const char* kAgentVersion = "gpupack-agent 0.1.0";
// kEpochFile: the highest leadership epoch seen, {"epoch": N}, in the state directory.
constexpr const char* kEpochFile = "leader_epoch.json";

// WriteStateFile replaces a file of the state directory whole (base/atomic_file.h; 0666 less the umask, as an
// ofstream made it); false when it could not.
bool WriteStateFile(const fs::path& path, const std::string& content) {
  return WriteFileAtomically(path.string(), content, 0666).ok();
}

}  // namespace

// ---- declined upgrades -------------------------------------------------------------------------------------------

ChannelDecline ReadDecline(const DeclinedUpgrade& declined) {
  ChannelDecline d;
  const Json j = Json::parse(declined.body, nullptr, false);
  auto text = [&j](const char* key) -> const std::string* {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get_ptr<const std::string*>() : nullptr;
  };
  if (const std::string* m = text("message")) d.message = m->substr(0, 500);
  else d.message = declined.body.substr(0, 200);
  if (const std::string* code = text("code")) d.code = protocol::ParseRefusalCode(*code);
  if (const std::string* leader = text("leader")) d.leader = leader->substr(0, 512);
  if (d.leader.empty()) d.leader = declined.leader;
  if (d.code == protocol::RefusalCode::kUnauthorized) d.action = ChannelDecline::Action::kAuthRefused;
  if (d.code == protocol::RefusalCode::kUnknownInstance) d.action = ChannelDecline::Action::kRegister;
  if (d.code == protocol::RefusalCode::kNotLeader && !d.leader.empty())
    d.action = ChannelDecline::Action::kFollowLeader;
  if (d.action != ChannelDecline::Action::kFollowLeader) d.leader.clear();  // only a standby's refusal names one
  return d;
}

// ---- ReconnectPolicy ---------------------------------------------------------------------------------------------

ReconnectPolicy::ReconnectPolicy(size_t servers, Random random)
    : servers_(std::max<size_t>(1, servers)), random_(std::move(random)) {
  if (!random_) {
    random_ = [engine = std::mt19937_64(std::random_device{}())]() mutable {
      return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
    };
  }
}

ReconnectPolicy::Outcome ReconnectPolicy::Classify(const DeclinedUpgrade& declined) {
  if (declined.http_status == 0) return Outcome::kUnreachable;
  return ReadDecline(declined).action == ChannelDecline::Action::kFollowLeader ? Outcome::kLeaderNamed
                                                                                : Outcome::kAnswered;
}

void ReconnectPolicy::SetServers(size_t servers) { servers_ = std::max<size_t>(1, servers); }

void ReconnectPolicy::Connected() {
  backoff_ = kBase;
  tried_ = 0;
}

std::chrono::milliseconds ReconnectPolicy::Closed() {
  tried_ = 0;
  return Jitter(kBase);
}

std::chrono::milliseconds ReconnectPolicy::Failed(Outcome outcome) {
  ++tried_;
  // A leader named is followed at once even on the walk's last attempt (one beyond the list): a standby that
  // names a dead leader costs one refused connection more, then the walk ends.
  const size_t limit = outcome == Outcome::kLeaderNamed ? servers_ + 1 : servers_;
  if (tried_ < limit) return std::chrono::milliseconds(0);
  tried_ = 0;
  const std::chrono::milliseconds wait = Jitter(backoff_);
  backoff_ = std::min(backoff_ * 2, kCap);
  return wait;
}

std::chrono::milliseconds ReconnectPolicy::Jitter(std::chrono::milliseconds ceiling) {
  const double r = std::clamp(random_(), 0.0, 1.0);
  return std::chrono::milliseconds(static_cast<int64_t>(r * static_cast<double>(ceiling.count())));
}

// ---- ServerConnection --------------------------------------------------------------------------------------------

ServerConnection::ServerConnection(ConnectionOptions options, Listener& listener, Health health)
    : options_(std::move(options)), listener_(listener), health_(std::move(health)) {
  servers_ = options_.servers.empty() ? std::vector<ServerEndpoint>{options_.server} : options_.servers;
  reconnect_.SetServers(servers_.size());
  for (auto& s : servers_) s.signing = options_.server.signing;
  if (std::ifstream in(fs::path(options_.state_dir) / "instance.json"); in) {
    Json j = Json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("containerInstanceArn") && j["containerInstanceArn"].is_string())
      instance_arn_ = j["containerInstanceArn"];
  }
  if (std::ifstream in(fs::path(options_.state_dir) / kEpochFile); in) {
    Json j = Json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("epoch") && j["epoch"].is_number_integer() && j["epoch"].get<int64_t>() > 0) {
      epoch_ = j["epoch"].get<int64_t>();
      spdlog::info("agent: leadership epoch {} remembered from {}", epoch_, kEpochFile);
    } else {
      spdlog::warn("agent: ignoring {}: not {{\"epoch\": N}}", kEpochFile);
    }
  }
}

ServerConnection::~ServerConnection() { Stop(); }

std::string ServerConnection::instance_arn() const {
  std::lock_guard lock(mu_);
  return instance_arn_;
}

// ---- registration ------------------------------------------------------------------------------------------------

Status ServerConnection::Register() {
  std::lock_guard registering(register_mu_);
  const Registration& reg = options_.registration;
  Json devices = Json::array();
  for (const auto& d : reg.devices)
    devices.push_back({{"id", d.uuid}, {"type", "GPU"}, {"gpuInfo", {{"memoryInMiB", d.usable_mib}}}});
  Json attrs = Json::array({{{"name", protocol::kChannelAttribute}, {"value", protocol::kChannelVersion}}});
  const bool serving = health_.mps_serving ? health_.mps_serving() : false;
  if (serving) attrs.push_back({{"name", protocol::kMpsCapability}});
  if (!reg.devices.empty()) attrs.push_back({{"name", "gpupack.gpu-model"}, {"value", reg.devices[0].name}});
  for (const auto& [k, v] : reg.attributes) attrs.push_back({{"name", k}, {"value", v}});
  Json identity = {{"instanceId", reg.name}};
  if (!reg.instance_type.empty()) identity["instanceType"] = reg.instance_type;
  Json body = {{"cluster", reg.cluster},
               {"instanceIdentityDocument", identity.dump()},
               {"totalResources", Json::array({{{"name", "CPU"}, {"type", "INTEGER"}, {"integerValue", reg.cpu}},
                                               {{"name", "MEMORY"}, {"type", "INTEGER"}, {"integerValue", reg.memory}}})},
               {"platformDevices", devices},
               {"attributes", attrs},
               {"versionInfo", {{"agentVersion", kAgentVersion}}}};
  std::string arn = instance_arn();
  if (!arn.empty()) body["containerInstanceArn"] = arn;
  auto r = CallEcs(Current(), "RegisterContainerInstance", body);
  // Several servers (--server URL,URL,...): one that cannot be reached or cannot serve now (ServerException)
  // makes the registration try the next, each once.
  size_t servers = 0;
  size_t first = 0;
  {
    std::lock_guard lock(mu_);
    servers = servers_.size();
    first = current_;
  }
  for (size_t tried = 1; !r.ok() && r.status().code() == ErrorCode::kServer && tried < servers; ++tried) {
    spdlog::warn("agent: registration at {} failed: {}; trying the next server", Current().Url(), r.status().message());
    NextServer("");
    r = CallEcs(Current(), "RegisterContainerInstance", body);
  }
  if (!r.ok() && r.status().code() == ErrorCode::kServer) {
    // Failed everywhere: the channel goes on from where it was, not from the last server this walk tried.
    std::lock_guard lock(mu_);
    current_ = first;
  }
  if (!r.ok() && r.status().code() == ErrorCode::kClusterNotFound) {
    // Like the ECS agent with the default cluster: create the cluster it was told to join.
    auto created = CallEcs(Current(), "CreateCluster", Json{{"clusterName", reg.cluster}});
    if (!created.ok()) return created.status();
    r = CallEcs(Current(), "RegisterContainerInstance", body);
  }
  if (!r.ok() && !arn.empty() && r.status().code() == ErrorCode::kInstanceDeregistered) {
    deregistered_.store(true);
    return Status::Client("the server deregistered container instance " + arn +
                          ": its tasks are stopped and this agent registers no more; to bring the host back as a "
                          "new instance, remove " + (fs::path(options_.state_dir) / "instance.json").string() +
                          " and restart the agent");
  }
  if (!r.ok() && !arn.empty() && r.status().code() == ErrorCode::kInvalidParameter) {
    spdlog::warn("agent: the server no longer knows {}; registering as a new instance", arn);
    body.erase("containerInstanceArn");
    r = CallEcs(Current(), "RegisterContainerInstance", body);
  }
  if (!r.ok() && r.status().code() == ErrorCode::kAccessDenied) {
    // Most often a key that belongs to another host (an agent key registers one container instance).
    spdlog::error("agent: the server refused to register this host ({}): {}", reg.name, r.status().message());
  }
  if (!r.ok()) return r.status();
  const Json& ci = (*r)["containerInstance"];
  if (!ci.is_object() || !ci.contains("containerInstanceArn") || !ci["containerInstanceArn"].is_string())
    return Status::Server("RegisterContainerInstance answered no containerInstanceArn");
  arn = ci["containerInstanceArn"].get<std::string>();
  {
    std::lock_guard lock(mu_);
    instance_arn_ = arn;
  }
  registered_capability_ = serving;
  WriteStateFile(fs::path(options_.state_dir) / "instance.json", Json{{"containerInstanceArn", arn}}.dump());
  spdlog::info("agent: registered {} with {} GPU(s) in cluster {}", arn, reg.devices.size(), reg.cluster);

  return Status::Ok();
}

void ServerConnection::MpsServingChanged(bool serving) {
  if (serving == registered_capability_.load()) return;
  // ecs.capability.gpu-sharing-mps only while the daemon answers.
  if (Status s = Register(); !s.ok()) spdlog::warn("agent: re-registration failed: {}", s.message());
}

// ---- the connection thread ----------------------------------------------------------------------------------------

void ServerConnection::Start() { thread_ = std::thread([this] { Loop(); }); }

void ServerConnection::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ServerConnection::Loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (closed_) {
      // Dropped outside the lock: its destructor joins its io thread, whose callbacks take the lock.
      std::unique_ptr<ChannelClient> old = std::move(channel_);
      closed_ = false;
      ready_ = false;
      const std::chrono::milliseconds wait = reconnect_.Closed();
      next_connect_ = Clock::now() + wait;
      lock.unlock();
      spdlog::warn("agent: channel closed; reconnecting in {} ms", wait.count());
      old.reset();
      lock.lock();
      continue;
    }
    if (channel_ && Clock::now() >= SilentAfter()) {
      // A server silent this long is gone without a close (stopped, hung, cut off): leave it for the next one.
      spdlog::warn("agent: the server at {} said nothing for {} ms; closing the channel and trying the next server",
                   servers_[current_].Url(), (heartbeat_interval_ * kSilentHeartbeats).count());
      channel_->Close();
      closed_ = true;
      ready_ = false;
      current_ = (current_ + 1) % servers_.size();
      continue;
    }
    if (!channel_ && Clock::now() >= next_connect_) {
      lock.unlock();
      Connect();
      lock.lock();
      continue;
    }
    if (ready_ && (heartbeat_due_ || Clock::now() >= next_heartbeat_)) {
      heartbeat_due_ = false;
      next_heartbeat_ = Clock::now() + heartbeat_interval_;
      lock.unlock();
      SendHeartbeat();
      lock.lock();
      continue;
    }
    const auto wake = channel_ ? std::min(ready_ ? next_heartbeat_ : Clock::now() + heartbeat_interval_, SilentAfter())
                               : next_connect_;
    cv_.wait_until(lock, wake, [this] { return stopping_ || closed_ || heartbeat_due_; });
  }
  std::unique_ptr<ChannelClient> old = std::move(channel_);
  ready_ = false;
  lock.unlock();
  old.reset();
}

ServerEndpoint ServerConnection::Current() const {
  std::lock_guard lock(mu_);
  return servers_[current_];
}

bool ServerConnection::NextServer(const std::string& leader_url) {
  std::lock_guard lock(mu_);
  if (!leader_url.empty()) {
    // Only a server this agent was configured with (--server) is followed: a URL a refusal names is the word of
    // whoever answered, and a stranger reached that way would get this agent's signed upgrade, its hello and its
    // trust in the epoch it claims (docs/security.md, "Who the agent talks to").
    if (auto leader = ServerEndpoint::Parse(leader_url); leader.ok()) {
      for (size_t i = 0; i < servers_.size(); ++i)
        if (servers_[i].host == leader->host && servers_[i].port == leader->port) {
          current_ = i;
          return true;
        }
    }
    if (ignored_leaders_.size() < kMaxIgnoredLeaders && ignored_leaders_.insert(leader_url).second)
      spdlog::warn("agent: {} named {} as the leader, which is not one of this agent's --server URLs; ignoring it "
                   "(the agent connects only to the servers it was configured with)",
                   servers_[current_].Url(), leader_url);
  }
  current_ = (current_ + 1) % servers_.size();
  return false;
}

void ServerConnection::Connect() {
  uint64_t generation = 0;
  {
    std::lock_guard lock(mu_);
    generation = ++generation_;
  }
  DeclinedUpgrade declined;
  auto c = ChannelClient::Connect(Current(), protocol::ChannelTarget(instance_arn()),
                                  {[this, generation](std::string m) { OnMessage(generation, m); },
                                   [this, generation] { OnClosed(generation); }},
                                  std::chrono::milliseconds(5000), &declined);
  if (!c.ok()) {
    const ServerEndpoint failed = Current();
    const std::string& why = c.status().message();  // for the log only: the decisions read `declined`
    ReconnectPolicy::Outcome outcome = ReconnectPolicy::Classify(declined);
    const ChannelDecline decline = declined.http_status != 0 ? ReadDecline(declined) : ChannelDecline{};
    // NextServer moves to the leader a standby named (the refusal's "leader" field) when it is one of the
    // configured servers, else to the next server; a leader named but not followed counts as a plain refusal.
    if (!NextServer(decline.leader) && outcome == ReconnectPolicy::Outcome::kLeaderNamed)
      outcome = ReconnectPolicy::Outcome::kAnswered;
    if (declined.http_status != 0) {
      // The server answered: its code decides. Only an instance it does not know is registered again: a
      // standby's redirect, a busy server (503) or an authentication refusal says nothing about the instance,
      // and re-registering on each would make every agent register on every walk of a takeover.
      if (decline.action == ChannelDecline::Action::kAuthRefused) {
        spdlog::error("agent: the server at {} refused this agent's credentials for the channel (HTTP {}): {}; "
                      "not registering again, retrying with the backoff",
                      failed.Url(), declined.http_status, why);
      }
      if (decline.action == ChannelDecline::Action::kRegister) {
        // The server may have forgotten the instance (a new database), or deregistered it: register again.
        if (Status s = Register(); !s.ok()) spdlog::warn("agent: re-registration failed: {}", s.message());
        if (deregistered_.load()) {
          spdlog::error("agent: the server deregistered this instance while the channel was away: stopping every "
                        "task; this agent connects no more");
          listener_.OnDeregistered();
          std::lock_guard lock(mu_);
          next_connect_ = Clock::now() + std::chrono::hours(24 * 365);  // (max() would overflow wait_until)
          return;
        }
      }
    }
    std::lock_guard lock(mu_);
    // The next server of the walk at once; after a whole walk failed, a jittered backoff.
    reconnect_.SetServers(servers_.size());
    const std::chrono::milliseconds wait = reconnect_.Failed(outcome);
    next_connect_ = Clock::now() + wait;
    spdlog::warn("agent: channel to {}: {}; trying {} in {} ms", failed.Url(), why, servers_[current_].Url(),
                 wait.count());
    return;
  }
  const bool impaired = health_.impaired ? health_.impaired() : false;
  std::lock_guard lock(mu_);
  channel_ = std::move(*c);
  closed_ = false;
  reconnect_.Connected();
  pending_acks_.clear();
  hello_stopped_.clear();
  // Under the lock SendState takes: a report either made it into this snapshot or goes out after the hello.
  protocol::Hello hello;
  hello.tasks = listener_.HelloTasks();
  hello.impaired = impaired;
  for (const auto& t : hello.tasks)
    if (t.status == TaskStatus::kStopped) hello_stopped_.insert(t.task_arn);
  // One message, or parts when the hello passes the server's message limit (many tasks of many containers).
  std::vector<std::string> messages = protocol::SerializeHello(hello);
  const size_t count = messages.size();
  for (std::string& m : messages) channel_->Send(std::move(m));
  ready_ = true;
  next_heartbeat_ = Clock::now();
  last_heard_ = Clock::now();
  spdlog::info("agent: channel open; reported {} task(s) in {} message(s)", hello.tasks.size(), count);
}

void ServerConnection::SendHeartbeat() {
  protocol::Heartbeat hb;
  hb.impaired = health_.impaired ? health_.impaired() : false;
  if (health_.held_gpus) hb.held_gpus = health_.held_gpus();
  if (health_.gpu_memory) hb.gpu_memory = health_.gpu_memory();
  hb.id = next_id_++;
  const std::string text = protocol::Serialize(protocol::AgentMessage(hb));
  std::lock_guard lock(mu_);
  if (ready_ && channel_) channel_->Send(text);
}

void ServerConnection::HeartbeatNow() {
  {
    std::lock_guard lock(mu_);
    heartbeat_due_ = true;
  }
  cv_.notify_all();
}

// ---- reports and acks -------------------------------------------------------------------------------------------

void ServerConnection::SendState(const protocol::TaskReport& report) {
  std::lock_guard lock(mu_);
  if (!ready_ || !channel_) return;  // the next hello reports it
  const int64_t id = next_id_++;
  pending_acks_[id] = {report.task_arn, report.status};
  channel_->Send(protocol::Serialize(protocol::AgentMessage(protocol::StateReport{id, report})));
}

// Ack tells the server a push (assign, stop) is recorded, so it stops re-sending it. A push without an id needs
// none; a lost ack only makes the server send the push again, which changes nothing.
void ServerConnection::Ack(int64_t push_id) {
  if (push_id == 0) return;
  std::lock_guard lock(mu_);
  if (channel_) channel_->Send(protocol::Serialize(protocol::AgentMessage(protocol::Ack{push_id})));
}

void ServerConnection::SendLogs(const protocol::LogsAnswer& answer) {
  std::string text = protocol::Serialize(protocol::AgentMessage(answer));
  std::lock_guard lock(mu_);
  if (ready_ && channel_) channel_->Send(std::move(text));
}

void ServerConnection::WaitForAcks(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return pending_acks_.empty() || !ready_ || closed_; });
}

// ---- the channel's io thread -------------------------------------------------------------------------------------

void ServerConnection::OnClosed(uint64_t generation) {
  {
    std::lock_guard lock(mu_);
    if (generation != generation_) return;
    closed_ = true;
    ready_ = false;
  }
  cv_.notify_all();
}

int64_t ServerConnection::epoch() const {
  std::lock_guard lock(mu_);
  return epoch_;
}

bool ServerConnection::PersistEpoch(int64_t epoch) const {
  if (options_.state_dir.empty()) return true;
  return WriteStateFile(fs::path(options_.state_dir) / kEpochFile, Json{{"epoch", epoch}}.dump());
}

bool ServerConnection::AcceptEpoch(const char* what, const std::optional<int64_t>& epoch) {
  if (!epoch) return true;
  int64_t highest = 0;
  {
    std::lock_guard lock(mu_);
    if (*epoch > epoch_) {
      // Written before the message is acted on: a restart after this point refuses every older epoch. A write
      // that fails is logged; the epoch still holds in memory.
      if (!PersistEpoch(*epoch))
        spdlog::warn("agent: could not write {} in {}: a restarted agent would not remember epoch {}", kEpochFile,
                     options_.state_dir, *epoch);
      epoch_ = *epoch;
    }
    if (*epoch == epoch_) return true;
    highest = epoch_;
  }
  spdlog::warn("agent: ignoring the server's {} of leadership epoch {}: epoch {} is current (a deposed leader's)",
               what, *epoch, highest);
  return false;
}

void ServerConnection::OnMessage(uint64_t generation, const std::string& text) {
  {
    std::lock_guard lock(mu_);
    if (generation != generation_) return;  // a message of a channel already replaced
    last_heard_ = Clock::now();
  }
  auto parsed = protocol::ParseServerMessage(text);
  if (!parsed.ok()) {
    spdlog::warn("agent: ignoring a message from the server: {}", parsed.status().message());
    return;
  }
  protocol::ServerMessage& m = *parsed;
  if (auto* welcome = std::get_if<protocol::Welcome>(&m)) {
    if (!AcceptEpoch("welcome", welcome->epoch)) return;
    std::set<std::string> hello_stopped;
    {
      std::lock_guard lock(mu_);
      heartbeat_interval_ = std::chrono::milliseconds(std::max<int64_t>(50, welcome->heartbeat_interval_ms));
      hello_stopped.swap(hello_stopped_);
    }
    listener_.OnWelcome(*welcome, hello_stopped);
    HeartbeatNow();
  } else if (auto* assign = std::get_if<protocol::Assign>(&m)) {
    if (!AcceptEpoch("assign", assign->epoch)) return;
    listener_.OnAssign(std::move(assign->task), assign->id);  // acked once the task is persisted
  } else if (auto* stop = std::get_if<protocol::Stop>(&m)) {
    if (!AcceptEpoch("stop", stop->epoch)) return;
    listener_.OnStop(stop->order, stop->id);
  } else if (auto* logs = std::get_if<protocol::LogsRequest>(&m)) {
    listener_.OnLogs(std::move(*logs));  // queued: read on the log service's thread
  } else {
    const auto* error = std::get_if<protocol::Error>(&m);
    const std::optional<int64_t> id = error ? error->id : std::optional<int64_t>(std::get<protocol::Ack>(m).id);
    if (error && !id) {
      spdlog::warn("agent: the server answered an error ({}): {}",
                   error->code ? protocol::Name(*error->code) : "no code", error->message);
      return;
    }
    std::pair<std::string, TaskStatus> acked;
    {
      std::lock_guard lock(mu_);
      auto it = pending_acks_.find(*id);
      if (it == pending_acks_.end()) return;  // a heartbeat's ack, or one from before a reconnect
      acked = it->second;
      pending_acks_.erase(it);
    }
    cv_.notify_all();
    if (error)
      spdlog::warn("agent: server refused the report for {} ({}): {}", acked.first,
                   error->code ? protocol::Name(*error->code) : "no code", error->message);
    listener_.OnReportAcked(acked.first, acked.second);
  }
}

}  // namespace gpupack::agent
