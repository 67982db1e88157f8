// SigV4 signing, canonical forms and the credentials file (protocol/sigv4.h). The verifier is sigv4_verifier.cc.
#include "protocol/sigv4.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "base/percent.h"
#include "protocol/field_limits.h"
#include "protocol/sigv4_text.h"

namespace gpupack::protocol {
namespace {

using std::chrono::sys_seconds;
using namespace sigv4_text;

constexpr size_t kMaxSecretBytes = 1024;
constexpr size_t kMaxCredentialsFileBytes = 1 << 20;

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return out;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  const unsigned char* ok = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                                 reinterpret_cast<const unsigned char*>(data.data()), data.size(), md.data(), &len);
  if (ok == nullptr) return std::string();  // only on allocation failure; the signature then never matches
  return std::string(reinterpret_cast<const char*>(md.data()), len);
}

std::optional<sys_seconds> MakeTime(int y, int mo, int d, int h, int mi, int se) {
  if (y < 1970 || mo < 1 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 59) {
    return std::nullopt;
  }
  const std::chrono::year_month_day ymd{std::chrono::year{y}, std::chrono::month{static_cast<unsigned>(mo)},
                                        std::chrono::day{static_cast<unsigned>(d)}};
  if (!ymd.ok()) return std::nullopt;
  const sys_seconds t = sys_seconds{std::chrono::sys_days{ymd}} + std::chrono::hours{h} + std::chrono::minutes{mi} +
                        std::chrono::seconds{se};
  // Past system_clock's range (the year 2262) the time would overflow when formatted or compared; no request is
  // signed that far ahead.
  if (t > std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::time_point::max())) return std::nullopt;
  return t;
}

// ValidHost: a gpupack_host is what the agent of that host sends as its instanceId (its --name), so it is held to
// the same bounds; anything else could never match a registration.
bool ValidHost(std::string_view s) {
  if (s.empty() || s.size() > kInstanceIdLimit.max_bytes) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    return alnum || c == '-' || c == '_' || c == '.' || c == ':' || c == '/';
  });
}

bool ValidSecret(std::string_view s) {
  if (s.empty() || s.size() > kMaxSecretBytes) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

}  // namespace

const char* KeyRoleName(KeyRole role) {
  switch (role) {
    case KeyRole::kAgent:
      return "agent";
    case KeyRole::kReader:
      return "reader";
    case KeyRole::kAdmin:
      break;
  }
  return "admin";
}

// ---- Building blocks ------------------------------------------------------------------------------------------

std::string HexSha256(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr) != 1) return std::string();
  return Hex(md.data(), len);
}

std::string FormatAmzDate(std::chrono::system_clock::time_point t) {
  const auto secs = std::chrono::floor<std::chrono::seconds>(t);
  const auto day = std::chrono::floor<std::chrono::days>(secs);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss hms{secs - day};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d%02u%02uT%02d%02d%02dZ", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                static_cast<int>(hms.seconds().count()));
  return buf;
}

std::optional<sys_seconds> ParseAmzDate(std::string_view s) {
  if (s.size() != 16 || s[8] != 'T' || s[15] != 'Z') return std::nullopt;
  const int y = Digits(s, 0, 4), mo = Digits(s, 4, 2), d = Digits(s, 6, 2);
  const int h = Digits(s, 9, 2), mi = Digits(s, 11, 2), se = Digits(s, 13, 2);
  return MakeTime(y, mo, d, h, mi, se);
}

std::optional<sys_seconds> ParseHttpDate(std::string_view s) {
  // "Sun, 30 Aug 2015 12:36:00 GMT"
  static constexpr std::array<std::string_view, 7> kDays = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
  static constexpr std::array<std::string_view, 12> kMonths = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                               "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  if (s.size() != 29 || s.substr(3, 2) != ", " || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' || s[19] != ':' ||
      s[22] != ':' || s.substr(25) != " GMT") {
    return std::nullopt;
  }
  if (std::find(kDays.begin(), kDays.end(), s.substr(0, 3)) == kDays.end()) return std::nullopt;
  const auto month = std::find(kMonths.begin(), kMonths.end(), s.substr(8, 3));
  if (month == kMonths.end()) return std::nullopt;
  const int mo = static_cast<int>(month - kMonths.begin()) + 1;
  return MakeTime(Digits(s, 12, 4), mo, Digits(s, 5, 2), Digits(s, 17, 2), Digits(s, 20, 2), Digits(s, 23, 2));
}

std::string CanonicalUri(std::string_view path) {
  if (path.empty()) return "/";
  std::vector<std::string_view> segments;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view seg = path.substr(start, end - start);
    if (seg == "..") {
      if (!segments.empty()) segments.pop_back();
    } else if (!seg.empty() && seg != ".") {
      segments.push_back(seg);
    }
    start = end + 1;
  }
  std::string normalized = path.front() == '/' ? "/" : "";
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i > 0) normalized += '/';
    normalized += segments[i];
  }
  if (!segments.empty() && path.back() == '/') normalized += '/';
  if (normalized.empty()) normalized = "/";
  return PercentEncode(normalized, /*keep_slash=*/true);
}

std::string CanonicalQueryString(std::string_view raw_query) {
  std::vector<std::pair<std::string, std::string>> params;
  size_t start = 0;
  while (start <= raw_query.size()) {
    size_t end = raw_query.find('&', start);
    if (end == std::string_view::npos) end = raw_query.size();
    const std::string_view piece = raw_query.substr(start, end - start);
    if (!piece.empty()) {
      const size_t eq = piece.find('=');
      const std::string_view name = piece.substr(0, eq);
      const std::string_view value = eq == std::string_view::npos ? std::string_view() : piece.substr(eq + 1);
      params.emplace_back(PercentEncode(PercentDecode(name)), PercentEncode(PercentDecode(value)));
    }
    start = end + 1;
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

std::string CanonicalHeaderValue(std::string_view value) {
  value = Trim(value);
  std::string out;
  out.reserve(value.size());
  bool in_space = false;
  for (const char c : value) {
    if (IsSpace(c)) {
      in_space = true;
      continue;
    }
    if (in_space) out += ' ';
    in_space = false;
    out += c;
  }
  return out;
}

std::string CanonicalRequest(std::string_view method, std::string_view path, std::string_view query,
                             const HeaderList& headers, const std::vector<std::string>& signed_headers,
                             std::string_view payload_hash) {
  std::string out;
  out.append(method).append("\n");
  out.append(CanonicalUri(path)).append("\n");
  out.append(CanonicalQueryString(query)).append("\n");
  std::string signed_list;
  for (const std::string& name : signed_headers) {
    out.append(name).append(":");
    bool first = true;
    for (const auto& [header_name, value] : headers) {
      if (!IEquals(header_name, name)) continue;
      if (!first) out += ',';
      out += CanonicalHeaderValue(value);
      first = false;
    }
    out += '\n';
    if (!signed_list.empty()) signed_list += ';';
    signed_list += name;
  }
  out.append("\n").append(signed_list).append("\n").append(payload_hash);
  return out;
}

std::string CredentialScope(std::string_view date, std::string_view region, std::string_view service) {
  std::string out;
  out.append(date).append("/").append(region).append("/").append(service).append("/").append(kSigV4Terminator);
  return out;
}

std::string StringToSign(std::string_view amz_date, std::string_view scope, std::string_view canonical_request) {
  std::string out;
  out.append(kSigV4Algorithm).append("\n").append(amz_date).append("\n").append(scope).append("\n");
  out.append(HexSha256(canonical_request));
  return out;
}

std::string SigningKey(std::string_view secret, std::string_view date, std::string_view region,
                       std::string_view service) {
  std::string key = "AWS4";
  key.append(secret);
  const std::string k_date = HmacSha256(key, date);
  const std::string k_region = HmacSha256(k_date, region);
  const std::string k_service = HmacSha256(k_region, service);
  std::string k_signing = HmacSha256(k_service, kSigV4Terminator);
  OPENSSL_cleanse(key.data(), key.size());
  return k_signing;
}

std::string SignatureHex(std::string_view signing_key, std::string_view string_to_sign) {
  const std::string mac = HmacSha256(signing_key, string_to_sign);
  return Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
}

// ---- Signing --------------------------------------------------------------------------------------------------

std::string AuthorizationHeader(const Credential& credential, std::string_view region, std::string_view service,
                                std::string_view method, std::string_view path, std::string_view query,
                                const HeaderList& headers, std::string_view body, std::string_view amz_date) {
  std::set<std::string> names;
  for (const auto& [name, value] : headers) names.insert(Lower(name));
  const std::vector<std::string> signed_headers(names.begin(), names.end());
  const std::string date = std::string(amz_date.substr(0, 8));
  const std::string scope = CredentialScope(date, region, service);
  const std::string canonical = CanonicalRequest(method, path, query, headers, signed_headers, HexSha256(body));
  const std::string sts = StringToSign(amz_date, scope, canonical);
  std::string key = SigningKey(credential.secret_access_key, date, region, service);
  const std::string signature = SignatureHex(key, sts);
  OPENSSL_cleanse(key.data(), key.size());

  std::string out(kSigV4Algorithm);
  out.append(" Credential=").append(credential.access_key_id).append("/").append(scope);
  out.append(", SignedHeaders=");
  for (size_t i = 0; i < signed_headers.size(); ++i) {
    if (i > 0) out += ';';
    out += signed_headers[i];
  }
  out.append(", Signature=").append(signature);
  return out;
}

std::map<std::string, std::string> SignRequest(const Credential& credential, std::string_view region,
                                               std::string_view service, std::string_view method, std::string_view path,
                                               std::string_view query, const HeaderList& headers, std::string_view body,
                                               std::chrono::system_clock::time_point now) {
  static constexpr std::array<std::string_view, 8> kUnsigned = {
      "authorization",   "connection",        "expect",     "user-agent",
      "x-amzn-trace-id", "transfer-encoding", "x-amz-date", "x-amz-content-sha256"};
  const std::string amz_date = FormatAmzDate(now);
  const std::string payload_hash = HexSha256(body);
  HeaderList to_sign;
  for (const auto& [name, value] : headers) {
    std::string lower = Lower(name);
    if (std::find(kUnsigned.begin(), kUnsigned.end(), lower) != kUnsigned.end()) continue;
    to_sign.emplace_back(std::move(lower), value);
  }
  to_sign.emplace_back("x-amz-date", amz_date);
  to_sign.emplace_back("x-amz-content-sha256", payload_hash);
  return {
      {"Authorization", AuthorizationHeader(credential, region, service, method, path, query, to_sign, body, amz_date)},
      {"X-Amz-Date", amz_date},
      {"X-Amz-Content-Sha256", payload_hash}};
}

// ---- Credentials file -----------------------------------------------------------------------------------------

Result<std::vector<Credential>> ParseCredentials(std::string_view text, std::string_view origin) {
  const std::string where(origin);
  struct Profile {
    std::string name;
    std::optional<std::string> id, secret, role, host;
    int line = 0;
    int host_line = 0;
  };
  std::vector<Profile> profiles;
  int line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = Trim(text.substr(start, end - start));
    start = end + 1;
    ++line_no;
    const std::string at = where + " line " + std::to_string(line_no) + ": ";
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') return Status::InvalidParameter(at + "a section must look like [profile-name]");
      const std::string name(Trim(line.substr(1, line.size() - 2)));
      if (name.empty()) return Status::InvalidParameter(at + "empty profile name");
      for (const Profile& p : profiles) {
        if (p.name == name) {
          return Status::InvalidParameter(at + "profile [" + Echo(name) + "] appears twice (first on line " +
                                          std::to_string(p.line) + ")");
        }
      }
      profiles.push_back({name, std::nullopt, std::nullopt, std::nullopt, std::nullopt, line_no, 0});
      continue;
    }
    // The line is never echoed: it may hold a secret.
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidParameter(at + "expected 'key = value', '[profile]' or a comment");
    }
    if (profiles.empty()) return Status::InvalidParameter(at + "a key outside any [profile] section");
    const std::string key = Lower(Trim(line.substr(0, eq)));
    const std::string_view value = Trim(line.substr(eq + 1));
    Profile& p = profiles.back();
    std::optional<std::string>* slot = nullptr;
    if (key == "aws_access_key_id") slot = &p.id;
    if (key == "aws_secret_access_key") slot = &p.secret;
    if (key == "gpupack_role") slot = &p.role;
    if (key == "gpupack_host") slot = &p.host;
    if (slot == nullptr) continue;  // region, aws_session_token, ...: not ours
    if (slot->has_value()) {
      return Status::InvalidParameter(at + key + " given twice in profile [" + Echo(p.name) + "]");
    }
    if (slot == &p.id && !ValidAccessKeyId(value)) {
      return Status::InvalidParameter(at + "aws_access_key_id must be 1 to 128 letters, digits, '-', '_' or '.'");
    }
    if (slot == &p.secret && !ValidSecret(value)) {
      return Status::InvalidParameter(at +
                                      "aws_secret_access_key must be 1 to 1024 printable characters "
                                      "without spaces");
    }
    if (slot == &p.role && value != "admin" && value != "agent" && value != "reader") {
      return Status::InvalidParameter(at + "gpupack_role must be admin, agent or reader, not '" + Echo(value) + "'");
    }
    if (slot == &p.host) {
      if (!ValidHost(value)) {
        return Status::InvalidParameter(at + "gpupack_host must be the host's agent --name: 1 to " +
                                        std::to_string(kInstanceIdLimit.max_bytes) +
                                        " letters, digits, '-', '_', '.', ':' or '/'");
      }
      p.host_line = line_no;
    }
    *slot = std::string(value);
  }
  if (profiles.empty()) {
    return Status::InvalidParameter(where + ": no [profile] with aws_access_key_id and aws_secret_access_key");
  }
  std::vector<Credential> out;
  for (Profile& p : profiles) {
    if (!p.id || !p.secret) {
      return Status::InvalidParameter(where + ": profile [" + Echo(p.name) + "] (line " + std::to_string(p.line) +
                                      ") has no " + (p.id ? "aws_secret_access_key" : "aws_access_key_id"));
    }
    for (const Credential& c : out) {
      if (c.access_key_id == *p.id) {
        return Status::InvalidParameter(where + ": access key id '" + *p.id + "' appears in profiles [" +
                                        Echo(c.profile) + "] and [" + Echo(p.name) + "]");
      }
    }
    const KeyRole role = p.role == "agent"    ? KeyRole::kAgent
                         : p.role == "reader" ? KeyRole::kReader
                                              : KeyRole::kAdmin;
    // Only an agent key registers a host: a bound admin or reader key would read as a limit it is not.
    if (p.host && role != KeyRole::kAgent) {
      return Status::InvalidParameter(where + " line " + std::to_string(p.host_line) + ": gpupack_host binds an "
                                      "agent key to its host, but profile [" + Echo(p.name) + "] has gpupack_role " +
                                      KeyRoleName(role) + " (add gpupack_role = agent, or remove gpupack_host)");
    }
    out.push_back({std::move(*p.id), std::move(*p.secret), std::move(p.name), role, p.host.value_or("")});
  }
  return out;
}

Result<Credential> SelectProfile(const std::vector<Credential>& credentials, const std::string& profile,
                                 std::string_view origin) {
  const std::string wanted = profile.empty() ? "default" : profile;
  for (const Credential& c : credentials) {
    if (c.profile == wanted) return c;
  }
  if (profile.empty() && credentials.size() == 1) return credentials.front();
  std::string names;
  for (const Credential& c : credentials) names += (names.empty() ? "[" : ", [") + Echo(c.profile) + "]";
  return Status::InvalidParameter(std::string(origin) + " has no profile [" + Echo(wanted) + "]" +
                                  (profile.empty() ? " and more than one profile" : "") + " (it has " + names +
                                  "): choose one with --profile NAME or AWS_PROFILE");
}

Result<std::vector<Credential>> LoadCredentialsFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return Status::InvalidParameter("cannot open credentials file " + path + ": " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::InvalidParameter("cannot stat credentials file " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidParameter("credentials file " + path + " is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidParameter("credentials file " + path + " is readable or writable by group or others (mode " +
                                    mode + "); run: chmod 600 " + path);
  }
  if (static_cast<size_t>(st.st_size) > kMaxCredentialsFileBytes) {
    return Status::InvalidParameter("credentials file " + path + " is larger than 1 MiB");
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::InvalidParameter("cannot read credentials file " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxCredentialsFileBytes) {
      return Status::InvalidParameter("credentials file " + path + " is larger than 1 MiB");
    }
  }
  if (Trim(text).empty()) return Status::InvalidParameter("credentials file " + path + " is empty");
  Result<std::vector<Credential>> parsed = ParseCredentials(text, "credentials file " + path);
  OPENSSL_cleanse(text.data(), text.size());
  return parsed;
}

}  // namespace gpupack::protocol
