#include "api/auth/server_names.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace gpupack::api {

namespace {

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool IsWildcardHost(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

// Bracketed: an IPv6 address as a Host header writes it.
std::string Bracketed(const std::string& host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? "[" + host + "]" : host;
}

}  // namespace

Result<std::string> ServerNames::Normalize(std::string_view text) {
  auto bad = [&text](const char* why) {
    return Status::InvalidParameter("'" + std::string(text.substr(0, 255)) + "' is not HOST[:PORT]: " + why);
  };
  if (text.empty() || text.size() > 255) return bad("empty or longer than 255 characters");
  for (char c : text) {
    if (c <= ' ' || c == 0x7f || c == '/' || c == '@' || c == '?' || c == '#')
      return bad("spaces, control characters, '/', '@', '?' and '#' are not allowed (no scheme, user or path)");
  }
  std::string host;
  std::string_view port_text;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close == 1) return bad("an IPv6 address needs its closing ']'");
    host = std::string(text.substr(0, close + 1));
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("only ':PORT' may follow ']'");
      port_text = rest.substr(1);
      if (port_text.empty()) return bad("the port is empty");
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon != std::string_view::npos && text.find(':') != colon) return bad("an IPv6 address must be in brackets");
    host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = text.substr(colon + 1);
      if (port_text.empty()) return bad("the port is empty");
    }
    if (host.empty()) return bad("the host is empty");
  }
  unsigned port = 80;
  if (!port_text.empty()) {
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535)
      return bad("the port must be 1..65535");
  }
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  return host + ":" + std::to_string(port);
}

Status ServerNames::Add(std::string_view host_port) {
  auto name = Normalize(host_port);
  if (!name.ok()) return name.status();
  std::lock_guard lock(mu_);
  names_.insert(std::move(*name));
  return Status::Ok();
}

void ServerNames::AddListen(const std::string& listen_host, uint16_t port) {
  std::vector<std::string> hosts;
  if (IsWildcardHost(listen_host)) {
    // Any address of the machine reaches the server: each interface's, and the names that resolve to them.
    hosts = {"localhost", "127.0.0.1", "::1"};
    if (ifaddrs* list = nullptr; getifaddrs(&list) == 0) {
      for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr == nullptr) continue;
        char text[INET6_ADDRSTRLEN] = {};
        if (i->ifa_addr->sa_family == AF_INET) {
          if (inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text))
            hosts.emplace_back(text);
        } else if (i->ifa_addr->sa_family == AF_INET6 && listen_host != "0.0.0.0") {
          if (inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, text, sizeof text))
            hosts.emplace_back(text);
        }
      }
      freeifaddrs(list);
    }
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') hosts.emplace_back(name);
  } else {
    hosts = {listen_host};
    if (IsLoopbackHost(listen_host)) hosts.insert(hosts.end(), {"localhost", "127.0.0.1", "::1"});
  }
  for (const std::string& h : hosts) {
    auto name = Normalize(Bracketed(h) + ":" + std::to_string(port));
    if (!name.ok()) continue;  // an interface address with a zone (fe80::1%eth0) is no Host a client sends
    std::lock_guard lock(mu_);
    names_.insert(std::move(*name));
  }
}

bool ServerNames::Contains(std::string_view host_header) const {
  auto name = Normalize(host_header);
  if (!name.ok()) return false;
  std::lock_guard lock(mu_);
  return names_.count(*name) > 0;
}

std::vector<std::string> ServerNames::names() const {
  std::lock_guard lock(mu_);
  return {names_.begin(), names_.end()};
}

}  // namespace gpupack::api
