#include "agent/proc_tree.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace gpupack::agent {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str().substr(0, 1 << 16);
}

bool ToInt(const std::string& s, int& out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// StatusUids: the four uids of a /proc/<pid>/status text's Uid: line (real, effective, saved, file-system); none
// for a zombie, which can no longer act as its uid (and waits for a reaper that may never come).
std::vector<int64_t> StatusUids(const std::string& text) {
  if (text.find("\nState:\tZ") != std::string::npos) return {};
  size_t line = text.starts_with("Uid:") ? 0 : text.find("\nUid:");
  if (line == std::string::npos) return {};
  if (line != 0) ++line;
  const size_t end = text.find('\n', line);
  std::istringstream fields(text.substr(line + 4, end == std::string::npos ? std::string::npos : end - line - 4));
  std::vector<int64_t> uids;
  for (int64_t uid = 0; uids.size() < 4 && fields >> uid;) uids.push_back(uid);
  return uids;
}

}  // namespace

std::optional<ProcIds> ParseProcStat(const std::string& text) {
  // "pid (comm) S ppid pgrp session ...": fields after the command count from its last ')'.
  size_t close = text.rfind(')');
  size_t open = text.find(" (");
  if (close == std::string::npos || open == std::string::npos || open > close) return std::nullopt;
  ProcIds ids;
  if (!ToInt(text.substr(0, open), ids.pid)) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  std::string state, ppid, pgrp, session;
  if (!(rest >> state >> ppid >> pgrp >> session)) return std::nullopt;
  if (!ToInt(ppid, ids.ppid) || !ToInt(pgrp, ids.pgrp) || !ToInt(session, ids.session)) return std::nullopt;
  return ids;
}

std::optional<ProcIds> ReadProcIds(int pid) {
  if (pid <= 0) return std::nullopt;
  std::string text = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat");
  if (text.empty()) return std::nullopt;
  return ParseProcStat(text);
}

std::set<int64_t> ProcessUids(int64_t first, int64_t last) {
  std::set<int64_t> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    for (int64_t uid : StatusUids(ReadSmallFile("/proc/" + name + "/status")))
      if (uid >= first && uid <= last) out.insert(uid);
  }
  return out;
}

std::string ReadProcCgroup(int pid) {
  if (pid <= 0) return "";
  return ReadSmallFile("/proc/" + std::to_string(pid) + "/cgroup");
}

}  // namespace gpupack::agent
