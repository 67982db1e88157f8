#include "agent/proc_tree.h"

#include <charconv>
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

std::string ReadProcCgroup(int pid) {
  if (pid <= 0) return "";
  return ReadSmallFile("/proc/" + std::to_string(pid) + "/cgroup");
}

}  // namespace gpupack::agent
