// swarm_follow.cc: the swarm's agents following a takeover (bench/swarm_follow.h).
#include "bench/swarm_follow.h"

#include <sstream>

#include "bench/swarm_setup.h"

namespace gpupack::bench {

namespace {

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::vector<ServerEndpoint> ParseServers(const std::string& list) {
  std::vector<ServerEndpoint> out;
  std::stringstream in(list);
  for (std::string url; std::getline(in, url, ',');) {
    if (url.empty()) continue;
    auto e = ServerEndpoint::Parse(url);
    if (!e.ok()) SwarmDie("--server " + url + ": " + e.status().message());
    out.push_back(*e);
  }
  if (out.empty()) SwarmDie("--server names no server");
  return out;
}

Follower::Follower(Swarm& swarm, std::vector<ServerEndpoint> servers, int threads)
    : swarm_(swarm), servers_(std::move(servers)) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
}

void Follower::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void Follower::Lost(SimAgent* a) {
  a->connected = false;  // no more heartbeats on it
  a->welcomed = false;
  std::chrono::milliseconds wait{0};
  {
    std::lock_guard lock(a->mu);
    if (a->lost_at == Clock::time_point{}) {  // a channel that closes before its welcome continues the same loss
      a->lost_at = Clock::now();
      a->lost_unix_ms = UnixMs();
      ++swarm_.lost;
    }
    if (!a->policy) a->policy = std::make_unique<ReconnectPolicy>(servers_.size());
    wait = a->policy->Closed();
  }
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    due_.emplace(Clock::now() + wait, a);
  }
  cv_.notify_one();
}

std::optional<Clock::time_point> Follower::Attempt(SimAgent* a) {
  {
    // The closed channel is dropped here, not on its own io thread (its destructor joins that thread).
    std::unique_ptr<ChannelClient> old;
    {
      std::lock_guard lock(a->chan_mu);
      old = std::move(a->client);
    }
    old.reset();
  }
  a->connected = false;
  {
    std::lock_guard lock(a->mu);
    a->pending.clear();  // unacknowledged reports go again in the hello
    a->heartbeats_out.clear();
    ++a->attempts;
  }
  const size_t tried = a->server;
  DeclinedUpgrade declined;
  std::string error;
  const auto start = Clock::now();
  const bool connected = a->Connect(servers_[tried], &error, &declined);
  swarm_.attempt_ms.Add(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  if (connected) {
    std::lock_guard lock(a->mu);  // Lost (on the new channel's io thread) may already be reading the policy
    a->policy->Connected();
    ++swarm_.reconnects;
    return std::nullopt;
  }
  ++swarm_.reconnect_failures;
  ReconnectPolicy::Outcome outcome = ReconnectPolicy::Classify(declined);
  const agent::ChannelDecline decline = declined.http_status != 0 ? agent::ReadDecline(declined) : agent::ChannelDecline{};
  // The leader a standby named, when it is on the list (as ServerConnection::NextServer); else the next server.
  bool followed = false;
  if (!decline.leader.empty()) {
    if (auto leader = ServerEndpoint::Parse(decline.leader); leader.ok()) {
      for (size_t i = 0; i < servers_.size() && !followed; ++i)
        if (servers_[i].host == leader->host && servers_[i].port == leader->port) {
          a->server = i;
          followed = true;
        }
    }
  }
  if (!followed) {
    a->server = (tried + 1) % servers_.size();
    if (outcome == ReconnectPolicy::Outcome::kLeaderNamed) outcome = ReconnectPolicy::Outcome::kAnswered;
  }
  if (decline.action == agent::ChannelDecline::Action::kRegister || decline.action == agent::ChannelDecline::Action::kAuthRefused)
    swarm_.Error("reconnecting " + a->arn + " to " + servers_[tried].Url() + ": " + error);
  std::lock_guard lock(a->mu);
  return Clock::now() + a->policy->Failed(outcome);
}

void Follower::Work() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto when = due_.begin()->first;
    if (Clock::now() < when) {
      cv_.wait_until(lock, when);
      continue;
    }
    SimAgent* a = due_.begin()->second;
    due_.erase(due_.begin());
    lock.unlock();
    swarm_.attempt_wait_ms.Add(std::chrono::duration<double, std::milli>(Clock::now() - when).count());
    const std::optional<Clock::time_point> again = Attempt(a);
    lock.lock();
    if (again && !stopping_) due_.emplace(*again, a);
  }
}

}  // namespace gpupack::bench
