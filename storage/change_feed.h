// The change feed: every commit of a leader on PostgreSQL also writes what it changed as one row of
// gpupack_changes, numbered by a gapless commit sequence, so standbys follow the committed state by applying
// the rows in order (docs/ha.md, "Hot standbys"). This file holds the row's encoding and the standby's end:
// reading rows after a sequence number and waiting for the leader's NOTIFY.
//
// The encoding is one line per operation of the WriteBatch, "<kind> <payload>": an entity's line carries its
// stored document (storage/serialize.h, JSON on one line), a delete's line its key as JSON; "all" first when the
// batch replaces everything. DecodeChange(EncodeChange(b)) holds the same operations as b.
//
// Thread-safety: the functions are pure or use only their arguments; a ChangeListener is used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "storage/store.h"

namespace gpupack {

class PostgresStore;

// kChangeChannel: the NOTIFY channel a leader's commit signals and standbys LISTEN on.
inline constexpr const char* kChangeChannel = "gpupack_changes";

// BatchDocs: the stored documents of a batch's entities, made once per commit and used both by the entity
// tables' statements and by the change row.
struct BatchDocs {
  std::vector<std::string> clusters, task_definitions, instances, tasks, client_tokens, services,
      capacity_providers;
};
BatchDocs DocsOf(const WriteBatch& batch);

std::string EncodeChange(const WriteBatch& batch, const BatchDocs& docs);
// DecodeChange: the batch a row holds; a line this binary cannot read is a Status::Server naming it.
Result<WriteBatch> DecodeChange(std::string_view text);

// ChangePage: the rows after a sequence number, and the last sequence committed when they were read.
struct ChangePage {
  uint64_t latest = 0;  // the commit sequence of the last commit, read before the rows
  std::vector<std::pair<uint64_t, WriteBatch>> changes;  // (seq, batch), ascending, consecutive from after + 1
  // reload: the rows right after `after` cannot be followed (the leader pruned them, or the database was
  // restored to an earlier point): the reader must load the state afresh.
  bool reload = false;
};
// ReadChanges reads at most `limit` rows after `after` through `db`.
Result<ChangePage> ReadChanges(PostgresStore& db, uint64_t after, size_t limit);

// ChangeListener: a connection of its own that LISTENs on kChangeChannel. Wait returns when a notification
// came, `timeout` passed (a poll fallback: the caller reads the rows either way) or Interrupt was called. A
// broken connection is re-made on the next Wait; while the database is unreachable Wait only sleeps out its
// timeout (or until Interrupt). Wait is for one thread; Interrupt may be called from any thread.
class ChangeListener {
 public:
  explicit ChangeListener(std::string uri);
  ~ChangeListener();
  ChangeListener(const ChangeListener&) = delete;
  ChangeListener& operator=(const ChangeListener&) = delete;

  // Wait: true when at least one notification arrived.
  bool Wait(std::chrono::milliseconds timeout);
  // Interrupt: the Wait in progress (or the next one) returns at once, so a thread stopping its follower does
  // not wait out the poll interval (a takeover waits on it).
  void Interrupt();

 private:
  bool Connect();
  const std::string uri_;
  struct Conn;
  std::unique_ptr<Conn> conn_;
  int wake_fd_ = -1;  // an eventfd: Interrupt writes it, Wait polls and drains it
};

}  // namespace gpupack
