// The log store: every container's output (stdout and stderr), kept by the agent per task and container, bounded
// in size by rotation, one line per event with its timestamp. Both runtimes write it (the process runtime's
// monitor owns the pipe of its workload; the docker runtime copies the engine's log stream into it) and the
// agent answers the server's log requests from it (docs/api.md "Logs", docs/agent-channel.md).
//
// Layout. <root>/<task id>/<container>/ holds the container's stream as files named by the stream offset of
// their first byte, 20 digits: 00000000000000000000.log, 00000000000010485760.log, ... The newest file is
// written; when the next line would take it past `file_bytes`, a new file starts at the stream's current offset
// and the oldest files beyond `files` are deleted. Nothing is renamed, so a reader never sees a file change its
// name, and a position in the stream (offset) stays valid until its file is deleted.
//
// Records. One line per event: "<timestamp ms since the epoch> <message>\n". The message is one line of output
// without its newline; a line longer than kMaxLineBytes is cut into events of that size. The timestamp is when
// the writer read the line (process runtime) or the engine's timestamp (docker).
//
// Positions. An event's position is the offset of its record in the stream; the next event starts at the end
// of it. Readers page with positions (GetLogEvents's tokens carry them).
//
// Thread-safety: LogWriter is one writer's state, used by one thread (or process) at a time; its Append, Feed
// and Flush are async-signal-safe (no allocation, only open/write/close/unlink), so the process runtime's
// monitor may run them in a forked copy of the agent. ReadLogPage and the other functions are safe to call from
// any thread, also while a writer appends (a reader sees only whole lines).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpupack::agent {

// LogLimits: how much of one container's output is kept: `files` files of at most `file_bytes` each.
struct LogLimits {
  uint64_t file_bytes = 10ull << 20;
  int files = 3;
};
inline constexpr int kMaxLogFiles = 64;
inline constexpr size_t kMaxLineBytes = 64 * 1024;

// IsNameChar: [A-Za-z0-9_.-], the characters of every file name the agent makes from a task or container name.
bool IsNameChar(char c);
// Sanitized keeps IsNameChar characters, turns anything else (and a leading '.') into '_', and bounds the length
// (the process runtime's container ids and the log directories are named with it).
std::string Sanitized(std::string_view raw);

// LogDirectory: <root>/<task id>/<container>, both names kept to [A-Za-z0-9_.-] (others become '_'). The task id
// is the last '/' segment of the ARN.
std::string LogDirectory(const std::string& root, const std::string& task_arn, const std::string& container_name);
// TaskLogDirectory: <root>/<task id>.
std::string TaskLogDirectory(const std::string& root, const std::string& task_arn);

// NowMs: the wall clock in ms since the epoch (async-signal-safe).
int64_t NowMs();

// LogWriter appends events to one container's stream. Open (not signal-safe: it allocates and lists the
// directory) resumes the stream where it ends; after it, Append, Feed, Flush and Close allocate nothing.
class LogWriter {
 public:
  LogWriter() = default;
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // Open creates `dir` when missing and opens the stream's newest file for appending (a new one when there is
  // none). Errors: the directory or the file cannot be created.
  Status Open(const std::string& dir, LogLimits limits);
  // Resume is Open for a process that was handed the state of a writer opened elsewhere: the newest file's
  // descriptor `fd` (opened for appending), the start offsets of the files that exist (oldest first, the last is
  // fd's) and that file's size. Allocates; not signal-safe.
  void Resume(const std::string& dir, LogLimits limits, int fd, const std::vector<uint64_t>& starts, uint64_t size);

  // SetFd: the newest file is open as `fd` in this process (the monitor program was handed it).
  void SetFd(int fd) { fd_ = fd; }

  // Append writes one event (the message cut at kMaxLineBytes; a newline in it ends it). Returns false when the
  // write failed (the event is lost; the writer goes on with the next one).
  bool Append(int64_t timestamp_ms, const char* message, size_t size);
  // Feed takes raw output: every complete line becomes an event stamped `now_ms`; a partial line waits for its
  // end (or for kMaxLineBytes of it) in the writer.
  void Feed(const char* data, size_t size, int64_t now_ms);
  // Flush writes the partial line, if any, as an event (at the end of the output).
  void Flush(int64_t now_ms);
  void Close();

  int fd() const { return fd_; }
  const std::vector<uint64_t>& starts() const { return starts_; }
  uint64_t size() const { return size_; }
  const std::string& dir() const { return dir_; }
  LogLimits limits() const { return limits_; }
  // End: the stream offset just past the last record written.
  uint64_t End() const { return starts_.empty() ? 0 : starts_.back() + size_; }

 private:
  bool Rotate();
  void FilePath(uint64_t start);  // into path_
  bool WriteRecord(int64_t timestamp_ms, const char* message, size_t size);

  std::string dir_;
  LogLimits limits_;
  int fd_ = -1;
  std::vector<uint64_t> starts_;  // capacity kMaxLogFiles + 1, reserved by Open/Resume
  uint64_t size_ = 0;             // of the newest file
  std::vector<char> path_;        // room for dir + "/" + 20 digits + ".log"
  std::vector<char> record_;      // room for one record
  std::vector<char> partial_;     // a line waiting for its end
  size_t partial_size_ = 0;
};

// LogFile: one file of a stream.
struct LogFile {
  uint64_t start = 0;
  uint64_t size = 0;
  std::string path;
};
// ListLogFiles: the stream's files, oldest first; empty when the directory does not exist.
std::vector<LogFile> ListLogFiles(const std::string& dir);

struct LogEvent {
  int64_t timestamp_ms = 0;
  std::string message;
  bool operator==(const LogEvent&) const = default;
};

// LogQuery: one page of a stream.
//   forward: the events at or after `position` (none: the head of the stream), oldest first;
//   backward: the events that end at or before `position` (none: the end of the stream), the newest ones that
//   fit the page, returned oldest first.
// Only events with start_ms <= timestamp < end_ms whose message contains every term are returned.
struct LogQuery {
  bool forward = true;
  std::optional<uint64_t> position;
  std::optional<int64_t> start_ms, end_ms;
  std::vector<std::string> terms;
  size_t limit = 10000;                  // events
  size_t max_bytes = 512 * 1024;         // of messages (and 26 bytes of overhead each)
  // A page ends after scanning max_scan_bytes / (1 + terms) of the stream, even without events (backward: it
  // starts no older file past that), so one page's work is bounded whatever the pattern; its token goes on.
  uint64_t max_scan_bytes = 32ull << 20;
};

struct LogPage {
  bool found = false;  // the stream exists (its directory does)
  std::vector<LogEvent> events;
  uint64_t next_forward = 0;   // where the next forward page starts
  uint64_t next_backward = 0;  // where the next backward page ends
  bool at_end = false;         // forward: the page reached the end of what is written
};

// ReadLogPage reads one page of the stream in `dir`. A position before the oldest file kept reads from it; a
// position that is not the start of a record (not a token of ours) reads from the next record.
Result<LogPage> ReadLogPage(const std::string& dir, const LogQuery& query);

// FormatRecord: "<timestamp> <message>\n" (for tests and the docker runtime's copy).
std::string FormatRecord(int64_t timestamp_ms, std::string_view message);

// PurgeLogs deletes <root>/<task id> directories whose files are all older than `retention` and for which
// `keep(task id)` says no (a task the agent still has). Returns how many it deleted.
size_t PurgeLogs(const std::string& root, std::chrono::seconds retention,
                 const std::function<bool(const std::string& task_id)>& keep);

// CapLogs keeps the log store under `cap_bytes` in all: while it holds more, it deletes the <root>/<task id>
// directory of a task the agent no longer has (`keep(task id)` says no) whose newest file is the oldest, one after
// another. The logs of tasks the agent has are never deleted (each container's are bounded by LogLimits), so the
// store can stay above the cap while they alone exceed it (`bytes` then says so).
struct LogCapResult {
  uint64_t bytes = 0;          // what the store holds afterwards
  size_t removed_tasks = 0;    // task directories deleted
  uint64_t removed_bytes = 0;  // and what they held
};
LogCapResult CapLogs(const std::string& root, uint64_t cap_bytes,
                     const std::function<bool(const std::string& task_id)>& keep);

}  // namespace gpupack::agent
