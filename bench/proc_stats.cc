// proc_stats.cc: the /proc readers declared in bench/proc_stats.h.
#include "bench/proc_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

namespace gpupack::bench {

namespace fs = std::filesystem;

ProcSample SampleProc(pid_t pid) {
  ProcSample s;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream fields(text.substr(paren + 2));
    std::vector<std::string> f;
    for (std::string x; fields >> x && f.size() < 13;) f.push_back(x);
    if (f.size() >= 13) s.cpu_s = static_cast<double>(std::stoll(f[11]) + std::stoll(f[12])) / sysconf(_SC_CLK_TCK);
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    auto value = [&] { return std::atoll(line.c_str() + line.find(':') + 1); };
    if (line.rfind("VmRSS:", 0) == 0) s.rss_kib = value();
    else if (line.rfind("VmHWM:", 0) == 0) s.hwm_kib = value();
    else if (line.rfind("Threads:", 0) == 0) s.threads = static_cast<int>(value());
  }
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::ifstream in(it->path() / "schedstat");
    long long run_ns = 0;
    if (in >> run_ns) s.sched_s += run_ns / 1e9;
  }
  ec.clear();
  for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    ++s.fds;
  return s;
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace gpupack::bench
