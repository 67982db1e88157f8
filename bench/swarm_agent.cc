// swarm_agent.cc: the simulated agent's protocol handling (bench/swarm_agent.h).
#include "bench/swarm_agent.h"

#include <algorithm>
#include <variant>

namespace gpupack::bench {

void LatencySample::Add(double ms) {
  std::lock_guard lock(mu_);
  ++count_;
  max_ = std::max(max_, ms);
  if (values_.size() < kCap) {
    values_.push_back(ms);
  } else if (uint64_t slot = rng_() % static_cast<uint64_t>(count_); slot < kCap) {
    values_[slot] = ms;
  }
}

void LatencySample::Clear() {
  std::lock_guard lock(mu_);
  values_.clear();
  count_ = 0;
  max_ = 0;
}

int64_t LatencySample::count() const {
  std::lock_guard lock(mu_);
  return count_;
}

double LatencySample::max() const {
  std::lock_guard lock(mu_);
  return max_;
}

std::vector<double> LatencySample::Values() const {
  std::lock_guard lock(mu_);
  return values_;
}

Heartbeater::Heartbeater(const std::vector<std::unique_ptr<SimAgent>>& agents,
                         std::function<Clock::duration()> interval)
    : thread_([this, &agents, interval = std::move(interval)] {
        const auto n = static_cast<int64_t>(agents.size());
        while (running_) {
          const auto now = Clock::now();
          const auto every = interval();
          for (const auto& a : agents) {
            if (!a->connected) continue;
            if (a->next_heartbeat == Clock::time_point{}) a->next_heartbeat = now + every * a->index / n;
            if (now < a->next_heartbeat) continue;
            a->next_heartbeat += every;
            if (a->next_heartbeat < now) a->next_heartbeat = now + every;  // fell behind (a busy box): no burst
            a->SendHeartbeat();
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }) {}

void Heartbeater::Stop() {
  running_ = false;
  if (thread_.joinable()) thread_.join();
}

void SimAgent::SendHeartbeat() {
  const int64_t id = next_id++;
  {
    std::lock_guard lock(mu);
    // Bounded: a server that stopped answering leaves at most 1,024 heartbeats waiting per agent.
    if (heartbeats_out.size() < 1024) heartbeats_out[id] = Clock::now();
  }
  ++swarm->heartbeats;
  Send(protocol::Serialize(protocol::AgentMessage(protocol::Heartbeat{id, false, {}})));
}

std::vector<protocol::ContainerReport> ContainerReports(protocol::TaskStatus status,
                                                        const std::vector<std::string>& container_names,
                                                        int exit_code) {
  std::vector<protocol::ContainerReport> containers;
  for (const auto& name : container_names) {
    protocol::ContainerReport c{name, status, std::nullopt, ""};
    if (status == protocol::TaskStatus::kStopped) c.exit_code = exit_code;
    containers.push_back(std::move(c));
  }
  return containers;
}

protocol::TaskStatus StatusOf(const std::string& status) {
  return protocol::ParseTaskStatus(status).value_or(protocol::TaskStatus::kPending);
}

void SimAgent::SendState(const std::string& task_arn, const std::string& status,
                         const std::vector<std::string>& container_names, bool crashed) {
  protocol::StateReport m;
  m.id = next_id++;
  m.report.task_arn = task_arn;
  m.report.status = StatusOf(status);
  m.report.containers = ContainerReports(m.report.status, container_names, crashed ? 1 : 143);
  if (status == "STOPPED" && crashed) {
    m.report.stop_code = protocol::StopCode::kEssentialContainerExited;
    m.report.reason = "Essential container in task exited";
  } else if (status == "STOPPED") {
    m.report.stop_code = protocol::StopCode::kUserInitiated;
    m.report.reason = "Task stopped by user";
  }
  {
    std::lock_guard lock(mu);
    pending[m.id] = {task_arn, status};
  }
  Send(protocol::Serialize(protocol::AgentMessage(m)));
}

bool SimAgent::Crash(const std::string& task_arn) {
  {
    std::lock_guard lock(mu);
    auto it = tasks.find(task_arn);
    if (it == tasks.end() || it->second != "RUNNING") return false;
    it->second = "STOPPED";
  }
  ++swarm->crashes;
  SendState(task_arn, "STOPPED", {"main"}, /*crashed=*/true);
  return true;
}

bool SimAgent::Connect(const ServerEndpoint& server, std::string* error, DeclinedUpgrade* declined) {
  const uint64_t gen = ++generation;
  auto c = ChannelClient::Connect(server, protocol::ChannelTarget(arn),
                                  {[this](std::string m) { OnMessage(m); },
                                   [this, gen] {
                                     ++swarm->closes;
                                     if (gen == generation && swarm->on_lost) swarm->on_lost(this);
                                   }},
                                  std::chrono::milliseconds(5000), declined, swarm->loop);
  if (!c.ok()) {
    *error = c.status().message();
    return false;
  }
  protocol::Hello hello;
  {
    std::lock_guard lock(mu);
    if (lost_at != Clock::time_point{})
      hello_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
    hello_reported = tasks;
    swarm->hello_tasks += static_cast<int64_t>(tasks.size());
    for (const auto& [task_arn, status] : tasks)
      hello.tasks.push_back({task_arn, StatusOf(status), std::nullopt, "", ContainerReports(StatusOf(status), {"main"})});
  }
  std::lock_guard lock(chan_mu);
  client = std::move(*c);
  connected = true;
  client->Send(protocol::Serialize(protocol::AgentMessage(hello)));
  return true;
}

void SimAgent::OnMessage(const std::string& text) {
  auto parsed = protocol::ParseServerMessage(text);
  if (!parsed.ok()) return swarm->Error("a message the protocol refuses: " + parsed.status().message());
  // A push (assign, stop) is acked once recorded, else the server sends it again and finally closes the channel.
  auto ack = [this](int64_t push_id) {
    if (swarm->no_ack || push_id == 0) return;
    ++swarm->push_acks;
    Send(protocol::Serialize(protocol::AgentMessage(protocol::Ack{push_id})));
  };
  auto assign = [this, &ack](const protocol::Assignment& task, int64_t push_id) {
    ++swarm->assigns;
    {
      std::lock_guard lock(mu);
      if (tasks.count(task.task_arn)) {  // never start a task twice
        ++swarm->duplicate_assigns;
        return ack(push_id);
      }
      tasks[task.task_arn] = "RUNNING";
    }
    ack(push_id);
    swarm->Stamp(task.task_arn, &TaskTimes::assigned);
    std::vector<std::string> names;
    for (const auto& c : task.containers) names.push_back(c.name);
    SendState(task.task_arn, "RUNNING", names);
  };
  auto stop = [this](const std::string& task_arn) {
    ++swarm->stops;
    {
      std::lock_guard lock(mu);
      if (auto it = tasks.find(task_arn); it != tasks.end()) it->second = "STOPPED";
    }
    SendState(task_arn, "STOPPED", {"main"});
  };
  protocol::ServerMessage& m = *parsed;
  if (const auto* welcome = std::get_if<protocol::Welcome>(&m)) {
    // The welcome comes once the hello's reports are applied and durable: they count as acknowledged.
    std::map<std::string, std::string> reported;
    {
      std::lock_guard lock(mu);
      if (lost_at != Clock::time_point{}) {  // back after a loss (bench/swarm_follow.h)
        Return r{swarm->agent_offset + index, lost_unix_ms, hello_unix_ms,
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch()).count(),
                 welcome->epoch.value_or(0), attempts};
        lost_at = {};
        attempts = 0;
        ++swarm->returned;
        std::lock_guard swarm_lock(swarm->mu);
        swarm->returns.push_back(r);
      }
      reported.swap(hello_reported);
      for (const auto& [task_arn, status] : reported)
        if (status == "STOPPED" && tasks.count(task_arn) && tasks[task_arn] == "STOPPED") tasks.erase(task_arn);
    }
    for (const auto& [task_arn, status] : reported) swarm->Acked(task_arn, status);
    swarm->welcome_stops += static_cast<int64_t>(welcome->stop.size());
    swarm->welcome_assigns += static_cast<int64_t>(welcome->assign.size());
    for (const auto& s : welcome->stop) stop(s.task_arn);
    for (const auto& a : welcome->assign) assign(a, 0);
    swarm->welcome_heartbeat_ms = welcome->heartbeat_interval_ms;
    welcomed = true;
  } else if (const auto* push = std::get_if<protocol::Assign>(&m)) {
    assign(push->task, push->id);
  } else if (const auto* order = std::get_if<protocol::Stop>(&m)) {
    stop(order->order.task_arn);
    ack(order->id);
  } else {
    const auto* error = std::get_if<protocol::Error>(&m);
    if (error) swarm->Error(error->message.empty() ? "(no message)" : error->message);
    const std::optional<int64_t> id = error ? error->id : std::optional<int64_t>(std::get<protocol::Ack>(m).id);
    if (!id) return;
    std::pair<std::string, std::string> what;
    {
      std::lock_guard lock(mu);
      if (auto hb = heartbeats_out.find(*id); hb != heartbeats_out.end()) {
        const auto sent = hb->second;
        heartbeats_out.erase(hb);
        if (error) {
          ++swarm->heartbeat_errors;
        } else {
          ++swarm->heartbeat_acks;
          swarm->heartbeat_ms.Add(std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
        }
        return;
      }
      auto it = pending.find(*id);
      if (it == pending.end()) {
        if (!error) ++swarm->heartbeat_acks;
        return;
      }
      what = it->second;
      pending.erase(it);
      if (!error && what.second == "STOPPED" && tasks.count(what.first) && tasks[what.first] == "STOPPED")
        tasks.erase(what.first);  // the server has it: forget it
    }
    if (error) return;
    ++swarm->state_acks;
    swarm->Acked(what.first, what.second);
    swarm->Stamp(what.first, what.second == "RUNNING" ? &TaskTimes::running_acked : &TaskTimes::stopped_acked);
  }
}

}  // namespace gpupack::bench
