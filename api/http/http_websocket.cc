// WsSession: one upgraded connection (the agent channel), from the handshake to on_close. The HTTP Session
// hands its stream over (http_websocket.h); Stop() ends what is left (FinishWebSocket). The lifetimes the
// server keeps to are written down in http_server_impl.h.

#include "api/http/http_websocket.h"

#include <atomic>
#include <chrono>
#include <deque>

#include <boost/asio/post.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <spdlog/spdlog.h>

namespace gpupack::api::http_internal {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

// WsSession serves one upgraded connection (the agent channel). Like Session, everything runs on its strand;
// Send/Close come from any thread and post through the Gate.
class WsSession : public WebSocketConnection, public std::enable_shared_from_this<WsSession> {
 public:
  // kKeptReadBytes: the read buffer a connection keeps between messages (Beast prepares 1,536 bytes per read).
  static constexpr size_t kKeptReadBytes = 4096;

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

  // Send counts the message into the send queue's bytes before it is posted (so what waits in the io_context
  // counts too); a message that would pass max_send_queue_bytes while others wait closes the connection instead.
  // Senders are serialized by the Gate's mutex; the strand only ever lowers queued_bytes_.
  void Send(std::string text) override {
    std::lock_guard lock(server_.gate->mu);
    if (!server_.gate->open || overflowed_.load()) return;
    const size_t size = text.size();
    const size_t queued = queued_bytes_.load();
    if (queued > 0 && queued + size > handler_.max_send_queue_bytes) {
      overflowed_ = true;
      ++server_.websocket_overflow_closes;
      net::post(ws_.get_executor(), [self = shared_from_this(), queued] {
        self->Guarded("overflow", [&] {
          if (self->finished_) return;
          spdlog::warn("websocket {} ({}): the peer does not read: {} bytes wait to be sent (limit {}); closing it",
                       self->id_, self->remote_, queued, self->handler_.max_send_queue_bytes);
          self->Finish();
        });
      });
      return;
    }
    queued_bytes_ += size;
    server_.websocket_queued_bytes += size;
    net::post(ws_.get_executor(), [self = shared_from_this(), t = std::move(text), size]() mutable {
      self->Guarded("send", [&] {
        if (self->finished_) return self->Release(size);
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
    // What is still queued will never be sent: it leaves the count now (the strings go with the session).
    size_t unsent = 0;
    for (const auto& m : queue_) unsent += m.size();
    Release(unsent);
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
  // Release takes `n` sent or dropped bytes off the send queue's counts.
  void Release(size_t n) {
    queued_bytes_ -= n;
    server_.websocket_queued_bytes -= n;
  }

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
      { HttpRequest done = std::move(request_); }  // the handler copied what it keeps: its buffers go now
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
      // A large message (a hello listing many tasks) leaves the buffer large; the next read prepares what it needs.
      if (buffer_.capacity() > kKeptReadBytes) buffer_.shrink_to_fit();
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
        if (self->finished_) return;  // Finish released the queue's bytes
        if (ec) return self->Finish();
        self->Release(self->queue_.front().size());
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
  HttpRequest request_;  // the upgrade request, until on_open has seen it (a channel lives long: about 1 KiB)
  beast::flat_buffer buffer_;
  std::deque<std::string> queue_;
  std::atomic<size_t> queued_bytes_{0};     // Send counted these; written or dropped ones are released
  std::atomic<bool> overflowed_{false};     // passed max_send_queue_bytes: closing, nothing more is queued
  bool writing_ = false;
  bool closing_ = false;
  bool opened_ = false;
  bool finished_ = false;
};

std::shared_ptr<WsSession> RegisterWebSocket(HttpServer::Impl& server, beast::tcp_stream&& stream,
                                             const WebSocketHandler& handler, std::string remote, bool* full) {
  std::lock_guard lock(server.mu);
  *full = false;
  if (server.stopped) return nullptr;
  if (server.ws_sessions.size() >= server.options.max_websockets) {
    *full = true;
    return nullptr;
  }
  const uint64_t id = server.next_session_id++;
  auto ws = std::make_shared<WsSession>(server, id, std::move(stream), handler, std::move(remote));
  server.ws_sessions.emplace(id, ws);
  ++server.websockets_open;
  return ws;
}

void RunWebSocket(const std::shared_ptr<WsSession>& ws, http::request<http::string_body> req, HttpRequest request) {
  ws->Run(std::move(req), std::move(request));
}

bool WebSocketsFull(HttpServer::Impl& server) {
  std::lock_guard lock(server.mu);
  return server.ws_sessions.size() >= server.options.max_websockets;
}

void FinishWebSocket(WsSession& ws) { ws.Finish(); }

}  // namespace gpupack::api::http_internal
