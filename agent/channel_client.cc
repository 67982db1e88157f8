#include <utility>  // before any Asio header: Boost 1.74 + GCC 12 (see README.md)

#include "agent/channel_client.h"

#include <atomic>
#include <deque>
#include <future>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <spdlog/spdlog.h>

namespace gpupack::agent {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

Result<ServerEndpoint> ServerEndpoint::Parse(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  else if (rest.find("://") != std::string::npos)
    return Status::InvalidParameter("--server must be an http:// URL, e.g. http://127.0.0.1:8080 (got " + url + ")");
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon + 1 >= rest.size())
    return Status::InvalidParameter("--server needs HOST:PORT, e.g. http://127.0.0.1:8080 (got " + url + ")");
  ServerEndpoint e;
  e.host = rest.substr(0, colon);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') e.host = e.host.substr(1, e.host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(rest.substr(colon + 1));
  } catch (...) {
    port = -1;
  }
  if (port <= 0 || port > 65535) return Status::InvalidParameter("--server port must be 1..65535 (got " + url + ")");
  e.port = static_cast<uint16_t>(port);
  return e;
}

std::string ServerEndpoint::Url() const {
  return "http://" + Authority();
}

std::string ServerEndpoint::Authority() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

namespace {

Result<tcp::endpoint> Resolve(const net::any_io_executor& ex, const ServerEndpoint& server) {
  beast::error_code ec;
  tcp::resolver resolver(ex);
  auto results = resolver.resolve(server.host, std::to_string(server.port), ec);
  if (ec || results.empty()) return Status::Server("cannot resolve " + server.host + ": " + ec.message());
  return results.begin()->endpoint();
}

// Sign adds SigV4's Authorization, X-Amz-Date and X-Amz-Content-Sha256 to `req`, signing every header it
// carries except those SignRequest leaves out (Connection, User-Agent, ...).
template <class Fields>
void Sign(const protocol::SigningIdentity& id, http::request<Fields>& req, std::string_view body) {
  protocol::HeaderList headers;
  for (const auto& field : req) headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  const std::string target(req.target());
  const size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : target.substr(q + 1);
  for (const auto& [name, value] :
       protocol::SignRequest(id.credential, id.region, id.service, std::string(req.method_string()), path, query, headers,
                        body, std::chrono::system_clock::now())) {
    req.set(name, value);
  }
}

// CodeOf: the ErrorCode of an ECS error from its __type and, where gpupack adds one, its "code".
ErrorCode CodeOf(const std::string& type, const std::string& code, int http_status) {
  if (type == "InvalidParameterException" && code == protocol::kInstanceDeregisteredCode)
    return ErrorCode::kInstanceDeregistered;
  if (type == "InvalidParameterException") return ErrorCode::kInvalidParameter;
  if (type == "ClusterNotFoundException") return ErrorCode::kClusterNotFound;
  if (type == "AccessDeniedException") return ErrorCode::kAccessDenied;
  if (type == "UnrecognizedClientException") return ErrorCode::kUnrecognizedClient;
  if (type == "InvalidSignatureException") return ErrorCode::kInvalidSignature;
  if (type == "IncompleteSignatureException") return ErrorCode::kIncompleteSignature;
  if (type == "MissingAuthenticationTokenException") return ErrorCode::kMissingAuthenticationToken;
  return http_status >= 500 ? ErrorCode::kServer : ErrorCode::kClient;
}

// AuthHint shortens an authentication refusal to its first line and says what the agent operator can do.
std::string AuthHint(const std::string& type, const ServerEndpoint& server, const std::string& message) {
  const std::string first = message.substr(0, message.find('\n'));
  if (type == "MissingAuthenticationTokenException")
    return first + " (the server requires signed requests: start the agent with --credentials FILE)";
  if (type == "UnrecognizedClientException" || type == "InvalidSignatureException") {
    if (!server.signing) return first;
    return first + " (signed as access key " + server.signing->credential.access_key_id + ", profile [" +
           server.signing->credential.profile + "], region " + server.signing->region +
           ": check the key is in the server's credentials file with the same secret, the server's --region and "
           "this host's clock)";
  }
  return message.substr(0, 500);
}

}  // namespace

namespace {

// RoundTrip sends `req` (signed when server.signing is set) on a new connection and reads the response.
Result<http::response<http::string_body>> RoundTrip(const ServerEndpoint& server, http::request<http::string_body>& req,
                                                    const std::string& what, std::chrono::milliseconds timeout) {
  net::io_context ioc;
  auto ep = Resolve(ioc.get_executor(), server);
  if (!ep.ok()) return ep.status();
  beast::tcp_stream stream(ioc);
  stream.expires_after(timeout);
  beast::error_code ec;
  stream.connect(*ep, ec);
  if (ec) return Status::Server("cannot reach the server at " + server.Url() + ": " + ec.message());
  req.prepare_payload();
  if (server.signing) Sign(*server.signing, req, req.body());
  http::write(stream, req, ec);
  if (ec) return Status::Server(what + ": sending failed: " + ec.message());
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(16 << 20);
  http::read(stream, buffer, parser, ec);
  if (ec) return Status::Server(what + ": no answer from " + server.Url() + ": " + ec.message());
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return parser.release();
}

// EcsErrorOf: the ECS error of a non-200 response: its __type (or "HTTP <status>"), message and gpupack's "code"
// ("" when absent).
struct EcsErrorOf {
  std::string type, message, code;
  explicit EcsErrorOf(const http::response<http::string_body>& res) {
    Json j = Json::parse(res.body(), nullptr, false);
    auto text = [&j](const char* key) {
      return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
    };
    type = text("__type");
    if (type.empty()) type = "HTTP " + std::to_string(res.result_int());
    message = j.is_object() && j.contains("message") && j["message"].is_string() ? text("message")
                                                                                  : res.body().substr(0, 200);
    code = text("code");
  }
};

// RefusalOf reads a declined upgrade's answer (`res`, whose body Beast read whole) into `declined` (its status,
// first DeclinedUpgrade::kMaxBody bytes and leader header) and a Status with the server's error type and
// message: the code of that type (authentication errors with their own codes and the operator's hint), the
// message bounded.
Status RefusalOf(const ServerEndpoint& server, const http::response<http::string_body>& res,
                 DeclinedUpgrade& declined) {
  declined.http_status = res.result_int();
  declined.body = res.body().substr(0, DeclinedUpgrade::kMaxBody);
  declined.leader = std::string(res[protocol::kLeaderHeader]).substr(0, 512);
  http::response<http::string_body> bounded{res.result(), res.version()};
  bounded.body() = declined.body;
  const EcsErrorOf e(bounded);
  // The channel's own code ("code": protocol::RefusalCode) is for ReadDecline: this Status keeps the ECS type's.
  const ErrorCode code = CodeOf(e.type, "", declined.http_status);
  return Status(code, "the server refused the agent channel: " + e.type + ": " + AuthHint(e.type, server, e.message));
}

}  // namespace

Result<Json> CallEcs(const ServerEndpoint& server, const std::string& operation, const Json& body,
                     std::chrono::milliseconds timeout) {
  http::request<http::string_body> req{http::verb::post, "/", 11};
  req.set(http::field::host, server.Authority());
  req.set(http::field::content_type, "application/x-amz-json-1.1");
  req.set("X-Amz-Target", "AmazonEC2ContainerServiceV20141113." + operation);
  req.body() = body.dump();
  auto res = RoundTrip(server, req, operation, timeout);
  if (!res.ok()) return res.status();
  if (res->result_int() != 200) {
    const EcsErrorOf e(*res);
    return Status(CodeOf(e.type, e.code, res->result_int()),
                  operation + ": " + e.type + ": " + AuthHint(e.type, server, e.message));
  }
  Json j = Json::parse(res->body(), nullptr, false);
  if (j.is_discarded()) return Status::Server(operation + ": the server's answer is not JSON");
  return j;
}

// ---- the channel ---------------------------------------------------------------------------------------

struct ChannelLoop::Impl {
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work{ioc.get_executor()};
  std::vector<std::thread> threads;
};

ChannelLoop::ChannelLoop(int threads) : impl_(std::make_unique<Impl>()) {
  for (int i = 0; i < std::max(threads, 1); ++i)
    impl_->threads.emplace_back([impl = impl_.get()] {
      for (;;) {
        try {
          impl->ioc.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("agent channel: loop thread: {}", e.what());
        }
      }
    });
}

ChannelLoop::~ChannelLoop() {
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
}

namespace {

using Strand = net::strand<net::any_io_executor>;

// Conn: one WebSocket and what its handlers touch. Every handler runs on the connection's strand and keeps
// the Conn alive, so a client may go while a handler is still queued.
struct Conn : std::enable_shared_from_this<Conn> {
  explicit Conn(const net::any_io_executor& ex) : strand(net::make_strand(ex)), ws(strand) {}
  Strand strand;
  websocket::stream<beast::tcp_stream> ws;
  beast::flat_buffer buffer;
  ChannelClient::Callbacks callbacks;  // strand only, once open
  std::deque<std::string> queue;       // strand only
  bool writing = false;                // strand only
  std::atomic<bool> is_open{false};
  std::atomic<bool> closed_called{false};

  void Read() {
    ws.async_read(buffer, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->Closed();
      std::string text = beast::buffers_to_string(self->buffer.data());
      self->buffer.consume(self->buffer.size());
      try {
        if (self->callbacks.on_message) self->callbacks.on_message(std::move(text));
      } catch (const std::exception& e) {
        spdlog::error("agent channel: message handler threw: {}", e.what());
      }
      self->Read();
    });
  }
  void WriteNext() {
    if (queue.empty() || !is_open) {
      writing = false;
      return;
    }
    writing = true;
    ws.async_write(net::buffer(queue.front()), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->Closed();
      self->queue.pop_front();
      self->WriteNext();
    });
  }
  void Closed() {
    is_open = false;
    beast::error_code ec;
    beast::get_lowest_layer(ws).socket().close(ec);
    if (!closed_called.exchange(true) && callbacks.on_close) callbacks.on_close();
  }
};

}  // namespace

// A client on a ChannelLoop has no io_context nor thread of its own (own == nullptr). Members go in reverse:
// the Conn is released before `own`, whose destruction drops the handlers still queued (and with them the Conn).
struct ChannelClient::Impl {
  std::unique_ptr<net::io_context> own;
  std::thread thread;  // runs `own`
  std::shared_ptr<Conn> conn;
};

ChannelClient::ChannelClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<ChannelClient>> ChannelClient::Connect(const ServerEndpoint& server, const std::string& target,
                                                              Callbacks callbacks, std::chrono::milliseconds timeout,
                                                              DeclinedUpgrade* declined, ChannelLoop* loop) {
  auto impl = std::make_unique<Impl>();
  if (loop == nullptr) impl->own = std::make_unique<net::io_context>();
  const net::any_io_executor ex = loop ? loop->impl().ioc.get_executor() : impl->own->get_executor();
  impl->conn = std::make_shared<Conn>(ex);
  Conn& c = *impl->conn;
  c.callbacks = std::move(callbacks);
  auto ep = Resolve(ex, server);
  if (!ep.ok()) return ep.status();
  auto& tcp_layer = beast::get_lowest_layer(c.ws);
  tcp_layer.expires_after(timeout);
  beast::error_code ec;
  tcp_layer.connect(*ep, ec);
  if (ec) return Status::Server("cannot reach the server at " + server.Url() + ": " + ec.message());
  tcp_layer.socket().set_option(tcp::no_delay(true), ec);
  if (server.signing) {
    c.ws.set_option(websocket::stream_base::decorator(
        [id = *server.signing](websocket::request_type& req) { Sign(id, req, ""); }));
  }
  // The handshake runs asynchronously (only the asynchronous handshake hands back a declined answer: status and
  // body; the stream's expiry bounds it): on the client's own io_context before its io thread starts, or on the
  // loop while this thread waits (so Connect must not be called on a loop thread).
  websocket::response_type res;
  if (impl->own) {
    c.ws.async_handshake(res, server.Authority(), target, [&ec](beast::error_code e) { ec = e; });
    impl->own->run();
    impl->own->restart();
  } else {
    std::promise<beast::error_code> done;
    net::dispatch(c.strand, [&] {
      c.ws.async_handshake(res, server.Authority(), target, [&done](beast::error_code e) { done.set_value(e); });
    });
    ec = done.get_future().get();
  }
  if (ec == websocket::error::upgrade_declined) {
    DeclinedUpgrade answer;
    Status refused = RefusalOf(server, res, answer);
    if (declined) *declined = std::move(answer);
    return refused;
  }
  if (ec) return Status::Server("the server refused the agent channel: " + ec.message());
  tcp_layer.expires_never();
  c.ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
  c.ws.read_message_max(16 << 20);
  c.ws.text(true);
  c.is_open = true;
  net::post(c.strand, [conn = impl->conn] { conn->Read(); });
  if (impl->own) {
    impl->thread = std::thread([ioc = impl->own.get(), conn = impl->conn.get()] {
      try {
        ioc->run();
      } catch (const std::exception& e) {
        spdlog::error("agent channel: io thread: {}", e.what());
        conn->Closed();
      }
    });
  }
  return std::unique_ptr<ChannelClient>(new ChannelClient(std::move(impl)));
}

ChannelClient::~ChannelClient() {
  Close();
  Conn& c = *impl_->conn;
  // Give the close handshake a moment (bounded), then stop regardless.
  for (int i = 0; i < 50 && !c.closed_called.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (impl_->own) {
    impl_->own->stop();
    if (impl_->thread.joinable()) impl_->thread.join();
    if (!c.closed_called.exchange(true) && c.callbacks.on_close) c.callbacks.on_close();
    return;
  }
  // On a loop: on the strand, where every callback runs, close, call on_close once, and forget the callbacks,
  // so none runs once this returns.
  auto forget = [conn = impl_->conn] {
    conn->is_open = false;
    beast::error_code ec;
    beast::get_lowest_layer(conn->ws).socket().close(ec);
    if (!conn->closed_called.exchange(true) && conn->callbacks.on_close) conn->callbacks.on_close();
    conn->callbacks = {};
  };
  if (c.strand.running_in_this_thread()) {
    forget();
    return;
  }
  std::promise<void> done;
  net::post(c.strand, [&] {
    forget();
    done.set_value();
  });
  done.get_future().wait();
}

void ChannelClient::Send(std::string text) {
  net::post(impl_->conn->strand, [conn = impl_->conn, t = std::move(text)]() mutable {
    if (!conn->is_open) return;
    conn->queue.push_back(std::move(t));
    if (!conn->writing) conn->WriteNext();
  });
}

void ChannelClient::Close() {
  net::post(impl_->conn->strand, [conn = impl_->conn] {
    if (!conn->is_open) return;
    conn->is_open = false;
    conn->ws.async_close(websocket::close_code::normal, [conn](beast::error_code) { conn->Closed(); });
  });
}

bool ChannelClient::open() const { return impl_->conn->is_open; }

}  // namespace gpupack::agent
