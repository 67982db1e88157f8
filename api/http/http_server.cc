// HttpServer: the listener and its limits (accept, max_connections answered 503, accept back-off), the io
// threads, and Create/Start/Stop/stats. Each connection is a Session (http_session.cc); an upgraded one a
// WsSession (http_websocket.cc). The lifetimes the server keeps to are written down in http_server_impl.h.

#include "api/http/http_server_impl.h"

#include <ctime>
#include <exception>
#include <string>

#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

#include "api/http/http_wire.h"

namespace gpupack::api {

namespace net = boost::asio;
using http_internal::tcp;
using http_internal::ErrorResponse;
using http_internal::HostPortString;
using http_internal::HttpDate;
using http_internal::NewRequestId;

namespace {

constexpr std::chrono::milliseconds kAcceptRetry{100};

// ClientAddress: the peer's address as max_connections_per_address counts it (IPv4-mapped IPv6 read as IPv4);
// empty when the peer is already gone.
std::string ClientAddress(const tcp::socket& socket) {
  boost::system::error_code ec;
  auto address = socket.remote_endpoint(ec).address();
  if (ec) return "";
  if (address.is_v6() && address.to_v6().is_v4_mapped())
    address = net::ip::make_address_v4(net::ip::v4_mapped, address.to_v6());
  return address.to_string();
}

}  // namespace

void HttpServer::Impl::DoAccept() {
  acceptor.async_accept(net::make_strand(ioc), [this](boost::system::error_code ec, tcp::socket socket) {
    try {
      OnAccept(ec, std::move(socket));
    } catch (const std::exception& e) {  // e.g. bad_alloc; keep accepting
      spdlog::error("http: accept failed: {}", e.what());
      DoAccept();
    }
  });
}

void HttpServer::Impl::OnAccept(boost::system::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;  // Stop
  if (ec) {
    // E.g. EMFILE: the pending connection stays queued; back off instead of spinning.
    spdlog::warn("http: accept failed: {}; retrying in {} ms", ec.message(), kAcceptRetry.count());
    accept_retry.expires_after(kAcceptRetry);
    accept_retry.async_wait([this](boost::system::error_code wait_ec) {
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
    RejectBusy(std::move(socket),
               "too many open connections (limit " + std::to_string(options.max_connections) + "); retry later");
    DoAccept();
    return;
  }
  const std::string address = ClientAddress(socket);
  std::shared_ptr<http_internal::Session> session;
  bool address_full = false;
  {
    std::lock_guard lock(mu);
    if (stopped) return;
    size_t& held = per_address[address];
    address_full = held >= options.max_connections_per_address;
    if (!address_full) {
      ++held;
      const uint64_t id = next_session_id++;
      session = http_internal::MakeSession(*this, id, std::move(socket));
      sessions.emplace(id, session);
      address_of.emplace(id, address);
      ++connections_open;
    }
  }
  if (address_full) {
    const uint64_t rejected = ++rejected_address_connections;
    if (rejected == 1 || rejected % 1000 == 0) {
      spdlog::warn("http: {} holds {} connections (max_connections_per_address); rejecting more ({} so far)",
                   address, options.max_connections_per_address, rejected);
    }
    RejectBusy(std::move(socket), "too many open connections from " + address + " (limit " +
                                      std::to_string(options.max_connections_per_address) + "); retry later");
    DoAccept();
    return;
  }
  ++connections_total;
  http_internal::StartSession(session);
  DoAccept();
}

// RejectBusy answers 503 and closes, without blocking: the response fits in an empty socket send buffer.
void HttpServer::Impl::RejectBusy(tcp::socket socket, const std::string& message) {
  const HttpResponse r = ErrorResponse(503, "ServerException", message);
  const std::string wire = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/x-amz-json-1.1\r\n"
                           "Date: " + HttpDate(std::time(nullptr)) +
                           "\r\nServer: gpupack\r\nx-amzn-ErrorType: ServerException\r\nx-amzn-RequestId: " + NewRequestId() +
                           "\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: " +
                           std::to_string(r.body.size()) + "\r\n\r\n" + r.body;
  boost::system::error_code ec;
  socket.non_blocking(true, ec);
  if (!ec) socket.write_some(net::buffer(wire), ec);
  socket.shutdown(tcp::socket::shutdown_send, ec);
  socket.close(ec);
}

void HttpServer::Impl::Unregister(uint64_t id) {
  std::lock_guard lock(mu);
  if (sessions.erase(id) > 0) --connections_open;
  auto it = address_of.find(id);
  if (it == address_of.end()) return;
  auto held = per_address.find(it->second);
  if (held != per_address.end() && --held->second == 0) per_address.erase(held);
  address_of.erase(it);
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
  if (options.max_connections_per_address < 1)
    return Status::InvalidParameter("HttpServer: max_connections_per_address must be >= 1");
  if (options.read_timeout.count() <= 0 || options.idle_timeout.count() <= 0 || options.write_timeout.count() <= 0) {
    return Status::InvalidParameter("HttpServer: read, idle and write timeouts must be > 0");
  }

  boost::system::error_code ec;
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
  boost::system::error_code ec;
  impl_->acceptor.close(ec);
  impl_->accept_retry.cancel();
  std::vector<std::shared_ptr<http_internal::Session>> open;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [id, session] : impl_->sessions) open.push_back(session);
  }
  for (auto& session : open) http_internal::FinishSession(*session);
  std::vector<std::shared_ptr<http_internal::WsSession>> open_ws;
  {
    std::lock_guard lock(impl_->mu);
    for (auto& [id, ws] : impl_->ws_sessions) open_ws.push_back(ws);
  }
  for (auto& ws : open_ws) http_internal::FinishWebSocket(*ws);
  spdlog::debug("http: stopped; closed {} open connections and {} websockets", open.size(), open_ws.size());
}

HttpServer::Stats HttpServer::stats() const {
  Stats s;
  s.connections_open = impl_->connections_open.load();
  s.connections_total = impl_->connections_total.load();
  s.requests = impl_->requests.load();
  s.rejected_connections = impl_->rejected_connections.load();
  s.rejected_address_connections = impl_->rejected_address_connections.load();
  s.bad_requests = impl_->bad_requests.load();
  s.websockets_open = impl_->websockets_open.load();
  s.rejected_websockets = impl_->rejected_websockets.load();
  s.websocket_queued_bytes = impl_->websocket_queued_bytes.load();
  s.websocket_overflow_closes = impl_->websocket_overflow_closes.load();
  return s;
}

}  // namespace gpupack::api
