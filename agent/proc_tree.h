// Reading /proc: which process belongs to which container (the watchdog gets pids from NVML and needs the task
// behind each one), and which uids processes run as (the process runtime's task uids).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
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

// ProcessUids: the uids within [first, last] that some live process (not a zombie) on the host has, real,
// effective, saved or file-system (the Uid: line of /proc/<pid>/status, which every user may read).
std::set<int64_t> ProcessUids(int64_t first, int64_t last);

// ReadProcCgroup returns /proc/<pid>/cgroup ("" when unreadable); a docker container's id appears in it.
std::string ReadProcCgroup(int pid);

}  // namespace gpupack::agent
