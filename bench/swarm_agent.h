// swarm_agent: the simulated node agent of bench/agent_swarm.cc (SimAgent) and the counters and timestamps the
// whole swarm shares (Swarm). Each SimAgent is only the channel protocol (docs/agent-channel.md) on a
// ChannelClient, its messages built and read with protocol/messages.h; nothing is forked. Heartbeater sends
// every agent's heartbeats and LatencySample keeps their send -> ack times. agent_swarm.cc owns the phases, the
// server and the figures.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/channel_client.h"
#include "agent/server_connection.h"
#include "protocol/messages.h"

namespace gpupack::bench {

using Clock = std::chrono::steady_clock;
using gpupack::agent::ChannelClient;
using gpupack::agent::DeclinedUpgrade;
using gpupack::agent::ReconnectPolicy;
using gpupack::agent::ServerEndpoint;

// TaskTimes: when each step of one task happened, stamped by the driver and the agents (Swarm::Stamp).
struct TaskTimes {
  Clock::time_point sent{}, answered{}, assigned{}, running_acked{}, stop_sent{}, stopped_acked{};
};

struct Swarm;

// LatencySample: a bounded sample of latencies in ms, for quantiles. It keeps every value up to kCap, then a
// uniform sample of kCap of them (reservoir, Algorithm R); the count and the max stay exact. Thread-safe.
class LatencySample {
 public:
  static constexpr size_t kCap = 1'000'000;
  void Add(double ms);
  void Clear();
  int64_t count() const;
  double max() const;
  std::vector<double> Values() const;  // the sample, unsorted

 private:
  mutable std::mutex mu_;
  std::vector<double> values_;  // guarded by mu_
  int64_t count_ = 0;           // guarded by mu_
  double max_ = 0;              // guarded by mu_
  std::mt19937_64 rng_{20261203};
};

// SimAgent keeps what a real agent keeps (docs/agent-channel.md): every task it was given, reported in each
// hello until the server acknowledged its STOPPED report; an assign for a task it has is ignored.
struct SimAgent {
  Swarm* swarm = nullptr;
  int index = 0;
  std::string arn;
  std::mutex chan_mu;                     // guards client: Send and replacement
  std::unique_ptr<ChannelClient> client;  // guarded by chan_mu
  std::atomic<bool> connected{false};
  std::mutex mu;
  std::map<int64_t, std::pair<std::string, std::string>> pending;  // state id -> (task ARN, status); guarded by mu
  std::map<std::string, std::string> tasks;                        // task ARN -> RUNNING | STOPPED; guarded by mu
  std::map<std::string, std::string> hello_reported;               // what the last hello said; guarded by mu
  std::unordered_map<int64_t, Clock::time_point> heartbeats_out;   // heartbeat id -> sent, until its answer; guarded by mu
  std::atomic<int64_t> next_id{1};
  std::atomic<bool> welcomed{false};
  std::atomic<bool> churning{false};   // the churn thread has it down or is reconnecting it
  Clock::time_point next_heartbeat{};  // heartbeat thread only
  // generation: bumped by every Connect and Disconnect; a channel's close counts as a loss (Swarm::on_lost) only
  // while its generation is current, so closing a channel on purpose (Disconnect, churn, shutdown) is no loss.
  std::atomic<uint64_t> generation{0};
  // Following a takeover (bench/swarm_follow.h): when the channel was lost (zero when it is not lost, or since
  // the welcome that ended the loss), and the attempts since; guarded by mu. The walk's state (the server the
  // agent tries, its ReconnectPolicy) belongs to the Follower's worker that holds the agent.
  Clock::time_point lost_at{};
  int64_t lost_unix_ms = 0, hello_unix_ms = 0;
  int attempts = 0;
  size_t server = 0;                        // index into the Follower's servers
  std::unique_ptr<ReconnectPolicy> policy;  // made by the Follower

  void OnMessage(const std::string& text);
  // SendHeartbeat sends a heartbeat (not impaired, no held GPUs: a heartbeat that changes nothing) and keeps its
  // send time until the server answers it (Swarm::heartbeat_ms).
  void SendHeartbeat();
  // SendState reports a task RUNNING or STOPPED; a STOPPED report says the user stopped it (exit code 143 on
  // SIGTERM), or with `crashed` that its essential container exited on its own (exit code 1).
  void SendState(const std::string& task_arn, const std::string& status,
                 const std::vector<std::string>& container_names, bool crashed = false);
  // Crash stops a RUNNING task as if its process had died: a STOPPED report the server did not ask for (the
  // service scheduler counts it as a failure and replaces it). False when the agent runs no such task.
  bool Crash(const std::string& task_arn);
  void Send(const std::string& text) {
    std::lock_guard lock(chan_mu);
    if (client) client->Send(text);
  }
  // Connect opens the channel and says hello with every task it has; false when the server refused (then
  // `declined`, when given, holds the server's answer: ChannelClient::Connect).
  bool Connect(const ServerEndpoint& server, std::string* error, DeclinedUpgrade* declined = nullptr);
  // Disconnect closes the channel (the io thread is joined when it returns); unacknowledged reports are
  // forgotten, as a real agent forgets them, and sent again in the next hello.
  void Disconnect() {
    std::unique_ptr<ChannelClient> old;
    {
      std::lock_guard lock(chan_mu);
      ++generation;  // this close is on purpose: no loss
      old = std::move(client);
      connected = false;
    }
    old.reset();
    std::lock_guard lock(mu);
    pending.clear();
    heartbeats_out.clear();
    welcomed = false;
  }
};

// Return: one agent back with a leader after it lost its channel (Swarm::returns): when it lost it, when it said
// hello to the server that welcomed it and when the welcome came (ms since 1970, so that another process on the
// same host can set them against its own clock), the welcome's leadership epoch (0: none) and the connection
// attempts it took.
struct Return {
  int agent = 0;  // the instance number (--agent-offset + index)
  int64_t lost_unix_ms = 0, hello_unix_ms = 0, welcome_unix_ms = 0, epoch = 0;
  int attempts = 0;
};

struct Swarm {
  std::atomic<int64_t> assigns{0}, stops{0}, state_acks{0}, heartbeats{0}, heartbeat_acks{0}, errors{0}, closes{0};
  std::atomic<int64_t> duplicate_assigns{0}, reconnects{0}, reconnect_failures{0}, push_acks{0};
  std::atomic<int64_t> crashes{0};                    // tasks stopped on the agent's side (SimAgent::Crash)
  bool no_ack = false;  // set before any agent connects
  agent::ChannelLoop* loop = nullptr;  // the channels' shared io threads (--io-threads), or none: one per channel
  std::atomic<int64_t> heartbeat_errors{0};           // heartbeats answered with an error
  std::atomic<int64_t> welcome_heartbeat_ms{0};       // heartbeatIntervalMs of the last welcome; 0 before one
  LatencySample heartbeat_ms;                         // each heartbeat's send -> ack, ms
  LatencySample attempt_ms, attempt_wait_ms;          // --follow: each attempt's Connect, and its lateness (due -> start)
  std::atomic<int64_t> hello_tasks{0}, welcome_assigns{0}, welcome_stops{0};
  std::mutex mu;
  std::string first_error;                            // guarded by mu
  std::unordered_map<std::string, TaskTimes> times;   // guarded by mu
  std::set<std::string> running_acked, stopped_acked;  // reports the server acknowledged; guarded by mu
  // Following a takeover (bench/swarm_follow.h): on_lost is called (on the channel's io thread) when an agent's
  // current channel closes without the swarm closing it; set before any agent connects, or left empty. returns
  // collects the agents welcomed back since the serve loop last printed them; guarded by mu.
  std::function<void(SimAgent*)> on_lost;
  int agent_offset = 0;
  std::vector<Return> returns;
  std::atomic<int64_t> lost{0}, returned{0};

  void Error(const std::string& message) {
    ++errors;
    std::lock_guard lock(mu);
    if (first_error.empty()) first_error = message.substr(0, 300);
  }
  void Stamp(const std::string& arn, Clock::time_point TaskTimes::*field) {
    auto now = Clock::now();
    std::lock_guard lock(mu);
    times[arn].*field = now;
  }
  void Acked(const std::string& arn, const std::string& status) {
    std::lock_guard lock(mu);
    (status == "RUNNING" ? running_acked : stopped_acked).insert(arn);
  }
};

// Heartbeater: one thread for the whole swarm that sends each connected agent's heartbeat every interval()
// (read on every pass, so it follows the welcome's heartbeatIntervalMs once one came). Each agent's first one is
// due a staggered fraction of the interval after its channel opened, like real agents that started apart.
// `agents` must outlive it; Stop (or the destructor) joins the thread.
class Heartbeater {
 public:
  Heartbeater(const std::vector<std::unique_ptr<SimAgent>>& agents, std::function<Clock::duration()> interval);
  ~Heartbeater() { Stop(); }
  Heartbeater(const Heartbeater&) = delete;
  Heartbeater& operator=(const Heartbeater&) = delete;
  void Stop();

 private:
  std::atomic<bool> running_{true};
  std::thread thread_;
};

// ContainerReports: every container of a task in `status` (STOPPED ones exited with `exit_code`: 143 on SIGTERM).
std::vector<protocol::ContainerReport> ContainerReports(protocol::TaskStatus status,
                                                        const std::vector<std::string>& container_names,
                                                        int exit_code = 143);

// StatusOf: the protocol's status for "RUNNING", "STOPPED", ...; PENDING for a name it does not know.
protocol::TaskStatus StatusOf(const std::string& status);

}  // namespace gpupack::bench
