// swarm_serve: agent_swarm's serve mode (--serve-s): the swarm holds its registered and welcomed agents while
// another program loads the same server (bench/write_path_compare.sh: wrk RunTask and a Describe loop), and
// reports what the agents saw in a measured window: each heartbeat's send -> ack time, each assign -> RUNNING
// report acked, and the server's CPU. The agents answer as in the phases (bench/swarm_agent.h): every assign
// is acked and reported RUNNING, every stop reported STOPPED.
//
// With --crash-per-min P the agents also crash tasks (bench/services_scale.mjs: services replacing replicas that
// died): P % of their RUNNING tasks a minute are reported STOPPED with exit code 1, unasked.
//
// Control, by signal to the swarm's pid: SIGUSR1 prints the swarm's counters since the start ("counters N:
// heartbeats H acked A assigns N stops S crashes C", flushed) and starts the measured window over (clears the
// figures; the window otherwise begins at "ready"); SIGUSR2 turns crashing on, and off again; SIGTERM or SIGINT
// ends it. ServeSignals must be blocked before any thread starts (BlockServeSignals), so that every thread leaves
// them to ServeUntilSignalled.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "bench/swarm_agent.h"
#include "bench/swarm_setup.h"

namespace gpupack::bench {

// BlockServeSignals blocks SIGUSR1, SIGUSR2, SIGTERM and SIGINT in the calling thread and the threads it starts
// later.
void BlockServeSignals();

// ServeUntilSignalled prints "ready: ..." (flushed), waits for the signals above or serve_s seconds, then calls
// stop_heartbeats, waits up to 5 s for the answers to heartbeats already sent, and prints the window's figures:
// a human report, then "result.KEY VALUE" lines. The agents are still connected when it returns.
void ServeUntilSignalled(const SwarmOptions& o, Swarm& swarm, pid_t server_pid, const std::string& cluster,
                         const std::function<Clock::duration()>& heartbeat_interval,
                         const std::function<void()>& stop_heartbeats,
                         const std::vector<std::unique_ptr<SimAgent>>& agents);

}  // namespace gpupack::bench
