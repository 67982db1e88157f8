// HttpServer::Impl and the hooks between the server's files. Internal to the api library; only the server's
// own .cc files include it. The server is Boost.Beast/Asio, callback style (Beast's advanced_server shape),
// in three files along its seams:
// - http_server.cc: the listener and its limits (accept, max_connections, 503), Create/Start/Stop/stats;
//   (max_websockets is enforced where an upgrade is handed over: http_session.cc and http_websocket.cc);
// - http_session.cc: Session, one HTTP/1.1 connection on its own strand, and the Responder behind it;
// - http_websocket.cc: WsSession, one upgraded connection (the agent channel).
// (http_wire.cc holds the plain-text pieces they share: error bodies, dates, header checks.)
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
#pragma once

// <utility> before any Asio header: Boost 1.74's Asio fails under GCC 12 in C++20 ("'exchange' is not a member
// of 'std'") unless it is included first.
#include <utility>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include "api/http/http_server.h"

namespace gpupack::api {
namespace http_internal {

namespace net = boost::asio;
using tcp = net::ip::tcp;

// Gate guards every post from a Responder or a WebSocketConnection into the io_context; Stop() closes it first.
struct Gate {
  std::mutex mu;
  bool open = true;  // guarded by mu
};

class Session;    // http_session.cc
class WsSession;  // http_websocket.cc

// MakeSession creates the Session for an accepted connection; the caller registers it under `id`.
std::shared_ptr<Session> MakeSession(HttpServer::Impl& server, uint64_t id, tcp::socket socket);
// StartSession starts serving the connection on the Session's strand.
void StartSession(const std::shared_ptr<Session>& session);
// FinishSession closes the connection and leaves the registry; idempotent. On the Session's strand, or during
// Stop() once no io thread runs.
void FinishSession(Session& session);
// FinishWebSocket ends an upgraded connection (on_close runs, it leaves the registry); idempotent. Same rule.
void FinishWebSocket(WsSession& ws);

}  // namespace http_internal

// Impl: everything behind HttpServer. Members are declared so that destruction runs threads (already joined) →
// registry (already empty) → acceptor → io_context, i.e. nothing outlives the io_context it was made from.
struct HttpServer::Impl {
  Impl(HttpServerOptions o, Handler h) : options(std::move(o)), handler(std::move(h)) {}

  void DoAccept();
  void OnAccept(boost::system::error_code ec, http_internal::tcp::socket socket);
  void RejectBusy(http_internal::tcp::socket socket, const std::string& message);
  void Unregister(uint64_t id);
  void RunIoThread();

  const HttpServerOptions options;
  const Handler handler;
  const std::shared_ptr<http_internal::Gate> gate = std::make_shared<http_internal::Gate>();
  uint16_t port = 0;

  std::atomic<uint64_t> connections_open{0};
  std::atomic<uint64_t> connections_total{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> rejected_address_connections{0};
  std::atomic<uint64_t> bad_requests{0};
  std::atomic<uint64_t> websockets_open{0};
  std::atomic<uint64_t> rejected_websockets{0};
  std::atomic<uint64_t> websocket_queued_bytes{0};
  std::atomic<uint64_t> websocket_overflow_closes{0};

  boost::asio::io_context ioc{options.threads};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  http_internal::tcp::acceptor acceptor{ioc};
  boost::asio::steady_timer accept_retry{ioc};  // used only by the accept chain

  std::mutex mu;  // guards the seven members below
  std::unordered_map<uint64_t, std::shared_ptr<http_internal::Session>> sessions;
  std::unordered_map<uint64_t, std::string> address_of;     // session id -> its client address (sessions only)
  std::unordered_map<std::string, size_t> per_address;      // client address -> its sessions open (never 0)
  std::unordered_map<uint64_t, std::shared_ptr<http_internal::WsSession>> ws_sessions;
  uint64_t next_session_id = 1;
  bool started = false;
  bool stopped = false;

  std::mutex lifecycle_mu;  // serializes Start() and Stop()
  std::vector<std::thread> threads;
};

}  // namespace gpupack::api
