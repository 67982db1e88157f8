// ServerRuntime: the server's parts wired together (store, committer, control plane, agent channel, HTTP), for
// `gpupack server` and `gpupack up`.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack::cli {

class ServerRuntime {
 public:
  // Start validates the flags (bad usage -> exit code 2 in *exit_code), opens the database and listens.
  // Returns null on failure with *exit_code set and the reason printed on stderr.
  static std::unique_ptr<ServerRuntime> Start(const ServerFlags& flags, int* exit_code);
  ~ServerRuntime();  // stops serving, flushes pending commits
  std::string endpoint() const;  // http://HOST:PORT
  std::string auth_summary() const;  // one line for the banner: SigV4 and how many keys, or none
  // AgentsConnected waits (at most `timeout`) until every instance named has a connected agent channel; false when
  // one has none by then.
  bool AgentsConnected(const std::vector<std::string>& instance_arns, std::chrono::milliseconds timeout) const;

  struct Impl;

 private:
  explicit ServerRuntime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Installs SIGINT/SIGTERM handlers and waits until one arrives.
void WaitForSignal();

// ParseDefaultStrategy reads --default-strategy: TYPE[:FIELD], checked as a RunTask's strategy is.
Result<PlacementStrategy> ParseDefaultStrategy(const std::string& text);

// Usage prints "gpupack: <message>" and returns 2.
int Usage(const std::string& message);

}  // namespace gpupack::cli
