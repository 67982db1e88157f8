// Text helpers shared by the SigV4 signer (sigv4.cc) and verifier (sigv4_verifier.cc). Internal to
// gpupack::sigv4: not part of its interface.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

namespace gpupack::protocol::sigv4_text {

inline constexpr size_t kMaxAccessKeyIdBytes = 128;
inline constexpr size_t kMaxEchoBytes = 100;

inline bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }
inline bool IsDigit(char c) { return c >= '0' && c <= '9'; }
inline bool IsAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool IsLowerHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); }
inline char ToLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

inline std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ToLower(c);
  return out;
}

inline bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ToLower(a[i]) != ToLower(b[i])) return false;
  }
  return true;
}

inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Echo makes client-supplied text safe and short for an error message: printable ASCII only, at most 100 bytes.
inline std::string Echo(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxEchoBytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (s.size() > kMaxEchoBytes) out += "...";
  return out;
}

// Digits reads the n decimal digits at pos; -1 when any is missing or not a digit.
inline int Digits(std::string_view s, size_t pos, size_t n) {
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (i >= s.size() || !IsDigit(s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

inline bool ValidAccessKeyId(std::string_view s) {
  if (s.empty() || s.size() > kMaxAccessKeyIdBytes) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

}  // namespace gpupack::protocol::sigv4_text
