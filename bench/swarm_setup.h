// swarm_setup: what bench/agent_swarm.cc needs around its phases: its options (SwarmOptions, ParseSwarmOptions),
// the server it starts (StartSwarmServer), the body each simulated agent registers with (RegisterBody), a
// parallel loop, and the quantiles of its figures (Summarize). agent_swarm.cc owns the phases and the report.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpupack::bench {

struct SwarmOptions {
  std::string gpupack = "build-bench/gpupack";
  std::string server;  // attach instead of starting one; URL,URL,... with --follow (the first registers)
  pid_t server_pid = 0;
  int agents = 200;
  int agent_offset = 0;    // agent i registers as instance number agent_offset + i (several swarms, one cluster)
  int baseline_s = 10;
  int idle_s = 30;
  int hold_s = 60;
  double rate = 10;
  double task_life_s = 5;
  double churn = 0;        // reconnects per second across the swarm, during the driven phase
  int churn_down_ms = 200; // how long a churned agent stays away
  int heartbeat_ms = 0;    // each agent's heartbeat interval; 0: the one the server's welcome names
  int serve_s = 0;         // > 0: serve mode (bench/swarm_serve.h) for at most this long, instead of the phases
  double crash_per_min = 0;  // serve mode: % of the swarm's RUNNING tasks crashed per minute, while SIGUSR2 says so
  std::string dir;         // $TMPDIR or /tmp unless given
  bool keep = false;
  bool no_ack = false;  // the agents ack no push, as agents from before pushes were acked
  // follow: an agent whose channel closes reconnects as the real agent does, walking the servers of --server
  // URL,URL,... (bench/swarm_follow.h), on follow_threads worker threads.
  bool follow = false;
  int follow_threads = 16;
  // io_threads > 0: every agent's channel runs on one agent::ChannelLoop of that many threads (the load generator
  // costs less); 0: one io thread per channel, as each real agent has.
  int io_threads = 0;
};

// ParseSwarmOptions reads the command line; --help prints the usage and exits 0, a bad argument exits 1.
SwarmOptions ParseSwarmOptions(int argc, char** argv);

// SwarmDie prints "agent_swarm: MESSAGE" and exits 1 without running destructors (under the channels' io threads).
[[noreturn]] void SwarmDie(const std::string& message);

// StartSwarmServer runs `gpupack server` on a fresh database in `dir`, its output in dir/server.out, and returns
// its pid and endpoint (read from that output, bounded by 10 s); the command line in argv_out.
pid_t StartSwarmServer(const SwarmOptions& o, const std::string& dir, std::string* endpoint,
                       std::vector<std::string>* argv_out);

// RegisterBody: RegisterContainerInstance of simulated agent `index`: 8 GPUs x 81,559 MiB, 65,536 CPU units,
// 262,144 MiB, gpupack.agent-channel=v1.
nlohmann::json RegisterBody(const std::string& cluster, int index);

// ParallelFor runs fn(i) for i in [0, n) on `threads` threads.
template <typename Fn>
void ParallelFor(int n, int threads, Fn fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) fn(i);
    });
  for (auto& t : pool) t.join();
}

struct Quantiles {
  size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

// Summarize: the nearest-rank quantiles of v (all zero when empty).
Quantiles Summarize(std::vector<double> v);

}  // namespace gpupack::bench
