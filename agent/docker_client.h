// DockerClient: a small synchronous HTTP/1.1 client for the Docker Engine API over its unix socket.
//
// Boost.Beast and Asio stay inside docker_client.cc, so this header compiles fast (see README.md). Every request
// opens a fresh connection (`Connection: close`), has a deadline for the whole exchange (connect, write, read)
// and a bound on the response body. Thread-compatible: a const client may be used from several threads, each
// call has its own connection.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "base/percent.h"
#include "base/status.h"

namespace gpupack::agent {

struct DockerClientOptions {
  std::string socket_path = "/var/run/docker.sock";
  std::chrono::milliseconds timeout{30000};  // default deadline of one request
  size_t max_body_bytes = 16 << 20;          // a larger response body is an error
};

// DockerResponse is the engine's answer: its HTTP status and body (JSON for the endpoints gpupack uses).
struct DockerResponse {
  int status = 0;
  std::string body;
};

class DockerClient {
 public:
  explicit DockerClient(DockerClientOptions options) : options_(std::move(options)) {}

  // Request sends `method target` (target is the path and query, e.g. "/v1.41/containers/json?all=1") with an
  // optional JSON body and reads the whole response. The Status is an error only when no response came back
  // (cannot connect, deadline passed, malformed or too large); an engine error is a response with status >= 400.
  // `timeout` overrides the default deadline (Stop waits for the engine's own grace period).
  Result<DockerResponse> Request(std::string_view method, std::string_view target, std::string_view body = {},
                                 std::optional<std::chrono::milliseconds> timeout = std::nullopt) const;

  const DockerClientOptions& options() const { return options_; }

 private:
  DockerClientOptions options_;
};

// UrlEncode percent-encodes everything but RFC 3986 unreserved characters (for query parameter values): the one
// encoder, base/percent.h.
inline std::string UrlEncode(std::string_view value) { return PercentEncode(value); }

// EngineMessage extracts the engine's error message from a response body ({"message": "..."}), or returns the
// body itself (shortened) when it is not that shape.
std::string EngineMessage(const DockerResponse& response);

}  // namespace gpupack::agent
