// ServerNames: the names a SigV4-signed request may be addressed to at this server (docs/security.md, "Whose
// request it is"). SigV4 signs the Host header, so a request signed for another server (a stranger an agent was
// misled to, another deployment that shares a key) names that server's host; a server that answers only requests
// whose signed Host is one of its own names cannot be handed a request captured elsewhere and replayed within the
// signature's 5 minutes. The names are the listen address (for a wildcard address: every address of the
// machine's interfaces, its host name and localhost; for a loopback one: localhost, 127.0.0.1 and ::1 too), the
// --advertise URL's HOST:PORT, and what the operator adds with --server-name (a proxy's or a load balancer's
// name, the other replicas'). Each name is HOST:PORT; a Host without a port means port 80 (plain HTTP).
//
// Thread-safety: every method takes the object's lock; names may be added while requests are checked (the port
// of --listen HOST:0 is known only once the server is bound).
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gpupack::api {

class ServerNames {
 public:
  // Normalize: "host:port" from a Host header or a --server-name value: the host in lower case (an IPv6 address
  // in brackets), port 80 when none is given; kInvalidParameter when it is not HOST[:PORT] (empty, a scheme or a
  // path, a port outside 1..65535, spaces or control characters).
  static Result<std::string> Normalize(std::string_view host_port);

  // Add adds a name (HOST[:PORT], as Normalize reads it).
  Status Add(std::string_view host_port);
  // AddListen adds the names of a listen address `host` (as --listen gives it, without brackets) on `port`, the
  // port actually bound.
  void AddListen(const std::string& host, uint16_t port);

  // Contains: whether `host_header` (a request's Host value) is one of the names.
  bool Contains(std::string_view host_header) const;
  std::vector<std::string> names() const;  // sorted, for the banner and the log

 private:
  mutable std::mutex mu_;
  std::set<std::string, std::less<>> names_;
};

}  // namespace gpupack::api
