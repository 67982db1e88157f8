// agent_swarm: N simulated node agents held by one `gpupack server`, and what the server spends on them. A
// benchmark, never a test: it prints figures and their setup. Figures: docs/benchmarks.md, section 4.
//
// Real agents are too heavy to run by the hundred on one host (each supervises an MPS daemon and forks
// containers), so each simulated agent is only the channel protocol (docs/agent-channel.md) on a
// ChannelClient, its messages built and read with the protocol library (protocol/messages.h):
// RegisterContainerInstance (8 GPUs, gpupack.agent-channel=v1), the WebSocket, hello, a
// heartbeat every heartbeatIntervalMs of the server's welcome or every --heartbeat-ms (staggered across the
// agents; each one timed from its send to the server's ack), and an answer to every assign (an ack of
// its id, then a RUNNING state report) and every stop (a STOPPED report, then an ack). Like a real agent it keeps
// every task until the server acknowledged its STOPPED report, reports them all in each hello, and ignores an
// assign for a task it has (acking it again).
// Nothing is forked.
//
// Phases, each bounded:
//   start     the server (`gpupack server --listen 127.0.0.1:0 --log-level warn` on a fresh database in a
//             temporary directory), or attach to one with --server URL --server-pid PID
//   baseline  --baseline-s with no agent at all (what the idle server costs by itself)
//   register  --agents instances through the ECS API (8 threads), then open their channels and say hello
//   idle      hold every agent connected for --idle-s with heartbeats only
//   driven    hold them for --hold-s while a driver thread calls RunTask at --rate per second and StopTask on
//             each task --task-life-s after it was placed (so at most rate x life tasks run); with --churn R,
//             R agents a second drop their channel meanwhile and reconnect --churn-down-ms later
//   check     stop the churn and every task, wait for the agents to settle (bounded), then check through the
//             API: no leaked reservation on any GPU, no lost state change, every instance connected; exit
//             status 1 on a violation (docs/reliability.md, "1,000 agents with churn")
// With --serve-s S the phases after register are replaced by serve mode (bench/swarm_serve.h): the agents are
// held until SIGTERM (at most S seconds) while another program loads the server, and the measured window's
// heartbeat send -> ack quantiles are printed (bench/write_path_compare.sh uses it); with --crash-per-min the agents
// also crash some of their tasks on SIGUSR2 (bench/services_scale.mjs uses it, with several swarms on one server:
// --agent-offset). With --follow (serve mode, --server naming several replicas) an agent whose channel closes
// reconnects as the real agent does and reports its return (bench/swarm_follow.h; bench/ha_bench.mjs --only herd).
// The server's CPU time (its threads' run time from /proc/PID/task/*/schedstat, in ns; utime + stime from
// /proc/PID/stat, in 10 ms ticks, next to it) is taken over each phase; its VmRSS is sampled
// every second and VmHWM read at the end (/proc/PID/status). The swarm's own CPU is printed too, because it
// shares the machine with the server.
//
// Usage: agent_swarm [--gpupack PATH | --server URL --server-pid PID] [--agents N] [--agent-offset K]
//                    [--baseline-s S] [--idle-s S] [--hold-s S] [--rate R] [--task-life-s S] [--churn R]
//                    [--churn-down-ms MS] [--heartbeat-ms MS] [--serve-s S [--crash-per-min P]] [--dir DIR]
//                    [--keep] [--no-ack] [--server URL,URL,... --follow [--follow-threads N]] [--io-threads N]
// Defaults: build-bench/gpupack, 200 agents, 10 s baseline, 30 s idle, 60 s driven, 10 RunTask/s, 5 s life,
// no churn (200 ms away when churning), the welcome's heartbeat interval, no serve mode.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/channel_client.h"
#include "bench/proc_stats.h"
#include "bench/swarm_agent.h"
#include "bench/swarm_follow.h"
#include "bench/swarm_serve.h"
#include "bench/swarm_setup.h"
#include "protocol/messages.h"

namespace {

namespace fs = std::filesystem;
namespace protocol = gpupack::protocol;
using gpupack::agent::CallEcs;
using Json = nlohmann::json;
using namespace gpupack::bench;  // SimAgent, Swarm (swarm_agent.h); SampleProc, ... (proc_stats.h); Clock; SwarmOptions

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

[[noreturn]] void Die(const std::string& message) { SwarmDie(message); }


// ---- the simulated agents, /proc, options, the server and serve mode: bench/swarm_agent.h, bench/proc_stats.h,
// bench/swarm_setup.h, bench/swarm_serve.h

// ---- figures ---------------------------------------------------------------------------------------------------

void PrintLatency(const char* name, const std::vector<double>& v, const char* note) {
  Quantiles q = Summarize(v);
  std::printf("  %-34s %6zu %8.1f %8.1f %8.1f %8.1f   %s\n", name, q.n, q.p50, q.p90, q.p99, q.max, note);
}

struct Phase {
  explicit Phase(const char* n) : name(n) {}
  const char* name;
  double wall_s = 0, server_cpu_s = 0, server_ticks_s = 0, swarm_cpu_s = 0;
  int64_t rss_min_kib = 0, rss_max_kib = 0;
  std::string load_before, load_after;
};

}  // namespace

int main(int argc, char** argv) {
  SwarmOptions o = ParseSwarmOptions(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  if (o.serve_s > 0) BlockServeSignals();  // before any thread starts: they all inherit the mask
  std::string command_line;
  for (int i = 0; i < argc; ++i) {
    if (i) command_line += ' ';  // two appends: GCC 12 at -O3 sees a false -Wrestrict in " " + std::string
    command_line += argv[i];
  }

  // ---- start (or attach)
  std::string work;
  std::vector<std::string> server_argv;
  std::string endpoint = o.server;
  pid_t server_pid = o.server_pid;
  bool own_server = o.server.empty();
  if (own_server) {
    std::string tmpl = o.dir + "/gpupack-agent-swarm.XXXXXX";
    if (!mkdtemp(tmpl.data())) Die("cannot create a temporary directory under " + o.dir);
    work = tmpl;
    server_pid = StartSwarmServer(o, work, &endpoint, &server_argv);
  }
  // --server URL,URL,... (--follow): the first registers the agents and takes their first channels.
  const std::vector<ServerEndpoint> servers = ParseServers(endpoint);
  const std::optional<ServerEndpoint> server = servers[0];
  auto stop_server = [&] {
    if (!own_server) return;
    kill(server_pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 100 && waitpid(server_pid, &status, WNOHANG) != server_pid; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!o.keep) fs::remove_all(work);
    else std::fprintf(stderr, "kept %s\n", work.c_str());
  };
  auto check = [&](const auto& r, const std::string& what) {
    if (!r.ok()) {
      stop_server();
      Die(what + ": " + r.status().message());
    }
  };

  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ProcSample started = SampleProc(server_pid);
  const std::string cluster = "swarm";
  const std::string family = "swarm-shared-2g";
  check(CallEcs(*server, "CreateCluster", Json{{"clusterName", cluster}}), "CreateCluster");
  check(CallEcs(*server, "RegisterTaskDefinition",
                Json{{"family", family},
                     {"containerDefinitions",
                      Json::array({{{"name", "main"}, {"image", "bench/infer:latest"}, {"essential", true}, {"cpu", 256},
                                    {"memory", 1024}, {"entryPoint", {"/bin/sh", "-c"}}, {"command", {"exec sleep 30"}},
                                    {"resourceRequirements",
                                     Json::array({{{"type", "GPU"},
                                                   {"sharingStrategy", {{"nvidiaMps", {{"memory", 2048}}}}}}})}}})}}),
        "RegisterTaskDefinition");
  ProcSample before = SampleProc(server_pid);
  const std::string load_start = LoadAverage();
  // Baseline: the server with no agent at all, for --baseline-s (its watchdog and idle threads).
  const auto b0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(o.baseline_s));
  const double baseline_wall_s = Seconds(Clock::now() - b0);
  const double baseline_cpu_s = SampleProc(server_pid).sched_s - before.sched_s;

  // ---- register and connect
  // --io-threads: the channels share one loop (declared before the swarm and its agents: it outlives them).
  std::optional<gpupack::agent::ChannelLoop> loop;
  if (o.io_threads > 0) loop.emplace(o.io_threads);
  Swarm swarm;
  swarm.loop = loop ? &*loop : nullptr;
  swarm.no_ack = o.no_ack;
  swarm.agent_offset = o.agent_offset;
  std::optional<Follower> follower;  // --follow: agents whose channel closes walk the servers (bench/swarm_follow.h)
  if (o.follow) {
    follower.emplace(swarm, servers, o.follow_threads);
    swarm.on_lost = [&follower](SimAgent* a) { follower->Lost(a); };
  }
  std::vector<std::unique_ptr<SimAgent>> agents;
  for (int i = 0; i < o.agents; ++i) {
    agents.push_back(std::make_unique<SimAgent>());
    agents.back()->swarm = &swarm;
    agents.back()->index = i;
  }
  std::atomic<int> register_failures{0}, connect_failures{0};
  std::mutex fail_mu;
  std::string first_failure;
  auto fail = [&](std::atomic<int>& counter, const std::string& m) {
    ++counter;
    std::lock_guard lock(fail_mu);
    if (first_failure.empty()) first_failure = m;
  };
  // Heartbeats: one thread for the whole swarm, from the first channel to shutdown, every --heartbeat-ms or else
  // every heartbeatIntervalMs of the server's welcome (5,000 ms until one came).
  auto heartbeat_interval = [&]() -> Clock::duration {
    const int64_t ms = o.heartbeat_ms > 0 ? o.heartbeat_ms : swarm.welcome_heartbeat_ms.load();
    return std::chrono::milliseconds(ms > 0 ? ms : 5000);
  };
  Heartbeater heartbeater(agents, heartbeat_interval);
  auto stop_heartbeats = [&] { heartbeater.Stop(); };

  auto t_reg0 = Clock::now();
  ParallelFor(o.agents, 8, [&](int i) {
    auto r = CallEcs(*server, "RegisterContainerInstance", RegisterBody(cluster, o.agent_offset + i));
    if (!r.ok()) return fail(register_failures, r.status().message());
    agents[i]->arn = (*r)["containerInstance"]["containerInstanceArn"];
  });
  auto t_reg1 = Clock::now();
  if (register_failures) {
    stop_heartbeats();
    stop_server();
    Die(std::to_string(register_failures.load()) + " registrations failed; first: " + first_failure);
  }
  ParallelFor(o.agents, 8, [&](int i) {
    std::string error;
    if (!agents[i]->Connect(*server, &error)) return fail(connect_failures, error);
  });
  if (connect_failures) {
    stop_heartbeats();
    stop_server();
    Die(std::to_string(connect_failures.load()) + " channels failed to open; first: " + first_failure);
  }
  int welcomed = 0;
  for (int i = 0; i < 600; ++i) {  // bounded: 60 s
    welcomed = 0;
    for (auto& a : agents) welcomed += a->welcomed ? 1 : 0;
    if (welcomed == o.agents) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto t_conn1 = Clock::now();
  if (welcomed != o.agents) {
    stop_heartbeats();
    stop_server();
    Die("only " + std::to_string(welcomed) + " of " + std::to_string(o.agents) + " agents were welcomed within 60 s");
  }
  if (o.serve_s > 0) {  // serve mode (bench/swarm_serve.h) instead of the idle, driven and check phases
    ServeUntilSignalled(o, swarm, server_pid, cluster, heartbeat_interval, stop_heartbeats, agents);
    if (follower) follower->Stop();  // no attempt after this: the closes below are on purpose
    ParallelFor(o.agents, 8, [&](int i) { agents[i]->Disconnect(); });
    stop_server();
    return 0;
  }
  // hold runs the heartbeats for `seconds`, sampling the server once a second.
  auto hold = [&](Phase& p, int seconds) {
    p.load_before = LoadAverage();
    ProcSample s0 = SampleProc(server_pid);
    double self0 = SelfCpuSeconds();
    p.rss_min_kib = p.rss_max_kib = s0.rss_kib;
    auto t0 = Clock::now(), end = t0 + std::chrono::seconds(seconds), next_sample = t0 + std::chrono::seconds(1);
    while (Clock::now() < end) {
      if (Clock::now() >= next_sample) {
        next_sample += std::chrono::seconds(1);
        int64_t rss = SampleProc(server_pid).rss_kib;
        p.rss_min_kib = std::min(p.rss_min_kib, rss);
        p.rss_max_kib = std::max(p.rss_max_kib, rss);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ProcSample s1 = SampleProc(server_pid);
    p.wall_s = Seconds(Clock::now() - t0);
    p.server_cpu_s = s1.sched_s - s0.sched_s;
    p.server_ticks_s = s1.cpu_s - s0.cpu_s;
    p.swarm_cpu_s = SelfCpuSeconds() - self0;
    p.load_after = LoadAverage();
  };

  ProcSample connected = SampleProc(server_pid);
  Phase idle("idle (heartbeats only)");
  hold(idle, o.idle_s);
  const int64_t heartbeats_idle = swarm.heartbeats;

  // ---- driven: RunTask at o.rate per second, StopTask o.task_life_s after each placement; with --churn, agents
  // drop their channel and come back meanwhile
  std::atomic<bool> driving{true};
  std::atomic<int64_t> run_ok{0}, run_failed{0}, stop_calls{0}, call_errors{0};
  std::string first_failure_reason;         // guarded by swarm.mu
  std::set<std::string> stopped_at_once;    // StopTask answered STOPPED (a PENDING task); guarded by swarm.mu
  std::thread driver([&] {
    if (o.rate <= 0) return;
    std::deque<std::pair<Clock::time_point, std::string>> live;  // placement time, task ARN
    const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / o.rate));
    const auto life = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.task_life_s));
    auto stop_one = [&](const std::string& arn) {
      swarm.Stamp(arn, &TaskTimes::stop_sent);
      ++stop_calls;
      auto r = CallEcs(*server, "StopTask", Json{{"cluster", cluster}, {"task", arn}, {"reason", "agent_swarm"}});
      if (!r.ok()) {
        ++call_errors;
      } else if ((*r)["task"].value("lastStatus", "") == "STOPPED") {
        std::lock_guard lock(swarm.mu);
        stopped_at_once.insert(arn);
      }
    };
    auto next = Clock::now();
    while (driving) {
      std::this_thread::sleep_until(next);
      next += period;
      if (!driving) break;
      while (!live.empty() && Clock::now() - live.front().first >= life) {
        stop_one(live.front().second);
        live.pop_front();
      }
      auto sent = Clock::now();
      auto r = CallEcs(*server, "RunTask", Json{{"cluster", cluster}, {"taskDefinition", family}, {"count", 1}});
      auto answered = Clock::now();
      if (!r.ok()) {
        ++call_errors;
        continue;
      }
      const Json& tasks = (*r)["tasks"];
      if (!tasks.is_array() || tasks.empty()) {
        ++run_failed;
        std::lock_guard lock(swarm.mu);
        if (first_failure_reason.empty()) first_failure_reason = (*r)["failures"].dump().substr(0, 300);
        continue;
      }
      ++run_ok;
      std::string arn = tasks[0]["taskArn"];
      {
        std::lock_guard lock(swarm.mu);
        auto& t = swarm.times[arn];
        t.sent = sent;
        t.answered = answered;
      }
      live.emplace_back(answered, arn);
    }
    for (const auto& [_, arn] : live) stop_one(arn);  // leave nothing running
  });
  // Churn: --churn times a second a random agent drops its channel (its unacknowledged reports with it) and
  // reconnects --churn-down-ms later with a hello that reports every task it has, as a real agent would.
  std::atomic<bool> churning{true};
  std::atomic<int64_t> churned{0};
  std::string first_reconnect_error;  // churn thread only until joined
  std::thread churner([&] {
    if (o.churn <= 0) return;
    std::mt19937 rng(20261129);
    std::deque<std::pair<Clock::time_point, int>> away;  // reconnect time, agent
    const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / o.churn));
    const auto down = std::chrono::milliseconds(o.churn_down_ms);
    auto reconnect = [&](int i) {
      std::string error;
      for (int attempt = 0; attempt < 50; ++attempt) {  // bounded: 5 s
        if (agents[i]->Connect(*server, &error)) {
          ++swarm.reconnects;
          agents[i]->churning = false;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      ++swarm.reconnect_failures;
      if (first_reconnect_error.empty()) first_reconnect_error = error;
      agents[i]->churning = false;
    };
    auto next = Clock::now();
    while (churning) {
      auto wake = away.empty() ? next : std::min(next, away.front().first);
      std::this_thread::sleep_until(std::min(wake, Clock::now() + std::chrono::milliseconds(50)));
      auto now = Clock::now();
      while (!away.empty() && away.front().first <= now) {
        reconnect(away.front().second);
        away.pop_front();
      }
      if (now < next) continue;
      next += period;
      // Every other drop hits an agent that holds tasks (the first found from a random start), so that hellos
      // carry reports and welcomes carry assigns and stops; the others hit any agent.
      int i = static_cast<int>(rng() % static_cast<unsigned>(o.agents));
      if (rng() % 2) {
        for (int k = 0; k < o.agents; ++k) {
          SimAgent& a = *agents[(i + k) % o.agents];
          std::lock_guard lock(a.mu);
          if (!a.tasks.empty()) {
            i = (i + k) % o.agents;
            break;
          }
        }
      }
      if (agents[i]->churning.exchange(true)) continue;
      agents[i]->Disconnect();
      ++churned;
      away.emplace_back(now + down, i);
    }
    for (const auto& [_, i] : away) reconnect(i);
  });
  Phase driven(o.churn > 0 ? "driven (heartbeats + RunTask/StopTask + churn)" : "driven (heartbeats + RunTask/StopTask)");
  hold(driven, o.hold_s);
  ProcSample driven_end = SampleProc(server_pid);
  churning = false;
  churner.join();
  driving = false;
  driver.join();
  // Let the last reports come back: every agent welcomed again and every placed task STOPPED on the server
  // (bounded: 60 s).
  std::vector<std::string> placed;
  {
    std::lock_guard lock(swarm.mu);
    for (const auto& [arn, t] : swarm.times)
      if (t.sent != Clock::time_point{}) placed.push_back(arn);
  }
  auto describe_tasks = [&](const std::vector<std::string>& arns, std::map<std::string, Json>* out) {
    for (size_t i = 0; i < arns.size(); i += 100) {
      Json batch = Json::array();
      for (size_t j = i; j < std::min(arns.size(), i + 100); ++j) batch.push_back(arns[j]);
      auto d = CallEcs(*server, "DescribeTasks", Json{{"cluster", cluster}, {"tasks", batch}});
      if (!d.ok()) continue;
      for (const auto& t : (*d)["tasks"]) (*out)[t["taskArn"]] = t;
    }
  };
  const auto settle0 = Clock::now();
  std::map<std::string, Json> final_tasks;
  for (int i = 0; i < 300; ++i) {  // bounded: 300 x (describe + 200 ms)
    final_tasks.clear();
    describe_tasks(placed, &final_tasks);
    int not_stopped = 0, unwelcomed = 0;
    for (const auto& [arn, t] : final_tasks) not_stopped += t.value("lastStatus", "") != "STOPPED" ? 1 : 0;
    for (const auto& a : agents) unwelcomed += a->welcomed ? 0 : 1;
    if ((not_stopped == 0 && unwelcomed == 0) || Seconds(Clock::now() - settle0) > 60) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double settle_s = Seconds(Clock::now() - settle0);
  ProcSample end = SampleProc(server_pid);

  // ---- verify through the API: every instance connected; no leaked or lost reservation (per GPU, remaining ==
  // total - the declared memory of its non-STOPPED tasks); no lost state change (every task whose STOPPED report
  // was acknowledged is STOPPED, every acknowledged RUNNING report left startedAt, unless StopTask stopped the
  // task while it was still PENDING); nothing still running once every task was stopped.
  std::vector<std::string> violations;
  auto violation = [&](const std::string& what) {
    if (violations.size() < 20) std::fprintf(stderr, "VIOLATION %s\n", what.c_str());
    violations.push_back(what);
  };
  int connected_now = 0, described = 0, gpus_checked = 0;
  std::vector<Json> instances;
  for (int i = 0; i < o.agents; i += 100) {
    Json arns = Json::array();
    for (int j = i; j < std::min(o.agents, i + 100); ++j) arns.push_back(agents[j]->arn);
    auto d = CallEcs(*server, "DescribeContainerInstances", Json{{"cluster", cluster}, {"containerInstances", arns}});
    if (!d.ok()) {
      violation("DescribeContainerInstances failed: " + d.status().message());
      continue;
    }
    for (const auto& ci : (*d)["containerInstances"]) {
      ++described;
      connected_now += ci.value("agentConnected", false) ? 1 : 0;
      instances.push_back(ci);
    }
  }
  if (connected_now != o.agents) violation(std::to_string(o.agents - connected_now) + " instances not agentConnected at the end");
  {
    // Tasks the server lists as not stopped, whether or not the driver knows them.
    std::vector<std::string> listed;
    Json next_token;
    for (int page = 0; page < 10000; ++page) {
      Json body = {{"cluster", cluster}, {"desiredStatus", "RUNNING"}, {"maxResults", 100}};
      if (next_token.is_string()) body["nextToken"] = next_token;
      auto l = CallEcs(*server, "ListTasks", body);
      if (!l.ok()) break;
      for (const auto& a : (*l)["taskArns"]) listed.push_back(a);
      next_token = (*l).value("nextToken", Json());
      if (!next_token.is_string()) break;
    }
    std::vector<std::string> unknown;
    for (const auto& a : listed)
      if (!final_tasks.count(a)) unknown.push_back(a);
    describe_tasks(unknown, &final_tasks);
  }
  std::map<std::string, std::pair<int64_t, int>> declared;  // GPU -> (MiB, containers) of non-STOPPED tasks
  int not_stopped = 0, running_unreflected = 0, stopped_lost = 0;
  {
    std::lock_guard lock(swarm.mu);
    for (const auto& [arn, t] : final_tasks) {
      const std::string status = t.value("lastStatus", "");
      if (status != "STOPPED") {
        ++not_stopped;
        if (not_stopped <= 3) violation("task " + arn + " is " + status + " after every task was stopped and the agents settled");
        for (const auto& c : t["containers"])
          for (const auto& g : c.value("gpuIds", Json::array())) {
            declared[g].first += c["gpuSharingStrategy"]["nvidiaMps"].value("memory", 0);
            ++declared[g].second;
          }
      }
      if (swarm.stopped_acked.count(arn) && status != "STOPPED") {
        ++stopped_lost;
        violation("task " + arn + ": its STOPPED report was acknowledged, the server says " + status);
      }
      if (swarm.running_acked.count(arn) && !t.contains("startedAt") && !stopped_at_once.count(arn)) {
        ++running_unreflected;
        violation("task " + arn + ": its RUNNING report was acknowledged, the server has no startedAt");
      }
    }
    for (const auto& arn : placed)
      if (!final_tasks.count(arn)) violation("task " + arn + " was placed and is not described");
  }
  for (const auto& ci : instances) {
    int running = 0, pending = 0;
    for (const auto& g : ci["gpuDevices"]) {
      ++gpus_checked;
      auto [mib, count] = declared.count(g["gpuId"]) ? declared[g["gpuId"]] : std::pair<int64_t, int>{0, 0};
      int64_t total = g["totalMemoryInMiB"], remaining = g["remainingMemoryInMiB"];
      if (remaining != total - mib || g["containerCount"] != count)
        violation("GPU " + g["gpuId"].get<std::string>() + ": remaining " + std::to_string(remaining) + " MiB, " +
                  g["containerCount"].dump() + " containers; its non-STOPPED tasks declare " + std::to_string(mib) +
                  " MiB of " + std::to_string(total) + " in " + std::to_string(count));
    }
    for (const auto& [arn, t] : final_tasks)
      if (t.value("containerInstanceArn", "") == ci.value("containerInstanceArn", "")) {
        running += t.value("lastStatus", "") == "RUNNING" ? 1 : 0;
        pending += t.value("lastStatus", "") == "PENDING" ? 1 : 0;
      }
    if (ci.value("runningTasksCount", -1) != running || ci.value("pendingTasksCount", -1) != pending)
      violation("instance " + ci.value("containerInstanceArn", "") + " counts " + ci["runningTasksCount"].dump() +
                " running/" + ci["pendingTasksCount"].dump() + " pending, its tasks " + std::to_string(running) + "/" +
                std::to_string(pending));
  }
  const int64_t closes_before_shutdown = swarm.closes;
  const double swarm_rss_mib = SampleProc(getpid()).rss_kib / 1024.0;
  const int swarm_threads = SampleProc(getpid()).threads;

  // ---- latency of the pipeline, as the simulated agents saw it
  std::vector<double> answer_ms, assign_ms, running_ms, stop_ms;
  {
    std::lock_guard lock(swarm.mu);
    for (const auto& [arn, t] : swarm.times) {
      if (t.sent == Clock::time_point{}) continue;
      answer_ms.push_back(Millis(t.answered - t.sent));
      if (t.assigned != Clock::time_point{}) assign_ms.push_back(Millis(t.assigned - t.sent));
      if (t.running_acked != Clock::time_point{} && t.assigned != Clock::time_point{})
        running_ms.push_back(Millis(t.running_acked - t.assigned));
      if (t.stopped_acked != Clock::time_point{} && t.stop_sent != Clock::time_point{})
        stop_ms.push_back(Millis(t.stopped_acked - t.stop_sent));
    }
  }

  stop_heartbeats();
  ParallelFor(o.agents, 8, [&](int i) { agents[i]->Disconnect(); });
  stop_server();

  // ---- report
  auto mib = [](int64_t kib) { return kib / 1024.0; };
  auto cores = [](const Phase& p) { return p.wall_s > 0 ? p.server_cpu_s / p.wall_s : 0; };
  char when[64];
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::printf("gpupack agents held by one server (%s)\n", when);
  std::printf("command          %s\n", command_line.c_str());
  std::printf("machine          %u CPUs, %s; load average %s at the start\n", std::thread::hardware_concurrency(),
              CpuModel().c_str(), load_start.c_str());
  if (own_server) {
    std::string s;
    for (const auto& a : server_argv) s += a + " ";
    std::printf("server           %s(pid %d)\n", s.c_str(), server_pid);
  } else {
    std::printf("server           %s (pid %d, attached)\n", endpoint.c_str(), server_pid);
  }
  std::printf("agents           %d simulated (ChannelClient, 8 GPUs x 81,559 MiB, 65,536 CPU, 262,144 MiB each), "
              "heartbeat every %lld ms, staggered\n",
              o.agents, static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(heartbeat_interval()).count()));
  std::printf("register         %.1f s for %d RegisterContainerInstance (8 threads); channels open and welcomed "
              "%.1f s later\n",
              Seconds(t_reg1 - t_reg0), o.agents, Seconds(t_conn1 - t_reg1));
  std::printf("driver           RunTask count=1 at %.1f/s (one connection per call), StopTask %.1f s after each; "
              "shared task, nvidiaMps 2,048 MiB\n\n",
              o.rate, o.task_life_s);

  std::printf("server memory    VmRSS %.1f MiB started, %.1f MiB before registering, %.1f MiB with all %d connected "
              "(%.1f KiB per agent), %.1f MiB at the end; VmHWM %.1f MiB\n",
              mib(started.rss_kib), mib(before.rss_kib), mib(connected.rss_kib), o.agents,
              static_cast<double>(connected.rss_kib - before.rss_kib) / o.agents, mib(end.rss_kib), mib(end.hwm_kib));
  std::printf("server process   %d threads, %d open fds with all connected\n", connected.threads, connected.fds);
  std::printf("\n%-40s %7s %11s %8s %10s %16s %10s  %s\n", "phase", "wall s", "server CPU", "cores", "(ticks)",
              "VmRSS MiB min-max", "swarm CPU", "load average before -> after");
  std::printf("%-40s %7.1f %10.3fs %8.4f\n", "baseline (no agent)", baseline_wall_s, baseline_cpu_s,
              baseline_wall_s > 0 ? baseline_cpu_s / baseline_wall_s : 0.0);
  for (const Phase* p : {&idle, &driven})
    std::printf("%-40s %7.1f %10.3fs %8.4f %9.2fs %8.1f-%-7.1f %9.2fs  %s -> %s\n", p->name, p->wall_s, p->server_cpu_s,
                cores(*p), p->server_ticks_s, mib(p->rss_min_kib), mib(p->rss_max_kib), p->swarm_cpu_s,
                p->load_before.c_str(), p->load_after.c_str());
  std::printf("                 server CPU: the threads' run time from schedstat (ns); (ticks): utime+stime from stat, "
              "10 ms steps\n");
  std::printf("\nheartbeats       %lld during idle (%.1f/s), %lld in all, %lld acked\n",
              static_cast<long long>(heartbeats_idle), idle.wall_s > 0 ? heartbeats_idle / idle.wall_s : 0.0,
              static_cast<long long>(swarm.heartbeats.load()), static_cast<long long>(swarm.heartbeat_acks.load()));
  if (idle.wall_s > 0 && heartbeats_idle > 0)
  {
    const double base_cores = baseline_wall_s > 0 ? baseline_cpu_s / baseline_wall_s : 0.0;
    const double held_cpu_s = idle.server_cpu_s - base_cores * idle.wall_s;  // above the no-agent baseline
    std::printf("idle cost        %.1f µs of server CPU per heartbeat (idle CPU above the baseline / heartbeats), "
                "%.4f cores per 1,000 agents\n",
                1e6 * held_cpu_s / heartbeats_idle, 1000.0 * held_cpu_s / idle.wall_s / o.agents);
  }
  std::printf("tasks            %lld placed, %lld placement failures, %lld StopTask, %lld API errors; agents got "
              "%lld assign and %lld stop (%lld acked), %lld state reports acked\n",
              static_cast<long long>(run_ok.load()), static_cast<long long>(run_failed.load()),
              static_cast<long long>(stop_calls.load()), static_cast<long long>(call_errors.load()),
              static_cast<long long>(swarm.assigns.load()), static_cast<long long>(swarm.stops.load()),
              static_cast<long long>(swarm.push_acks.load()), static_cast<long long>(swarm.state_acks.load()));
  if (!first_failure_reason.empty()) std::printf("                 first placement failure: %s\n", first_failure_reason.c_str());
  std::printf("connections      %d of %d instances agentConnected at the end (DescribeContainerInstances, %d described); "
              "%lld channels closed before shutdown; %lld error messages%s%s\n",
              connected_now, o.agents, described, static_cast<long long>(closes_before_shutdown),
              static_cast<long long>(swarm.errors.load()), swarm.first_error.empty() ? "" : ", first: ",
              swarm.first_error.c_str());
  std::printf("swarm itself     VmRSS %.1f MiB, %d threads (%s)\n", swarm_rss_mib, swarm_threads,
              o.io_threads > 0 ? "the channels on one shared loop, --io-threads" : "one io thread per ChannelClient");
  std::printf("churn            %.1f reconnects/s asked, each agent away %d ms: %lld channels dropped, %lld reconnected "
              "(hello with the agent's tasks), %lld reconnects failed%s%s; %lld assigns for a task the agent had "
              "(ignored)\n"
              "                 hellos reported %lld tasks; welcomes carried %lld assigns and %lld stops\n",
              o.churn, o.churn_down_ms, static_cast<long long>(churned.load()),
              static_cast<long long>(swarm.reconnects.load()), static_cast<long long>(swarm.reconnect_failures.load()),
              first_reconnect_error.empty() ? "" : ", first: ", first_reconnect_error.c_str(),
              static_cast<long long>(swarm.duplicate_assigns.load()), static_cast<long long>(swarm.hello_tasks.load()),
              static_cast<long long>(swarm.welcome_assigns.load()), static_cast<long long>(swarm.welcome_stops.load()));
  std::printf("server at the end of the driven phase: %d open fds, %d threads, VmRSS %.1f MiB\n", driven_end.fds,
              driven_end.threads, mib(driven_end.rss_kib));
  std::printf("check (API)      settled in %.1f s; %zu tasks described, %d not STOPPED; %d GPUs of %d instances: "
              "remaining == total - declared memory of non-STOPPED tasks; %zu RUNNING and %zu STOPPED reports "
              "acknowledged: %d RUNNING without startedAt, %d STOPPED reports lost; %zu stopped while PENDING\n",
              settle_s, final_tasks.size(), not_stopped, gpus_checked, described, swarm.running_acked.size(),
              swarm.stopped_acked.size(), running_unreflected, stopped_lost, stopped_at_once.size());
  std::printf("violations       %zu%s%s\n\n", violations.size(), violations.empty() ? "" : ", first: ",
              violations.empty() ? "" : violations[0].c_str());
  std::printf("  %-34s %6s %8s %8s %8s %8s\n", "driven phase, ms", "n", "p50", "p90", "p99", "max");
  PrintLatency("RunTask answered", answer_ms, "placement durable (new TCP connection per call)");
  PrintLatency("RunTask sent -> assign at agent", assign_ms, "pushed after the commit");
  PrintLatency("assign -> RUNNING report acked", running_ms, "report applied and durable");
  PrintLatency("StopTask sent -> STOPPED acked", stop_ms, "push, report, commit");
  return violations.empty() ? 0 : 1;
}
