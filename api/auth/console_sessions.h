// ConsoleSessions: the web console's logins (docs/console.md, docs/security.md "Console sessions"). A person
// logs in once with an access key id and secret from the credentials file; the server answers a random 256-bit
// token in an HttpOnly cookie, and the console's data calls carry that cookie instead of a SigV4 signature.
// Sessions live in memory only (a restart logs everyone out), expire after `idle` without a call, and end at
// logout. The table keeps the SHA-256 of each token, never the token: a lookup compares hashes, so its timing
// says nothing about a valid token, and a memory dump holds no usable cookie.
//
// Owned by RequestAuthenticator (api/auth/request_auth.h). Thread-safe: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "protocol/sigv4.h"
#include "base/status.h"

namespace gpupack::api {

// kSessionCookie names the console's cookie; kConsoleHeader is the header every console data call must carry
// (a cross-site form or image cannot set it, so a forged request from another site is refused even if a
// browser sent the cookie).
inline constexpr std::string_view kSessionCookie = "gpupack_session";
inline constexpr std::string_view kConsoleHeader = "x-gpupack-console";

// ConsoleSession: who a session belongs to. `role` is what the console lets it do: kAdmin for an admin key,
// kReader for every other key (agent keys read in the console, they never write).
struct ConsoleSession {
  std::string access_key_id;
  std::string profile;
  KeyRole role = KeyRole::kReader;
};

// ConsoleRole: the console role of a key with role `key_role` (see ConsoleSession).
KeyRole ConsoleRole(KeyRole key_role);

// SessionTokenOf: the value of the gpupack_session cookie in a Cookie header value, or nullopt.
std::optional<std::string> SessionTokenOf(std::string_view cookie_header);

class ConsoleSessions {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  struct Options {
    std::chrono::seconds idle{30 * 60};  // a session unused this long is gone
    size_t max_sessions = 10000;         // beyond it, the least recently used session is dropped
  };

  explicit ConsoleSessions(Options options, Clock clock = &std::chrono::steady_clock::now);

  // Create starts a session for `who` and returns its token: 64 lower-case hex digits (256 random bits from
  // the operating system's generator through OpenSSL), or kServer when the generator fails.
  Result<std::string> Create(ConsoleSession who);
  // Find: the session of `token` when it exists and has not idled out; a hit restarts its idle time.
  std::optional<ConsoleSession> Find(std::string_view token);
  // Erase ends the session of `token` (logout); unknown tokens are ignored.
  void Erase(std::string_view token);
  size_t size() const;

 private:
  struct Entry {
    ConsoleSession who;
    std::chrono::steady_clock::time_point last_used;
  };
  void DropExpiredLocked(std::chrono::steady_clock::time_point now);

  const Options options_;
  const Clock clock_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> by_hash_;  // hex SHA-256 of the token -> session; guarded by mu_
  std::chrono::steady_clock::time_point last_sweep_{};  // guarded by mu_
};

}  // namespace gpupack::api
