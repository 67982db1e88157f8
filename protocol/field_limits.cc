#include "protocol/field_limits.h"

#include <algorithm>
#include <string>

namespace gpupack::protocol {

namespace {

bool Allowed(char c, Charset charset) {
  const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  switch (charset) {
    case Charset::kIdentifier: return alnum || c == '-' || c == '_' || c == '.' || c == ':' || c == '/';
    case Charset::kName: return alnum || c == '-' || c == '_';
    case Charset::kPrintable: return c >= 0x20 && c <= 0x7e;
  }
  return false;
}

const char* Words(Charset charset) {
  switch (charset) {
    case Charset::kIdentifier: return "letters, digits, hyphens, underscores, periods, colons and slashes";
    case Charset::kName: return "letters, digits, hyphens and underscores";
    case Charset::kPrintable: return "printable ASCII characters (no control characters)";
  }
  return "";
}

}  // namespace

Status CheckField(std::string_view value, const FieldLimit& limit, std::string_view at) {
  const std::string field(at.empty() ? limit.name : at);
  const std::string rule = " must be 1 to " + std::to_string(limit.max_bytes) + " " + Words(limit.charset);
  if (value.empty()) return Status::InvalidParameter(field + rule + ", got an empty value");
  if (value.size() > limit.max_bytes)
    return Status::InvalidParameter(field + rule + ", got " + std::to_string(value.size()) + " bytes");
  const auto bad = std::find_if(value.begin(), value.end(), [&](char c) { return !Allowed(c, limit.charset); });
  if (bad != value.end()) {  // the byte is named by its code: it may be a control character
    static constexpr char kHex[] = "0123456789abcdef";
    const auto byte = static_cast<unsigned char>(*bad);
    return Status::InvalidParameter(field + rule + ", got byte 0x" + kHex[byte >> 4] + kHex[byte & 15] +
                                    " at offset " + std::to_string(bad - value.begin()));
  }
  return Status::Ok();
}

}  // namespace gpupack::protocol
