// MpsControlDaemon and FakeMps (docs/agent-channel.md "MPS daemon"). Every control command runs the control program as a
// child with the pipe and log directories in its environment, its stdin and stdout on pipes, and a deadline.
#include "agent/mps_daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

extern char** environ;

namespace gpupack::agent {

const char* MpsHealthName(MpsHealth h) {
  switch (h) {
    case MpsHealth::kServing: return "serving";
    case MpsHealth::kNotServing: return "not serving";
    case MpsHealth::kHung: return "hung";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kProbeCommand[] = "get_default_active_thread_percentage";
constexpr char kDefaultMpsPipeDir[] = "/tmp/nvidia-mps";
constexpr size_t kMaxOutput = 1 << 20;  // a control command's answer is small; cap what we keep
// sockaddr_un.sun_path is 108 bytes; the daemon's sockets live in the pipe directory under names of up to
// ~20 characters, so a longer directory makes the daemon fail in ways that are hard to read.
constexpr size_t kMaxPipeDirLength = 80;

std::string ErrnoText(int err) { return std::strerror(err); }

// MakeDirs creates `path` and its missing parents with mode 0755 (whatever the umask); existing ones are kept.
Status MakeDirs(const std::string& path) {
  if (path.empty()) return Status::InvalidParameter("an MPS directory is empty");
  std::string prefix;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    prefix = path.substr(0, pos);
    if (prefix.empty() || prefix == "/") continue;
    if (mkdir(prefix.c_str(), 0755) == 0) {
      chmod(prefix.c_str(), 0755);
      continue;
    }
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    return Status::Server("cannot create MPS directory " + prefix + ": " + ErrnoText(err));
  }
  return Status::Ok();
}

// OpenToTaskUsers makes the pipe directory 1777, like /tmp, an existing one too: the control daemon starts each
// MPS server as the uid of its first client, never root for a task, and that server must reach the daemon's socket
// and make its own pipes here (search and write); the sticky bit keeps one user from removing or replacing
// another's entries, the daemon's included.
Status OpenToTaskUsers(const std::string& pipe_dir) {
  if (chmod(pipe_dir.c_str(), 01777) != 0) {
    return Status::Server("cannot open the MPS pipe directory " + pipe_dir + " to task users: " + ErrnoText(errno));
  }
  return Status::Ok();
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// SaysCannotConnect: the control program's ways of saying that no daemon listens on the pipe directory.
bool SaysCannotConnect(const std::string& output) {
  const std::string o = Lower(output);
  for (const char* s : {"cannot find mps control daemon", "cannot connect", "can't connect", "connection refused",
                        "failed to connect"}) {
    if (o.find(s) != std::string::npos) return true;
  }
  return false;
}

// WriteNoSigpipe writes to a pipe whose reader may be gone without letting SIGPIPE kill the agent: the signal
// is blocked in this thread for the write, and a SIGPIPE the write raised is consumed.
ssize_t WriteNoSigpipe(int fd, const char* data, size_t size) {
  sigset_t pipe_set, old_set, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  const ssize_t n = write(fd, data, size);
  const int err = errno;
  if (n < 0 && err == EPIPE && !was_pending) {
    const timespec zero{0, 0};
    sigtimedwait(&pipe_set, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = err;
  return n;
}

// ReapLater waits for a killed child that did not die at once (stuck in the kernel), off the caller's thread.
void ReapLater(pid_t pid) {
  std::thread([pid] {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }).detach();
}

struct RunResult {
  bool timed_out = false;
  int exit_code = -1;  // 128 + signal when killed by a signal
  std::string output;  // stdout and stderr together
};

// RunControl runs `program args...` with `input` on its stdin, in its own process group, with the MPS
// directories set in its environment; everything (writing, reading, exiting) within `timeout`. On timeout the
// whole process group is killed. An error only when the program cannot be started.
Result<RunResult> RunControl(const MpsOptions& o, const std::vector<std::string>& args, const std::string& input,
                             milliseconds timeout) {
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) return Status::Server("pipe: " + ErrnoText(errno));
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(in_pipe[0]);
    close(in_pipe[1]);
    return Status::Server("pipe: " + ErrnoText(err));
  }

  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv(*e);
    if (kv.starts_with("CUDA_MPS_PIPE_DIRECTORY=") || kv.starts_with("CUDA_MPS_LOG_DIRECTORY=")) continue;
    env_strings.emplace_back(kv);
  }
  env_strings.push_back("CUDA_MPS_PIPE_DIRECTORY=" + o.pipe_dir);
  env_strings.push_back("CUDA_MPS_LOG_DIRECTORY=" + o.log_dir);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings{o.control_program};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);  // the agent's sockets stay out of a daemon started by -d
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t no_signals, default_signals;
  sigemptyset(&no_signals);
  sigemptyset(&default_signals);
  for (int sig : {SIGPIPE, SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&default_signals, sig);
  posix_spawnattr_setsigmask(&attr, &no_signals);
  posix_spawnattr_setsigdefault(&attr, &default_signals);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int spawn_err = posix_spawnp(&pid, o.control_program.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(in_pipe[0]);
  close(out_pipe[1]);
  int in_fd = in_pipe[1], out_fd = out_pipe[0];
  if (spawn_err != 0) {
    close(in_fd);
    close(out_fd);
    return Status::Server("cannot run the MPS control program " + o.control_program + ": " + ErrnoText(spawn_err));
  }
  fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
  fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) | O_NONBLOCK);

  RunResult result;
  size_t written = 0;
  if (input.empty()) {
    close(in_fd);
    in_fd = -1;
  }
  auto drain = [&] {  // reads what is there; closes out_fd at end of file
    char buf[4096];
    while (out_fd >= 0) {
      const ssize_t n = read(out_fd, buf, sizeof buf);
      if (n > 0) {
        if (result.output.size() < kMaxOutput) result.output.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        close(out_fd);
        out_fd = -1;
      } else if (errno != EINTR) {
        break;  // EAGAIN: nothing more for now
      }
    }
  };

  const auto deadline = Clock::now() + timeout;
  bool exited = false;
  while (true) {
    int status = 0;
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno == ECHILD)) {
      exited = true;
      if (w == pid) {
        result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      drain();  // what it wrote before exiting; a daemon it left behind may hold the pipe open, so no waiting
      break;
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    // Short slices so a child that exits while a grandchild holds its stdout open is still seen promptly.
    const int slice = static_cast<int>(
        std::min<int64_t>(10, std::chrono::duration_cast<milliseconds>(deadline - now).count() + 1));
    pollfd fds[2];
    nfds_t n = 0;
    if (in_fd >= 0) fds[n++] = {in_fd, POLLOUT, 0};
    if (out_fd >= 0) fds[n++] = {out_fd, POLLIN, 0};
    if (poll(fds, n, slice) < 0 && errno != EINTR) break;
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].fd == in_fd && fds[i].revents != 0) {
        const ssize_t k = WriteNoSigpipe(in_fd, input.data() + written, input.size() - written);
        if (k > 0) written += static_cast<size_t>(k);
        if ((k < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) {
          close(in_fd);  // all sent (or the reader is gone): end of file tells it there are no more commands
          in_fd = -1;
        }
      } else if (fds[i].fd == out_fd && fds[i].revents != 0) {
        drain();
      }
    }
  }
  if (!exited) {
    result.timed_out = true;
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    bool reaped = false;
    for (int i = 0; i < 100 && !reaped; ++i) {  // SIGKILL is quick unless the child is stuck in the kernel
      int status = 0;
      const pid_t w = waitpid(pid, &status, WNOHANG);
      reaped = w == pid || (w < 0 && errno == ECHILD);
      if (!reaped) std::this_thread::sleep_for(milliseconds(5));
    }
    if (!reaped) ReapLater(pid);
  }
  if (in_fd >= 0) close(in_fd);
  if (out_fd >= 0) close(out_fd);
  return result;
}

std::string Ms(milliseconds d) { return std::to_string(d.count()) + " ms"; }

std::string Shorten(const std::string& s) {
  std::string t = Trim(s);
  if (t.size() > 300) t.replace(300, std::string::npos, "...");
  return t;
}

Status ValidateOptions(const MpsOptions& o) {
  if (o.pipe_dir.empty()) return Status::InvalidParameter("the MPS pipe directory is empty");
  if (o.log_dir.empty()) return Status::InvalidParameter("the MPS log directory is empty");
  std::string dir = o.pipe_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir == kDefaultMpsPipeDir) {
    return Status::InvalidParameter(
        "the MPS pipe directory must not be the default /tmp/nvidia-mps: every CUDA program on the host would "
        "join that daemon, also those that never asked for sharing");
  }
  return Status::Ok();
}

// MpsControlDaemon drives the real control program. Thread-safe: run_mu_ serializes control commands (one
// child at a time); the counters are atomics so impaired() never waits behind a probe.
class MpsControlDaemon final : public MpsSupervisor {
 public:
  explicit MpsControlDaemon(MpsOptions options) : options_(std::move(options)) {}

  Status Start() override {
    if (Status s = ValidateOptions(options_); !s.ok()) return s;
    if (options_.pipe_dir.size() > kMaxPipeDirLength) {
      return Status::InvalidParameter("the MPS pipe directory " + options_.pipe_dir + " is longer than " +
                                      std::to_string(kMaxPipeDirLength) +
                                      " characters: the daemon's unix sockets in it would not fit");
    }
    if (Status s = MakeDirs(options_.pipe_dir); !s.ok()) return s;
    if (Status s = OpenToTaskUsers(options_.pipe_dir); !s.ok()) return s;
    if (Status s = MakeDirs(options_.log_dir); !s.ok()) return s;
    std::lock_guard lock(run_mu_);
    const MpsHealth first = ProbeLocked();
    if (first == MpsHealth::kServing) {
      owned_ = true;  // adopted: we quit it on Stop like one we started
      failures_ = 0;
      return Status::Ok();
    }
    if (first == MpsHealth::kHung) {
      return Status::Server("the MPS control daemon on " + options_.pipe_dir + " did not answer within " +
                            Ms(options_.probe_timeout) + " (hung); not starting a second one on the same pipe "
                            "directory");
    }
    auto run = RunControl(options_, {"-d"}, "", options_.probe_timeout);
    if (!run.ok()) return run.status();
    if (run->timed_out) {
      return Status::Server(options_.control_program + " -d did not return within " + Ms(options_.probe_timeout));
    }
    if (run->exit_code != 0) {
      return Status::Server(options_.control_program + " -d failed (exit " + std::to_string(run->exit_code) +
                            "): " + Shorten(run->output));
    }
    owned_ = true;
    const auto deadline = Clock::now() + options_.start_timeout;
    MpsHealth last = first;
    while (true) {
      last = ProbeLocked();
      if (last == MpsHealth::kServing) {
        failures_ = 0;
        return Status::Ok();
      }
      const auto now = Clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(milliseconds(50), deadline - now));
    }
    return Status::Server("the MPS control daemon started with `" + options_.control_program +
                          " -d` did not answer within " + Ms(options_.start_timeout) + " (last probe: " +
                          MpsHealthName(last) + ")");
  }

  Status Stop() override {
    std::lock_guard lock(run_mu_);
    if (!owned_) return Status::Ok();
    auto run = RunControl(options_, {}, "quit\n", options_.probe_timeout);
    if (!run.ok()) return run.status();
    if (run->timed_out) {
      return Status::Server("the MPS control daemon did not answer `quit` within " + Ms(options_.probe_timeout));
    }
    owned_ = false;  // answered, or nothing listens any more: either way it is gone
    return Status::Ok();
  }

  MpsHealth Probe() override {
    std::lock_guard lock(run_mu_);
    const MpsHealth h = ProbeLocked();
    if (h == MpsHealth::kServing) {
      failures_ = 0;
    } else {
      ++failures_;
    }
    return h;
  }

  MpsAnswer Send(const std::string& command) override {
    if (command.empty() || command.find_first_of("\r\n") != std::string::npos) {
      return {MpsFailure::kBadCommand, Status::InvalidParameter("an MPS control command is one non-empty line")};
    }
    std::lock_guard lock(run_mu_);
    auto run = RunControl(options_, {}, command + "\n", options_.probe_timeout);
    if (!run.ok()) return {MpsFailure::kCannotRun, run.status()};
    if (run->timed_out) {
      return {MpsFailure::kNoAnswer, Status::Server("MPS control daemon is not responding: `" + command +
                                                    "` got no answer within " + Ms(options_.probe_timeout))};
    }
    const bool no_daemon = SaysCannotConnect(run->output);
    if (run->exit_code != 0 || no_daemon) {
      // 126/127: the shell could not execute it; 128+N: a signal ended it. Either way it did not run.
      const bool ran = run->exit_code != 126 && run->exit_code != 127 && run->exit_code < 128;
      const MpsFailure failure = !ran       ? MpsFailure::kCannotRun
                                 : no_daemon ? MpsFailure::kNoDaemon
                                             : MpsFailure::kFailed;
      return {failure, Status::Server("MPS control daemon is not responding: `" + command + "` failed (exit " +
                                      std::to_string(run->exit_code) + "): " + Shorten(run->output))};
    }
    return std::move(run->output);
  }

  bool impaired() const override { return failures_.load() >= options_.failures_to_impair; }
  int consecutive_failures() const override { return failures_.load(); }
  const MpsOptions& options() const override { return options_; }

 private:
  // ProbeLocked runs the harmless probe command; run_mu_ held. Does not count.
  MpsHealth ProbeLocked() {
    auto run = RunControl(options_, {}, std::string(kProbeCommand) + "\n", options_.probe_timeout);
    if (!run.ok()) return MpsHealth::kNotServing;  // no control program: nothing can be serving
    if (run->timed_out) return MpsHealth::kHung;
    if (run->exit_code != 0 || SaysCannotConnect(run->output)) return MpsHealth::kNotServing;
    return MpsHealth::kServing;
  }

  const MpsOptions options_;
  std::mutex run_mu_;
  bool owned_ = false;  // guarded by run_mu_: we started or adopted the daemon and owe it a `quit`
  std::atomic<int> failures_{0};
};

// FakeMps simulates the daemon: its health is the word in <pipe_dir>/fake-mps-health. Thread-safe.
class FakeMps final : public MpsSupervisor {
 public:
  explicit FakeMps(MpsOptions options) : options_(std::move(options)) {}

  Status Start() override {
    if (Status s = ValidateOptions(options_); !s.ok()) return s;
    if (Status s = MakeDirs(options_.pipe_dir); !s.ok()) return s;
    if (Status s = MakeDirs(options_.log_dir); !s.ok()) return s;
    const MpsHealth h = Read();
    if (h == MpsHealth::kHung) std::this_thread::sleep_for(options_.probe_timeout);
    if (h != MpsHealth::kServing) {
      return Status::Server("the fake MPS control daemon is " + std::string(MpsHealthName(h)) + " (" + HealthFile() +
                            ")");
    }
    running_ = true;
    failures_ = 0;
    return Status::Ok();
  }

  Status Stop() override {
    running_ = false;
    return Status::Ok();
  }

  MpsHealth Probe() override {
    const MpsHealth h = running_ ? Read() : MpsHealth::kNotServing;
    if (h == MpsHealth::kHung) std::this_thread::sleep_for(options_.probe_timeout);  // as long as a real one
    if (h == MpsHealth::kServing) {
      failures_ = 0;
    } else {
      ++failures_;
    }
    return h;
  }

  MpsAnswer Send(const std::string& command) override {
    const MpsHealth h = running_ ? Read() : MpsHealth::kNotServing;
    if (h == MpsHealth::kHung) {
      std::this_thread::sleep_for(options_.probe_timeout);
      return {MpsFailure::kNoAnswer, Status::Server("MPS control daemon is not responding: `" + command +
                                                    "` got no answer within " + Ms(options_.probe_timeout))};
    }
    if (h == MpsHealth::kNotServing) {
      return {MpsFailure::kNoDaemon, Status::Server("MPS control daemon is not responding: `" + command +
                                                    "` failed: Cannot find MPS control daemon process (fake)")};
    }
    if (command == kProbeCommand) return std::string("100.0\n");
    if (command == "quit") running_ = false;
    return std::string();
  }

  bool impaired() const override { return failures_.load() >= options_.failures_to_impair; }
  int consecutive_failures() const override { return failures_.load(); }
  const MpsOptions& options() const override { return options_; }

 private:
  std::string HealthFile() const { return options_.pipe_dir + "/" + kFakeMpsHealthFile; }

  MpsHealth Read() const {
    std::ifstream in(HealthFile());
    if (!in) return MpsHealth::kServing;  // absent: serving
    std::stringstream text;
    text << in.rdbuf();
    const std::string word = Lower(Trim(text.str()));
    if (word == "serving" || word.empty()) return MpsHealth::kServing;
    if (word == "hung") return MpsHealth::kHung;
    return MpsHealth::kNotServing;  // "down", and anything unknown: fail safe
  }

  const MpsOptions options_;
  std::atomic<bool> running_{false};
  std::atomic<int> failures_{0};
};

}  // namespace

std::unique_ptr<MpsSupervisor> MakeMpsControlDaemon(MpsOptions options) {
  return std::make_unique<MpsControlDaemon>(std::move(options));
}

std::unique_ptr<MpsSupervisor> MakeFakeMps(MpsOptions options) { return std::make_unique<FakeMps>(std::move(options)); }

// ---- Parsing the control daemon's answers ----

namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Words splits on blanks, newlines included (an answer like "FAULT\n" is one word).
std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && IsBlank(line[i])) ++i;
    size_t start = i;
    while (i < line.size() && !IsBlank(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool ParsePid(std::string_view s, int& out) {
  if (s.empty() || s.size() > 9) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v <= 0) return false;
  out = v;
  return true;
}

}  // namespace

std::vector<int> ParseMpsServerList(std::string_view text) {
  std::vector<int> out;
  for (std::string_view line : Lines(text)) {
    auto words = Words(line);
    int pid = 0;
    if (words.size() == 1 && ParsePid(words[0], pid)) out.push_back(pid);
  }
  return out;
}

std::vector<MpsClientRow> ParseMpsPs(std::string_view text) {
  std::vector<MpsClientRow> out;
  for (std::string_view line : Lines(text)) {
    auto words = Words(line);
    MpsClientRow row;
    int id = 0;
    if (words.size() < 4 || !ParsePid(words[0], row.pid) || !ParsePid(words[1], id) ||
        !ParsePid(words[2], row.server_pid)) {
      continue;  // the header, or not a client row
    }
    row.device = std::string(words[3]);
    out.push_back(std::move(row));
  }
  return out;
}

bool MpsDeviceMatches(std::string_view cell, std::string_view uuid) {
  if (cell.empty()) return false;
  if (cell == uuid) return true;
  return cell.size() >= 12 && uuid.size() > cell.size() && uuid.substr(0, cell.size()) == cell;
}

bool MpsServerFaulted(std::string_view status_answer) {
  auto words = Words(status_answer);
  return !words.empty() && words[0] == "FAULT";
}

}  // namespace gpupack::agent
