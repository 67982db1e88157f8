#include "api/auth/console_sessions.h"

#include <algorithm>
#include <array>

#include <openssl/rand.h>

namespace gpupack::api {

namespace {

// kMaxSessionsPerKey: console sessions one access key holds at most (docs/security.md, "Console sessions").
constexpr size_t kMaxSessionsPerKey = 16;

std::string Hex(const unsigned char* data, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[data[i] >> 4];
    out[2 * i + 1] = kHex[data[i] & 15];
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

KeyRole ConsoleRole(KeyRole key_role) { return key_role == KeyRole::kAdmin ? KeyRole::kAdmin : KeyRole::kReader; }

std::optional<std::string> SessionTokenOf(std::string_view cookie_header) {
  // Cookie: a=1; gpupack_session=abc; b=2 (RFC 6265 section 4.2: pairs separated by "; ").
  while (!cookie_header.empty()) {
    const size_t semi = cookie_header.find(';');
    std::string_view pair = Trim(cookie_header.substr(0, semi));
    cookie_header = semi == std::string_view::npos ? std::string_view{} : cookie_header.substr(semi + 1);
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos || Trim(pair.substr(0, eq)) != kSessionCookie) continue;
    std::string_view value = Trim(pair.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    if (value.empty()) return std::nullopt;
    return std::string(value);
  }
  return std::nullopt;
}

ConsoleSessions::ConsoleSessions(Options options, Clock clock) : options_(options), clock_(std::move(clock)) {}

Result<std::string> ConsoleSessions::Create(ConsoleSession who) {
  std::array<unsigned char, 32> bits{};
  if (RAND_bytes(bits.data(), static_cast<int>(bits.size())) != 1)
    return Status(ErrorCode::kServer, "the random generator failed: no console session");
  std::string token = Hex(bits.data(), bits.size());
  const std::string key = protocol::HexSha256(token);
  const auto now = clock_();
  std::lock_guard lock(mu_);
  DropExpiredLocked(now);
  // A key holds at most kMaxSessionsPerKey sessions: past it, its own least recently used one ends, so its logins
  // can never push another key's sessions out (ten thousand logins with one key evicted the administrator's
  // session before). A scan: logins are rare.
  size_t held = 0;
  auto own_oldest = by_hash_.end();
  for (auto it = by_hash_.begin(); it != by_hash_.end(); ++it) {
    if (it->second.who.access_key_id != who.access_key_id) continue;
    ++held;
    if (own_oldest == by_hash_.end() || it->second.last_used < own_oldest->second.last_used) own_oldest = it;
  }
  if (held >= kMaxSessionsPerKey) {
    by_hash_.erase(own_oldest);
  } else if (by_hash_.size() >= options_.max_sessions && !by_hash_.empty()) {
    auto oldest = std::min_element(by_hash_.begin(), by_hash_.end(), [](const auto& a, const auto& b) {
      return a.second.last_used < b.second.last_used;
    });
    by_hash_.erase(oldest);
  }
  by_hash_[key] = Entry{std::move(who), now};
  return token;
}

std::optional<ConsoleSession> ConsoleSessions::Find(std::string_view token) {
  if (token.size() != 64) return std::nullopt;
  const std::string key = protocol::HexSha256(token);
  const auto now = clock_();
  std::lock_guard lock(mu_);
  auto it = by_hash_.find(key);
  if (it == by_hash_.end()) return std::nullopt;
  if (now - it->second.last_used >= options_.idle) {
    by_hash_.erase(it);
    return std::nullopt;
  }
  it->second.last_used = now;
  return it->second.who;
}

void ConsoleSessions::Erase(std::string_view token) {
  const std::string key = protocol::HexSha256(token);
  std::lock_guard lock(mu_);
  by_hash_.erase(key);
}

size_t ConsoleSessions::size() const {
  std::lock_guard lock(mu_);
  return by_hash_.size();
}

// DropExpiredLocked: forgets idle sessions, at most once a minute (a sweep walks the whole table).
void ConsoleSessions::DropExpiredLocked(std::chrono::steady_clock::time_point now) {
  if (last_sweep_ != std::chrono::steady_clock::time_point{} && now - last_sweep_ < std::chrono::minutes(1)) return;
  last_sweep_ = now;
  std::erase_if(by_hash_, [&](const auto& e) { return now - e.second.last_used >= options_.idle; });
}

}  // namespace gpupack::api
