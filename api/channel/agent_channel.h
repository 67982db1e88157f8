// AgentChannel: the server end of the agent channel. One WebSocket per agent at
// /agent/v1/channel?containerInstance=<ARN>, JSON text messages typed by the protocol library
// (protocol/messages.h):
//
//   agent -> server                                   server -> agent
//   {"type":"hello","tasks":[...],"impaired":b}       {"type":"welcome","assign":[...],"stop":[...],
//                                                       "heartbeatIntervalMs":n,"epoch"?}
//   {"type":"helloPart",...,"last":b} (a hello in parts: gathered per connection, the last one is the hello)
//   {"type":"state","id":n,"taskArn",...}             {"type":"ack","id":n}            (once durable)
//   {"type":"heartbeat","id":n,"impaired","heldGpus", {"type":"ack","id":n}
//    "gpuMemoryUsed"?} (its figures: GpuMemoryUsage below)
//                                                     {"type":"assign","id":n,"task":{...},"epoch"?} (after
//                                                                                   RunTask commits)
//                                                     {"type":"stop","id":n,"taskArn","reason","epoch"?}
//   {"type":"ack","id":n}  (a push is recorded)
//   {"type":"error","code",...} answers a message the server could not apply (code: RefusalCodeOf below).
//                                                     {"type":"logs","id":n,...}  (RequestLogs: a page of a
//   {"type":"logEvents","id":n,...} (its answer)                                 container's output)
//
// Pushes are kept per connection until the agent acks their id. One unacked for push_ack_timeout is sent again
// (same id) while it still matters, i.e. no report about its task has been applied since (an agent that acted
// on it without acking, an older one, is not pestered: the push is forgotten); up to push_attempts sends in
// all, and when the last is not acked either the connection is closed: the agent reconnects and the welcome's
// reconcile delivers whatever it still lacks. A new connection starts with no pending push (the welcome covers
// the old connection's), and a welcome drops the pushes sent on its connection before the hello (it covers
// those too).
//
// A connection that sends no heartbeat for `missed_heartbeats` intervals is closed and its instance marked
// agentConnected=false; RunTask then answers AGENT for it. A second connection for the same instance replaces
// the first.
//
// With options.epoch (the leadership term this server leads, docs/ha.md), the welcome and every push carry it
// as "epoch", so an agent can tell a deposed leader's late push from the current leader's and ignore it; without
// one (a single server) they carry none, as before.
//
// Requests (RequestLogs) are not pushes: never acked, never re-sent. Each has a correlation id of its own and a
// deadline; it ends once, with the agent's answer, or with an error when the agent is not connected, its
// connection closes, or the deadline passes (the watchdog's tick, at most a quarter of the heartbeat interval
// late). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/auth/request_auth.h"
#include "api/http/http_server.h"
#include "engine/control_plane.h"
#include "protocol/messages.h"

namespace gpupack::api {

using Json = nlohmann::json;

inline constexpr const char* kAgentChannelPath = protocol::kChannelPath;

// ChannelRefusal: a refusal of the agent channel's upgrade: `status` (its HTTP status and ECS error name, its
// message for people) with `code` in the body's "code" (protocol::RefusalCode), and a standby's `leader` URL,
// when it knows one, in the body's "leader" and the protocol::kLeaderHeader header. Every refusal of the
// channel's upgrade is built here (the leader's AgentChannel::Handler, a standby's in api/leadership.cc).
UpgradeAnswer ChannelRefusal(Status status, protocol::RefusalCode code, const std::string& leader = "");
// RefusalCodeOf: the code of an error message answering a message that an operation refused with `s`.
protocol::RefusalCode RefusalCodeOf(const Status& s);

struct AgentChannelOptions {
  std::chrono::milliseconds heartbeat_interval{5000};
  int missed_heartbeats = 3;
  // With --credentials: the upgrade request must be SigV4-signed by a key allowed kAgentChannelAction, else it
  // is answered 403 in ECS's error shape and not upgraded. Must outlive the channel; null = no authentication.
  const RequestAuthenticator* authenticator = nullptr;
  // An assign or stop the agent has not acked after this long is sent again (while it matters, see above);
  // after push_attempts sends in all without an ack the connection is closed (the agent reconnects; reconcile
  // takes over). The defaults give up after 16 s, past the heartbeat window (15 s) that closes a stalled agent
  // anyway, so an agent busy for a while is not closed sooner than before.
  std::chrono::milliseconds push_ack_timeout{2000};
  int push_attempts = 8;
  // For tests: called before every send of a push (resends too); true drops that send, as if lost on the wire.
  // Re-sends call it with the channel's lock held: it must not call the channel.
  std::function<bool(const std::string& instance_arn, const Json& message)> drop_push = nullptr;
  // The parts of one hello (protocol::HelloPart) a connection may send, in bytes all together: past it the
  // server answers an error and closes the connection. 64 MiB is some 50 times the hello of 360 tasks of 10
  // containers; each part is held to the channel's message limit (1 MiB) like any message.
  size_t max_hello_bytes = 64 << 20;
  // The leadership term this channel's server leads under (fixed for the channel's life: a new term starts a new
  // server); the welcome and every push carry it. nullopt: no term (a single server), so none is sent.
  std::optional<int64_t> epoch = std::nullopt;
};

// GpuMemoryUsage: the GPU memory each running task uses, per GPU, as its agent last reported it on a heartbeat
// ("gpuMemoryUsed": the agent's watchdog reading, NVML's list of MPS client processes), for the console. In
// memory only: never written to the store nor sent through the applier, so a restarted server knows none until
// the next heartbeats. A heartbeat replaces its instance's figures whole (one without a reading, or with a refused
// one, drops them); a task's go when its agent reports it STOPPED, an instance's when its agent disconnects. Only
// tasks the server holds on that instance and not STOPPED are kept, each once, and only the instance's GPUs.
// Thread-safe.
class GpuMemoryUsage {
 public:
  struct Reading {
    EpochMs read_at = 0;                  // by the server's clock: the heartbeat's arrival less the reading's age
    std::map<std::string, int64_t> gpus;  // GPU UUID -> bytes in use
    bool operator==(const Reading&) const = default;
  };

  // Replace sets the figures of an instance's tasks (task ARN -> reading), dropping the instance's others.
  void Replace(const std::string& instance_arn, std::map<std::string, Reading> tasks);
  void DropTask(const std::string& task_arn);
  void DropInstance(const std::string& instance_arn);
  // Of: a task's latest figures; none when its agent reported none.
  std::optional<Reading> Of(const std::string& task_arn) const;
  size_t tasks() const;  // tasks with figures
  // generation bumps whenever a figure appears, changes or goes (not when only a reading's time moves), so the
  // console's reads can tell "unchanged".
  uint64_t generation() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, Reading>> by_instance_;  // guarded by mu_: instance -> task -> figures
  std::map<std::string, std::string> instance_of_;                     // guarded by mu_: task -> instance
  uint64_t generation_ = 0;                                            // guarded by mu_
};

// ChannelEventLog: the channel's connect and disconnect lines. The first kLinesPerWindow of each kWindow are
// logged one by one at info level; the rest at debug level, counted, and summed up in one info line once the
// window has ended (a herd of 10,000 agents finding a new leader is a few lines, not 10,000).
class ChannelEventLog {
 public:
  enum class Event { kConnected, kReconnected, kDisconnected };
  static constexpr int kLinesPerWindow = 50;
  static constexpr std::chrono::seconds kWindow{10};

  using Clock = std::chrono::steady_clock;
  // Log: one event of `instance_arn` (`from`: the peer's address, for a connection); `open`: the channels open
  // after it.
  void Log(Event event, const std::string& instance_arn, const std::string& from, size_t open,
           Clock::time_point now = Clock::now());
  // Flush: the summary of a window that has ended (the watchdog's tick), if anything went unlogged in it.
  void Flush(size_t open, Clock::time_point now = Clock::now());

 private:
  // Roll: with mu_ held, ends the window when it is over; the summary line to print, or "".
  std::string Roll(std::chrono::steady_clock::time_point now, size_t open);

  std::mutex mu_;
  std::chrono::steady_clock::time_point window_start_{};  // guarded by mu_
  int lines_ = 0;                                         // logged one by one in this window; guarded by mu_
  uint64_t quiet_[3] = {0, 0, 0};                         // counted only, by Event; guarded by mu_
};

class AgentChannel {
 public:
  AgentChannel(ControlPlane& control_plane, AgentChannelOptions options);
  ~AgentChannel();  // stops the heartbeat watchdog
  AgentChannel(const AgentChannel&) = delete;
  AgentChannel& operator=(const AgentChannel&) = delete;

  // The WebSocket endpoint to register in HttpServerOptions::websockets[kAgentChannelPath].
  WebSocketHandler Handler();

  // Push sends an assign or stop to the agent of an instance with a fresh id and keeps it until the agent acks
  // that id (see above); dropped when the instance is not connected (it reconciles on reconnect).
  void Push(const std::string& instance_arn, AgentPush push);
  // SetEpoch: the term this server now leads (a hot standby promoted: api/leadership.h); the next welcome and
  // push carry it.
  void SetEpoch(int64_t epoch) { epoch_.store(epoch); }
  std::optional<int64_t> epoch() const {
    const int64_t e = epoch_.load();
    return e > 0 ? std::optional<int64_t>(e) : options_.epoch;
  }

  size_t connected() const;
  // Connections opened since construction (a reconnect counts once more).
  uint64_t connections_opened() const { return connections_opened_.load(); }
  // Pushes sent and not yet acked on the instance's current connection (0 when it has none).
  size_t unacked_pushes(const std::string& instance_arn) const;
  // Pushes sent again for want of an ack, and connections closed because a push was never acked.
  uint64_t push_retries() const { return push_retries_.load(); }
  uint64_t push_unacked_closes() const { return push_unacked_closes_.load(); }

  // RequestLogs asks the instance's agent for a page of a container's output (the request's id is set here) and
  // calls `done` once, on the thread that answers: with the agent's answer, or a kServer error that says the
  // agent is not connected, went away, or did not answer within `timeout`. `done` must not call the channel.
  void RequestLogs(const std::string& instance_arn, protocol::LogsRequest request,
                   std::chrono::milliseconds timeout, std::function<void(Result<protocol::LogsAnswer>)> done);
  // Requests waiting for their answer.
  size_t pending_requests() const;

  // Upgrade requests refused by the authenticator since construction.
  uint64_t auth_refusals() const { return auth_refusals_.load(); }

  // gpu_memory: the GPU memory in use that heartbeats reported (see GpuMemoryUsage); lives as long as the channel.
  const GpuMemoryUsage& gpu_memory() const { return gpu_memory_; }
  // Heartbeats whose gpuMemoryUsed was refused (malformed or past its bounds) since construction; the rest of
  // each was applied.
  uint64_t gpu_memory_refusals() const { return gpu_memory_refusals_.load(); }
  // Heartbeats acked from the read view (they changed nothing) and heartbeats applied by the writer.
  uint64_t heartbeats_from_view() const { return heartbeats_from_view_.load(); }
  uint64_t heartbeats_written() const { return heartbeats_written_.load(); }

 private:
  struct Unacked {
    AgentPush message;  // with its id
    std::chrono::steady_clock::time_point sent;
    int sends = 1;
  };
  struct Peer {
    std::shared_ptr<WebSocketConnection> conn;
    std::string instance_arn;
    std::chrono::steady_clock::time_point last_seen;
    bool hello_done = false;
    bool closing = false;                // closed for an unacked push; OnClose will follow
    std::map<int64_t, Unacked> unacked;  // by push id
    std::vector<protocol::TaskReport> hello_parts;  // the tasks of the hello's parts so far
    size_t hello_part_bytes = 0;                     // their messages' bytes, at most max_hello_bytes
    bool gpu_memory_warned = false;                  // a refused gpuMemoryUsed was logged on this connection
    // writes_in_flight: the hellos and heartbeats of this connection handed to the writer and not yet answered;
    // while any is, a heartbeat cannot be judged from the view (it may be behind them) and goes to the writer.
    int writes_in_flight = 0;
  };
  void OnOpen(const std::shared_ptr<WebSocketConnection>& conn, const HttpRequest& req);
  void OnMessage(const std::shared_ptr<WebSocketConnection>& conn, std::string text);
  void OnClose(const std::shared_ptr<WebSocketConnection>& conn);
  void OnHello(const std::shared_ptr<WebSocketConnection>& conn, const std::string& arn, protocol::Hello hello);
  void OnHelloPart(const std::shared_ptr<WebSocketConnection>& conn, const std::string& arn,
                   protocol::HelloPart part, size_t bytes);
  void OnHeartbeat(const std::shared_ptr<WebSocketConnection>& conn, const std::string& arn,
                   const protocol::Heartbeat& heartbeat);
  // WriteSettled: one of the connection's writes (hello, heartbeat) was answered.
  void WriteSettled(WebSocketConnection* conn);
  void Watchdog();
  void SendPush(const std::shared_ptr<WebSocketConnection>& conn, const std::string& instance_arn,
                const AgentPush& message);
  void Reply(const std::shared_ptr<WebSocketConnection>& conn, const protocol::ServerMessage& message);
  void OnLogsAnswer(const std::shared_ptr<WebSocketConnection>& conn, protocol::LogsAnswer answer);
  // KeepGpuMemory takes a heartbeat's GPU memory figures into gpu_memory_ (see GpuMemoryUsage).
  void KeepGpuMemory(const std::shared_ptr<WebSocketConnection>& conn, const std::string& instance_arn,
                     const protocol::Heartbeat& heartbeat);
  // FailRequests ends (outside the lock) the requests taken out of requests_ with `why`.
  using RequestDone = std::function<void(Result<protocol::LogsAnswer>)>;
  static void FailRequests(std::vector<RequestDone> done, const std::string& why);

  ControlPlane& cp_;
  const AgentChannelOptions options_;
  std::atomic<int64_t> epoch_{0};  // set by SetEpoch; 0: options_.epoch
  mutable std::mutex mu_;
  std::map<WebSocketConnection*, Peer> peers_;              // guarded by mu_
  std::map<std::string, WebSocketConnection*> by_instance_; // guarded by mu_
  bool stopping_ = false;                                    // guarded by mu_
  struct PendingRequest {
    WebSocketConnection* conn;  // the connection it was sent on
    std::string instance_arn;
    std::chrono::steady_clock::time_point deadline;
    RequestDone done;
  };
  std::map<int64_t, PendingRequest> requests_;  // by correlation id; guarded by mu_
  std::atomic<int64_t> next_request_id_{1};
  std::condition_variable cv_;
  std::thread watchdog_;
  std::atomic<uint64_t> auth_refusals_{0};
  std::atomic<int64_t> next_push_id_{1};
  std::atomic<uint64_t> connections_opened_{0}, push_retries_{0}, push_unacked_closes_{0};
  GpuMemoryUsage gpu_memory_;
  std::atomic<uint64_t> gpu_memory_refusals_{0};
  std::atomic<uint64_t> heartbeats_from_view_{0}, heartbeats_written_{0};
  ChannelEventLog events_;
};


}  // namespace gpupack::api
