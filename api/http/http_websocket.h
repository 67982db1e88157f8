// http_websocket: how an HTTP Session hands an upgrade request over to a WsSession (http_websocket.cc).
// Internal to the api library; the Beast WebSocket stream itself stays inside http_websocket.cc.
#pragma once

#include "api/http/http_server_impl.h"

#include <memory>
#include <string>

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace gpupack::api::http_internal {

// RegisterWebSocket makes the WsSession for an accepted upgrade and registers it (counted in websockets_open),
// moving `stream` into it. Returns nullptr, leaving `stream` alone, once the server is stopping or when
// max_websockets upgraded connections are open (then `*full` is set; the caller answers 503). Called on the
// HTTP Session's strand; the WsSession keeps running on the same strand (the stream's executor).
std::shared_ptr<WsSession> RegisterWebSocket(HttpServer::Impl& server, boost::beast::tcp_stream&& stream,
                                             const WebSocketHandler& handler, std::string remote, bool* full);
// WebSocketsFull is true while max_websockets upgraded connections are open.
bool WebSocketsFull(HttpServer::Impl& server);

// RunWebSocket answers the upgrade `req` (the handshake) and then serves messages; `request` is what
// WebSocketHandler::on_open sees.
void RunWebSocket(const std::shared_ptr<WsSession>& ws,
                  boost::beast::http::request<boost::beast::http::string_body> req, HttpRequest request);

}  // namespace gpupack::api::http_internal
