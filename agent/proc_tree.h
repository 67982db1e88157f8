// Reading /proc: which process belongs to which container. The watchdog gets pids from NVML and needs the task
// behind each one.
#pragma once

#include <optional>
#include <string>

namespace gpupack::agent {

// ProcIds is what /proc/<pid>/stat says about a process's place in the process tree.
struct ProcIds {
  int pid = 0;
  int ppid = 0;
  int pgrp = 0;
  int session = 0;
};

// ReadProcIds reads /proc/<pid>/stat; nullopt when the process is gone or the file cannot be parsed.
std::optional<ProcIds> ReadProcIds(int pid);

// ParseProcStat parses the text of a /proc/<pid>/stat file (the command name may hold spaces and parentheses).
std::optional<ProcIds> ParseProcStat(const std::string& text);

// ReadProcCgroup returns /proc/<pid>/cgroup ("" when unreadable); a docker container's id appears in it.
std::string ReadProcCgroup(int pid);

}  // namespace gpupack::agent
