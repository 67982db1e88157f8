// FakeDockerEngine: a stand-in for the Docker Engine API on a unix socket, for the agent's tests (no engine, no
// network). Its own thread accepts the connections one after another, at most `max_connections` (the loop is
// bounded), reads each request (the head through the blank line, then a Content-Length body) and hands it to
// `answer` with the connection; the connection is closed when `answer` returns. `answer` runs on the engine's
// thread: what it shares with the test needs a lock. Destroying the engine stops accepting and joins the thread
// (an `answer` that waits for the client must see it hang up first). The socket lives where the test says,
// normally in its TempDir (tests/unit/temp_dir.h), which removes it.
// Tests only.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <utility>

#include <gtest/gtest.h>

namespace gpupack::testing_support {

class FakeDockerEngine {
 public:
  struct Request {
    std::string line;  // the request line: "POST /v1.41/containers/create?name=... HTTP/1.1"
    std::string head;  // the whole head, request line included
    std::string body;  // Content-Length bytes after the head (fewer when the client hung up)
    // Target: the request line's target, "/version" for "GET /version HTTP/1.1".
    std::string Target() const {
      const size_t from = line.find(' ') + 1;
      return line.substr(from, line.find(" HTTP/") - from);
    }
  };
  using Answer = std::function<void(int fd, const Request& request)>;

  FakeDockerEngine(std::string socket_path, Answer answer, int max_connections = 1000)
      : path_(std::move(socket_path)), answer_(std::move(answer)) {
    listener_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path_.copy(address.sun_path, sizeof address.sun_path - 1);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0) << path_;
    EXPECT_EQ(listen(listener_, 8), 0);
    thread_ = std::thread([this, max_connections] { Serve(max_connections); });
  }
  FakeDockerEngine(const FakeDockerEngine&) = delete;
  FakeDockerEngine& operator=(const FakeDockerEngine&) = delete;
  ~FakeDockerEngine() {
    shutdown(listener_, SHUT_RDWR);
    thread_.join();
    close(listener_);
  }

  // path: the socket, for DockerRuntimeOptions::socket_path and the like.
  const std::string& path() const { return path_; }

  // Send writes what it can; the client may have hung up already (no SIGPIPE).
  static void Send(int fd, const std::string& text) { (void)send(fd, text.data(), text.size(), MSG_NOSIGNAL); }
  // Reply sends a whole HTTP/1.1 answer with its Content-Length and Connection: close; a Content-Type header
  // only when `content_type` is not empty.
  static void Reply(int fd, const std::string& status, const std::string& body,
                    const std::string& content_type = "application/json") {
    Send(fd, "HTTP/1.1 " + status + "\r\n" + (content_type.empty() ? "" : "Content-Type: " + content_type + "\r\n") +
                 "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  }
  // HoldUntilHangUp reads and drops what the client sends until it closes the connection.
  static void HoldUntilHangUp(int fd) {
    char chunk[512];
    while (read(fd, chunk, sizeof chunk) > 0) {
    }
  }

 private:
  void Serve(int max_connections) {
    for (int served = 0; served < max_connections; ++served) {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      answer_(fd, ReadRequest(fd));
      close(fd);
    }
  }

  // ReadRequest reads the head, then as much of the body as its Content-Length names.
  static Request ReadRequest(int fd) {
    std::string data;
    char chunk[4096];
    size_t head_end = std::string::npos;
    size_t length = 0;
    while (true) {
      if (head_end == std::string::npos && (head_end = data.find("\r\n\r\n")) != std::string::npos) {
        const size_t at = data.find("Content-Length: ");
        if (at != std::string::npos && at < head_end) length = std::stoul(data.substr(at + 16));
      }
      if (head_end != std::string::npos && data.size() >= head_end + 4 + length) break;
      const ssize_t n = read(fd, chunk, sizeof chunk);
      if (n <= 0) break;
      data.append(chunk, static_cast<size_t>(n));
    }
    Request r;
    r.line = data.substr(0, data.find("\r\n"));
    r.head = head_end == std::string::npos ? data : data.substr(0, head_end + 4);
    r.body = head_end == std::string::npos ? "" : data.substr(head_end + 4, length);
    return r;
  }

  std::string path_;
  Answer answer_;
  int listener_ = -1;
  std::thread thread_;
};

}  // namespace gpupack::testing_support
