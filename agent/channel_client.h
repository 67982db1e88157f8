// The agent's two ways to the server: a small ECS JSON client (RegisterContainerInstance) and the WebSocket
// channel. Boost.Beast stays inside channel_client.cc.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/percent.h"
#include "protocol/messages.h"
#include "protocol/sigv4.h"
#include "base/status.h"

namespace gpupack::agent {

using Json = nlohmann::json;

// ServerEndpoint: "http://HOST:PORT" parsed, and the key to sign with when the server wants signatures
// (`gpupack server --credentials`): then CallEcs and ChannelClient::Connect sign every request with SigV4.
struct ServerEndpoint {
  std::string host;
  uint16_t port = 0;
  std::optional<protocol::SigningIdentity> signing;
  static Result<ServerEndpoint> Parse(const std::string& url);
  std::string Url() const;
  // Authority: HOST:PORT as the Host header carries it (an IPv6 address in brackets), the port always given: the
  // server answers a signed request only when its signed Host names it, port included (docs/security.md).
  std::string Authority() const;
};

// CallEcs POSTs one ECS operation (SigV4-signed when server.signing is set) and returns the response body; an ECS
// error comes back as a Status with the error's __type and message (authentication errors with their own
// codes: kUnrecognizedClient, kInvalidSignature, ...). Bounded by `timeout`.
Result<Json> CallEcs(const ServerEndpoint& server, const std::string& operation, const Json& body,
                     std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

// DeclinedUpgrade: the server's answer to a channel upgrade it declined (any status but 101 Switching
// Protocols): its HTTP status, the first kMaxBody bytes of its body (gpupack answers an ECS error with the
// refusal's code, {"__type", "code", "leader"?, "message"}: protocol::RefusalCode) and its leader header
// (protocol::kLeaderHeader: a standby names the leader there too). Filled by ChannelClient::Connect.
struct DeclinedUpgrade {
  static constexpr size_t kMaxBody = 4096;
  int http_status = 0;  // 0: the upgrade was not declined (it opened, or no answer came)
  std::string body;
  std::string leader;  // the kLeaderHeader header's value, "" when absent
};

// ChannelLoop: io threads that many ChannelClients share, for a process that holds thousands of channels (the
// agent swarm benchmark). The loop must outlive every client on it.
class ChannelLoop {
 public:
  explicit ChannelLoop(int threads);
  ~ChannelLoop();  // stops and joins the threads
  ChannelLoop(const ChannelLoop&) = delete;
  ChannelLoop& operator=(const ChannelLoop&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// ChannelClient: one WebSocket to the server. Messages arrive on the client's own io thread (or, on a
// ChannelLoop, on one of its threads, one at a time) through on_message; on_close is called once when the
// connection ends. Send and Close are thread-safe.
class ChannelClient {
 public:
  struct Callbacks {
    std::function<void(std::string)> on_message;
    std::function<void()> on_close;
  };
  // Connect opens the WebSocket at `target` (e.g. "/agent/v1/channel?containerInstance=...") or fails within
  // `timeout`. The upgrade request is SigV4-signed when server.signing is set; a declined upgrade fails with the
  // server's error type and message for people ("the server refused the agent channel: InvalidSignatureException:
  // ...") and, when `declined` is given, fills it with the answer's status, (bounded) body and leader header,
  // which the caller decides on (agent::ReadDecline). With `loop` the client runs on the loop's threads (then
  // Connect must not be called on one of them).
  static Result<std::unique_ptr<ChannelClient>> Connect(const ServerEndpoint& server, const std::string& target,
                                                        Callbacks callbacks,
                                                        std::chrono::milliseconds timeout = std::chrono::milliseconds(5000),
                                                        DeclinedUpgrade* declined = nullptr, ChannelLoop* loop = nullptr);
  // Closes and joins the io thread (on a loop: waits for its strand); on_close has been called when it returns,
  // and no callback runs after.
  ~ChannelClient();
  ChannelClient(const ChannelClient&) = delete;
  ChannelClient& operator=(const ChannelClient&) = delete;

  void Send(std::string text);
  void Close();
  bool open() const;

  struct Impl;

 private:
  explicit ChannelClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// PercentEncode for query values (ARNs carry ':' and '/'): the one encoder, base/percent.h.
using gpupack::PercentEncode;

}  // namespace gpupack::agent
