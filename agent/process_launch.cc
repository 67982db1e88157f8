#include "agent/process_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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
  int fd = open(l.temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = WriteAll(fd, b.data, b.size);
  int saved = errno;
  close(fd);
  if (!ok) {
    errno = saved;
    return false;
  }
  return rename(l.temp_path.c_str(), l.state_path.c_str()) == 0;
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

[[noreturn]] void RunWorkload(Launch& l, int error_fd) {
  setpgid(0, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGPIPE, &dfl, nullptr);  // the monitor ignores it; the program starts with defaults
  if (dup2(l.log_fd, STDOUT_FILENO) < 0 || dup2(l.log_fd, STDERR_FILENO) < 0) {
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

}  // namespace

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
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    Send(report, kFailedPipe, errno);
    _exit(1);
  }
  pid_t pid = fork();
  if (pid < 0) {
    Send(report, kFailedFork, errno);
    _exit(1);
  }
  if (pid == 0) {
    close(exec_pipe[0]);
    close(report);
    RunWorkload(l, exec_pipe[1]);
  }
  close(exec_pipe[1]);
  close(l.log_fd);
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

  // Wait for the exit without reaping: the zombie keeps the process group id taken, so whatever the program
  // left running in its group is killed with certainty (a container engine ends a container this way too).
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0) {
    if (errno != EINTR) break;
  }
  kill(-pid, SIGKILL);
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
