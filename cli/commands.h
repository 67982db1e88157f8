// The subcommands of the gpupack binary: flag sets and entry points. Wiring only.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace gpupack::cli {

inline constexpr const char* kVersion = "0.1.0";

struct ServerFlags {
  std::string listen = "127.0.0.1:8080";
  std::string db = "gpupack.db";
  std::string region = "us-east-1";
  std::string account_id = "000000000000";
  std::string credentials;
  std::string log_level = "info";
  bool insecure_no_auth = false;
  int threads = 2;
};

void AddServerFlags(CLI::App& app, ServerFlags& flags);

// RunServer runs until SIGINT/SIGTERM; returns the process exit status (0, 1 on failure, 2 on bad usage).
int RunServer(const ServerFlags& flags, bool banner_for_up);

}  // namespace gpupack::cli
