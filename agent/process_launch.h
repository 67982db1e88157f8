// The forked side of the process runtime (process_runtime.cc has the whole design): what Start prepares before
// fork (Launch), the middle process's and the monitor's code, and the reports they send back on a pipe. After fork
// only async-signal-safe calls are made: every string and buffer the children use is in Launch already.
// Internal to the process runtime.
//
// Nothing copies the agent's address space. A fork would: it copies every mapping (each thread's stack too) and
// write-protects every page of the agent, whose threads then fault, page by page, with a TLB shootdown each, and
// `gpupack up` runs a server and 64 agents in one process. So the middle process, the monitor-to-be and the
// workload are started with clone(CLONE_VM | CLONE_VFORK) on stacks of their own (as posix_spawn does): each
// shares its parent's memory, which waits until it execs or exits. The monitor is this same program started
// afresh (execve of /proc/self/exe with argv[0] kMonitorArgv0): a constructor of this file recognizes it before
// main, reads the launch from a socket (EncodeLaunch) and runs RunMonitor. When that exec fails (or
// exec_monitor is off), the middle forks the monitor instead (the raw clone system call, so that no fork handler
// of the C library runs in memory it shares with the agent's other threads), and the monitor runs on its copy.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/log_store.h"

namespace gpupack::agent::process_launch {

// ProcStat is what /proc/<pid>/stat says about a process: its state letter and its start time (field 22).
struct ProcStat {
  bool exists = false;
  char state = 0;
  unsigned long long start_time = 0;
};

// ReadProcStat reads /proc/<pid>/stat (async-signal-safe); exists is false when there is no such process or the
// file cannot be read.
ProcStat ReadProcStat(pid_t pid);

// Report is one message to Start on the report pipe (8 bytes: atomic on a pipe).
struct Report {
  int32_t kind;
  int32_t value;
};
enum ReportKind : int32_t {
  kMonitorPid = 1,   // from the middle process
  kWorkloadPid = 2,  // from the monitor, right after fork
  kExecResult = 3,   // from the monitor: 0 = running and recorded, else the exec's errno
  kFailedFork = 4,   // value: errno
  kFailedPipe = 5,
  kFailedState = 6,  // the state file could not be written
  kFailedLaunch = 7, // the monitor program could not read its launch (value: errno)
};

// Launch is everything the monitor and the workload need, prepared before fork.
struct Launch {
  std::vector<std::string> argv_storage;
  std::vector<char*> argv;
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  std::vector<std::string> candidates;  // paths to try, in order (execvp's search)
  // The identity the workload runs as (ProcessRuntimeOptions::task_user): it takes these ids with no
  // supplementary groups before its exec, always with no_new_privs; -1: it keeps the monitor's.
  int64_t run_uid = -1;
  int64_t run_gid = -1;
  std::string state_path;
  std::string temp_path;
  std::string json_prefix;  // the record's first fields, ending in ','
  std::vector<char> buffer;  // room to render the record in the monitor
  // The stacks of the middle process (the monitor goes on running on its copy) and of the workload until its exec.
  std::unique_ptr<char[]> middle_stack;
  std::unique_ptr<char[]> workload_stack;
  int report_read_fd = -1;  // Start's end of the report pipe (the middle closes its copy)
  // The container's log stream (agent/log_store.h): opened by Start; the monitor reads the workload's output
  // from a pipe and writes it here, a line per event, rotating the files. log_fd is the writer's descriptor.
  LogWriter writer;
  int log_fd = -1;
  int output_write_fd = -1;    // the workload's stdout and stderr (the monitor's pipe), set by the monitor
  std::vector<char> output_buffer;  // the monitor's read buffer (allocated before fork)
  int null_fd = -1;
  int report_fd = -1;
  // The monitor program (exec mode): its argv and environment, and the socket its launch is sent on.
  bool exec_monitor = true;  // false: always fork the monitor
  std::string monitor_program = "/proc/self/exe";  // executed as the monitor (gpupack or gpupack-monitor)
  std::vector<std::string> monitor_argv_storage;
  std::vector<char*> monitor_argv;
  std::vector<std::string> monitor_env_storage;  // kMonitorEnv first, then LD_LIBRARY_PATH when the agent has one
  std::vector<char*> monitor_envp;
  int data_fd = -1;       // the monitor's end
  int data_send_fd = -1;  // Start's end
  int exec_errno = 0;     // written by the monitor-to-be when its exec failed (it shares the agent's memory)
  bool exec_mode = false; // after StartMiddle: the monitor is the program started afresh; Start sends the launch
};

inline constexpr const char* kMonitorArgv0 = "gpupack-process-monitor";
inline constexpr const char* kMonitorEnv = "GPUPACK_PROCESS_MONITOR=1";

// EncodeLaunch writes what the monitor program needs of a launch (argv, environment, candidates, paths, the
// record's prefix, the log stream's directory, limits and files); DecodeLaunch reads it back into a Launch (and sets up argv/envp/buffer), false when malformed.
std::string EncodeLaunch(const Launch& l);
bool DecodeLaunch(const std::string& blob, Launch& l);

// Send writes one Report to `fd` (async-signal-safe).
void Send(int fd, int32_t kind, int32_t value);

inline constexpr size_t kLaunchStackBytes = 256 * 1024;

// StartMiddle starts the middle process (clone(CLONE_VM | CLONE_VFORK), on l.middle_stack) and returns its pid
// once it has exited (it starts the monitor, reports the monitor's pid and exits at once); -1 with errno when it
// could not be started. The caller reaps it, then sends EncodeLaunch(l) on data_send_fd when l.exec_mode.
// Allocates both stacks and, with exec_monitor, the monitor program's argv (data_fd, log_fd and report_fd must be
// set).
pid_t StartMiddle(Launch& l);

// RunMonitor is the monitor process's body (after the middle process forked it): it sets up its session and
// descriptors, starts and execs the workload, records its state file and reports to Start, waits for the
// workload's exit and records it. Never returns.
[[noreturn]] void RunMonitor(Launch& l);

}  // namespace gpupack::agent::process_launch
