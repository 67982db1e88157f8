// proc_stats: what a benchmark reads about processes and the host from /proc, for its setup and figures: a
// process's CPU time, memory, threads and descriptors (SampleProc), the caller's own CPU time, the load average
// and the CPU model. Linux only; every function reads once and keeps nothing. Used by bench/agent_swarm.cc.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace gpupack::bench {

// ProcSample: one reading of a process (SampleProc); zero where /proc could not be read.
struct ProcSample {
  double cpu_s = 0;       // utime + stime (clock ticks: 10 ms)
  double sched_s = 0;     // sum of the threads' run time from /proc/PID/task/*/schedstat (ns)
  int64_t rss_kib = 0;    // VmRSS
  int64_t hwm_kib = 0;    // VmHWM
  int threads = 0;
  int fds = 0;
};

// SampleProc reads /proc/PID/stat, status, task/*/schedstat and fd.
ProcSample SampleProc(pid_t pid);

// SelfCpuSeconds: the calling process's user + system CPU time (getrusage).
double SelfCpuSeconds();

// LoadAverage: the 1, 5 and 15 minute load averages as /proc/loadavg prints them.
std::string LoadAverage();

// CpuModel: the first "model name" of /proc/cpuinfo, "unknown" without one.
std::string CpuModel();

}  // namespace gpupack::bench
