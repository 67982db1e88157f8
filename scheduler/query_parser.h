// The parsed form of a cluster query expression (scheduler/query.h): the tree that Parse (query_parser.cc)
// builds and Evaluate (query.cc) walks, and the values both sides share. Internal to scheduler/: only those two
// files include it.
//
// query_parser.cc owns the grammar and everything that does not depend on the instance: it resolves subjects
// and operators, splits wildcard patterns, parses numbers, versions and dates into Operands. query.cc owns the
// semantics of a predicate against one instance (the tree walk and the comparisons). An Expression is immutable
// once Parse returns it, so one may be evaluated from many threads at once.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/model.h"

namespace gpupack::query {
namespace detail {

// ---- Values -----------------------------------------------------------------------------------------------

inline bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

inline bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!IsAsciiDigit(c)) return false;
  return true;
}

// A decimal number: exact when it is an integer that fits int64, else a double.
struct Number {
  bool is_integer = false;
  int64_t integer = 0;
  double real = 0;
};

// ParseNumber accepts [+-]digits[.digits] and nothing else (no exponent, inf or nan).
inline std::optional<Number> ParseNumber(std::string_view s) {
  std::string_view body = s;
  if (!body.empty() && (body.front() == '+' || body.front() == '-')) body.remove_prefix(1);
  const size_t dot = body.find('.');
  const std::string_view whole = body.substr(0, dot);
  if (!AllDigits(whole)) return std::nullopt;
  if (dot != std::string_view::npos && !AllDigits(body.substr(dot + 1))) return std::nullopt;
  // from_chars takes no '+'; parse from the first character that it accepts.
  const char* first = s.data() + (s.front() == '+' ? 1 : 0);
  const char* last = s.data() + s.size();
  Number n;
  if (dot == std::string_view::npos) {
    auto [ptr, ec] = std::from_chars(first, last, n.integer);
    if (ec == std::errc() && ptr == last) {
      n.is_integer = true;
      n.real = static_cast<double>(n.integer);
      return n;
    }
  }
  auto [ptr, ec] = std::from_chars(first, last, n.real);
  if (ec != std::errc() || ptr != last) return std::nullopt;  // out of range for a double
  return n;
}

inline int CompareNumbers(const Number& a, const Number& b) {
  if (a.is_integer && b.is_integer) return a.integer < b.integer ? -1 : (a.integer > b.integer ? 1 : 0);
  return a.real < b.real ? -1 : (a.real > b.real ? 1 : 0);
}

inline int Sign(int v) { return v < 0 ? -1 : (v > 0 ? 1 : 0); }

// IsVersion: [vV]digits{.digits}, e.g. "1.57.1" or "v1.8".
inline bool IsVersion(std::string_view s) {
  if (!s.empty() && (s.front() == 'v' || s.front() == 'V')) s.remove_prefix(1);
  if (s.empty()) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    if (!AllDigits(s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// A span of time [begin, end) in epoch milliseconds: what a registeredAt argument names.
struct TimeSpan {
  EpochMs begin = 0;
  EpochMs end = 0;
};

// WildcardPattern matches a whole value where each `*` stands for any run of characters (possibly empty).
// The pattern is split at parse time; Matches allocates nothing and runs in O(value * pattern) at worst.
class WildcardPattern {
 public:
  WildcardPattern() = default;
  explicit WildcardPattern(std::string_view pattern) {
    parts_.clear();
    size_t start = 0;
    while (true) {
      const size_t star = pattern.find('*', start);
      parts_.emplace_back(pattern.substr(start, star == std::string_view::npos ? std::string_view::npos
                                                                                 : star - start));
      if (star == std::string_view::npos) break;
      start = star + 1;
    }
  }

  bool HasWildcard() const { return parts_.size() > 1; }

  bool Matches(std::string_view value) const {
    if (parts_.size() == 1) return value == parts_.front();
    const std::string& prefix = parts_.front();
    const std::string& suffix = parts_.back();
    if (value.size() < prefix.size() + suffix.size()) return false;
    if (!value.starts_with(prefix) || !value.ends_with(suffix)) return false;
    std::string_view middle = value.substr(prefix.size(), value.size() - prefix.size() - suffix.size());
    // With only `*` wildcards, taking the leftmost occurrence of each inner part is never worse than any other.
    for (size_t i = 1; i + 1 < parts_.size(); ++i) {
      if (parts_[i].empty()) continue;
      const size_t at = middle.find(parts_[i]);
      if (at == std::string_view::npos) return false;
      middle.remove_prefix(at + parts_[i].size());
    }
    return true;
  }

 private:
  std::vector<std::string> parts_{std::string()};  // the pattern split at each '*'
};

// ---- Subjects and operators -------------------------------------------------------------------------------

enum class Subject {
  kAttribute,
  kAgentConnected,
  kAgentVersion,
  kEc2InstanceId,
  kRegisteredAt,
  kRunningTasksCount,
  kTaskGroup,
  kInstanceId,
};

// Operators; each negative one is stored as its positive form plus a negation.
enum class Op { kEq, kNe, kGt, kGe, kLt, kLe, kExists, kNotExists, kIn, kNotIn, kMatches, kNotMatches };

// One argument of a predicate, converted at parse time to what its subject compares with.
struct Operand {
  std::string text;          // as written, without quotes
  WildcardPattern pattern;   // text as a pattern (string subjects; agentConnected with =~)
  std::optional<Number> number;  // attributes: text as a number, for >, >=, <, <=
  bool is_version = false;   // agentVersion: text is a dotted version
  bool boolean = false;      // agentConnected
  int64_t integer = 0;       // runningTasksCount
  TimeSpan time;             // registeredAt
};

}  // namespace detail

// ---- The tree ---------------------------------------------------------------------------------------------

// Expression: the whole parsed expression, its nodes in one vector (children by index) and its predicates in
// another; built by the parser, read-only afterwards.
class Expression {
 public:
  struct Predicate {
    detail::Subject subject = detail::Subject::kAttribute;
    std::string attribute;  // kAttribute: the attribute name
    detail::Op op = detail::Op::kEq;  // positive form: kEq, kGt, kGe, kLt, kLe, kExists, kIn or kMatches
    bool negated = false;
    std::vector<detail::Operand> operands;
  };
  enum class Kind { kAnd, kOr, kNot, kPredicate };
  struct Node {
    Kind kind = Kind::kPredicate;
    std::vector<uint32_t> children;  // kAnd, kOr: two or more; kNot: one
    uint32_t predicate = 0;          // kPredicate: index into predicates
  };

  std::vector<Node> nodes;
  std::vector<Predicate> predicates;
  uint32_t root = 0;
};

}  // namespace gpupack::query
