// SigV4 verification (protocol/sigv4_verifier.h): the Authorization header's parser and SigV4Verifier.
#include "protocol/sigv4_verifier.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <array>

#include "protocol/sigv4_text.h"

namespace gpupack::protocol {
namespace {

using std::chrono::sys_seconds;
using namespace sigv4_text;

constexpr size_t kMaxAuthorizationBytes = 4096;
constexpr size_t kMaxSignedHeaders = 64;
constexpr size_t kMaxHeaderNameBytes = 128;
constexpr size_t kMaxScopePartBytes = 64;
constexpr size_t kMaxCanonicalInMessage = 8192;

constexpr std::string_view kInvalidSignatureMessage =
    "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
    "Access Key and signing method. Consult the service documentation for details.";
constexpr std::string_view kInvalidTokenMessage = "The security token included in the request is invalid.";

std::string SkewText(std::chrono::seconds skew) {
  if (skew.count() % 60 == 0) return std::to_string(skew.count() / 60) + " min.";
  return std::to_string(skew.count()) + " sec.";
}

size_t CountHeader(const SigV4Request& req, std::string_view lower_name) {
  size_t n = 0;
  for (const auto& [name, value] : req.headers) {
    if (IEquals(name, lower_name)) ++n;
  }
  return n;
}

const std::string* FindHeader(const SigV4Request& req, std::string_view lower_name) {
  for (const auto& [name, value] : req.headers) {
    if (IEquals(name, lower_name)) return &value;
  }
  return nullptr;
}

// SplitTarget splits a request target into the path and the raw query (an absolute-form target loses its
// scheme and authority first).
std::pair<std::string_view, std::string_view> SplitTarget(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() && IEquals(target.substr(0, scheme.size()), scheme)) {
      const size_t slash = target.find_first_of("/?", scheme.size());
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      break;
    }
  }
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return {target, {}};
  return {target.substr(0, q), target.substr(q + 1)};
}

bool IsTokenChar(char c) { return IsAlnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos; }

Status Incomplete(std::string m) { return Status(ErrorCode::kIncompleteSignature, std::move(m)); }
Status Invalid(std::string m) { return Status(ErrorCode::kInvalidSignature, std::move(m)); }
SigV4Result Refused(Status s) { return {std::move(s), {}, {}, KeyRole::kAdmin}; }

}  // namespace

// ---- Authorization header -------------------------------------------------------------------------------------

Result<SigV4Authorization> ParseAuthorization(std::string_view header) {
  if (header.size() > kMaxAuthorizationBytes) {
    return Incomplete("Authorization header is longer than " + std::to_string(kMaxAuthorizationBytes) + " bytes.");
  }
  header = Trim(header);
  size_t sp = 0;
  while (sp < header.size() && !IsSpace(header[sp])) ++sp;
  const std::string_view algorithm = header.substr(0, sp);
  if (algorithm != kSigV4Algorithm) {
    if (algorithm.empty()) return Incomplete("Authorization header is empty.");
    return Incomplete("Unsupported AWS 'algorithm': '" + Echo(algorithm) + "'. Only " + std::string(kSigV4Algorithm) +
                      " is accepted.");
  }
  std::string_view rest = header.substr(sp);

  std::optional<std::string_view> credential, signed_headers, signature;
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find(',', start);
    if (end == std::string_view::npos) end = rest.size();
    const std::string_view piece = Trim(rest.substr(start, end - start));
    start = end + 1;
    if (piece.empty()) continue;
    const size_t eq = piece.find('=');
    if (eq == std::string_view::npos) {
      return Incomplete("Authorization header component '" + Echo(piece) + "' is not Name=Value.");
    }
    const std::string_view name = Trim(piece.substr(0, eq));
    const std::string_view value = Trim(piece.substr(eq + 1));
    std::optional<std::string_view>* slot = nullptr;
    if (name == "Credential") slot = &credential;
    if (name == "SignedHeaders") slot = &signed_headers;
    if (name == "Signature") slot = &signature;
    if (slot == nullptr) {
      return Incomplete("Authorization header has an unknown component '" + Echo(name) + "'.");
    }
    if (slot->has_value()) {
      return Incomplete("Authorization header has '" + std::string(name) + "' twice.");
    }
    *slot = value;
  }
  std::string missing;
  if (!credential) missing += "Authorization header requires 'Credential' parameter. ";
  if (!signature) missing += "Authorization header requires 'Signature' parameter. ";
  if (!signed_headers) missing += "Authorization header requires 'SignedHeaders' parameter. ";
  if (!missing.empty()) return Incomplete(missing + "Authorization=" + Echo(header));

  SigV4Authorization auth;
  // Credential=AKID/YYYYMMDD/region/service/aws4_request
  std::array<std::string_view, 5> parts;
  size_t n = 0;
  bool too_many = false;
  start = 0;
  while (start <= credential->size()) {
    size_t end = credential->find('/', start);
    if (end == std::string_view::npos) end = credential->size();
    if (n == parts.size()) {
      too_many = true;
      break;
    }
    parts[n++] = credential->substr(start, end - start);
    start = end + 1;
  }
  if (too_many || n != parts.size()) {
    return Incomplete("Credential must be <access key id>/<YYYYMMDD>/<region>/<service>/aws4_request, got '" +
                      Echo(*credential) + "'.");
  }
  if (!ValidAccessKeyId(parts[0])) {
    return Incomplete("Credential has a malformed access key id '" + Echo(parts[0]) + "'.");
  }
  if (parts[1].size() != 8 || Digits(parts[1], 0, 8) < 0) {
    return Incomplete("Credential date must be YYYYMMDD, got '" + Echo(parts[1]) + "'.");
  }
  for (size_t i = 2; i < parts.size(); ++i) {
    if (parts[i].empty() || parts[i].size() > kMaxScopePartBytes) {
      return Incomplete("Credential has an empty or overlong scope part in '" + Echo(*credential) + "'.");
    }
  }
  auth.access_key_id = std::string(parts[0]);
  auth.date = std::string(parts[1]);
  auth.region = std::string(parts[2]);
  auth.service = std::string(parts[3]);
  auth.terminator = std::string(parts[4]);

  // SignedHeaders=name;name;... lower case, sorted, unique.
  start = 0;
  while (start <= signed_headers->size()) {
    size_t end = signed_headers->find(';', start);
    if (end == std::string_view::npos) end = signed_headers->size();
    const std::string_view name = signed_headers->substr(start, end - start);
    start = end + 1;
    if (name.empty() || name.size() > kMaxHeaderNameBytes ||
        !std::all_of(name.begin(), name.end(), [](char c) { return IsTokenChar(c) && ToLower(c) == c; })) {
      return Incomplete("SignedHeaders must be lower-case header names separated by ';', got '" +
                        Echo(*signed_headers) + "'.");
    }
    if (auth.signed_headers.size() == kMaxSignedHeaders) {
      return Incomplete("SignedHeaders names more than " + std::to_string(kMaxSignedHeaders) + " headers.");
    }
    if (!auth.signed_headers.empty() && auth.signed_headers.back() >= name) {
      return Incomplete("SignedHeaders must be sorted and without repeats, got '" + Echo(*signed_headers) + "'.");
    }
    auth.signed_headers.emplace_back(name);
  }

  if (signature->size() != 64 || !std::all_of(signature->begin(), signature->end(), IsLowerHex)) {
    return Incomplete("Signature must be 64 lower-case hexadecimal digits, got '" + Echo(*signature) + "'.");
  }
  auth.signature = std::string(*signature);
  return auth;
}

// ---- Verification ---------------------------------------------------------------------------------------------

SigV4Verifier::SigV4Verifier(std::vector<Credential> credentials, std::string region, std::string service,
                             std::chrono::seconds skew)
    : region_(std::move(region)), service_(std::move(service)), skew_(std::max(skew, std::chrono::seconds{0})) {
  for (Credential& c : credentials) {
    std::string id = c.access_key_id;
    by_access_key_.emplace(std::move(id), std::move(c));  // emplace keeps the first of two equal ids
  }
}

const Credential* SigV4Verifier::FindKey(std::string_view access_key_id) const {
  const auto key = by_access_key_.find(access_key_id);
  return key == by_access_key_.end() ? nullptr : &key->second;
}

SigV4Result SigV4Verifier::Authenticate(const SigV4Request& req, std::chrono::system_clock::time_point now) const {
  // 1. The Authorization header, parsed.
  const size_t authorizations = CountHeader(req, "authorization");
  if (authorizations == 0) {
    return Refused(Status(ErrorCode::kMissingAuthenticationToken, "Missing Authentication Token"));
  }
  if (authorizations > 1) return Refused(Incomplete("The request has more than one Authorization header."));
  Result<SigV4Authorization> parsed = ParseAuthorization(*FindHeader(req, "authorization"));
  if (!parsed.ok()) return Refused(parsed.status());
  const SigV4Authorization& auth = *parsed;

  // 2. The request time: X-Amz-Date, else Date.
  std::string amz_date;
  std::string date_header = "x-amz-date";
  std::optional<sys_seconds> when;
  if (const size_t n = CountHeader(req, "x-amz-date"); n > 1) {
    return Refused(Incomplete("The request has more than one X-Amz-Date header."));
  } else if (n == 1) {
    amz_date = *FindHeader(req, "x-amz-date");
    when = ParseAmzDate(amz_date);
    if (!when) {
      return Refused(Incomplete("Date must be in ISO-8601 'basic format'. Got '" + Echo(amz_date) +
                                "'. See http://en.wikipedia.org/wiki/ISO_8601"));
    }
  } else if (const size_t d = CountHeader(req, "date"); d > 1) {
    return Refused(Incomplete("The request has more than one Date header."));
  } else if (d == 1) {
    date_header = "date";
    when = ParseHttpDate(*FindHeader(req, "date"));
    if (!when) {
      return Refused(Incomplete("Date header must be an HTTP date like 'Sun, 30 Aug 2015 12:36:00 GMT'. Got '" +
                                Echo(*FindHeader(req, "date")) + "'."));
    }
    amz_date = FormatAmzDate(*when);
  } else {
    return Refused(
        Incomplete("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. "
                   "Authorization=" +
                   Echo(*FindHeader(req, "authorization"))));
  }

  // 3. What must be signed.
  const auto is_signed = [&auth](std::string_view name) {
    return std::binary_search(auth.signed_headers.begin(), auth.signed_headers.end(), name);
  };
  if (!is_signed("host")) return Refused(Incomplete("'Host' must be a 'SignedHeader' in the AWS Authorization."));
  if (!is_signed(date_header)) {
    return Refused(Incomplete(std::string(date_header == "date" ? "'Date'" : "'X-Amz-Date'") +
                              " must be a 'SignedHeader' in the AWS Authorization."));
  }
  if (CountHeader(req, "x-amz-target") > 0 && !is_signed("x-amz-target")) {
    return Refused(Incomplete("'X-Amz-Target' must be a 'SignedHeader' in the AWS Authorization."));
  }
  for (const std::string& name : auth.signed_headers) {
    if (CountHeader(req, name) == 0) {
      return Refused(Invalid("SignedHeaders names '" + name + "', which the request does not carry."));
    }
  }

  // 4. The credential scope.
  if (auth.terminator != kSigV4Terminator) {
    return Refused(Invalid("Credential should be scoped with a valid terminator: 'aws4_request', not '" +
                           Echo(auth.terminator) + "'."));
  }
  if (auth.service != service_) {
    return Refused(Invalid("Credential should be scoped to correct service: '" + service_ + "'."));
  }
  if (auth.region != region_) {
    return Refused(Invalid("Credential should be scoped to a valid region, not '" + Echo(auth.region) +
                           "'. This server's region is '" + region_ + "'."));
  }
  if (auth.date != std::string_view(amz_date).substr(0, 8)) {
    return Refused(
        Invalid("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '" +
                auth.date + "' != '" + amz_date.substr(0, 8) + "', from '" + amz_date + "'."));
  }

  // 5. The clock-skew window, to the second: now - skew <= request time <= now + skew.
  const sys_seconds now_s = std::chrono::floor<std::chrono::seconds>(now);
  if (*when < now_s - skew_) {
    return Refused(Invalid("Signature expired: " + amz_date + " is now earlier than " + FormatAmzDate(now_s - skew_) +
                           " (" + FormatAmzDate(now_s) + " - " + SkewText(skew_) + ")"));
  }
  if (*when > now_s + skew_) {
    return Refused(Invalid("Signature not yet current: " + amz_date + " is still later than " +
                           FormatAmzDate(now_s + skew_) + " (" + FormatAmzDate(now_s) + " + " + SkewText(skew_) + ")"));
  }

  // 6. Who signed it.
  const auto key = by_access_key_.find(auth.access_key_id);
  if (key == by_access_key_.end()) {
    return Refused(Status(ErrorCode::kUnrecognizedClient, std::string(kInvalidTokenMessage)));
  }
  if (CountHeader(req, "x-amz-security-token") > 0) {
    return Refused(Status(ErrorCode::kUnrecognizedClient,
                          std::string(kInvalidTokenMessage) +
                              " This server issues no session tokens: sign with a key from its credentials file only "
                              "(unset AWS_SESSION_TOKEN)."));
  }

  // 7. The payload: its hash always comes from the body.
  const std::string payload_hash = HexSha256(req.body);
  if (const size_t n = CountHeader(req, "x-amz-content-sha256"); n > 1) {
    return Refused(Incomplete("The request has more than one X-Amz-Content-Sha256 header."));
  } else if (n == 1) {
    const std::string& claimed = *FindHeader(req, "x-amz-content-sha256");
    if (claimed == "UNSIGNED-PAYLOAD" || claimed.rfind("STREAMING-", 0) == 0) {
      return Refused(Invalid("'" + Echo(claimed) + "' is not accepted by this service: sign the payload's SHA-256."));
    }
    if (claimed != payload_hash) {
      return Refused(Invalid("The provided 'x-amz-content-sha256' header does not match what was computed."));
    }
  }

  // 8. The signature, compared in constant time.
  const auto [path, query] = SplitTarget(req.target);
  const std::string canonical =
      CanonicalRequest(req.method, path, query, req.headers, auth.signed_headers, payload_hash);
  const std::string sts = StringToSign(amz_date, CredentialScope(auth.date, auth.region, auth.service), canonical);
  std::string signing_key = SigningKey(key->second.secret_access_key, auth.date, auth.region, auth.service);
  const std::string expected = SignatureHex(signing_key, sts);
  OPENSSL_cleanse(signing_key.data(), signing_key.size());
  if (expected.size() != auth.signature.size() ||
      CRYPTO_memcmp(expected.data(), auth.signature.data(), expected.size()) != 0) {
    std::string message(kInvalidSignatureMessage);
    if (canonical.size() + sts.size() <= kMaxCanonicalInMessage) {
      message += "\n\nThe Canonical String for this request should have been\n'" + canonical +
                 "'\n\nThe String-to-Sign should have been\n'" + sts + "'\n";
    }
    return Refused(Invalid(std::move(message)));
  }
  return {Status::Ok(), key->second.access_key_id, key->second.profile, key->second.role, key->second.host};
}

}  // namespace gpupack::protocol
