#include "agent/process_launch.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/atomic_file.h"

namespace gpupack::agent::process_launch {
namespace {

// ---- Async-signal-safe helpers (also used after fork) ------------------------------------------------------

// Buf appends text into fixed memory without allocating.
struct Buf {
  char* data;
  size_t capacity;
  size_t size = 0;
  bool overflow = false;

  void Append(const char* text, size_t n) {
    if (size + n + 1 > capacity) {
      overflow = true;
      return;
    }
    std::memcpy(data + size, text, n);
    size += n;
    data[size] = '\0';
  }
  void Append(const char* text) { Append(text, std::strlen(text)); }
  void AppendInt(long long value) {
    char digits[24];
    int n = 0;
    unsigned long long v = value < 0 ? 0ULL - static_cast<unsigned long long>(value) : value;
    do {
      digits[n++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    if (value < 0) digits[n++] = '-';
    char out[24];
    for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
    Append(out, n);
  }
};

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

ProcStat ReadProcStat(pid_t pid) {
  char path[48];
  Buf b{path, sizeof path};
  b.Append("/proc/");
  b.AppendInt(pid);
  b.Append("/stat");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char text[2048];
  size_t size = 0;
  while (size < sizeof text) {
    ssize_t n = read(fd, text + size, sizeof text - size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    size += static_cast<size_t>(n);
  }
  close(fd);
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so fields count from the last ')'.
  size_t close_paren = size;
  for (size_t i = size; i > 0; --i) {
    if (text[i - 1] == ')') {
      close_paren = i - 1;
      break;
    }
  }
  if (close_paren == size) return {};
  ProcStat stat;
  int field = 2;  // the ')' ends field 2
  size_t i = close_paren + 1;
  while (i < size) {
    while (i < size && text[i] == ' ') ++i;
    if (i >= size) break;
    ++field;
    size_t start = i;
    while (i < size && text[i] != ' ' && text[i] != '\n') ++i;
    if (field == 3) stat.state = text[start];
    if (field == 22) {
      unsigned long long v = 0;
      for (size_t k = start; k < i; ++k) {
        if (text[k] < '0' || text[k] > '9') return {};
        v = v * 10 + static_cast<unsigned long long>(text[k] - '0');
      }
      stat.start_time = v;
      stat.exists = true;
      return stat;
    }
    if (i < size && text[i] == '\n') break;
  }
  return {};
}

void Send(int fd, int32_t kind, int32_t value) {
  Report report{kind, value};
  WriteAll(fd, &report, sizeof report);
}

namespace {

// WriteRecord renders and atomically replaces the state file. exit_code < 0: still running.
bool WriteRecord(Launch& l, pid_t monitor, unsigned long long monitor_start, pid_t pid,
                 unsigned long long start_time, int exit_code, int signal_number) {
  Buf b{l.buffer.data(), l.buffer.size()};
  b.Append(l.json_prefix.c_str());
  b.Append(exit_code < 0 ? "\"state\":\"running\"" : "\"state\":\"exited\"");
  b.Append(",\"monitor_pid\":");
  b.AppendInt(monitor);
  b.Append(",\"monitor_start_time\":");
  b.AppendInt(static_cast<long long>(monitor_start));
  b.Append(",\"pid\":");
  b.AppendInt(pid);
  b.Append(",\"start_time\":");
  b.AppendInt(static_cast<long long>(start_time));
  if (exit_code >= 0) {
    b.Append(",\"exit_code\":");
    b.AppendInt(exit_code);
    b.Append(",\"signal\":");
    b.AppendInt(signal_number);
  }
  b.Append("}\n");
  if (b.overflow) {
    errno = ENAMETOOLONG;
    return false;
  }
  // base/atomic_file.h's allocation-free form: the monitor renders and writes without allocating.
  const int rc = WriteFileAtomicallyAt(l.state_path.c_str(), l.temp_path.c_str(), b.data, b.size, 0644);
  if (rc != 0) errno = rc;
  return rc == 0;
}

// CloseAllBut closes every descriptor >= 3 except the listed ones.
void CloseAllBut(int a, int b) {
  int keep[2] = {std::min(a, b), std::max(a, b)};
  unsigned int from = 3;
  for (int fd : keep) {
    if (fd < static_cast<int>(from)) continue;
    if (static_cast<unsigned int>(fd) > from) {
      if (close_range(from, static_cast<unsigned int>(fd) - 1, 0) != 0) {
        for (unsigned int f = from; f < static_cast<unsigned int>(fd); ++f) close(static_cast<int>(f));
      }
    }
    from = static_cast<unsigned int>(fd) + 1;
  }
  if (close_range(from, ~0U, 0) != 0) {
    struct rlimit limit {};
    rlim_t max = 65536;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) max = limit.rlim_cur;
    for (rlim_t f = from; f < max; ++f) close(static_cast<int>(f));
  }
}

void ResetSignals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // fails harmlessly for KILL, STOP, ...
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Exited: whether the workload has exited (not reaped: WNOWAIT).
bool Exited(pid_t pid) {
  siginfo_t info{};
  info.si_pid = 0;
  return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT | WNOHANG) == 0 && info.si_pid == pid;
}

// CopyOutput writes what arrives on `fd` (the workload's stdout and stderr) to the log stream, stamping each line
// when it is read, until the workload exits (true) or the pipe's every writer closed it (false). With a pidfd the
// exit wakes the poll at once; without (kernels before 5.3) it is checked every 50 ms.
bool CopyOutput(Launch& l, int fd, pid_t pid) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  bool exited = false;
  while (!exited) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
    const int ready = poll(fds, pidfd >= 0 ? 2 : 1, pidfd >= 0 ? -1 : 50);
    if (ready < 0 && errno != EINTR) break;
    exited = pidfd >= 0 ? ready > 0 && (fds[1].revents & POLLIN) != 0 : Exited(pid);
    if (exited || ready <= 0 || (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    const ssize_t n = read(fd, l.output_buffer.data(), l.output_buffer.size());
    if (n > 0) l.writer.Feed(l.output_buffer.data(), static_cast<size_t>(n), NowMs());
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;  // every writer closed it
  }
  if (pidfd >= 0) close(pidfd);
  return exited;
}

// DrainOutput copies what is left in the pipe once the workload's group is gone, without waiting for a writer
// that escaped the group (bounded: 16 MiB).
void DrainOutput(Launch& l, int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  size_t copied = 0;
  while (copied < (16u << 20)) {
    const ssize_t n = read(fd, l.output_buffer.data(), l.output_buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    l.writer.Feed(l.output_buffer.data(), static_cast<size_t>(n), NowMs());
    copied += static_cast<size_t>(n);
  }
  close(fd);
}

[[noreturn]] void RunWorkload(Launch& l, int error_fd) {
  setpgid(0, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGPIPE, &dfl, nullptr);  // the monitor ignores it; the program starts with defaults
  if (dup2(l.output_write_fd, STDOUT_FILENO) < 0 || dup2(l.output_write_fd, STDERR_FILENO) < 0) {
    int err = errno;
    WriteAll(error_fd, &err, sizeof err);
    _exit(127);
  }
  // The workload's identity, with the raw system calls: the C library's setuid() would ask every thread of the
  // process it thinks it is in (the monitor's, whose memory it shares) to change too. Going from root to another
  // uid clears every capability; no_new_privs keeps a set-user-ID or file-capability program from taking any
  // back.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      (l.run_gid >= 0 && (syscall(SYS_setgroups, 0, nullptr) != 0 ||
                          syscall(SYS_setresgid, l.run_gid, l.run_gid, l.run_gid) != 0)) ||
      (l.run_uid >= 0 && syscall(SYS_setresuid, l.run_uid, l.run_uid, l.run_uid) != 0)) {
    int err = errno;
    WriteAll(error_fd, &err, sizeof err);
    _exit(127);
  }
  // execvp's search: EACCES is remembered while other candidates are tried; other errors end the search.
  int err = ENOENT;
  bool denied = false;
  for (const std::string& path : l.candidates) {
    execve(path.c_str(), l.argv.data(), l.envp.data());
    err = errno;
    if (err == EACCES) {
      denied = true;
    } else if (err != ENOENT && err != ENOTDIR && err != ESTALE && err != ENODEV && err != ETIMEDOUT) {
      break;
    }
  }
  if (denied && (err == ENOENT || err == ENOTDIR || err == ESTALE || err == ENODEV || err == ETIMEDOUT)) {
    err = EACCES;
  }
  WriteAll(error_fd, &err, sizeof err);
  _exit(127);
}

// WorkloadArgs is what the workload's clone gets: the launch and its end of the exec pipe.
struct WorkloadArgs {
  Launch* launch;
  int error_fd;
  int report_fd;
  int exec_read_fd;
};

int WorkloadMain(void* arg) {
  auto* a = static_cast<WorkloadArgs*>(arg);
  close(a->exec_read_fd);  // its own descriptor table (no CLONE_FILES): the monitor keeps its copy
  close(a->report_fd);
  RunWorkload(*a->launch, a->error_fd);
}

// StackTop is the highest 16-byte aligned address of a stack of kLaunchStackBytes (stacks grow down).
void* StackTop(char* stack) {
  auto top = reinterpret_cast<uintptr_t>(stack + kLaunchStackBytes);
  return reinterpret_cast<void*>(top & ~static_cast<uintptr_t>(15));
}

// MonitorExecMain is the monitor-to-be: it shares the middle's memory (CLONE_VM) until it execs the monitor program
// (this program, or gpupack-monitor) with the three descriptors the monitor needs kept open (in its own descriptor table).
int MonitorExecMain(void* arg) {
  Launch& l = *static_cast<Launch*>(arg);
  for (int fd : {l.data_fd, l.log_fd, l.report_fd}) fcntl(fd, F_SETFD, 0);
  execve(l.monitor_program.c_str(), l.monitor_argv.data(), l.monitor_envp.data());
  l.exec_errno = errno != 0 ? errno : EIO;  // seen by the middle: CLONE_VM
  _exit(127);
}

// MiddleMain is the middle process: it shares the agent's memory (CLONE_VM) while the agent's thread waits, starts
// the monitor and exits, so that the monitor is reparented away from the agent. The monitor is this program
// started afresh when that works; else a fork (the raw system call: the C library's fork handlers must not run in
// memory shared with the agent's other threads), which runs RunMonitor on its copy.
int MiddleMain(void* arg) {
  Launch& l = *static_cast<Launch*>(arg);
  close(l.report_read_fd);
  if (l.data_send_fd >= 0) close(l.data_send_fd);
  if (l.exec_monitor) {
    l.exec_errno = 0;
    const pid_t monitor =
        clone(MonitorExecMain, StackTop(l.workload_stack.get()), CLONE_VM | CLONE_VFORK | SIGCHLD, &l);
    if (monitor > 0 && l.exec_errno == 0) {
      l.exec_mode = true;
      Send(l.report_fd, kMonitorPid, monitor);
      _exit(0);
    }
    if (monitor > 0) {
      while (waitpid(monitor, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  const long monitor = syscall(SYS_clone, SIGCHLD, 0, nullptr, nullptr, 0);
  if (monitor == 0) RunMonitor(l);
  if (monitor < 0) {
    Send(l.report_fd, kFailedFork, errno);
    _exit(1);
  }
  Send(l.report_fd, kMonitorPid, static_cast<int32_t>(monitor));
  _exit(0);
}

// ---- the launch, as sent to the monitor program --------------------------------------------------------------

void PutString(std::string& out, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(s);
}
void PutList(std::string& out, const std::vector<std::string>& list) {
  const uint32_t n = static_cast<uint32_t>(list.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  for (const auto& s : list) PutString(out, s);
}

// Reader takes strings and lists off a blob; ok() turns false at the first short read.
struct Reader {
  const std::string& blob;
  size_t pos = 0;
  bool good = true;
  uint32_t Count() {
    uint32_t n = 0;
    if (pos + sizeof n > blob.size()) {
      good = false;
      return 0;
    }
    std::memcpy(&n, blob.data() + pos, sizeof n);
    pos += sizeof n;
    return n;
  }
  std::string String() {
    const uint32_t n = Count();
    if (!good || n > blob.size() - pos) {
      good = false;
      return {};
    }
    std::string s = blob.substr(pos, n);
    pos += n;
    return s;
  }
  std::vector<std::string> List() {
    std::vector<std::string> out;
    const uint32_t n = Count();
    for (uint32_t i = 0; i < n && good; ++i) out.push_back(String());
    return out;
  }
};

// RunMonitorProgram is the monitor started afresh: it reads its launch from `data_fd` and runs RunMonitor.
[[noreturn]] void RunMonitorProgram(int data_fd, int log_fd, int report_fd) {
  std::string blob;
  char chunk[65536];
  for (;;) {
    const ssize_t n = read(data_fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    blob.append(chunk, static_cast<size_t>(n));
  }
  close(data_fd);
  Launch l;
  if (!DecodeLaunch(blob, l)) {
    Send(report_fd, kFailedLaunch, EPROTO);
    _exit(1);
  }
  // The two descriptors it inherited on purpose are close-on-exec again, as Start opened them: the workload must
  // not inherit them.
  for (int fd : {log_fd, report_fd}) fcntl(fd, F_SETFD, FD_CLOEXEC);
  l.log_fd = log_fd;
  l.writer.SetFd(log_fd);
  l.report_fd = report_fd;
  l.null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  l.workload_stack.reset(new char[kLaunchStackBytes]);
  RunMonitor(l);
}

// MonitorEntry runs before main in every process of this program; in one started as the monitor (argv[0] is
// kMonitorArgv0, the environment starts with kMonitorEnv) it becomes the monitor and never returns. The C library
// passes argc, argv and the environment to constructors.
__attribute__((constructor)) void MonitorEntry(int argc, char** argv, char** envp) {
  if (argc != 4 || argv == nullptr || std::strcmp(argv[0], kMonitorArgv0) != 0) return;
  if (envp == nullptr || envp[0] == nullptr || std::strcmp(envp[0], kMonitorEnv) != 0) return;
  RunMonitorProgram(std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]));
}

}  // namespace

std::string EncodeLaunch(const Launch& l) {
  std::string out;
  PutList(out, l.argv_storage);
  PutList(out, l.env_storage);
  PutList(out, l.candidates);
  PutString(out, l.state_path);
  PutString(out, l.temp_path);
  PutString(out, l.json_prefix);
  std::vector<std::string> log = {l.writer.dir(), std::to_string(l.writer.limits().file_bytes),
                                  std::to_string(l.writer.limits().files), std::to_string(l.writer.size())};
  for (uint64_t start : l.writer.starts()) log.push_back(std::to_string(start));
  PutList(out, log);
  PutList(out, {std::to_string(l.run_uid), std::to_string(l.run_gid)});
  return out;
}

bool DecodeLaunch(const std::string& blob, Launch& l) {
  Reader r{blob};
  l.argv_storage = r.List();
  l.env_storage = r.List();
  l.candidates = r.List();
  l.state_path = r.String();
  l.temp_path = r.String();
  l.json_prefix = r.String();
  const std::vector<std::string> log = r.List();
  const std::vector<std::string> identity = r.List();
  if (!r.good || r.pos != blob.size() || l.argv_storage.empty() || log.size() < 5 || identity.size() != 2)
    return false;
  LogLimits limits;
  std::vector<uint64_t> starts;
  try {
    l.run_uid = std::stoll(identity[0]);
    l.run_gid = std::stoll(identity[1]);
    limits.file_bytes = std::stoull(log[1]);
    limits.files = std::stoi(log[2]);
    for (size_t i = 4; i < log.size(); ++i) starts.push_back(std::stoull(log[i]));
    l.writer.Resume(log[0], limits, -1, starts, std::stoull(log[3]));
  } catch (const std::exception&) {
    return false;
  }
  l.argv.clear();
  for (std::string& arg : l.argv_storage) l.argv.push_back(arg.data());
  l.argv.push_back(nullptr);
  l.envp.clear();
  for (std::string& entry : l.env_storage) l.envp.push_back(entry.data());
  l.envp.push_back(nullptr);
  l.buffer.resize(l.json_prefix.size() + 512);
  l.output_buffer.resize(64 * 1024);
  return true;
}

pid_t StartMiddle(Launch& l) {
  l.middle_stack.reset(new char[kLaunchStackBytes]);
  l.workload_stack.reset(new char[kLaunchStackBytes]);
  l.exec_mode = false;
  if (l.exec_monitor) {
    l.monitor_argv_storage = {kMonitorArgv0, std::to_string(l.data_fd), std::to_string(l.log_fd),
                              std::to_string(l.report_fd)};
    l.monitor_argv.clear();
    for (std::string& arg : l.monitor_argv_storage) l.monitor_argv.push_back(arg.data());
    l.monitor_argv.push_back(nullptr);
    // The dynamic loader may need the agent's library path to start the program again.
    l.monitor_env_storage = {kMonitorEnv};
    if (const char* path = std::getenv("LD_LIBRARY_PATH"); path != nullptr)
      l.monitor_env_storage.push_back(std::string("LD_LIBRARY_PATH=") + path);
    l.monitor_envp.clear();
    for (std::string& entry : l.monitor_env_storage) l.monitor_envp.push_back(entry.data());
    l.monitor_envp.push_back(nullptr);
  }
  return clone(MiddleMain, StackTop(l.middle_stack.get()), CLONE_VM | CLONE_VFORK | SIGCHLD, &l);
}

[[noreturn]] void RunMonitor(Launch& l) {
  setsid();
  prctl(PR_SET_NAME, "gpupack-monitor", 0, 0, 0);
  ResetSignals();  // SIGCHLD must not be ignored, or waitpid below would lose the status
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);  // Start may have given up on the report pipe
  dup2(l.null_fd, STDIN_FILENO);
  dup2(l.null_fd, STDOUT_FILENO);
  dup2(l.null_fd, STDERR_FILENO);
  CloseAllBut(l.log_fd, l.report_fd);
  const int report = l.report_fd;

  int exec_pipe[2];
  int output_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0 || pipe2(output_pipe, O_CLOEXEC) != 0) {
    Send(report, kFailedPipe, errno);
    _exit(1);
  }
  l.output_write_fd = output_pipe[1];
  // The workload shares the monitor's memory until its exec (CLONE_VFORK: the monitor waits until then), so the
  // monitor's copy of the agent's address space is not copied once more.
  WorkloadArgs args{&l, exec_pipe[1], report, exec_pipe[0]};
  const pid_t pid = clone(WorkloadMain, StackTop(l.workload_stack.get()), CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  if (pid < 0) {
    Send(report, kFailedFork, errno);
    _exit(1);
  }
  close(exec_pipe[1]);
  close(output_pipe[1]);
  Send(report, kWorkloadPid, pid);

  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);
  int status = 0;
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {  // exec failed: no record, Start reports the error
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    Send(report, kExecResult, exec_errno == 0 ? EIO : exec_errno);
    _exit(0);
  }

  const pid_t self = getpid();
  const unsigned long long self_start = ReadProcStat(self).start_time;
  const unsigned long long start_time = ReadProcStat(pid).start_time;  // fork time; exec keeps it
  if (!WriteRecord(l, self, self_start, pid, start_time, -1, 0)) {
    int err = errno;
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    Send(report, kFailedState, err);
    _exit(1);
  }
  Send(report, kExecResult, 0);
  close(report);

  // Copy the output into the log stream until the program exits (or closes its output and everything it started
  // did too); then wait for the exit without reaping: the zombie keeps the process group id taken, so whatever the
  // program left running in its group is killed with certainty (a container engine ends a container this way
  // too), and what it wrote before is copied.
  const bool ended = CopyOutput(l, output_pipe[0], pid);
  siginfo_t info{};
  if (!ended) {
    while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0) {
      if (errno != EINTR) break;
    }
  }
  kill(-pid, SIGKILL);
  DrainOutput(l, output_pipe[0]);
  l.writer.Flush(NowMs());
  l.writer.Close();
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) _exit(1);
  }
  int exit_code = 0;
  int signal_number = 0;
  if (WIFSIGNALED(status)) {
    signal_number = WTERMSIG(status);
    exit_code = 128 + signal_number;
  } else if (WIFEXITED(status)) {
    exit_code = WEXITSTATUS(status);
  }
  WriteRecord(l, self, self_start, pid, start_time, exit_code, signal_number);
  _exit(0);
}

}  // namespace gpupack::agent::process_launch
