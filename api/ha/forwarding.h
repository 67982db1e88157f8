// Forwarding: a standby sends one HTTP request to the leader and returns the leader's answer (docs/ha.md).
//
// What it owns: the client side of a standby's forwarding. Forward writes the request unchanged (method,
// target, headers less the hop-by-hop ones, body: a SigV4 signature still verifies) to the leader's advertise
// URL, marks it with kForwardedHeader, reads the answer (status, headers less the hop-by-hop ones, body) and
// returns it unchanged. LeaderConnections keeps the idle keep-alive connections between calls. Plain
// non-blocking sockets waited on with poll() up to a deadline: no Beast, no io_context.
//
// Who calls it: Replica::StandbyFront (api/leadership.cc) from its forwarding threads, one LeaderConnections per
// standby front; it also refuses a request that already carries kForwardedHeader (no forwarding loops).
//
// Thread-safe: Forward may run on any number of threads at once sharing one LeaderConnections; each call uses
// the connection it took alone and gives it back (or closes it) before returning.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "api/http/http_server.h"
#include "base/status.h"

namespace gpupack::api {

// kForwardedHeader marks a request a standby forwarded, so a standby never forwards one again (no loops while
// two replicas disagree for a moment about who leads). Its value is the forwarding standby's advertise URL.
inline constexpr const char* kForwardedHeader = "x-gpupack-forwarded-by";

// LeaderConnections: a small bounded pool of idle keep-alive connections from a standby to the leader, so a
// forwarded call costs no TCP connect (and no TIME_WAIT socket) when one is idle. At most kMaxIdle connections
// wait, each for at most kMaxIdleTime; one that the leader closed meanwhile (it has something to read: the end
// of the stream) or that leads elsewhere is closed instead of used. Thread-safe; the destructor closes them.
class LeaderConnections {
 public:
  static constexpr size_t kMaxIdle = 64;  // the standby's forwarders: each holds at most one at a time
  static constexpr std::chrono::seconds kMaxIdleTime{10};

  LeaderConnections() = default;
  ~LeaderConnections();
  LeaderConnections(const LeaderConnections&) = delete;
  LeaderConnections& operator=(const LeaderConnections&) = delete;

  // Take: an idle connection to `base` still open, the most recently used first; -1 when none.
  int Take(const std::string& base);

  // Give: `fd` (to `base`) answered a whole request and may serve another; kept unless the pool is full.
  void Give(const std::string& base, int fd);

  // Enter: `fd` carries a call now (Abort cuts it); false, and nothing registered, once Abort was called.
  // Leave: the call on `fd` is over. Abort: cut every call in flight (shutdown() wakes its poll at once) and
  // refuse new ones, so a standby that changes role never waits on a leader that stopped answering.
  bool Enter(int fd);
  void Leave(int fd);
  void Abort();

 private:
  struct Idle {
    std::string base;
    int fd;
    std::chrono::steady_clock::time_point since;
  };
  std::mutex mu_;
  std::vector<Idle> idle_;       // guarded by mu_; the most recently given last
  std::vector<int> in_flight_;   // guarded by mu_: the connections carrying a call now
  bool aborted_ = false;         // guarded by mu_
};

// Forward sends `req` to the server at `base` (http://HOST:PORT), marked as forwarded by `me`, and returns its
// answer unchanged, within `timeout`. It uses an idle keep-alive connection from `pool` when there is one, else
// a new one; the connection goes back to the pool when it may serve another request. A reused connection that
// ends before any answer (the leader closed it as idle just as the request went out, so it did not take the
// request) is retried once on a new connection; any other failure (a timeout above all: the leader may be
// working on it) is returned as a Status. A leader that crashed after reading the request and before answering
// looks the same as the idle close; the retry then finds no leader at that address, or a new process that
// takes it as the client's own retry would. A call cut by `pool.Abort()` fails at once.
Result<HttpResponse> Forward(const HttpRequest& req, const std::string& base, const std::string& me,
                             std::chrono::milliseconds timeout, LeaderConnections& pool);

}  // namespace gpupack::api
