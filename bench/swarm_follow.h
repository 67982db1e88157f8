// swarm_follow: the simulated agents of bench/agent_swarm.cc following a takeover as the real agent does
// (agent_swarm --server URL,URL,... --follow; bench/ha_bench.mjs --only herd). When an agent's channel closes
// without the swarm closing it (the leader died, or closed it), the Follower reconnects it with the real agent's
// rule, agent::ReconnectPolicy itself (agent/server_connection.h): a random wait in [0, 100 ms] after the close,
// then walks of the servers of the list one after the other without waiting, following at once a standby's
// refusal that names a leader on the list (agent::ReadDecline: the body's "leader", else the leader header),
// and a full-jitter backoff (100 ms doubling to 1 s) only after a whole walk failed. Once a channel opens the
// agent says hello with every task it has (SimAgent::Connect), and its welcome records a Return: the loss, the
// hello and the welcome as ms since 1970, the welcome's epoch and the attempts (Swarm::returns).
//
// Where it differs from the real agent: the attempts run on a pool of worker threads (--follow-threads), not
// one thread per agent, so at most that many agents of one swarm process are connecting at any moment; a
// server that goes silent without closing the connection is not detected (the real agent's kSilentHeartbeats):
// the benchmark kills its leader with SIGKILL, whose connections the kernel closes; an instance the server does
// not know (UnknownInstance) is counted as a failed attempt, not registered again.
//
// Threads: Lost is called on a channel's io thread; the workers own the agents they hold (an agent is either
// waiting in the schedule, held by one worker, or connected). Stop joins the workers (each finishes the attempt
// it is in).
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/swarm_agent.h"

namespace gpupack::bench {

class Follower {
 public:
  // servers: the list every agent walks (at least one); the agents start on servers[0].
  Follower(Swarm& swarm, std::vector<ServerEndpoint> servers, int threads);
  ~Follower() { Stop(); }
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

  // Lost: agent `a`'s current channel closed: schedule its first attempt ReconnectPolicy::Closed() from now.
  void Lost(SimAgent* a);
  void Stop();

 private:
  void Work();
  // Attempt: one connection attempt of `a` (its old channel dropped first); answers when to try again, or
  // nothing when the channel opened.
  std::optional<Clock::time_point> Attempt(SimAgent* a);

  Swarm& swarm_;
  const std::vector<ServerEndpoint> servers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<Clock::time_point, SimAgent*> due_;  // guarded by mu_
  bool stopping_ = false;                            // guarded by mu_
  std::vector<std::thread> threads_;
};

// ParseServers: "URL,URL,..." as endpoints; dies (SwarmDie) on one that does not parse.
std::vector<ServerEndpoint> ParseServers(const std::string& list);

}  // namespace gpupack::bench
