// ProcessRuntime: containers as plain processes (docs/agent-channel.md), for hosts without a container engine and for
// tests.
//
// Shape of one container. Start starts a short-lived middle process, which starts the *monitor* and exits at
// once (Start reaps it), so the monitor is reparented to init (or the nearest subreaper) and the agent never
// has to reap it, before or after an agent restart; no SIGCHLD handler is involved. The monitor calls setsid(),
// points its own stdio at /dev/null (it never holds the agent's terminal or pipes open), closes every other
// inherited descriptor, then starts and execs the workload:
//
//   agent ─Start─vfork─> middle ─vfork+exec─> monitor (setsid, own session) ─vfork+exec─> workload
//                        (exits)              waits for it, records its exit    (own process group,
//                                                                                pgid = its pid)
//
// Nothing copies the agent's address space (process_launch.h says why): the middle and the workload are
// clone(CLONE_VM | CLONE_VFORK) children on stacks of their own, and the monitor is this same program executed
// afresh (it becomes the monitor before main and reads its launch from a socket); only when that exec fails is
// the monitor forked, as ProcessRuntimeOptions::exec_monitor = false always does.
//
// The workload gets argv = entry_point + command, exactly spec.environment as its environment (nothing of the
// agent's), /dev/null as stdin and a pipe as stdout and stderr, which the monitor copies, a line per event with
// its time, into the container's log stream <log_dir>/<task id>/<container>/ (agent/log_store.h: rotated files,
// so the monitor owns every write; a program writing a file itself could not be rotated safely). It sits
// in its own process group so that Stop signals it and everything it spawned, but not the monitor, which
// survives to record the exit status; when the program exits, the monitor kills what is left of its group.
// The program is looked up like execvp does, on the PATH of spec.environment, or the agent's PATH when the
// container sets none.
//
// The monitor reports to Start over a CLOEXEC pipe: the workload writes errno to a second CLOEXEC pipe when its
// exec fails (EOF there means the exec succeeded), and the monitor forwards the outcome only after it has
// written the state file, so Start returns with the container visible to Inspect and List.
//
// State on disk, <state_dir>/<id>.json, written only by the monitor, atomically (a temporary file, then
// rename()); not fsync'ed, because the processes it describes do not outlive the host either:
//   {"version":1,"id":...,"task_arn":...,"container_name":...,"argv0":...,"log_path":<the log directory>,
//    ["uid":U,] "state":"running"|"exited","monitor_pid":M,"monitor_start_time":MT,"pid":P,"start_time":T
//    [,"exit_code":C,"signal":S]}
// uid is the task's own uid from ProcessRuntimeOptions::task_uids, when it has one: while the file is there that
// uid is the task's.
// start_time is field 22 of /proc/<pid>/stat (clock ticks since boot): a pid is the recorded process only if its
// start time still matches, so a reused pid is never mistaken for (or signalled as) the container.
//
// After fork in a possibly multi-threaded agent, the middle process, the monitor and the workload only make
// async-signal-safe calls: everything (argv, envp, candidate paths, the JSON text) is prepared before fork.
//
// The forked side (the middle process, the monitor, the workload's exec) is process_launch.cc.
//
// Thread-safe for different containers. It keeps no state in memory but a cache of which containers run (see
// Inspect) and the task uids of Starts in progress (agent/task_uids.h), and concurrent calls for different
// containers are independent: each Start has its own pipes and files, every descriptor is CLOEXEC, and the monitor
// closes all it does not need at once, so a concurrent Start's descriptors it inherited through fork are gone
// before the workload is forked. Calls for the same container must not overlap (the agent runs each task's work
// one event at a time). A new instance on the same state_dir (after the agent was killed, even with -9) lists,
// inspects and stops what an earlier one started and reads its exit code once it exits.
#include <fcntl.h>
#include <pwd.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/log_store.h"
#include "agent/proc_tree.h"
#include "agent/process_launch.h"
#include "agent/runtime.h"
#include "agent/task_uids.h"

namespace gpupack::agent {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using namespace process_launch;

constexpr auto kPollInterval = std::chrono::milliseconds(20);
// How long Stop and Inspect wait for the monitor to record an exit it is about to record.
constexpr auto kRecordWait = std::chrono::seconds(2);

// ---- The agent side ---------------------------------------------------------------------------------------

// SendLaunch writes the launch to the monitor program (it reads to the end; a monitor that died makes the write
// fail, without SIGPIPE, and AwaitStart reports the monitor gone).
void SendLaunch(int fd, const std::string& blob) {
  size_t sent = 0;
  while (sent < blob.size()) {
    const ssize_t n = send(fd, blob.data() + sent, blob.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

bool ValidId(const std::string& id) {
  return !id.empty() && id.size() <= 255 && id[0] != '.' && std::all_of(id.begin(), id.end(), IsNameChar);
}

std::string TaskIdOf(const std::string& task_arn) {
  auto slash = task_arn.rfind('/');
  return slash == std::string::npos ? task_arn : task_arn.substr(slash + 1);
}

std::string ErrnoText(int err) { return std::strerror(err); }

// AboveStdio moves a descriptor to >= 3 (an agent started with a closed stdio must not hand it out as 0..2).
int AboveStdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return moved;
}

bool Alive(pid_t pid, unsigned long long start_time) {
  if (pid <= 0) return false;
  ProcStat stat = ReadProcStat(pid);
  return stat.exists && stat.start_time == start_time && stat.state != 'Z' && stat.state != 'X';
}

// Record is a parsed state file.
struct Record {
  std::string id;
  std::string task_arn;
  std::string container_name;
  std::string argv0;
  bool exited = false;
  pid_t monitor_pid = 0;
  unsigned long long monitor_start_time = 0;
  pid_t pid = 0;
  unsigned long long start_time = 0;
  std::optional<int> exit_code;
  int signal_number = 0;
  std::optional<int64_t> uid;  // the task's own uid (task_uids)
};

// Observation is a record together with the status read from it and from the processes it names.
struct Observation {
  Record record;
  ContainerStatus status;
};

class ProcessRuntime final : public Runtime {
 public:
  ProcessRuntime(ProcessRuntimeOptions options, TaskIdentity identity, std::optional<TaskUidRange> uids)
      : options_(std::move(options)), identity_(identity) {
    if (uids) uids_.emplace(*uids, [this] { return UidHolders(); }, options_.scratch_dirs);
  }

  std::string Name() const override { return "process"; }

  Result<std::string> Start(const ContainerSpec& spec) override {
    if (!uids_ || !spec.mps_pipe_dir.empty()) return StartAs(spec, identity_, std::nullopt);
    GP_ASSIGN(uid, uids_->Acquire(spec.task_arn));
    auto started = StartAs(spec, TaskIdentity{uid, uid}, uid);
    uids_->Release(spec.task_arn);  // from here the state file holds it, or nothing started
    return started;
  }

  // StartAs starts the container as `identity`; `own_uid` (the task's own uid) goes into its state file.
  Result<std::string> StartAs(const ContainerSpec& spec, const TaskIdentity& identity,
                              std::optional<int64_t> own_uid) {
    const std::string task_id = Sanitized(TaskIdOf(spec.task_arn));
    const std::string container = Sanitized(spec.container_name);
    const std::string id = Sanitized(task_id + "-" + container);
    if (spec.entry_point.empty() && spec.command.empty()) {
      return Status::InvalidParameter("container " + spec.container_name + " has no entryPoint and no command");
    }
    auto existing = ReadRecord(id);
    if (!existing.ok()) return existing.status();
    if (existing->has_value()) {
      return Status::Conflict("process runtime: container " + id + " already exists (remove it first)");
    }

    Launch l;
    l.argv_storage = spec.entry_point;
    l.argv_storage.insert(l.argv_storage.end(), spec.command.begin(), spec.command.end());
    for (std::string& arg : l.argv_storage) l.argv.push_back(arg.data());
    l.argv.push_back(nullptr);
    const std::string& argv0 = l.argv_storage.front();
    if (argv0.empty()) {
      return Status::InvalidParameter("container " + spec.container_name + ": empty program name");
    }

    // The environment: a later duplicate wins, in the order of first appearance.
    std::vector<std::string> names;
    std::map<std::string, std::string> values;
    for (const KeyValuePair& kv : spec.environment) {
      if (kv.name.empty() || kv.name.find('=') != std::string::npos) {
        return Status::InvalidParameter("container " + spec.container_name +
                                        ": invalid environment variable name '" + kv.name + "'");
      }
      if (values.emplace(kv.name, kv.value).second) {
        names.push_back(kv.name);
      } else {
        values[kv.name] = kv.value;
      }
    }
    for (const std::string& name : names) l.env_storage.push_back(name + "=" + values[name]);
    for (std::string& entry : l.env_storage) l.envp.push_back(entry.data());
    l.envp.push_back(nullptr);

    if (argv0.find('/') != std::string::npos) {
      l.candidates.push_back(argv0);
    } else {
      std::string path;
      if (auto it = values.find("PATH"); it != values.end()) {
        path = it->second;
      } else if (const char* agent_path = std::getenv("PATH"); agent_path != nullptr) {
        path = agent_path;
      } else {
        path = "/usr/local/bin:/usr/bin:/bin";
      }
      std::stringstream dirs(path);
      std::string dir;
      while (std::getline(dirs, dir, ':')) l.candidates.push_back((dir.empty() ? "." : dir) + "/" + argv0);
      if (!path.empty() && path.back() == ':') l.candidates.push_back("./" + argv0);
      if (l.candidates.empty()) l.candidates.push_back(argv0);
    }

    const std::string log_path = LogDirectory(options_.log_dir, spec.task_arn, spec.container_name);
    if (Status s = l.writer.Open(log_path, options_.log_limits); !s.ok()) return s;

    l.state_path = StatePath(id);
    l.temp_path = (fs::path(options_.state_dir) / ("." + id + ".tmp")).string();
    Json head = {{"version", 1},
                 {"id", id},
                 {"task_arn", spec.task_arn},
                 {"container_name", spec.container_name},
                 {"argv0", argv0},
                 {"log_path", log_path}};
    if (own_uid) head["uid"] = *own_uid;
    l.json_prefix = head.dump();
    l.json_prefix.back() = ',';  // the monitor appends the rest of the object
    l.buffer.resize(l.json_prefix.size() + 512);

    l.log_fd = AboveStdio(l.writer.fd());
    l.writer.SetFd(l.log_fd);
    if (l.log_fd < 0) {
      return Status::Server("process runtime: cannot open the log of " + id + ": " + ErrnoText(errno));
    }
    l.output_buffer.resize(64 * 1024);
    l.null_fd = AboveStdio(open("/dev/null", O_RDWR | O_CLOEXEC));
    int report[2] = {-1, -1}, data[2] = {-1, -1};
    if (l.null_fd < 0 || pipe2(report, O_CLOEXEC) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, data) != 0) {
      int err = errno;
      for (int fd : {l.null_fd, report[0], report[1]})
        if (fd >= 0) close(fd);
      l.writer.Close();
      return Status::Server("process runtime: cannot prepare " + id + ": " + ErrnoText(err));
    }
    report[0] = AboveStdio(report[0]);
    report[1] = AboveStdio(report[1]);
    data[0] = AboveStdio(data[0]);
    data[1] = AboveStdio(data[1]);
    l.report_fd = report[1];
    l.report_read_fd = report[0];
    l.data_send_fd = data[0];
    l.data_fd = data[1];
    l.exec_monitor = options_.exec_monitor;
    l.run_uid = identity.uid;
    l.run_gid = identity.gid;
    if (!options_.monitor_program.empty()) l.monitor_program = options_.monitor_program;

    const pid_t middle = StartMiddle(l);
    const int fork_errno = errno;
    if (middle > 0) {
      int ignored = 0;
      while (waitpid(middle, &ignored, 0) < 0 && errno == EINTR) {
      }
    }
    close(report[1]);
    l.writer.Close();  // the monitor holds its own copy
    close(l.null_fd);
    close(l.data_fd);
    if (middle > 0 && l.exec_mode) SendLaunch(l.data_send_fd, EncodeLaunch(l));
    close(l.data_send_fd);
    if (middle < 0) {
      close(report[0]);
      return Status::Server("process runtime: cannot fork: " + ErrnoText(fork_errno));
    }
    return AwaitStart(report[0], id, argv0);
  }

  // Inspect of a container last seen running reads only /proc/<pid>/stat while the process lives (the agent
  // inspects every running container each monitor interval): its state file cannot say anything else then, since
  // the monitor records the exit only after it has reaped the workload.
  Result<ContainerStatus> Inspect(const std::string& id) override {
    if (!ValidId(id)) return Status::InvalidParameter("process runtime: invalid container id '" + id + "'");
    if (auto live = LastSeenRunning(id); live && Alive(live->first, live->second)) return Running();
    auto seen = Observe(id);
    if (!seen.ok()) return seen.status();
    if (!seen->has_value()) {
      Forget(id);
      return ContainerStatus{ContainerState::kMissing, std::nullopt, "no such container"};
    }
    if ((*seen)->status.state == ContainerState::kRunning) {
      std::lock_guard lock(mu_);
      running_[id] = {(*seen)->record.pid, (*seen)->record.start_time};
    } else {
      Forget(id);
    }
    return (*seen)->status;
  }

  Status Stop(const std::string& id, std::chrono::milliseconds grace) override {
    if (!ValidId(id)) return Status::InvalidParameter("process runtime: invalid container id '" + id + "'");
    auto read = ReadRecord(id);
    if (!read.ok()) return read.status();
    if (!read->has_value() || (*read)->exited) return Status::Ok();  // idempotent
    const Record record = **read;
    if (Alive(record.pid, record.start_time)) {
      kill(-record.pid, SIGTERM);  // the workload's process group: the program and what it spawned
      const auto deadline = Clock::now() + grace;
      while (Clock::now() < deadline && Alive(record.pid, record.start_time)) {
        std::this_thread::sleep_for(kPollInterval);
      }
      // Whatever is left of the group (the program, or children that outlived it) is killed. The group id stays
      // taken while any member lives, so this cannot hit an unrelated process group.
      if (kill(-record.pid, SIGKILL) != 0 && errno != ESRCH) {
        return Status::Server("process runtime: cannot kill " + id + ": " + ErrnoText(errno));
      }
      const auto killed_by = Clock::now() + kRecordWait;  // SIGKILL is delivered, the exit takes a moment
      while (Clock::now() < killed_by && Alive(record.pid, record.start_time)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    // Let the monitor record the exit, so that Inspect right after Stop tells the exit code.
    auto seen = Observe(id);
    return seen.ok() ? Status::Ok() : seen.status();
  }

  Status Remove(const std::string& id) override {
    if (!ValidId(id)) return Status::InvalidParameter("process runtime: invalid container id '" + id + "'");
    Forget(id);
    auto seen = Observe(id);
    if (!seen.ok()) return seen.status();
    if (!seen->has_value()) return Status::Ok();
    if ((*seen)->status.state == ContainerState::kRunning) {
      return Status::Conflict("process runtime: container " + id + " is running; stop it first");
    }
    std::error_code ec;
    fs::remove(StatePath(id), ec);
    if (ec) return Status::Server("process runtime: cannot remove " + StatePath(id) + ": " + ec.message());
    return Status::Ok();
  }

  Result<std::vector<RuntimeContainer>> List() override {
    auto ids = Ids();
    if (!ids.ok()) return ids.status();
    std::vector<RuntimeContainer> out;
    for (const std::string& id : *ids) {
      auto seen = Observe(id);
      if (!seen.ok()) {
        spdlog::warn("process runtime: skipping {}: {}", id, seen.status().message());
        continue;
      }
      if (!seen->has_value()) continue;  // removed meanwhile
      const Record& r = (*seen)->record;
      out.push_back(RuntimeContainer{r.id, r.task_arn, r.container_name, (*seen)->status});
    }
    return out;
  }

  // CollectLogs: nothing to do: each container's monitor writes its stream as the lines come.
  Status CollectLogs(const std::string&, const std::string&) override { return Status::Ok(); }

  std::map<uint32_t, std::string> Owners(const std::vector<uint32_t>& pids) override {
    std::map<uint32_t, std::string> out;
    if (pids.empty()) return out;
    // The running containers' workload pids (their process groups) and monitor pids (their sessions).
    std::map<int, std::string> by_group, by_session;
    std::error_code ec;
    for (fs::directory_iterator it(options_.state_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.size() <= 5 || !name.ends_with(".json")) continue;
      auto record = ReadRecord(name.substr(0, name.size() - 5));
      if (!record.ok() || !record->has_value() || (*record)->exited) continue;
      const Record& r = **record;
      if (!Alive(r.pid, r.start_time)) continue;
      by_group[r.pid] = r.id;
      if (Alive(r.monitor_pid, r.monitor_start_time)) by_session[r.monitor_pid] = r.id;
    }
    if (by_group.empty()) return out;
    for (uint32_t pid : pids) {
      int p = static_cast<int>(pid);
      for (int depth = 0; depth < 64 && p > 1; ++depth) {  // bounded walk up the tree
        auto ids = ReadProcIds(p);
        if (!ids) break;
        const std::string* owner = Lookup(by_group, ids->pgrp);
        if (owner == nullptr) owner = Lookup(by_group, ids->pid);
        if (owner == nullptr) owner = Lookup(by_session, ids->session);
        if (owner != nullptr) {
          out[pid] = *owner;
          break;
        }
        p = ids->ppid;
      }
    }
    return out;
  }

 private:
  static const std::string* Lookup(const std::map<int, std::string>& m, int key) {
    auto it = m.find(key);
    return it == m.end() ? nullptr : &it->second;
  }

  std::string StatePath(const std::string& id) const {
    return (fs::path(options_.state_dir) / (id + ".json")).string();
  }

  // Ids: the containers that have a state file, sorted.
  Result<std::vector<std::string>> Ids() const {
    std::vector<std::string> ids;
    std::error_code ec;
    for (fs::directory_iterator it(options_.state_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.size() > 5 && name.ends_with(".json") && ValidId(name.substr(0, name.size() - 5))) {
        ids.push_back(name.substr(0, name.size() - 5));
      }
    }
    if (ec) return Status::Server("process runtime: cannot list " + options_.state_dir + ": " + ec.message());
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  // UidHolders: the task uid each container record names (TaskUids reads them on each Acquire).
  Result<std::vector<UidHolder>> UidHolders() const {
    GP_ASSIGN(ids, Ids());
    std::vector<UidHolder> out;
    for (const std::string& id : ids) {
      GP_ASSIGN(record, ReadRecord(id));
      if (record && record->uid) out.push_back(UidHolder{record->task_arn, *record->uid});
    }
    return out;
  }

  // AwaitStart reads the monitor's reports until the exec's outcome, for at most start_timeout.
  Result<std::string> AwaitStart(int fd, const std::string& id, const std::string& argv0) {
    pid_t monitor = 0, workload = 0;
    std::string pending;
    const auto deadline = Clock::now() + options_.start_timeout;
    std::optional<Status> outcome;
    while (!outcome) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        // The exec hangs (e.g. a stalled file system): take everything down so nothing runs unrecorded.
        if (monitor > 0) kill(monitor, SIGKILL);
        if (workload > 0) {
          kill(-workload, SIGKILL);
          kill(workload, SIGKILL);
        }
        std::error_code ec;
        fs::remove(StatePath(id), ec);
        outcome = Status::Server("process runtime: " + argv0 + " did not start within " +
                                 std::to_string(options_.start_timeout.count()) + " ms");
        break;
      }
      pollfd p{fd, POLLIN, 0};
      int ready = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;
      char chunk[256];
      ssize_t n = read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        outcome = Status::Server("process runtime: the monitor of " + id + " exited before " + argv0 +
                                 " started");
        break;
      }
      pending.append(chunk, static_cast<size_t>(n));
      while (pending.size() >= sizeof(Report)) {
        Report r;
        std::memcpy(&r, pending.data(), sizeof r);
        pending.erase(0, sizeof r);
        switch (r.kind) {
          case kMonitorPid: monitor = r.value; break;
          case kWorkloadPid: workload = r.value; break;
          case kExecResult:
            outcome = r.value == 0 ? Status::Ok()
                                   : Status::Server("exec failed: " + ErrnoText(r.value) + ": " + argv0);
            break;
          case kFailedFork:
            outcome = Status::Server("process runtime: cannot fork: " + ErrnoText(r.value));
            break;
          case kFailedPipe:
            outcome = Status::Server("process runtime: cannot create a pipe: " + ErrnoText(r.value));
            break;
          case kFailedLaunch:
            outcome = Status::Server("process runtime: the monitor of " + id + " could not read its launch: " +
                                     ErrnoText(r.value));
            break;
          case kFailedState:
            outcome = Status::Server("process runtime: cannot write " + StatePath(id) + ": " + ErrnoText(r.value));
            break;
          default: break;
        }
        if (outcome) break;
      }
    }
    close(fd);
    if (!outcome->ok()) return *outcome;
    return id;
  }

  // ReadRecord parses <state_dir>/<id>.json; nullopt when there is none.
  Result<std::optional<Record>> ReadRecord(const std::string& id) const {
    const std::string path = StatePath(id);
    std::ifstream in(path);
    if (!in) {
      std::error_code ec;
      if (!fs::exists(path, ec) && !ec) return std::optional<Record>();  // none, or removed meanwhile
      return Status::Server("process runtime: cannot read " + path);
    }
    Json json = Json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!json.is_object()) return Status::Server("process runtime: " + StatePath(id) + " is not a JSON object");
    Record r;
    try {
      r.id = json.value("id", id);
      r.task_arn = json.value("task_arn", "");
      r.container_name = json.value("container_name", "");
      r.argv0 = json.value("argv0", "");
      r.exited = json.value("state", "") == "exited";
      r.monitor_pid = json.value("monitor_pid", 0);
      r.monitor_start_time = json.value("monitor_start_time", 0ULL);
      r.pid = json.value("pid", 0);
      r.start_time = json.value("start_time", 0ULL);
      if (json.contains("exit_code")) r.exit_code = json["exit_code"].get<int>();
      if (json.contains("uid")) r.uid = json["uid"].get<int64_t>();
      r.signal_number = json.value("signal", 0);
    } catch (const Json::exception& e) {
      return Status::Server("process runtime: " + StatePath(id) + ": " + e.what());
    }
    return std::optional<Record>(std::move(r));
  }

  // Observe reads the record and tells the container's status from it and from what runs. When the record
  // says running but the program is gone while its monitor lives, the monitor is recording the exit right now:
  // Observe waits (bounded) for that record. A monitor writes the exit before it exits, so a record read after
  // the monitor was seen gone is final: the status never comes from a record older than that observation.
  Result<std::optional<Observation>> Observe(const std::string& id) const {
    const auto deadline = Clock::now() + kRecordWait;
    while (true) {
      auto record = ReadRecord(id);
      if (!record.ok()) return record.status();
      if (!record->has_value()) return std::optional<Observation>();
      const Record& r = **record;
      if (r.exited) return Seen(r, ExitedStatus(r));
      if (Alive(r.pid, r.start_time)) return Seen(r, Running());
      ReapIfOurs(r.monitor_pid, r.monitor_start_time);
      if (!Alive(r.monitor_pid, r.monitor_start_time)) {
        auto final_record = ReadRecord(id);
        if (!final_record.ok()) return final_record.status();
        if (!final_record->has_value()) return std::optional<Observation>();
        const Record& f = **final_record;
        if (f.exited) return Seen(f, ExitedStatus(f));
        return Seen(f, ContainerStatus{ContainerState::kExited, std::nullopt,
                                       "exit status unknown: the process monitor is gone"});
      }
      if (Clock::now() >= deadline) return Seen(r, Running());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // ReapIfOurs reaps a finished monitor when the agent happens to be its parent (the agent runs as PID 1 or as
  // a child subreaper, so the double fork reparented the monitor to it). The start time check makes sure the
  // zombie is that monitor and not another child of the agent that reused the pid.
  static void ReapIfOurs(pid_t monitor, unsigned long long start_time) {
    if (monitor <= 0) return;
    ProcStat stat = ReadProcStat(monitor);
    if (stat.exists && stat.start_time == start_time && stat.state == 'Z') waitpid(monitor, nullptr, WNOHANG);
  }

  static std::optional<Observation> Seen(const Record& r, ContainerStatus status) {
    return Observation{r, std::move(status)};
  }
  static ContainerStatus Running() { return ContainerStatus{ContainerState::kRunning, std::nullopt, ""}; }

  static ContainerStatus ExitedStatus(const Record& r) {
    ContainerStatus status;
    status.state = ContainerState::kExited;
    status.exit_code = r.exit_code;
    if (r.signal_number != 0) status.reason = "killed by signal " + std::to_string(r.signal_number);
    return status;
  }

  std::optional<std::pair<pid_t, unsigned long long>> LastSeenRunning(const std::string& id) const {
    std::lock_guard lock(mu_);
    auto it = running_.find(id);
    if (it == running_.end()) return std::nullopt;
    return it->second;
  }
  void Forget(const std::string& id) {
    std::lock_guard lock(mu_);
    running_.erase(id);
  }

  ProcessRuntimeOptions options_;
  // The workload (pid, start time) of containers Inspect last saw running: a cache of their state files' content,
  // so that it holds exactly while that process lives. Guarded by mu_.
  mutable std::mutex mu_;
  std::map<std::string, std::pair<pid_t, unsigned long long>> running_;
  const TaskIdentity identity_;
  std::optional<TaskUids> uids_;  // with --task-uids
};

}  // namespace

Result<TaskIdentity> ResolveTaskUser(const std::string& task_user, int64_t agent_uid) {
  const std::string& user = task_user;
  if (user.empty()) return TaskIdentity{};  // the agent's own
  const size_t colon = user.find(':');
  const std::string name = user.substr(0, colon);
  TaskIdentity out;
  if (auto uid = ParseNumericId(name)) {
    out.uid = *uid;
    out.gid = *uid;
    if (struct passwd* pw = getpwuid(static_cast<uid_t>(*uid))) out.gid = pw->pw_gid;
  } else if (struct passwd* pw = name.empty() ? nullptr : getpwnam(name.c_str())) {
    out.uid = pw->pw_uid;
    out.gid = pw->pw_gid;
  } else {
    return Status::InvalidParameter("task user '" + user + "': no such user on this host (give a user name or "
                                    "UID[:GID])");
  }
  if (colon != std::string::npos) {
    auto gid = ParseNumericId(user.substr(colon + 1));
    if (!gid) return Status::InvalidParameter("task user '" + user + "': the group must be a numeric GID");
    out.gid = *gid;
  }
  if (out.uid == agent_uid && out.gid == static_cast<int64_t>(getegid())) return TaskIdentity{};  // the agent's
  return out;
}

std::string ProcessImageNote(const std::string& image) {
  if (image == kHostImage) return "";
  return "image '" + image.substr(0, 150) + "' not used: the process runtime ran the command on the host";
}

Result<std::unique_ptr<Runtime>> MakeProcessRuntime(ProcessRuntimeOptions options) {
  if (options.state_dir.empty() || options.log_dir.empty()) {
    return Status::InvalidParameter("process runtime: state_dir and log_dir are required");
  }
  GP_ASSIGN(identity, ResolveTaskUser(options.task_user, static_cast<int64_t>(geteuid())));
  std::optional<TaskUidRange> uids;
  if (!options.task_uids.empty()) {
    GP_ASSIGN(range, ParseTaskUids(options.task_uids));
    if (geteuid() != 0) return Status::InvalidParameter("--task-uids needs an agent running as root");
    uids = range;
  }
  for (const std::string& dir : {options.state_dir, options.log_dir}) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    // Owner only: a workload (another user) reads no container's state or log, its own included.
    if (!ec) fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) return Status::Server("process runtime: cannot create " + dir + ": " + ec.message());
  }
  return std::unique_ptr<Runtime>(std::make_unique<ProcessRuntime>(std::move(options), identity, uids));
}

std::string BundledMonitorProgram() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path monitor = self.parent_path() / "gpupack-monitor";
  return access(monitor.c_str(), X_OK) == 0 ? monitor.string() : "";
}

}  // namespace gpupack::agent
