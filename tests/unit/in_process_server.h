// InProcessServer: `gpupack server` in-process on loopback (SQLite file, group committer, control plane, agent
// channel, ECS handler, HTTP server), for tests that drive real agents or raw peers against it. Header-only so
// each test binary compiles its own copy.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "api/agent_channel.h"
#include "api/control_plane.h"
#include "api/ecs_handler.h"
#include "api/http_server.h"
#include "storage/group_committer.h"
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
    committer_ = std::make_unique<GroupCommitter>(*store_);
    cp_ = std::make_unique<api::ControlPlane>(api::ControlPlaneOptions{}, *store_, *committer_);
    EXPECT_TRUE(cp_->Load().ok());
    options.channel.authenticator = options.authenticator;
    channel_ = std::make_unique<api::AgentChannel>(*cp_, std::move(options.channel));
    handler_ = std::make_unique<api::EcsHandler>(*cp_);
    if (options.authenticator != nullptr) handler_->SetAuthenticator(options.authenticator);
    api::HttpServerOptions o;
    o.port = options.port;
    o.websockets[api::kAgentChannelPath] = channel_->Handler();
    http_ = std::move(api::HttpServer::Create(o, handler_->AsHandler())).value();
    http_->Start();
  }
  ~InProcessServer() {
    http_->Stop();
    channel_.reset();
    committer_->Flush();
  }
  InProcessServer(const InProcessServer&) = delete;
  InProcessServer& operator=(const InProcessServer&) = delete;

  uint16_t port() const { return http_->port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  api::AgentChannel& channel() { return *channel_; }
  const api::AgentChannel& channel() const { return *channel_; }

 private:
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<GroupCommitter> committer_;
  std::unique_ptr<api::ControlPlane> cp_;
  std::unique_ptr<api::AgentChannel> channel_;
  std::unique_ptr<api::EcsHandler> handler_;
  std::unique_ptr<api::HttpServer> http_;
};

}  // namespace gpupack::testing_support
