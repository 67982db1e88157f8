// InProcessServer: `gpupack server` in-process on loopback (a SQLite file under api::Server, the same assembly
// the binary uses), for tests that drive real agents or raw peers against it. Header-only so each test binary
// compiles its own copy.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "api/server.h"
#include "storage/sqlite_store.h"

namespace gpupack::testing_support {

struct InProcessServerOptions {
  uint16_t port = 0;  // 0: any free port
  api::AgentChannelOptions channel{std::chrono::milliseconds(200), 3};  // a short heartbeat window
  const api::RequestAuthenticator* authenticator = nullptr;  // set: every call and upgrade must be signed
};

class InProcessServer {
 public:
  explicit InProcessServer(const std::string& db, InProcessServerOptions options = {}) {
    store_ = std::move(SqliteStore::Open(db)).value();
    api::ServerOptions o;
    o.port = options.port;
    o.channel = std::move(options.channel);
    o.authenticator = options.authenticator;
    auto server = api::Server::Start(std::move(o), *store_);
    EXPECT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server).value();
  }
  ~InProcessServer() { server_.reset(); }
  InProcessServer(const InProcessServer&) = delete;
  InProcessServer& operator=(const InProcessServer&) = delete;

  uint16_t port() const { return server_->port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  api::AgentChannel& channel() { return server_->channel(); }
  const api::AgentChannel& channel() const { return server_->channel(); }
  api::ControlPlane& control_plane() { return server_->control_plane(); }

 private:
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<api::Server> server_;
};

}  // namespace gpupack::testing_support
