// Leadership: several gpupack servers on one PostgreSQL database, one of them the leader (docs/ha.md).
//
// The lease is the one row of gpupack_leader_lease (storage/postgres_store.h): holder, the URL the holder serves
// on (its advertise URL), an epoch raised by every takeover, and expires_at, judged only by the database's
// clock. LeaseKeeper (api/ha/lease_keeper.h) runs the lease's statements; Replica is one server process's part
// in it.
//
// Replica: serves HTTP on one address all the time, in one of two roles.
// - Leader: the full api::Server over the store, loaded when the lease was taken (as a restart loads it), with
//   the store's commits fenced by the lease's epoch (PostgresStore::SetFence): a commit of a deposed leader
//   is refused by the database, so it never writes and never acknowledges.
// - Standby: a small HTTP server that answers /healthz, /readyz and /metrics (its role, readiness and epoch)
//   itself and forwards every other request, unchanged (method, target, headers, body: a SigV4 signature still
//   verifies), to the leader's advertise URL, over a small bounded pool of keep-alive connections (no connect
//   per call), and returns the leader's answer unchanged. The agent channel is
//   refused there with a message that names the leader, which agents follow (agent/server_connection.h).
// The lease thread renews the lease about every `renew_every` while leading, else tries to take it (when it
// has expired; when the holder's lease connection ended since the last step saw it, as a killed leader's does;
// or, at its start, when it names this replica's own advertise URL: a restart of the same server need not wait
// for its old lease). The role thread turns what the lease thread learned into the role served:
// a new epoch of its own builds a new leader server (the old one, if any, is stopped first; the port is the
// same), another holder turns it into a standby. While the database is unreachable nothing changes: a leader
// keeps serving reads from memory and its writes fail with ServerException (their commits fail), and /readyz
// says 503; when the database is back the replica takes the lease again (or learns who has it) and serves
// again by itself.
// A leader whose applier refuses writes after a failed commit raises its own epoch and reloads. A leader that
// stops cleanly (the destructor) releases its lease after its last commit, so a standby takes over within a
// renewal instead of the TTL.
//
// Thread-safe: readiness() and port() from any thread. The stores must outlive the Replica.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "api/follower.h"
#include "api/ha/lease_keeper.h"
#include "api/http/http_server.h"
#include "api/server.h"
#include "base/status.h"
#include "storage/postgres_store.h"

namespace gpupack::api {

struct ReplicaOptions {
  ServerOptions server;        // the leader's server; host and port are where both roles listen
  std::string advertise;       // the URL the others forward to, e.g. http://10.0.0.5:8080
  std::chrono::milliseconds lease_ttl{5000};
  std::chrono::milliseconds renew_every{1000};
  // forward_timeout: a standby's wait for the leader's answer to one forwarded call (well under the lease: a
  // leader that stopped answering costs a client a retry, not a hung call; a takeover cuts it at once).
  std::chrono::milliseconds forward_timeout{2500};
  // The standby's hot state (api/follower.h): how stale a read it answers itself may be, how far behind it may
  // be and still take the lease, and a test hook that pauses its following.
  std::chrono::milliseconds max_read_staleness{1000};
  std::chrono::milliseconds max_follow_lag{3000};
  std::chrono::milliseconds read_wait{1000};  // how long a read with a commit sequence waits before forwarding
  std::string follow_pause_file;
};

class Replica {
 public:
  // Start listens (a port 0 is chosen once and kept), takes one lease step and serves the role it gives, then
  // runs the lease and role threads. `data` is the store the leader serves from (its commits get fenced);
  // `lease` a second connection to the same database for the lease's statements.
  static Result<std::unique_ptr<Replica>> Start(ReplicaOptions options, PostgresStore& data, PostgresStore& lease);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  uint16_t port() const { return port_; }

  struct Readiness {
    bool ready = false;    // /readyz's 200
    std::string role;      // "leader", "standby" or "starting"
    std::string leader;    // the leader's advertise URL, "" when unknown
    int64_t epoch = 0;
    std::optional<Follower::Progress> follow;  // a standby's hot state
    uint64_t commit_seq = 0;                   // the last commit sequence this server made or applied
    // The last takeover of this server: rows applied from the standby's state, or a full load.
    int64_t takeover_changes = -1;  // -1: none yet, or the state was loaded
    bool takeover_loaded = false;
    int64_t takeover_ms = 0;
  };
  Readiness readiness() const;

 private:
  class StandbyFront;  // the standby's HTTP server and forwarding threads (leadership.cc; forwarding.h sends)

  Replica(ReplicaOptions options, PostgresStore& data, PostgresStore& lease);
  void LeaseLoop();
  void RoleLoop();
  void LeaseStep();
  // StepSoon: a standby's lease thread steps now rather than at its next renewal (at most one step every
  // kKnockGap): an agent knocking on a standby, or a forward the leader did not answer, says the leader may have
  // just died, and a step then takes its lease (its session ended) or learns who took it.
  void StepSoon();
  void Reconcile();
  Status ServeAsLeader(int64_t epoch);
  Status ServeAsStandby();
  ServerOptions LeaderOptions(int64_t epoch);  // the server's options with this replica's hooks
  std::shared_ptr<Follower> DropFollower();    // takes follower_ out (destroy it outside mu_)
  // CheckAdvertisedAddress: refuses to start when another gpupack server answers /readyz at the advertised URL.
  Status CheckAdvertisedAddress();
  HttpResponse ReadyResponse() const;
  void AddReplicaMetrics(MetricsRegistry& metrics);

  ReplicaOptions options_;
  PostgresStore& data_;
  std::string holder_;
  LeaseKeeper keeper_;
  uint16_t port_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;          // signalled when lease_ changes or stopping_ is set
  bool stopping_ = false;               // guarded by mu_
  uint64_t lease_steps_ = 0;            // guarded by mu_: lease steps taken (the role thread waits for the next)
  LeaseKeeper::View lease_;             // guarded by mu_: the last step's answer
  bool reachable_ = false;              // guarded by mu_: the last lease step reached the database
  std::chrono::steady_clock::time_point held_until_;  // guarded by mu_: the lease surely lasts until then
  bool bump_ = false;                   // guarded by mu_: the role thread asks for a new epoch (reload)
  bool step_soon_ = false;              // guarded by mu_: StepSoon was called since the last step
  int64_t serving_epoch_ = 0;           // guarded by mu_: the epoch the leader server serves; 0 = standby
  std::string forward_to_;              // guarded by mu_: the leader a standby forwards to

  std::shared_ptr<Follower> follower_;  // guarded by mu_ (set and dropped by the role changes)
  int64_t takeover_changes_ = -1;       // guarded by mu_: Readiness's takeover_*
  bool takeover_loaded_ = false;        // guarded by mu_
  int64_t takeover_ms_ = 0;             // guarded by mu_

  std::mutex role_mu_;                  // serializes role changes (role thread, Start, destructor)
  std::shared_ptr<Server> leader_;      // guarded by role_mu_
  std::unique_ptr<StandbyFront> standby_;  // guarded by role_mu_

  std::thread lease_thread_;
  std::thread role_thread_;
};

}  // namespace gpupack::api
