// HttpServer on Boost.Beast/Asio, callback style (Beast's advanced_server shape): a listener, a Session per
// connection on its own strand, a Gate that lets Responders on foreign threads reach a Session safely.
//
// Lifetimes, the part that is easy to get wrong:
// - Impl owns the io_context, the acceptor, the io threads and the registry of open Sessions (strong refs).
//   A Session stays alive while it is registered (e.g. while its Handler is working) and while a completion
//   handler that holds it is queued. Sessions never touch Impl from their destructor.
// - A Responder holds a PendingResponse: a shared Gate plus a weak_ptr to its Session, never a strong one, so a
//   Responder that outlives the server cannot keep a socket alive past its io_context. It posts to the
//   Session's strand only while holding the Gate's mutex and only if the Gate is open; Stop() closes the Gate
//   first, so after that no thread can post into the io_context or take a strong ref to a Session.
// - Stop(): close Gate → io_context.stop() → join threads → close the acceptor and every Session on the calling
//   thread (no io thread runs any more) → ~io_context later destroys queued handlers and the last Sessions.

#include <utility>  // before any Asio header: Boost 1.74 + GCC 12 (DESIGN.md §3)

#include "api/http_server.h"
#include "api/errors.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket.hpp>
#include <spdlog/spdlog.h>

namespace gpupack::api {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

const std::string* HttpRequest::Header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return &value;
  }
  return nullptr;
}

namespace {

// Linger after a response that closes the connection: read and discard what the peer still sends (e.g. the
// rest of a 413'd body) so the close does not turn into a RST that destroys the response in flight.
constexpr std::chrono::milliseconds kMaxLinger{1000};
constexpr size_t kMaxLingerBytes = 4 << 20;
constexpr size_t kReadChunk = 16 << 10;
constexpr std::chrono::milliseconds kAcceptRetry{100};

// JsonEscape escapes `s` for a JSON string literal (enough for the server's own short error messages).
std::string JsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  return out;
}

// NewRequestId is a random UUID (v4) for the answers the server gives by itself (413, 431, 400, 503): every
// response carries x-amzn-RequestId (DESIGN.md §4), and the SDKs report it as $metadata.requestId.
std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const uint64_t a = rng(), b = rng();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

// ErrorResponse is an ECS-shaped error: {"__type": "<type>", "message": "<message>"}.
HttpResponse ErrorResponse(int status, std::string_view type, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/x-amz-json-1.1");
  r.headers.emplace_back("x-amzn-RequestId", NewRequestId());
  r.headers.emplace_back("x-amzn-ErrorType", std::string(type));  // as the ECS handler's errors carry it
  r.body = "{\"__type\":\"" + JsonEscape(type) + "\",\"message\":\"" + JsonEscape(message) + "\"}";
  return r;
}

// HttpDate formats `t` as an IMF-fixdate (RFC 9110 §5.6.7), e.g. "Sun, 06 Nov 1994 08:49:37 GMT",
// independent of the C locale.
std::string HttpDate(std::time_t t) {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday % 7], tm.tm_mday,
                kMonths[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

// SV views Beast's boost::string_view (Boost 1.74) as a std::string_view.
std::string_view SV(beast::string_view s) { return {s.data(), s.size()}; }

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// ValidHeaderName: an RFC 9110 token.
bool ValidHeaderName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) return false;
  }
  return true;
}

// ValidHeaderValue: no CR, LF or NUL (header injection), no other control characters except HTAB.
bool ValidHeaderValue(std::string_view value) {
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return false;
  }
  return true;
}

std::string EndpointString(const tcp::endpoint& ep) {
  const auto addr = ep.address();
  return addr.is_v6() ? "[" + addr.to_string() + "]:" + std::to_string(ep.port())
                      : addr.to_string() + ":" + std::to_string(ep.port());
}

std::string HostPortString(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + std::to_string(port)
                                             : host + ":" + std::to_string(port);
}

// Gate guards every post from a Responder into the io_context; Stop() closes it first.
struct Gate {
  std::mutex mu;
  bool open = true;  // guarded by mu
};

class Session;
class WsSession;

}  // namespace

// Impl: everything behind HttpServer. Members are declared so that destruction runs threads (already joined) →
// registry (already empty) → acceptor → io_context, i.e. nothing outlives the io_context it was made from.
struct HttpServer::Impl {
  Impl(HttpServerOptions o, Handler h) : options(std::move(o)), handler(std::move(h)) {}

  void DoAccept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  void RejectBusy(tcp::socket socket);
  void Unregister(uint64_t id);
  void RunIoThread();

  const HttpServerOptions options;
  const Handler handler;
  const std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  uint16_t port = 0;

  std::atomic<uint64_t> connections_open{0};
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> bad_requests{0};
  std::atomic<uint64_t> websockets_open{0};

  net::io_context ioc{options.threads};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_retry{ioc};  // used only by the accept chain

  std::mutex mu;  // guards the four members below
  std::unordered_map<uint64_t, std::shared_ptr<Session>> sessions;
  std::unordered_map<uint64_t, std::shared_ptr<WsSession>> ws_sessions;
  uint64_t next_session_id = 1;
  bool started = false;
  bool stopped = false;

  std::mutex lifecycle_mu;  // serializes Start() and Stop()
  std::vector<std::thread> threads;
};

namespace {

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


// WsSession serves one upgraded connection (the agent channel). Like Session, everything runs on its strand;
// Send/Close come from any thread and post through the Gate.
class WsSession : public WebSocketConnection, public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(HttpServer::Impl& server, uint64_t id, beast::tcp_stream stream, const WebSocketHandler& handler,
            std::string remote)
      : server_(server), id_(id), ws_(std::move(stream)), handler_(handler), remote_(std::move(remote)) {}

  void Run(http::request<http::string_body> req, HttpRequest request) {
    request_ = std::move(request);
    ws_.set_option(websocket::stream_base::timeout{std::chrono::seconds(10), handler_.idle_timeout, true});
    ws_.read_message_max(handler_.max_message_bytes);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "gpupack"); }));
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) { self->OnAccept(ec); });
  }

  void Send(std::string text) override {
    std::lock_guard lock(server_.gate->mu);
    if (!server_.gate->open) return;
    net::post(ws_.get_executor(), [self = shared_from_this(), t = std::move(text)]() mutable {
      self->Guarded("send", [&] {
        if (self->finished_) return;
        self->queue_.push_back(std::move(t));
        if (!self->writing_) self->WriteNext();
      });
    });
  }

  void Close() override {
    std::lock_guard lock(server_.gate->mu);
    if (!server_.gate->open) return;
    net::post(ws_.get_executor(), [self = shared_from_this()] {
      self->Guarded("close", [&] {
        if (self->finished_ || self->closing_) return;
        self->closing_ = true;
        if (self->writing_) return;  // closes after the queue drains
        self->ws_.async_close(websocket::close_code::normal,
                              [self](beast::error_code) { self->Finish(); });
      });
    });
  }

  const std::string& remote_address() const override { return remote_; }

  // Finish ends the connection once: closes the socket, tells the handler, leaves the registry.
  void Finish() {
    if (finished_) return;
    finished_ = true;
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().close(ec);
    if (opened_ && handler_.on_close) {
      try {
        handler_.on_close(shared_from_this());
      } catch (const std::exception& e) {
        spdlog::error("websocket {} ({}): on_close threw: {}", id_, remote_, e.what());
      }
    }
    std::lock_guard lock(server_.mu);
    if (server_.ws_sessions.erase(id_) > 0) --server_.websockets_open;
  }

 private:
  template <typename F>
  void Guarded(const char* where, F&& f) noexcept {
    try {
      f();
    } catch (const std::exception& e) {
      spdlog::error("websocket {} ({}): {}: {}; closing it", id_, remote_, where, e.what());
      Finish();
    } catch (...) {
      spdlog::error("websocket {} ({}): {}: unknown exception; closing it", id_, remote_, where);
      Finish();
    }
  }

  void OnAccept(beast::error_code ec) {
    Guarded("accept", [&] {
      if (ec) {
        spdlog::info("websocket {} ({}): handshake failed: {}", id_, remote_, ec.message());
        return Finish();
      }
      opened_ = true;
      if (handler_.on_open) handler_.on_open(shared_from_this(), request_);
      Read();
    });
  }

  void Read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    Guarded("read", [&] {
      if (ec) {
        if (ec != websocket::error::closed && ec != net::error::operation_aborted)
          spdlog::info("websocket {} ({}): read ended: {}", id_, remote_, ec.message());
        return Finish();
      }
      std::string message = beast::buffers_to_string(buffer_.data());
      buffer_.consume(buffer_.size());
      if (handler_.on_message) handler_.on_message(shared_from_this(), std::move(message));
      if (!finished_) Read();
    });
  }

  void WriteNext() {
    if (queue_.empty()) {
      writing_ = false;
      if (closing_) ws_.async_close(websocket::close_code::normal, [self = shared_from_this()](beast::error_code) { self->Finish(); });
      return;
    }
    writing_ = true;
    ws_.text(true);
    ws_.async_write(net::buffer(queue_.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->Guarded("write", [&] {
        if (ec) return self->Finish();
        self->queue_.pop_front();
        self->WriteNext();
      });
    });
  }

  HttpServer::Impl& server_;
  const uint64_t id_;
  websocket::stream<beast::tcp_stream> ws_;
  const WebSocketHandler& handler_;
  const std::string remote_;
  HttpRequest request_;
  beast::flat_buffer buffer_;
  std::deque<std::string> queue_;
  bool writing_ = false;
  bool closing_ = false;
  bool opened_ = false;
  bool finished_ = false;
};

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
  if (handler.accept) {
    Status s = handler.accept(request);
    if (!s.ok()) {
      // Authentication and authorization refusals are 403 with their ECS error name (the upgrade is ours, not an
      // ECS operation: 403 tells a WebSocket client "not allowed" before any upgrade); others keep 400/500.
      int status = s.code() == ErrorCode::kServer ? 500 : 400;
      std::string type = "ClientException";
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
      Write(ErrorResponse(status, type, s.message()), /*close=*/true);
      return true;
    }
  }
  std::shared_ptr<WsSession> ws;
  {
    std::lock_guard lock(server_.mu);
    if (server_.stopped) return true;
    const uint64_t id = server_.next_session_id++;
    ws = std::make_shared<WsSession>(server_, id, std::move(stream_), handler, remote_);
    server_.ws_sessions.emplace(id, ws);
    ++server_.websockets_open;
  }
  upgraded_ = true;
  finished_ = true;
  server_.Unregister(id_);
  ws->Run(std::move(req), std::move(request));
  return true;
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

}  // namespace

void HttpServer::Impl::DoAccept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    try {
      OnAccept(ec, std::move(socket));
    } catch (const std::exception& e) {  // e.g. bad_alloc; keep accepting
      spdlog::error("http: accept failed: {}", e.what());
      DoAccept();
    }
  });
}

void HttpServer::Impl::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;  // Stop
  if (ec) {
    // E.g. EMFILE: the pending connection stays queued; back off instead of spinning.
    spdlog::warn("http: accept failed: {}; retrying in {} ms", ec.message(), kAcceptRetry.count());
    accept_retry.expires_after(kAcceptRetry);
    accept_retry.async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec) DoAccept();
    });
    return;
  }
  if (connections_open.load() >= options.max_connections) {
    const uint64_t rejected = ++rejected_connections;
    if (rejected == 1 || rejected % 1000 == 0) {  // a flood must not flood the log too
      spdlog::warn("http: {} connections open (max_connections); rejecting new ones ({} so far)",
                   connections_open.load(), rejected);
    }
    RejectBusy(std::move(socket));
    DoAccept();
    return;
  }
  std::shared_ptr<Session> session;
  {
    std::lock_guard lock(mu);
    if (stopped) return;
    const uint64_t id = next_session_id++;
    session = std::make_shared<Session>(*this, id, std::move(socket));
    sessions.emplace(id, session);
    ++connections_open;
  }
  ++connections_total;
  net::dispatch(session->executor(), [session] { session->Start(); });
  DoAccept();
}

// RejectBusy answers 503 and closes, without blocking: the response fits in an empty socket send buffer.
void HttpServer::Impl::RejectBusy(tcp::socket socket) {
  const HttpResponse r = ErrorResponse(
      503, "ServerException",
      "too many open connections (limit " + std::to_string(options.max_connections) + "); retry later");
  const std::string wire = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/x-amz-json-1.1\r\n"
                           "Date: " + HttpDate(std::time(nullptr)) +
                           "\r\nServer: gpupack\r\nx-amzn-ErrorType: ServerException\r\nx-amzn-RequestId: " + NewRequestId() +
                           "\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: " +
                           std::to_string(r.body.size()) + "\r\n\r\n" + r.body;
  beast::error_code ec;
  socket.non_blocking(true, ec);
  if (!ec) socket.write_some(net::buffer(wire), ec);
  socket.shutdown(tcp::socket::shutdown_send, ec);
  socket.close(ec);
}

void HttpServer::Impl::Unregister(uint64_t id) {
  std::lock_guard lock(mu);
  if (sessions.erase(id) > 0) --connections_open;
}

void HttpServer::Impl::RunIoThread() {
  for (;;) {
    try {
      ioc.run();
      return;  // stopped
    } catch (const std::exception& e) {
      spdlog::error("http: exception escaped to an io thread: {}", e.what());
    } catch (...) {
      spdlog::error("http: unknown exception escaped to an io thread");
    }
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::Create(HttpServerOptions options, Handler handler) {
  const std::string where = HostPortString(options.host, options.port);
  if (!handler) return Status::InvalidParameter("HttpServer on " + where + ": no handler given");
  if (options.threads < 1) return Status::InvalidParameter("HttpServer: threads must be >= 1");
  if (options.max_connections < 1) return Status::InvalidParameter("HttpServer: max_connections must be >= 1");
  if (options.read_timeout.count() <= 0 || options.idle_timeout.count() <= 0 || options.write_timeout.count() <= 0) {
    return Status::InvalidParameter("HttpServer: read, idle and write timeouts must be > 0");
  }

  beast::error_code ec;
  net::ip::address address;
  if (options.host == "localhost") {
    address = net::ip::address_v4::loopback();
  } else {
    address = net::ip::make_address(options.host, ec);
    if (ec) {
      return Status::InvalidParameter("cannot listen on " + where + ": '" + options.host +
                                      "' is not an IP address (use e.g. 127.0.0.1, 0.0.0.0, ::1 or localhost)");
    }
  }

  auto impl = std::make_unique<Impl>(std::move(options), std::move(handler));
  const tcp::endpoint endpoint(address, impl->options.port);
  auto fail = [&](const char* step) -> Status {
    std::string message = "cannot listen on " + where + ": " + step + ": " + ec.message();
    if (ec == net::error::address_in_use) message += " (another process holds this port; choose another one)";
    if (ec == net::error::access_denied) message += " (ports below 1024 need privileges)";
    if (ec == boost::system::errc::address_not_available) message += " (no local interface has this address)";
    return Status::Server(std::move(message));
  };
  impl->acceptor.open(endpoint.protocol(), ec);
  if (ec) return fail("open");
  impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);  // restart over TIME_WAIT, not a 2nd bind
  if (ec) return fail("setsockopt");
  impl->acceptor.bind(endpoint, ec);
  if (ec) return fail("bind");
  impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen");
  impl->port = impl->acceptor.local_endpoint(ec).port();
  if (ec) return fail("getsockname");
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Start() {
  std::lock_guard lifecycle(impl_->lifecycle_mu);
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->started || impl_->stopped) return;
    impl_->started = true;
  }
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->DoAccept();
  for (int i = 0; i < impl_->options.threads; ++i) {
    impl_->threads.emplace_back([impl = impl_.get()] { impl->RunIoThread(); });
  }
  spdlog::debug("http: serving on {} with {} io threads", HostPortString(impl_->options.host, impl_->port),
                impl_->options.threads);
}

uint16_t HttpServer::port() const { return impl_->port; }

void HttpServer::Stop() {
  std::lock_guard lifecycle(impl_->lifecycle_mu);
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  {
    std::lock_guard gate(impl_->gate->mu);  // from here on no Responder posts into the io_context
    impl_->gate->open = false;
  }
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) {
    if (t.get_id() == std::this_thread::get_id()) {
      spdlog::critical("http: HttpServer::Stop called from its own io thread; this is a bug in the caller");
      std::terminate();
    }
    t.join();
  }
  impl_->threads.clear();
  // No io thread runs any more: the acceptor and the Sessions are safe to touch from this thread.
  beast::error_code ec;
  impl_->acceptor.close(ec);
  impl_->accept_retry.cancel();
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [id, session] : impl_->sessions) open.push_back(session);
  }
  for (auto& session : open) session->Finish();
  std::vector<std::shared_ptr<WsSession>> open_ws;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [id, ws] : impl_->ws_sessions) open_ws.push_back(ws);
  }
  for (auto& ws : open_ws) ws->Finish();
  spdlog::debug("http: stopped; closed {} open connections and {} websockets", open.size(), open_ws.size());
}

HttpServer::Stats HttpServer::stats() const {
  Stats s;
  s.connections_open = impl_->connections_open.load();
  s.connections_total = impl_->connections_total.load();
  s.requests = impl_->requests.load();
  s.rejected_connections = impl_->rejected_connections.load();
  s.bad_requests = impl_->bad_requests.load();
  s.websockets_open = impl_->websockets_open.load();
  return s;
}

}  // namespace gpupack::api
