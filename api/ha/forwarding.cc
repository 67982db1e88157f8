#include "api/ha/forwarding.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "base/fd_wait.h"

namespace gpupack::api {
namespace {

using Clock = std::chrono::steady_clock;

// HopByHop: headers that belong to one connection, never forwarded (RFC 9110 §7.6.1); the length is re-framed.
// `expect` too: the standby already has the whole body and sends it at once, so the leader must not answer an
// interim 100 Continue the client never asked this connection for.
bool HopByHop(std::string_view lower) {
  for (std::string_view h : {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                             "upgrade", "content-length", "expect"})
    if (lower == h) return true;
  return false;
}

// Lower: `s` in ASCII lower case (header names, and the head of an answer when looking for its framing).
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// Fd closes a socket descriptor at the end of its scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// ConnectTo opens a TCP connection to the server at `base` (http://HOST:PORT) before `deadline`.
Result<int> ConnectTo(const std::string& base, Clock::time_point deadline) {
  std::string_view rest(base);
  if (rest.rfind("http://", 0) != 0) return Status::Server("the leader's URL '" + base + "' is not http://HOST:PORT");
  rest.remove_prefix(7);
  rest = rest.substr(0, rest.find('/'));
  std::string host, port = "80";
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    host = std::string(rest.substr(1, close - 1));
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = std::string(rest.substr(close + 2));
  } else {
    const size_t colon = rest.rfind(':');
    host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) port = std::string(rest.substr(colon + 1));
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr)
    return Status::Server("cannot resolve the leader's address " + base);
  Fd sock{::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  const int rc = sock.fd < 0 ? -1 : ::connect(sock.fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (sock.fd < 0 || (rc != 0 && errno != EINPROGRESS))
    return Status::Server("cannot connect to the leader at " + base);
  if (rc != 0) {
    int err = 0;
    socklen_t len = sizeof err;
    if (!WaitFd(sock.fd, POLLOUT, deadline) || ::getsockopt(sock.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
      return Status::Server("cannot connect to the leader at " + base);
  }
  const int fd = sock.fd;
  sock.fd = -1;
  return fd;
}

// Exchange: what one request on one connection came to. `ended_unanswered` when the connection ended (closed or
// reset, not timed out) before a byte of an answer: a kept-alive connection the leader closed just then;
// `reusable` when the answer was framed by its Content-Length and the leader did not ask to close.
struct Exchange {
  Result<HttpResponse> response = Status::Server("not sent");
  bool ended_unanswered = false;
  bool reusable = false;
};

// ExchangeOn sends `req` on the connection `fd` (keep-alive) and reads the leader's answer: status, headers
// (less the hop-by-hop ones) and body, unchanged.
Exchange ExchangeOn(int fd, const HttpRequest& req, const std::string& base, const std::string& me,
                    std::chrono::milliseconds timeout, Clock::time_point deadline) {
  Exchange x;
  std::string out = req.method + " " + req.target + " HTTP/1.1\r\n";
  for (const auto& [name, value] : req.headers)
    if (!HopByHop(name) && name != kForwardedHeader) out += name + ": " + value + "\r\n";
  out += std::string(kForwardedHeader) + ": " + me + "\r\n";
  out += "Content-Length: " + std::to_string(req.body.size()) + "\r\n\r\n";
  out += req.body;
  for (size_t sent = 0; sent < out.size();) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFd(fd, POLLOUT, deadline)) {
        x.response = Status::Server("the leader at " + base + " did not take the request in time");
        return x;
      }
    } else {
      x.response = Status::Server("the connection to the leader at " + base + " broke");
      x.ended_unanswered = true;
      return x;
    }
  }
  std::string in;
  size_t header_end = std::string::npos;
  size_t want = std::string::npos;  // the whole answer's length, once the headers told it
  bool close = false;               // the leader said Connection: close
  bool framed = false;              // the final answer's head was read
  for (;;) {
    if (want != std::string::npos && in.size() >= want) break;
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
      while (header_end == std::string::npos && (header_end = in.find("\r\n\r\n")) != std::string::npos &&
             in.compare(0, 10, "HTTP/1.1 1") == 0 && in.compare(0, 12, "HTTP/1.1 101") != 0) {
        in.erase(0, header_end + 4);  // an interim answer (100 Continue, 102, 103): the final one follows
        header_end = std::string::npos;
      }
      if (header_end != std::string::npos && want == std::string::npos && !framed) {
        framed = true;
        const std::string head = Lower(in.substr(0, header_end));
        const size_t cl = head.find("\r\ncontent-length:");
        if (cl != std::string::npos) want = header_end + 4 + std::stoull(head.substr(cl + 17));
        close = head.find("\r\nconnection: close") != std::string::npos;
      }
    } else if (n == 0) {
      x.ended_unanswered = in.empty();
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!WaitFd(fd, POLLIN, deadline)) {
        x.response = Status::Server("the leader at " + base + " did not answer within " +
                                    std::to_string(timeout.count()) + " ms");
        return x;
      }
    } else {
      x.response = Status::Server("the connection to the leader at " + base + " broke");
      x.ended_unanswered = in.empty();
      return x;
    }
  }
  if (header_end == std::string::npos || in.compare(0, 5, "HTTP/") != 0) {
    x.response = Status::Server("the leader at " + base + " closed the connection without an answer");
    return x;
  }
  HttpResponse r;
  const size_t sp = in.find(' ');
  r.status = std::atoi(in.c_str() + sp + 1);
  size_t line = in.find("\r\n") + 2;
  while (line < header_end) {
    const size_t eol = in.find("\r\n", line);
    const std::string h = in.substr(line, eol - line);
    line = eol + 2;
    const size_t colon = h.find(':');
    if (colon == std::string::npos) continue;
    std::string name = h.substr(0, colon), value = h.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (!HopByHop(Lower(name))) r.headers.emplace_back(std::move(name), std::move(value));
  }
  r.body = in.substr(header_end + 4, want == std::string::npos ? std::string::npos : want - header_end - 4);
  x.reusable = want != std::string::npos && in.size() == want && !close;
  x.response = std::move(r);
  return x;
}

}  // namespace

// ---- LeaderConnections --------------------------------------------------------------------------------------

LeaderConnections::~LeaderConnections() {
  for (const auto& c : idle_) ::close(c.fd);
}

int LeaderConnections::Take(const std::string& base) {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  while (!idle_.empty()) {
    Idle c = idle_.back();
    idle_.pop_back();
    pollfd p{c.fd, POLLIN, 0};
    if (c.base == base && now - c.since < kMaxIdleTime && ::poll(&p, 1, 0) == 0) return c.fd;
    ::close(c.fd);  // stale, closed by the leader, or to a former leader: none older is better
  }
  return -1;
}

void LeaderConnections::Give(const std::string& base, int fd) {
  std::lock_guard lock(mu_);
  if (idle_.size() >= kMaxIdle || aborted_) {
    ::close(fd);
    return;
  }
  idle_.push_back({base, fd, Clock::now()});
}

bool LeaderConnections::Enter(int fd) {
  std::lock_guard lock(mu_);
  if (aborted_) return false;
  in_flight_.push_back(fd);
  return true;
}

void LeaderConnections::Leave(int fd) {
  std::lock_guard lock(mu_);
  std::erase(in_flight_, fd);
}

void LeaderConnections::Abort() {
  std::lock_guard lock(mu_);
  aborted_ = true;
  for (int fd : in_flight_) ::shutdown(fd, SHUT_RDWR);
}

// ---- Forward ------------------------------------------------------------------------------------------------

Result<HttpResponse> Forward(const HttpRequest& req, const std::string& base, const std::string& me,
                             std::chrono::milliseconds timeout, LeaderConnections& pool) {
  const auto deadline = Clock::now() + timeout;
  for (int attempt = 0;; ++attempt) {
    int fd = attempt == 0 ? pool.Take(base) : -1;
    const bool reused = fd >= 0;
    if (!reused) {
      auto made = ConnectTo(base, deadline);
      if (!made.ok()) return made.status();
      fd = *made;
    }
    if (!pool.Enter(fd)) {
      ::close(fd);
      return Status::Server("this gpupack server stopped forwarding: it is changing role");
    }
    Exchange x = ExchangeOn(fd, req, base, me, timeout, deadline);
    pool.Leave(fd);
    if (x.response.ok() && x.reusable) {
      pool.Give(base, fd);
    } else {
      ::close(fd);
    }
    if (x.response.ok() || !reused || !x.ended_unanswered) return std::move(x.response);
  }
}

}  // namespace gpupack::api
