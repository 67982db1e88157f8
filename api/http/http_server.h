// HttpServer: a small HTTP/1.1 server for the ECS API, /healthz, /metrics and (later) the agent channel.
//
// The public surface is plain C++: Boost.Beast and Asio stay inside the server's own .cc files in api/
// (pimpl; http_server_impl.h tells which file does what), so code that includes this header compiles fast
// (one Beast translation unit takes tens of seconds).
//
// Shape: a thin HTTP layer. One listener, one session per connection on its own strand, limits and timeouts on
// every read (bad input is answered with a 4xx in ECS's error shape or closed, never a hang), and a Handler that
// turns an HttpRequest into an HttpResponse, either at once or later from any thread (e.g. after the placement
// applier's durable commit).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace gpupack::api {

// HttpRequest is one complete request as read from the wire. A value type; the Handler owns it.
struct HttpRequest {
  std::string method;  // as sent, e.g. "POST"
  std::string target;  // request target as sent, e.g. "/" or "/metrics?x=1"
  std::vector<std::pair<std::string, std::string>> headers;  // in wire order; names lower-cased
  std::string body;
  std::string remote_address;  // "ip:port" of the peer, e.g. "127.0.0.1:53422" or "[::1]:53422"

  // Header returns the value of the first header named `lower_name` (which must be lower case), or nullptr.
  const std::string* Header(std::string_view lower_name) const;
};

// HttpResponse is what a Handler answers. The server adds `Date` (unless present), `Server: gpupack` (unless
// present) and `Content-Length`, and owns `Connection`: a handler that sets `Connection: close` gets the
// connection closed after the response; other values are ignored. Content-Length and Transfer-Encoding set
// by the handler are ignored (the server frames the body). A header whose name or value contains CR, LF or
// NUL is dropped with a warning (no header injection). A status outside 200..599 becomes a 500. Responses
// with status 204 or 304 are sent without a body and without Content-Length (RFC 9110 §8.6); a response to
// HEAD carries the Content-Length of the body it would have had, and no body.
struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// Responder sends the response for one request. It may be called from ANY thread and must be called exactly
// once; a second call is ignored (and logged). If every copy of a Responder is destroyed without being called,
// the server answers 500 ServerException on its own, so no connection waits forever; that is a safety net,
// not a way to answer. After HttpServer::Stop() a Responder is a harmless no-op, and it may outlive the server.
using Responder = std::function<void(HttpResponse)>;

// Handler is called once per request, on one of the server's io threads (inside the connection's strand), so
// it must not block: do the slow part elsewhere and call the Responder when done. The next request on the same
// connection is not read until this one is answered. An exception thrown by the Handler is caught and logged,
// and the request is answered 500 (unless the Responder was already called).
using Handler = std::function<void(HttpRequest&&, Responder)>;

// WebSocketConnection: one accepted WebSocket (the agent channel). Send and Close are thread-safe; messages go
// out in the order Send was called. After the connection closed, Send does nothing. Messages wait in a send queue
// of at most WebSocketHandler::max_send_queue_bytes: a Send that would pass it (a peer that does not read) closes
// the connection at once instead, dropping what was queued.
class WebSocketConnection {
 public:
  virtual ~WebSocketConnection() = default;
  virtual void Send(std::string text) = 0;
  virtual void Close() = 0;
  virtual const std::string& remote_address() const = 0;
};

// UpgradeAnswer: what a WebSocketHandler's `accept` decides. An ok `status` accepts the upgrade; any other is
// answered as an HTTP error in ECS's shape (the code picks the HTTP status and __type, the message "message"),
// with `fields` added to its JSON body as string members (the agent channel's "code" and "leader") and `headers`
// to the response. A Status converts to an answer without fields or headers.
struct UpgradeAnswer {
  UpgradeAnswer(Status s = Status::Ok()) : status(std::move(s)) {}  // NOLINT: implicit by design
  Status status;
  std::vector<std::pair<std::string, std::string>> fields;
  std::vector<std::pair<std::string, std::string>> headers;
};

// WebSocketHandler serves the WebSocket upgrades of one path. `accept` decides on the upgrade request (a refusal
// is answered as an HTTP error in ECS's shape and the connection is not upgraded: UpgradeAnswer); the callbacks
// run on the connection's strand, one at a time per connection: on_open once, on_message per text message,
// on_close once when the connection ends for any reason (also after Close() and at Stop()).
struct WebSocketHandler {
  std::function<UpgradeAnswer(const HttpRequest&)> accept;
  std::function<void(const std::shared_ptr<WebSocketConnection>&, const HttpRequest&)> on_open;
  std::function<void(const std::shared_ptr<WebSocketConnection>&, std::string message)> on_message;
  std::function<void(const std::shared_ptr<WebSocketConnection>&)> on_close;
  size_t max_message_bytes = 1 << 20;
  // A peer that answers no ping for this long is disconnected (Beast's keep-alive pings at half of it).
  std::chrono::milliseconds idle_timeout{30000};
  // Bytes a connection may hold queued for sending (messages not yet written to the socket). A message that
  // would take the queue past it closes the connection (counted in websocket_overflow_closes); a single message
  // larger than the bound still goes out when the queue is empty, so the queue holds at most
  // max(max_send_queue_bytes, one message).
  size_t max_send_queue_bytes = 16 << 20;
  // busy_fields: added to the 503 body of an upgrade refused at HttpServerOptions::max_websockets (the agent
  // channel's "code").
  std::vector<std::pair<std::string, std::string>> busy_fields;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // an IP literal (IPv4 or IPv6) or "localhost"; never resolved via DNS
  uint16_t port = 8080;            // 0 = any free port; port() tells which
  size_t max_body_bytes = 1 << 20;     // larger body → 413 and close
  size_t max_header_bytes = 16 << 10;  // request line + headers; larger → 431 and close
  // Deadline for a whole request (headers and body), counted from its first byte; for the first request on a
  // connection it is counted from the accept (so a connection that never speaks is closed after this too).
  // Missed → the connection is closed without a response (slow-drip defence).
  std::chrono::milliseconds read_timeout{10000};
  // How long a keep-alive connection may wait for the first byte of its next request; then it is closed.
  std::chrono::milliseconds idle_timeout{60000};
  // Deadline for writing one response; a peer that does not read is disconnected.
  std::chrono::milliseconds write_timeout{10000};
  // Open HTTP connections at most; one more is accepted, answered 503 and closed (counted in
  // rejected_connections). An upgraded connection leaves this count for max_websockets'.
  size_t max_connections = 4096;
  // Open HTTP connections at most from one client address (IPv4, or IPv6 with IPv4-mapped addresses read as
  // IPv4): one more from that address is answered 503 and closed (counted in rejected_address_connections), so
  // a peer that opens connections and stalls them (headers, then a body a byte at a time) holds at most this
  // many slots and max_body_bytes of memory in each, and other clients keep theirs. Clients behind one proxy
  // or NAT share an address: raise it there. Upgraded connections are not counted (max_websockets bounds them).
  size_t max_connections_per_address = 256;
  // Upgraded connections (the agent channel) open at most: a limit apart from max_connections, so that agents
  // can never take the slots of ECS calls. One more upgrade request is answered 503 ServerException with
  // Retry-After and closed, not upgraded (counted in rejected_websockets); ECS calls are served meanwhile. The
  // process needs max_connections + max_websockets file descriptors, and a few for its store.
  size_t max_websockets = 1024;
  int threads = 2;  // io threads, >= 1
  // WebSocket endpoints by path (e.g. "/agent/v1/channel"); an upgrade request for any other path is a 404.
  std::map<std::string, WebSocketHandler> websockets;
};

// HttpServer listens on one address and serves HTTP/1.1 with keep-alive; pipelined requests are answered in
// order, one at a time per connection.
//
// Thread-safety: Start(), Stop(), port() and stats() may be called from any thread, concurrently. Stop() and
// the destructor must not be called from a Handler or any other code running on the server's own io threads
// (they join those threads). Responders are thread-safe (see above).
class HttpServer {
 public:
  // Counters since Create; read without a lock, so the fields are each exact but not one atomic snapshot.
  struct Stats {
    uint64_t connections_open = 0;      // sessions now open
    uint64_t connections_total = 0;     // connections accepted and served (rejected ones not included)
    uint64_t requests = 0;              // complete requests handed to the Handler
    uint64_t rejected_connections = 0;  // turned away at max_connections
    uint64_t rejected_address_connections = 0;  // turned away at max_connections_per_address
    uint64_t bad_requests = 0;          // answered by the server itself: 400 malformed, 413 body, 431 headers
    uint64_t websockets_open = 0;       // upgraded connections now open
    uint64_t rejected_websockets = 0;   // upgrade requests answered 503 at max_websockets
    uint64_t websocket_queued_bytes = 0;     // bytes queued for sending on all upgraded connections now
    uint64_t websocket_overflow_closes = 0;  // connections closed for passing max_send_queue_bytes
  };

  // Create validates the options, binds and listens (connections queue in the kernel until Start). A bad
  // host, a port in use or a bad option → a Status whose message says which address and why.
  static Result<std::unique_ptr<HttpServer>> Create(HttpServerOptions options, Handler handler);

  ~HttpServer();  // calls Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Start begins accepting and runs `threads` io threads. Idempotent; does nothing after Stop().
  void Start();

  // port is the bound port (useful with options.port = 0).
  uint16_t port() const;

  // Stop stops accepting, closes every connection (requests still waiting for their Responder are abandoned;
  // their clients see the connection close) and joins the io threads. Idempotent; returns as soon as any
  // Handler call in progress returns (Handlers do not block, see above).
  void Stop();

  Stats stats() const;

  struct Impl;  // defined in http_server_impl.h

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupack::api
