// DockerClient: one request per connection over the engine's unix socket, driven to completion on a private
// io_context so that a single deadline (beast::basic_stream's expiry) bounds connect, write and read.
#include <utility>  // before any Asio header: Boost 1.74 + GCC 12 (see README.md)

#include "agent/docker_client.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <nlohmann/json.hpp>

namespace gpupack::agent {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local = net::local::stream_protocol;
using Stream = beast::basic_stream<local, net::io_context::executor_type, beast::unlimited_rate_policy>;

// RunOne drives the io_context until the one pending operation has completed.
void RunOne(net::io_context& ioc) {
  ioc.restart();
  ioc.run();
}

}  // namespace

Result<DockerResponse> DockerClient::Request(std::string_view method, std::string_view target,
                                             std::string_view body,
                                             std::optional<std::chrono::milliseconds> timeout) const {
  const std::chrono::milliseconds deadline = timeout.value_or(options_.timeout);
  const http::verb verb = http::string_to_verb(beast::string_view(method.data(), method.size()));
  if (verb == http::verb::unknown) {
    return Status::InvalidParameter("docker client: unknown method " + std::string(method));
  }
  auto fail = [&](const std::string& what, const beast::error_code& ec) -> Status {
    std::string message = "docker engine at " + options_.socket_path + ": " + what + " " + std::string(method) +
                          " " + std::string(target) + ": ";
    if (ec == beast::error::timeout) {
      message += "no answer within " + std::to_string(deadline.count()) + " ms";
    } else if (ec == http::error::body_limit) {
      message += "response body larger than " + std::to_string(options_.max_body_bytes) + " bytes";
    } else {
      message += ec.message();
    }
    return Status::Server(std::move(message));
  };

  net::io_context ioc;
  Stream stream(ioc);
  stream.expires_after(deadline);  // one deadline for the whole exchange
  beast::error_code ec;

  stream.async_connect(local::endpoint(options_.socket_path), [&](const beast::error_code& e) { ec = e; });
  RunOne(ioc);
  if (ec) return fail("cannot connect for", ec);

  http::request<http::string_body> request{verb, std::string(target), 11};
  request.set(http::field::host, "docker");
  request.set(http::field::user_agent, "gpupack-agent");
  request.set(http::field::connection, "close");
  if (!body.empty()) {
    request.set(http::field::content_type, "application/json");
    request.body() = std::string(body);
  }
  request.prepare_payload();
  http::async_write(stream, request, [&](const beast::error_code& e, size_t) { ec = e; });
  RunOne(ioc);
  if (ec) return fail("cannot send", ec);

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(options_.max_body_bytes);
  parser.header_limit(64 * 1024);
  // The header first: Beast 1.74 does not apply body_limit to a Content-Length body once the parser is eager
  // (as http::read makes it), so that length is checked here; chunked bodies are checked by the parser.
  http::async_read_header(stream, buffer, parser, [&](const beast::error_code& e, size_t) { ec = e; });
  RunOne(ioc);
  if (!ec && parser.content_length() && *parser.content_length() > options_.max_body_bytes) {
    ec = http::error::body_limit;
  }
  if (!ec) {
    http::async_read(stream, buffer, parser, [&](const beast::error_code& e, size_t) { ec = e; });
    RunOne(ioc);
  }
  if (ec) return fail("no valid response to", ec);

  beast::error_code ignored;
  stream.socket().shutdown(local::socket::shutdown_both, ignored);
  DockerResponse response;
  response.status = static_cast<int>(parser.get().result_int());
  response.body = std::move(parser.get().body());
  return response;
}

std::string EngineMessage(const DockerResponse& response) {
  auto json = nlohmann::json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("message") && json["message"].is_string()) {
    return json["message"].get<std::string>();
  }
  std::string text = response.body;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.size() > 500) text = text.substr(0, 500) + "...";
  if (text.empty()) text = "HTTP " + std::to_string(response.status);
  return text;
}

}  // namespace gpupack::agent
