// swarm_serve.cc: agent_swarm's serve mode (bench/swarm_serve.h).
#include "bench/swarm_serve.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <optional>
#include <random>
#include <thread>

#include "bench/proc_stats.h"

namespace gpupack::bench {

namespace {

sigset_t ServeSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGUSR2);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

double Millis(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Counters: the swarm's counters at one moment, so the window's figures are differences.
struct Counters {
  int64_t heartbeats, acks, errors, assigns, stops, state_acks, crashes;
  static Counters Of(const Swarm& s) {
    return {s.heartbeats.load(), s.heartbeat_acks.load(), s.heartbeat_errors.load(), s.assigns.load(),
            s.stops.load(), s.state_acks.load(), s.crashes.load()};
  }
};

// Crasher: while on, crashes pct_per_min % of the swarm's RUNNING tasks a minute, spread evenly: every 100 ms
// it adds pct x RUNNING x elapsed / 1 min to a budget and crashes that many whole tasks (SimAgent::Crash),
// picked at random among the RUNNING ones. Off at the start; Toggle turns it on and off. `agents` must outlive
// it; the destructor joins the thread.
class Crasher {
 public:
  Crasher(const std::vector<std::unique_ptr<SimAgent>>& agents, double pct_per_min)
      : thread_([this, &agents, pct_per_min] {
          std::mt19937_64 rng(20261204);
          double budget = 0;
          auto last = Clock::now();
          while (running_) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            const auto now = Clock::now();
            const double elapsed_s = std::chrono::duration<double>(now - last).count();
            last = now;
            if (!on_ || pct_per_min <= 0) {
              budget = 0;
              continue;
            }
            std::vector<std::pair<SimAgent*, std::string>> live;  // (agent, RUNNING task)
            for (const auto& a : agents) {
              std::lock_guard lock(a->mu);
              for (const auto& [arn, status] : a->tasks)
                if (status == "RUNNING") live.emplace_back(a.get(), arn);
            }
            budget += pct_per_min / 100.0 * static_cast<double>(live.size()) * elapsed_s / 60.0;
            while (budget >= 1 && !live.empty()) {
              const size_t i = rng() % live.size();
              live[i].first->Crash(live[i].second);
              live[i] = std::move(live.back());
              live.pop_back();
              budget -= 1;
            }
          }
        }) {}
  ~Crasher() {
    running_ = false;
    thread_.join();
  }
  Crasher(const Crasher&) = delete;
  Crasher& operator=(const Crasher&) = delete;
  // Toggle turns crashing on or off and answers whether it is on now.
  bool Toggle() { return on_ = !on_; }
  bool on() const { return on_; }

 private:
  std::atomic<bool> running_{true}, on_{false};
  std::thread thread_;
};

}  // namespace

void BlockServeSignals() {
  sigset_t set = ServeSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void ServeUntilSignalled(const SwarmOptions& o, Swarm& swarm, pid_t server_pid, const std::string& cluster,
                         const std::function<Clock::duration()>& heartbeat_interval,
                         const std::function<void()>& stop_heartbeats,
                         const std::vector<std::unique_ptr<SimAgent>>& agents) {
  const auto interval_ms = std::chrono::duration_cast<std::chrono::milliseconds>(heartbeat_interval()).count();
  std::printf("ready: %d agents on cluster %s registered, connected and welcomed; heartbeat every %lld ms "
              "(the welcome's heartbeatIntervalMs: %lld ms); swarm pid %d\n",
              o.agents, cluster.c_str(), static_cast<long long>(interval_ms),
              static_cast<long long>(swarm.welcome_heartbeat_ms.load()), static_cast<int>(getpid()));
  std::fflush(stdout);

  auto start_window = [&](Clock::time_point* t0, Counters* c0, ProcSample* s0, double* self0, std::string* load0) {
    swarm.heartbeat_ms.Clear();
    *t0 = Clock::now();
    *c0 = Counters::Of(swarm);
    *s0 = SampleProc(server_pid);
    *self0 = SelfCpuSeconds();
    *load0 = LoadAverage();
  };
  Clock::time_point t0;
  Counters c0{};
  ProcSample s0;
  double self0 = 0;
  std::string load0;
  start_window(&t0, &c0, &s0, &self0, &load0);
  int windows = 1;
  const char* ended_by = "the --serve-s limit";
  const sigset_t set = ServeSignals();
  const auto deadline = Clock::now() + std::chrono::seconds(o.serve_s);
  std::optional<Crasher> crasher;
  crasher.emplace(agents, o.crash_per_min);
  Clock::duration crashing{};  // how long crashing was on
  Clock::time_point crash_since{};
  // --follow: the agents welcomed back since the last pass, one line each (bench/swarm_follow.h).
  auto print_returns = [&] {
    std::vector<Return> returns;
    {
      std::lock_guard lock(swarm.mu);
      returns.swap(swarm.returns);
    }
    for (const Return& r : returns)
      std::printf("returned %d %lld %lld %lld %lld %d\n", r.agent, static_cast<long long>(r.lost_unix_ms),
                  static_cast<long long>(r.hello_unix_ms), static_cast<long long>(r.welcome_unix_ms),
                  static_cast<long long>(r.epoch), r.attempts);
    if (!returns.empty()) std::fflush(stdout);
  };
  while (Clock::now() < deadline) {
    print_returns();
    timespec wait{0, o.follow ? 50'000'000 : 200'000'000};
    const int sig = sigtimedwait(&set, nullptr, &wait);
    if (sig == SIGUSR1) {
      const Counters c = Counters::Of(swarm);
      std::printf("counters %d: heartbeats %lld acked %lld assigns %lld stops %lld crashes %lld\n", windows,
                  static_cast<long long>(c.heartbeats), static_cast<long long>(c.acks),
                  static_cast<long long>(c.assigns), static_cast<long long>(c.stops),
                  static_cast<long long>(c.crashes));
      std::fflush(stdout);
      start_window(&t0, &c0, &s0, &self0, &load0);
      ++windows;
    } else if (sig == SIGUSR2) {
      const bool on = crasher->Toggle();
      if (on) crash_since = Clock::now();
      else crashing += Clock::now() - crash_since;
      std::printf("crashing %s (%.1f %% of the RUNNING tasks a minute); %lld tasks crashed so far\n",
                  on ? "on" : "off", o.crash_per_min, static_cast<long long>(swarm.crashes.load()));
      std::fflush(stdout);
    } else if (sig == SIGTERM || sig == SIGINT) {
      ended_by = sig == SIGTERM ? "SIGTERM" : "SIGINT";
      break;
    }
  }
  const auto t1 = Clock::now();
  if (crasher->on()) crashing += t1 - crash_since;
  crasher.reset();  // no crash after the window
  const ProcSample s1 = SampleProc(server_pid);
  const double self1 = SelfCpuSeconds();
  const std::string load1 = LoadAverage();
  stop_heartbeats();
  // The answers to heartbeats sent before the end still count (bounded: 5 s).
  int64_t unanswered = 0;
  for (int i = 0; i < 50; ++i) {
    unanswered = 0;
    for (const auto& a : agents) {
      std::lock_guard lock(a->mu);
      unanswered += static_cast<int64_t>(a->heartbeats_out.size());
    }
    if (unanswered == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const Counters c1 = Counters::Of(swarm);
  const double wall_s = std::chrono::duration<double>(t1 - t0).count();
  Quantiles hb = Summarize(swarm.heartbeat_ms.Values());
  hb.n = static_cast<size_t>(swarm.heartbeat_ms.count());
  hb.max = swarm.heartbeat_ms.max();
  std::vector<double> running_ms;
  {
    std::lock_guard lock(swarm.mu);
    for (const auto& [arn, t] : swarm.times)
      if (t.assigned >= t0 && t.assigned <= t1 && t.running_acked != Clock::time_point{})
        running_ms.push_back(Millis(t.running_acked - t.assigned));
  }
  const Quantiles run = Summarize(running_ms);
  const double server_cpu_s = s1.sched_s - s0.sched_s;
  std::string first_error;
  {
    std::lock_guard lock(swarm.mu);
    first_error = swarm.first_error;
  }

  char when[64];
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::printf("\ngpupack agents held while the server is loaded (agent_swarm --serve-s, %s)\n", when);
  std::printf("window           %.1f s (window %d, ended by %s); load average %s -> %s\n", wall_s, windows, ended_by,
              load0.c_str(), load1.c_str());
  std::printf("agents           %d on cluster %s, heartbeat every %lld ms, staggered (the welcome said %lld ms)\n",
              o.agents, cluster.c_str(), static_cast<long long>(interval_ms),
              static_cast<long long>(swarm.welcome_heartbeat_ms.load()));
  std::printf("heartbeats       %lld sent (%.1f/s), %lld acked, %lld answered with an error, %lld unanswered 5 s "
              "after the end\n",
              static_cast<long long>(c1.heartbeats - c0.heartbeats),
              wall_s > 0 ? (c1.heartbeats - c0.heartbeats) / wall_s : 0.0, static_cast<long long>(c1.acks - c0.acks),
              static_cast<long long>(c1.errors - c0.errors), static_cast<long long>(unanswered));
  std::printf("tasks            %lld assigns received (each acked, then reported RUNNING), %lld stops, %lld state "
              "reports acked; %lld channels closed, %lld error messages%s%s\n",
              static_cast<long long>(c1.assigns - c0.assigns), static_cast<long long>(c1.stops - c0.stops),
              static_cast<long long>(c1.state_acks - c0.state_acks), static_cast<long long>(swarm.closes.load()),
              static_cast<long long>(swarm.errors.load()), first_error.empty() ? "" : ", first: ", first_error.c_str());
  print_returns();
  if (o.follow) {
    const Quantiles at = Summarize(swarm.attempt_ms.Values()), late = Summarize(swarm.attempt_wait_ms.Values());
    std::printf("follow           %lld channels lost (the swarm did not close them), %lld agents welcomed back, "
                "%lld reconnects, %lld failed attempts (%d worker threads); an attempt's Connect p50 %.1f p99 %.1f "
                "max %.1f ms; started after its due time p50 %.1f p99 %.1f max %.1f ms\n",
                static_cast<long long>(swarm.lost.load()), static_cast<long long>(swarm.returned.load()),
                static_cast<long long>(swarm.reconnects.load()), static_cast<long long>(swarm.reconnect_failures.load()),
                o.follow_threads, at.p50, at.p99, at.max, late.p50, late.p99, late.max);
  }
  if (o.crash_per_min > 0)
    std::printf("crashes          %lld tasks stopped on the agents' side (exit code 1), crashing on for %.1f s at "
                "%.1f %% of the RUNNING tasks a minute\n",
                static_cast<long long>(c1.crashes - c0.crashes), std::chrono::duration<double>(crashing).count(),
                o.crash_per_min);
  std::printf("CPU              server %.2f s (%.2f cores, schedstat), swarm %.2f s\n", server_cpu_s,
              wall_s > 0 ? server_cpu_s / wall_s : 0.0, self1 - self0);
  std::printf("\n  %-34s %8s %8s %8s %8s %8s\n", "window, ms", "n", "p50", "p90", "p99", "max");
  std::printf("  %-34s %8zu %8.2f %8.2f %8.2f %8.2f\n", "heartbeat sent -> ack", hb.n, hb.p50, hb.p90, hb.p99, hb.max);
  std::printf("  %-34s %8zu %8.2f %8.2f %8.2f %8.2f\n\n", "assign -> RUNNING report acked", run.n, run.p50, run.p90,
              run.p99, run.max);
  std::printf("result.window_s %.3f\n", wall_s);
  std::printf("result.heartbeats_sent %lld\n", static_cast<long long>(c1.heartbeats - c0.heartbeats));
  std::printf("result.heartbeat_errors %lld\n", static_cast<long long>(c1.errors - c0.errors));
  std::printf("result.heartbeats_unanswered %lld\n", static_cast<long long>(unanswered));
  std::printf("result.heartbeat_ack_n %zu\n", hb.n);
  std::printf("result.heartbeat_ack_p50_ms %.3f\n", hb.p50);
  std::printf("result.heartbeat_ack_p90_ms %.3f\n", hb.p90);
  std::printf("result.heartbeat_ack_p99_ms %.3f\n", hb.p99);
  std::printf("result.heartbeat_ack_max_ms %.3f\n", hb.max);
  std::printf("result.assigns %lld\n", static_cast<long long>(c1.assigns - c0.assigns));
  std::printf("result.running_ack_p50_ms %.3f\n", run.p50);
  std::printf("result.running_ack_p99_ms %.3f\n", run.p99);
  std::printf("result.crashes %lld\n", static_cast<long long>(c1.crashes - c0.crashes));
  std::printf("result.crashing_s %.3f\n", std::chrono::duration<double>(crashing).count());
  std::printf("result.server_cpu_cores %.3f\n", wall_s > 0 ? server_cpu_s / wall_s : 0.0);
  std::fflush(stdout);
}

}  // namespace gpupack::bench
