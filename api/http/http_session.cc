// Session: one HTTP/1.1 connection on its own strand, from the accept to the close: timeouts and limits on every
// read, the Handler call, the response framing, the linger before a close, and the hand-over of an upgrade
// request to a WsSession (http_websocket.h). PendingResponse is the Responder behind each request. The
// lifetimes the server keeps to are written down in http_server_impl.h.

#include "api/http/http_server_impl.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <ctime>
#include <limits>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <spdlog/spdlog.h>

#include "api/http/errors.h"
#include "api/http/http_websocket.h"
#include "api/http/http_wire.h"

namespace gpupack::api::http_internal {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

namespace {

// Linger after a response that closes the connection: read and discard what the peer still sends (e.g. the
// rest of a 413'd body) so the close does not turn into a RST that destroys the response in flight.
constexpr std::chrono::milliseconds kMaxLinger{1000};
constexpr size_t kMaxLingerBytes = 4 << 20;
constexpr size_t kReadChunk = 16 << 10;

// SV views Beast's boost::string_view (Boost 1.74) as a std::string_view.
std::string_view SV(beast::string_view s) { return {s.data(), s.size()}; }

std::string EndpointString(const tcp::endpoint& ep) {
  const auto addr = ep.address();
  return addr.is_v6() ? "[" + addr.to_string() + "]:" + std::to_string(ep.port())
                      : addr.to_string() + ":" + std::to_string(ep.port());
}

}  // namespace

// Session serves one connection. Every member function except PostResponse() runs on the Session's strand
// (or, during Stop(), on the stopping thread after every io thread has been joined), so its members need no
// lock. PostResponse() is called by PendingResponse under the Gate's mutex.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl& server, uint64_t id, tcp::socket socket)
      : server_(server), id_(id), stream_(std::move(socket)) {}

  void Start();
  void PostResponse(HttpResponse response);
  void Finish();  // closes the socket and leaves the registry; idempotent
  net::any_io_executor executor() { return stream_.get_executor(); }

 private:
  void StartRequest(bool first);
  void OnFirstBytes(beast::error_code ec, std::size_t n);
  void ReadHeader();
  void OnHeader(beast::error_code ec, std::size_t n);
  void OnContinueWritten(beast::error_code ec, std::size_t n);
  void ReadBody();
  void OnBody(beast::error_code ec, std::size_t n);
  void FailRead(beast::error_code ec);
  void Dispatch();
  void OnResponse(HttpResponse response);
  void Write(HttpResponse response, bool close);
  void OnWrite(beast::error_code ec, std::size_t n);
  void LingerClose();
  void OnLinger(beast::error_code ec, std::size_t n);
  bool TryUpgrade(http::request<http::string_body>& req, HttpRequest& request);
  void RefuseUpgradeBusy(const WebSocketHandler& handler);

  // Guarded runs `f` and turns any exception into a log line and a closed connection: nothing escapes to an
  // io thread from here.
  template <typename F>
  void Guarded(const char* where, F&& f) noexcept {
    try {
      f();
    } catch (const std::exception& e) {
      spdlog::error("http: connection {} ({}): {}: {}; closing it", id_, remote_, where, e.what());
      Finish();
    } catch (...) {
      spdlog::error("http: connection {} ({}): {}: unknown exception; closing it", id_, remote_, where);
      Finish();
    }
  }

  HttpServer::Impl& server_;
  const uint64_t id_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  std::string remote_;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool head_ = false;
  bool awaiting_response_ = false;  // the Handler has the request; its Responder has not answered yet
  bool close_after_write_ = false;
  bool finished_ = false;
  bool upgraded_ = false;  // stream_ was handed to a WsSession
  size_t lingered_bytes_ = 0;
  std::array<char, 4096> drain_{};
};

namespace {

// PendingResponse backs one Responder: exactly once, from any thread, 500 if dropped uncalled.
class PendingResponse {
 public:
  PendingResponse(std::shared_ptr<Gate> gate, std::weak_ptr<Session> session)
      : gate_(std::move(gate)), session_(std::move(session)) {}
  PendingResponse(const PendingResponse&) = delete;
  PendingResponse& operator=(const PendingResponse&) = delete;

  ~PendingResponse() {
    if (called_.exchange(true)) return;
    try {
      spdlog::warn("http: a request's Responder was destroyed without being called; answering 500");
      Deliver(ErrorResponse(500, "ServerException", "the request handler did not produce a response"));
    } catch (...) {  // a destructor must not throw; the connection is then closed by Stop or the peer
    }
  }

  void Respond(HttpResponse response) {
    if (called_.exchange(true)) {
      spdlog::warn("http: a Responder was called more than once; the later response is ignored");
      return;
    }
    Deliver(std::move(response));
  }

 private:
  void Deliver(HttpResponse response) {
    std::lock_guard lock(gate_->mu);
    if (!gate_->open) return;  // the server is stopping or gone
    if (auto session = session_.lock()) session->PostResponse(std::move(response));
  }

  std::shared_ptr<Gate> gate_;
  std::weak_ptr<Session> session_;
  std::atomic<bool> called_{false};
};

}  // namespace

void Session::Start() {
  Guarded("start", [&] {
    beast::error_code ec;
    remote_ = EndpointString(stream_.socket().remote_endpoint(ec));
    if (ec) {  // the peer is already gone
      Finish();
      return;
    }
    stream_.socket().set_option(tcp::no_delay(true), ec);
    spdlog::debug("http: connection {} from {}", id_, remote_);
    StartRequest(/*first=*/true);
  });
}

// StartRequest arms the timeouts for the next request: for the first request on a connection read_timeout runs
// from now; later, idle_timeout runs until its first byte arrives, then read_timeout for the whole request.
void Session::StartRequest(bool first) {
  parser_.emplace();
  parser_->body_limit(static_cast<std::uint64_t>(server_.options.max_body_bytes));
  parser_->header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(server_.options.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  if (first || buffer_.size() > 0) {  // bytes of a pipelined request already wait in the buffer
    stream_.expires_after(server_.options.read_timeout);
    ReadHeader();
    return;
  }
  stream_.expires_after(server_.options.idle_timeout);
  stream_.async_read_some(buffer_.prepare(kReadChunk),
                          beast::bind_front_handler(&Session::OnFirstBytes, shared_from_this()));
}

void Session::OnFirstBytes(beast::error_code ec, std::size_t n) {
  Guarded("idle read", [&] {
    if (ec) {  // idle timeout, peer closed, reset, or Stop
      spdlog::debug("http: connection {} idle read ended: {}", id_, ec.message());
      Finish();
      return;
    }
    buffer_.commit(n);
    stream_.expires_after(server_.options.read_timeout);
    ReadHeader();
  });
}

void Session::ReadHeader() {
  http::async_read_header(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&Session::OnHeader, shared_from_this()));
}

void Session::OnHeader(beast::error_code ec, std::size_t) {
  Guarded("read header", [&] {
    if (ec) return FailRead(ec);
    const auto& req = parser_->get();
    if (req.find(http::field::transfer_encoding) != req.end() && !parser_->chunked()) {
      // RFC 9112 §6.3: a request whose last transfer coding is not chunked has no knowable length; reading it as
      // empty would parse its body as the next request (request smuggling). 400, then close.
      version_ = 11;
      keep_alive_ = false;
      head_ = false;
      ++server_.bad_requests;
      return Write(ErrorResponse(400, "ClientException",
                                 "malformed HTTP request: Transfer-Encoding must end with chunked"),
                   /*close=*/true);
    }
    if (parser_->is_done()) return Dispatch();
    if (req.version() >= 11 && IEquals(SV(req[http::field::expect]), "100-continue")) {
      // The body fits the limit (Beast checked Content-Length against body_limit with the header), so ask for it.
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                       beast::bind_front_handler(&Session::OnContinueWritten, shared_from_this()));
      return;
    }
    ReadBody();
  });
}

void Session::OnContinueWritten(beast::error_code ec, std::size_t) {
  Guarded("write 100-continue", [&] {
    if (ec) return Finish();
    ReadBody();
  });
}

void Session::ReadBody() {
  http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::OnBody, shared_from_this()));
}

void Session::OnBody(beast::error_code ec, std::size_t) {
  Guarded("read body", [&] {
    if (ec) return FailRead(ec);
    Dispatch();
  });
}

// FailRead maps a failed read: limits → 413/431, malformed → 400 (each then closes); timeouts, resets and a
// peer that closed → close quietly.
void Session::FailRead(beast::error_code ec) {
  version_ = 11;
  keep_alive_ = false;
  head_ = false;
  if (ec == http::error::body_limit) {
    ++server_.bad_requests;
    spdlog::info("http: connection {} ({}): body over {} bytes: 413", id_, remote_, server_.options.max_body_bytes);
    return Write(ErrorResponse(413, "ClientException", "request body exceeds " +
                                                           std::to_string(server_.options.max_body_bytes) + " bytes"),
                 /*close=*/true);
  }
  if (ec == http::error::header_limit) {
    ++server_.bad_requests;
    spdlog::info("http: connection {} ({}): header over {} bytes: 431", id_, remote_,
                 server_.options.max_header_bytes);
    return Write(ErrorResponse(431, "ClientException", "request header exceeds " +
                                                           std::to_string(server_.options.max_header_bytes) + " bytes"),
                 /*close=*/true);
  }
  const bool parse_error = &ec.category() == &http::make_error_code(http::error::bad_method).category() &&
                           ec != http::error::end_of_stream && ec != http::error::partial_message;
  if (parse_error) {
    ++server_.bad_requests;
    spdlog::info("http: connection {} ({}): malformed request ({}): 400", id_, remote_, ec.message());
    return Write(ErrorResponse(400, "ClientException", "malformed HTTP request: " + ec.message()), /*close=*/true);
  }
  if (ec == beast::error::timeout) {
    spdlog::info("http: connection {} ({}): request not complete within {} ms; closing", id_, remote_,
                 server_.options.read_timeout.count());
  } else {
    spdlog::debug("http: connection {} ({}) read ended: {}", id_, remote_, ec.message());
  }
  Finish();
}

void Session::Dispatch() {
  stream_.expires_never();  // the Handler may take its time; the connection waits for the Responder
  http::request<http::string_body> req = parser_->release();
  parser_.reset();
  version_ = req.version();
  keep_alive_ = req.keep_alive();
  head_ = req.method() == http::verb::head;

  HttpRequest request;
  request.method = std::string(req.method_string());
  request.target = std::string(req.target());
  request.headers.reserve(static_cast<size_t>(std::distance(req.begin(), req.end())));
  for (const auto& field : req) {
    std::string name(field.name_string());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    request.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  request.remote_address = remote_;
  if (websocket::is_upgrade(req)) {
    if (TryUpgrade(req, request)) return;
  }
  request.body = std::move(req.body());

  ++server_.requests;
  awaiting_response_ = true;
  auto pending = std::make_shared<PendingResponse>(server_.gate, weak_from_this());
  try {
    server_.handler(std::move(request), [pending](HttpResponse r) { pending->Respond(std::move(r)); });
  } catch (const std::exception& e) {
    spdlog::error("http: connection {} ({}): handler threw: {}", id_, remote_, e.what());
    pending->Respond(ErrorResponse(500, "ServerException", "internal error"));
  } catch (...) {
    spdlog::error("http: connection {} ({}): handler threw an unknown exception", id_, remote_);
    pending->Respond(ErrorResponse(500, "ServerException", "internal error"));
  }
}

// TryUpgrade hands an upgrade request for a registered path to a WsSession: the socket moves over and this
// Session leaves the registry without closing it. Returns false when the request is answered here instead
// (unknown path, or the handler refused it); the caller then goes on with the normal HTTP answer or error.
bool Session::TryUpgrade(http::request<http::string_body>& req, HttpRequest& request) {
  std::string path(req.target().substr(0, req.target().find('?')));
  auto it = server_.options.websockets.find(path);
  if (it == server_.options.websockets.end()) {
    Write(ErrorResponse(404, "ClientException", "no WebSocket endpoint at " + path.substr(0, 200)), /*close=*/true);
    return true;
  }
  const WebSocketHandler& handler = it->second;
  if (WebSocketsFull(server_)) {  // before the handler's checks, which cost more
    RefuseUpgradeBusy(handler);
    return true;
  }
  if (handler.accept) {
    UpgradeAnswer answer = handler.accept(request);
    const Status& s = answer.status;
    if (!s.ok()) {
      // Authentication and authorization refusals are 403 with their ECS error name (the upgrade is ours, not an
      // ECS operation: 403 tells a WebSocket client "not allowed" before any upgrade); others keep 400/500, named
      // as ECS names them (ServerException: the server cannot serve it now, e.g. a standby; ClientException).
      int status = s.code() == ErrorCode::kServer ? 500 : 400;
      std::string type = s.code() == ErrorCode::kServer ? "ServerException" : "ClientException";
      switch (s.code()) {
        case ErrorCode::kAccessDenied:
        case ErrorCode::kMissingAuthenticationToken:
        case ErrorCode::kIncompleteSignature:
        case ErrorCode::kInvalidSignature:
        case ErrorCode::kUnrecognizedClient:
          status = 403;
          type = ToEcsError(s.code()).type;
          break;
        default:
          break;
      }
      HttpResponse r = ErrorResponse(status, type, s.message(), answer.fields);
      for (auto& h : answer.headers) r.headers.push_back(std::move(h));
      Write(std::move(r), /*close=*/true);
      return true;
    }
  }
  bool full = false;
  std::shared_ptr<WsSession> ws = RegisterWebSocket(server_, std::move(stream_), handler, remote_, &full);
  if (full) {  // filled up since the check above; stream_ stays here
    RefuseUpgradeBusy(handler);
    return true;
  }
  if (!ws) return true;  // the server is stopping; stream_ stays here and Stop() closes it
  upgraded_ = true;
  finished_ = true;
  server_.Unregister(id_);
  RunWebSocket(ws, std::move(req), std::move(request));
  return true;
}

// RefuseUpgradeBusy answers an upgrade request 503 at max_websockets (with the handler's busy_fields) and closes;
// the connection is not upgraded.
void Session::RefuseUpgradeBusy(const WebSocketHandler& handler) {
  const uint64_t rejected = ++server_.rejected_websockets;
  if (rejected == 1 || rejected % 1000 == 0) {  // a flood must not flood the log too
    spdlog::warn("http: {} upgraded connections open (max_websockets); refusing upgrades ({} so far)",
                 server_.options.max_websockets, rejected);
  }
  HttpResponse r = ErrorResponse(503, "ServerException",
                                 "too many agent channel connections (limit " +
                                     std::to_string(server_.options.max_websockets) + "); retry later",
                                 handler.busy_fields);
  r.headers.emplace_back("Retry-After", "1");
  Write(std::move(r), /*close=*/true);
}

void Session::PostResponse(HttpResponse response) {
  net::post(stream_.get_executor(), [self = shared_from_this(), r = std::move(response)]() mutable {
    self->OnResponse(std::move(r));
  });
}

void Session::OnResponse(HttpResponse response) {
  Guarded("respond", [&] {
    if (finished_ || !awaiting_response_) return;
    awaiting_response_ = false;
    Write(std::move(response), /*close=*/!keep_alive_);
  });
}

void Session::Write(HttpResponse in, bool close) {
  int status = in.status;
  if (status < 200 || status > 599) {
    spdlog::error("http: handler answered status {}, which is not a final status; sending 500", status);
    in = ErrorResponse(500, "ServerException", "internal error");
    status = 500;
  }
  response_.emplace();
  auto& res = *response_;
  res.version(version_ >= 11 ? 11 : 10);
  res.result(static_cast<unsigned>(status));
  bool have_date = false;
  bool have_server = false;
  for (auto& [name, value] : in.headers) {
    if (!ValidHeaderName(name) || !ValidHeaderValue(value)) {
      spdlog::warn("http: dropping response header '{}': invalid name or value", name);
      continue;
    }
    if (IEquals(name, "content-length") || IEquals(name, "transfer-encoding")) continue;
    if (IEquals(name, "connection")) {
      if (IEquals(value, "close")) close = true;
      continue;
    }
    if (IEquals(name, "date")) have_date = true;
    if (IEquals(name, "server")) have_server = true;
    res.insert(name, value);
  }
  if (!have_date) res.set(http::field::date, HttpDate(std::time(nullptr)));
  if (!have_server) res.set(http::field::server, "gpupack");
  if (status == 204 || status == 304) {
    // No body and no Content-Length (RFC 9110 §8.6, §15.4.5).
  } else if (head_) {
    res.content_length(in.body.size());  // what a GET would have carried; no body follows
  } else {
    res.content_length(in.body.size());
    res.body() = std::move(in.body);
  }
  res.keep_alive(!close);
  close_after_write_ = close;
  stream_.expires_after(server_.options.write_timeout);
  http::async_write(stream_, res, beast::bind_front_handler(&Session::OnWrite, shared_from_this()));
}

void Session::OnWrite(beast::error_code ec, std::size_t) {
  Guarded("write", [&] {
    response_.reset();
    if (ec) {
      spdlog::debug("http: connection {} ({}) write failed: {}", id_, remote_, ec.message());
      return Finish();
    }
    if (close_after_write_) return LingerClose();
    StartRequest(/*first=*/false);
  });
}

void Session::LingerClose() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return Finish();
  lingered_bytes_ = 0;
  stream_.expires_after(std::min(kMaxLinger, server_.options.read_timeout));
  stream_.async_read_some(net::buffer(drain_), beast::bind_front_handler(&Session::OnLinger, shared_from_this()));
}

void Session::OnLinger(beast::error_code ec, std::size_t n) {
  Guarded("linger", [&] {
    lingered_bytes_ += n;
    if (ec || lingered_bytes_ > kMaxLingerBytes) return Finish();  // EOF (the usual end), timeout or enough
    stream_.async_read_some(net::buffer(drain_), beast::bind_front_handler(&Session::OnLinger, shared_from_this()));
  });
}

void Session::Finish() {
  if (finished_ || upgraded_) return;
  finished_ = true;
  awaiting_response_ = false;
  stream_.close();  // also cancels the timers and pending operations
  spdlog::debug("http: connection {} ({}) closed", id_, remote_);
  server_.Unregister(id_);
}

std::shared_ptr<Session> MakeSession(HttpServer::Impl& server, uint64_t id, tcp::socket socket) {
  return std::make_shared<Session>(server, id, std::move(socket));
}

void StartSession(const std::shared_ptr<Session>& session) {
  net::dispatch(session->executor(), [session] { session->Start(); });
}

void FinishSession(Session& session) { session.Finish(); }

}  // namespace gpupack::api::http_internal
