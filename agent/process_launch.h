// The forked side of the process runtime (process_runtime.cc has the whole design): what Start prepares before
// fork (Launch), the middle process's and the monitor's code, and the reports they send back on a pipe. After fork
// only async-signal-safe calls are made: every string and buffer the children use is in Launch already.
// Internal to the process runtime.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

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
};

// Launch is everything the monitor and the workload need, prepared before fork.
struct Launch {
  std::vector<std::string> argv_storage;
  std::vector<char*> argv;
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  std::vector<std::string> candidates;  // paths to try, in order (execvp's search)
  std::string state_path;
  std::string temp_path;
  std::string json_prefix;  // the record's first fields, ending in ','
  std::vector<char> buffer;  // room to render the record in the monitor
  int log_fd = -1;
  int null_fd = -1;
  int report_fd = -1;
};

// Send writes one Report to `fd` (async-signal-safe).
void Send(int fd, int32_t kind, int32_t value);

// RunMonitor is the monitor process's body (after the middle process forked it): it sets up its session and
// descriptors, forks and execs the workload, records its state file and reports to Start, waits for the
// workload's exit and records it. Never returns.
[[noreturn]] void RunMonitor(Launch& l);

}  // namespace gpupack::agent::process_launch
