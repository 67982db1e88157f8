// ServerConnection: the agent's connection to the server. It registers the instance (RegisterContainerInstance,
// again whenever the MPS capability changes or the server no longer knows the instance), holds the WebSocket
// channel (hello, welcome, pushes and their acks, state reports and their acks) and reconnects as
// ReconnectPolicy says (the servers of the list one after the other, then a jittered backoff of 100 ms doubling
// to 1 s). Heartbeats run on the connection's own thread and timer, so they keep flowing whatever the tasks are
// doing; they read the GPU health's held GPUs and impairment, which never wait on a probe.
//
// Threads: the connection thread (Start/Stop) connects, reconnects, re-registers when a declined upgrade says the
// server does not know the instance (ReadDecline: not on a standby's redirect, a busy server or an authentication
// refusal) and sends heartbeats; the channel's io thread parses each message (protocol::ParseServerMessage) and hands it to
// the Listener, whose calls must be quick (the TaskManager only records and posts). SendState, Ack and
// HeartbeatNow may be called from any thread. Thread-safe.
//
// A hello reports every task of the store; its snapshot is taken under the same lock SendState takes, and a task
// writes its record before it reports, so every state change is either in the hello or sent after it. A hello
// too large for one message goes as parts (protocol::SerializeHello), all sent before any report.
//
// Servers: the connection talks only to the servers it was configured with (ConnectionOptions::servers); a
// standby's refusal that names a leader off that list is logged and ignored, so no stranger gets the signed
// upgrade, the hello, or a say in the epoch.
//
// Epochs: the connection remembers the highest leadership epoch a welcome or push carried (docs/ha.md), across
// reconnects and (configured) servers, and across restarts: it is written to leader_epoch.json in the state directory
// (beside instance.json) before the message that raised it is handed on, and read back at construction. A
// welcome, assign or stop whose epoch is lower comes from a deposed leader: it is logged and dropped before the
// Listener sees it, so its task is neither started nor stopped nor acked. One without an epoch (a single server,
// an older server) is taken as before; one with a higher epoch raises it.
//
// Silence: a server that says nothing (no welcome, ack, push or answer) for kSilentHeartbeats heartbeat
// intervals while the channel is open is taken as gone (a stopped or hung process, a path that drops packets:
// no TCP close ever comes); the channel is closed and the next server of the list is tried, as when a
// connection breaks. The server acks every heartbeat, so a live server is never silent that long.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/channel_client.h"
#include "agent/gpu_discovery.h"
#include "agent/managed_task.h"
#include "protocol/messages.h"

namespace gpupack::agent {

// ReconnectPolicy: how long the agent's channel waits before its next connection attempt. Attempts go in walks: a
// walk tries the servers of the list one after the other (or the leader a standby named) without waiting between
// them, so after a takeover the agent finds the new leader in one walk; only when a whole walk failed (as many
// failed attempts as there are servers: one, for a single server) does it wait, a random time in [0, backoff]
// ("full jitter", so thousands of agents that lost the same leader do not come back in lockstep), and the backoff
// doubles from kBase to kCap. A connection that opens resets it; a channel that closes waits a random time in
// [0, kBase] before the first attempt. The random source is injected (tests fix it). Not thread-safe: the
// ServerConnection holds it under its lock.
class ReconnectPolicy {
 public:
  // Outcome: what a failed attempt learned. kUnreachable: no answer (connection refused, timed out, no such
  // host). kAnswered: a server answered and refused (a standby declines the channel). kLeaderNamed: a standby
  // named the leader, which the next attempt goes to.
  enum class Outcome { kUnreachable, kAnswered, kLeaderNamed };
  using Random = std::function<double()>;  // uniform in [0, 1)
  static constexpr std::chrono::milliseconds kBase{100};
  static constexpr std::chrono::milliseconds kCap{1000};

  // servers: how many the list holds (at least 1); random: nullptr takes a Mersenne Twister seeded from
  // std::random_device.
  explicit ReconnectPolicy(size_t servers, Random random = nullptr);

  // Classify: the Outcome of a failed connection attempt from what ChannelClient::Connect filled in `declined`:
  // no answer (http_status 0) is kUnreachable, a refusal naming the leader (ReadDecline) kLeaderNamed, any other
  // refusal kAnswered. Never from the failure's message.
  static Outcome Classify(const DeclinedUpgrade& declined);

  void SetServers(size_t servers);  // how many servers the list holds
  void Connected();                 // a channel opened: the backoff starts again from kBase
  std::chrono::milliseconds Closed();  // an open channel closed: the wait before the first attempt
  // Failed: the wait before the next attempt after one failed with `outcome` (the caller has already moved to
  // the next server or the leader named): zero within a walk, a jittered backoff after a whole walk failed.
  std::chrono::milliseconds Failed(Outcome outcome);

  std::chrono::milliseconds backoff() const { return backoff_; }  // the ceiling of the next walk's wait
  size_t tried() const { return tried_; }                          // failed attempts in the current walk

 private:
  std::chrono::milliseconds Jitter(std::chrono::milliseconds ceiling);

  size_t servers_;
  Random random_;
  std::chrono::milliseconds backoff_ = kBase;
  size_t tried_ = 0;
};

// ChannelDecline: what the agent does about a declined channel upgrade, read from the server's answer by
// ReadDecline (every way a gpupack server declines is listed in docs/agent-channel.md, "Declined upgrades"). The
// action follows the answer's code (protocol::RefusalCode, the body's "code") alone, never its message: an
// answer without a code the agent knows (a proxy's 502, a 404) is kRetry.
struct ChannelDecline {
  enum class Action {
    kRegister,      // UnknownInstance: the server does not know the instance (unregistered, forgotten, deregistered)
    kFollowLeader,  // NotLeader naming the leader: the next attempt goes there at once if it is a configured server
    kRetry,         // NotLeader naming none, Busy, ServerError, Malformed, no code: walk on
    kAuthRefused,   // Unauthorized: the signature or the key is refused: logged as an error, walk on with the backoff
  };
  Action action = Action::kRetry;
  std::optional<protocol::RefusalCode> code;  // the body's "code", none when absent or unknown
  std::string leader;   // NotLeader: the leader's URL, from the body's "leader" (else the kLeaderHeader header)
  std::string message;  // the server's message (its ECS error's, else the body's start), for the log only
};
ChannelDecline ReadDecline(const DeclinedUpgrade& declined);

// Registration: what RegisterContainerInstance says about this instance.
struct Registration {
  std::string cluster = "default";
  std::vector<GpuDevice> devices;
  std::vector<std::pair<std::string, std::string>> attributes;
  std::string instance_type;
  std::string name;  // instanceIdentityDocument's instanceId
  int64_t cpu = 0;     // CPU units
  int64_t memory = 0;  // MiB
};

struct ConnectionOptions {
  ServerEndpoint server;
  // Every server of a replicated control plane (gpupack server on PostgreSQL, --server URL,URL...), `server`
  // among them; empty: `server` alone. The channel goes to the leader: a standby refuses it naming the leader,
  // and the connection follows that name when it is one of these (never another: a URL off the list is logged
  // and ignored); a server that cannot be reached makes it try the next one. These are the only servers the
  // agent ever connects to, so the only ones whose welcome can raise the epoch it keeps.
  std::vector<ServerEndpoint> servers;
  // instance.json: the instance ARN, so a restarted agent re-registers the same instance; leader_epoch.json: the
  // highest leadership epoch seen, so a restarted agent still ignores a deposed leader.
  std::string state_dir;
  Registration registration;
};

class ServerConnection final : public Reporter {
 public:
  // Listener receives what the server says; every call is on the channel's io thread and must be quick.
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual std::vector<protocol::TaskReport> HelloTasks() = 0;  // every task the agent knows
    virtual void OnWelcome(const protocol::Welcome& welcome, const std::set<std::string>& hello_stopped) = 0;
    virtual void OnAssign(protocol::Assignment assignment, int64_t push_id) = 0;
    virtual void OnStop(const protocol::StopOrder& order, int64_t push_id) = 0;
    virtual void OnReportAcked(const std::string& arn, protocol::TaskStatus status) = 0;
    // OnDeregistered: the server deregistered this instance while the agent was away (its re-registration was
    // refused): every task must stop. Called once, on the connection thread.
    virtual void OnDeregistered() = 0;
    // OnLogs: the server asks for a page of a container's output; answer with SendLogs (from any thread).
    virtual void OnLogs(protocol::LogsRequest request) { (void)request; }
  };
  // Health: what heartbeats and registrations say about the GPUs (GpuHealth); quick and thread-safe.
  struct Health {
    std::function<bool()> impaired;
    std::function<std::vector<std::string>()> held_gpus;
    std::function<bool()> mps_serving;
    // gpu_memory: the GPU memory each running task uses (the watchdog's latest reading), for the heartbeat;
    // none when there is no reading. Unset: heartbeats carry none.
    std::function<std::optional<protocol::GpuMemoryReading>()> gpu_memory = nullptr;
  };

  ServerConnection(ConnectionOptions options, Listener& listener, Health health);
  ~ServerConnection() override;  // Stop()

  // Register registers the instance (the ARN of instance.json when there is one) and records its ARN. When the
  // server refuses because it deregistered that instance, deregistered() turns true and stays so: the agent
  // connects no more (a deregistered host does not come back by itself; removing instance.json makes it new).
  Status Register();
  bool deregistered() const { return deregistered_.load(); }
  // MpsServingChanged re-registers when `serving` differs from the capability last registered.
  void MpsServingChanged(bool serving);
  void Start();  // the connection thread
  void Stop();   // closes the channel and joins the thread

  std::string instance_arn() const;
  // epoch: the highest leadership epoch seen in a welcome or push (by this agent or, through leader_epoch.json,
  // an earlier run of it on the same state directory); 0 before any.
  int64_t epoch() const;
  // kSilentHeartbeats: heartbeat intervals of silence after which the server is taken as gone.
  static constexpr int kSilentHeartbeats = 3;

  // Reporter
  void SendState(const protocol::TaskReport& report) override;
  void Ack(int64_t push_id) override;

  // SendLogs answers a log request (dropped when the channel is gone: the server times the request out).
  void SendLogs(const protocol::LogsAnswer& answer);

  // HeartbeatNow sends a heartbeat at once (health changed; the welcome came).
  void HeartbeatNow();
  // WaitForAcks waits (bounded) until every state report sent is acknowledged or the channel is gone.
  void WaitForAcks(std::chrono::milliseconds timeout);

 private:
  using Clock = std::chrono::steady_clock;
  void Loop();
  void Connect();
  void SendHeartbeat();
  void OnMessage(uint64_t generation, const std::string& text);
  void OnClosed(uint64_t generation);
  // AcceptEpoch: false (and a log line naming `what`) when `epoch` is below the highest seen; else true, raising
  // the highest to `epoch`. A message without an epoch is always accepted.
  bool AcceptEpoch(const char* what, const std::optional<int64_t>& epoch);
  // PersistEpoch writes `epoch` to leader_epoch.json (atomically); false when it could not. Called under mu_.
  bool PersistEpoch(int64_t epoch) const;
  ServerEndpoint Current() const;  // the server the connection talks to now
  // SilentAfter: when the open channel's server counts as gone if it says nothing meanwhile. Called under mu_.
  Clock::time_point SilentAfter() const { return last_heard_ + heartbeat_interval_ * kSilentHeartbeats; }
  // NextServer moves to `leader` (the URL a standby's refusal named) when it is one of the configured servers
  // (true), else to the next server of the list (false): a leader named that is not on the list is logged (once
  // per URL) and never connected to.
  bool NextServer(const std::string& leader);
  // kMaxIgnoredLeaders: how many unknown leader URLs are remembered for logging once each (a server naming a new
  // URL on every refusal cannot grow the agent's memory).
  static constexpr size_t kMaxIgnoredLeaders = 64;

  const ConnectionOptions options_;
  Listener& listener_;
  const Health health_;

  std::mutex register_mu_;  // one registration at a time
  std::atomic<bool> registered_capability_{false};
  std::atomic<bool> deregistered_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string instance_arn_;                    // guarded by mu_
  std::vector<ServerEndpoint> servers_;         // guarded by mu_: the configured servers (options' list), no other
  std::set<std::string> ignored_leaders_;       // guarded by mu_: leader URLs named that are not configured (logged)
  size_t current_ = 0;                          // guarded by mu_: index into servers_
  std::unique_ptr<ChannelClient> channel_;      // guarded by mu_
  uint64_t generation_ = 0;                     // the current channel's; older channels' callbacks are ignored
  bool ready_ = false;                          // the hello went out on channel_
  bool closed_ = false;                         // channel_ closed; the connection thread drops it
  bool heartbeat_due_ = false;
  bool stopping_ = false;
  std::map<int64_t, std::pair<std::string, protocol::TaskStatus>> pending_acks_;  // report id -> task, status
  std::set<std::string> hello_stopped_;  // tasks the last hello reported STOPPED: the welcome acknowledges them
  std::chrono::milliseconds heartbeat_interval_{5000};
  int64_t epoch_ = 0;                           // guarded by mu_: the highest leadership epoch seen
  Clock::time_point last_heard_{};              // guarded by mu_: when channel_ opened or last brought a message
  ReconnectPolicy reconnect_{1};                // guarded by mu_: the wait before the next connection attempt
  Clock::time_point next_heartbeat_{}, next_connect_{};
  std::atomic<int64_t> next_id_{1};
  std::thread thread_;
};

}  // namespace gpupack::agent
