// Percent-encoding by SigV4's rules, the one encoder and decoder of ours: the agent channel's target, SigV4's
// canonical URI and query, and every query value we send.
#pragma once

#include <string>
#include <string_view>

namespace gpupack {

// PercentEncode keeps the unreserved bytes A-Z a-z 0-9 - _ . ~ (and '/' when `keep_slash`, for a path) and
// writes every other byte as %XX with upper-case hex: "a b/c" -> "a%20b%2Fc", or "a%20b/c" keeping slashes.
std::string PercentEncode(std::string_view s, bool keep_slash = false);

// PercentDecode decodes %XX escapes (either case); a '%' not followed by two hex digits stays literal. '+' stays
// '+', or is a space when `plus_is_space` (a form-encoded query value).
std::string PercentDecode(std::string_view s, bool plus_is_space = false);

}  // namespace gpupack
