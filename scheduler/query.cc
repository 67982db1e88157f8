// The ECS cluster query language: a hand-written recursive-descent parser and a tree evaluator.
//
// Parse does all the work that does not depend on the instance: it resolves subjects and operators, splits
// wildcard patterns, parses numbers, versions and dates. Evaluate only walks the tree and compares.
//
// Semantics where ECS leaves room (the tests pin each one):
// - A negative operator (!=, !exists, !in, !~) is the negation of its positive form, so a missing value makes
//   the positive forms false and the negative forms true. For task:group, `task:group != g` means "no
//   non-STOPPED task of group g on the instance" (the anti-affinity reading), not "some task of another group".
// - `*` is the only wildcard (in ==, in and =~). ECS's =~ takes a Java regex; a glob covers its usual `g5.*`.
//   Patterns are anchored on the whole value; there is no escape, a `*` in a value also matches itself.
// - Attribute values are strings: ==, != and in compare text; >, >=, <, <= compare numerically when both sides
//   are numbers, else byte-wise. An attribute without a value exists and compares as "".
// - agentVersion compares dotted versions segment by segment (1.10.0 > 1.9.3; 1.2 == 1.2.0) when both sides are
//   versions, else as text. An empty agentVersion, ec2InstanceId or instanceId, and registeredAt 0, are missing.
// - registeredAt's argument names a span at its own precision: a date is that UTC day, a datetime is that
//   second (or minute, or millisecond), epoch seconds are that second. == means "inside the span", < "before
//   it", >= "not before it", > "after it", <= "not after it". A datetime without an offset is UTC.
// - Each subject accepts the operators ECS lists for it; attributes accept all of them.
// - Subject names and keywords are case-insensitive; attribute names and values are case-sensitive.
#include "scheduler/query.h"

#include <chrono>
#include <charconv>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace gpupack::query {
namespace {

// ---- Values -----------------------------------------------------------------------------------------------

bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (AsciiLower(a[i]) != AsciiLower(b[i])) return false;
  return true;
}

bool StartsWithIgnoreCase(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && EqualsIgnoreCase(text.substr(0, prefix.size()), prefix);
}

bool AllDigits(std::string_view s) {
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
std::optional<Number> ParseNumber(std::string_view s) {
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

int CompareNumbers(const Number& a, const Number& b) {
  if (a.is_integer && b.is_integer) return a.integer < b.integer ? -1 : (a.integer > b.integer ? 1 : 0);
  return a.real < b.real ? -1 : (a.real > b.real ? 1 : 0);
}

int Sign(int v) { return v < 0 ? -1 : (v > 0 ? 1 : 0); }

// IsVersion: [vV]digits{.digits}, e.g. "1.57.1" or "v1.8".
bool IsVersion(std::string_view s) {
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

// CompareVersions compares two strings that pass IsVersion, segment by segment as unbounded integers; a
// missing segment counts as 0. Allocates nothing.
int CompareVersions(std::string_view a, std::string_view b) {
  auto strip_v = [](std::string_view& s) {
    if (!s.empty() && (s.front() == 'v' || s.front() == 'V')) s.remove_prefix(1);
  };
  strip_v(a);
  strip_v(b);
  auto next_segment = [](std::string_view& s) {
    const size_t dot = s.find('.');
    std::string_view seg = s.substr(0, dot);
    s = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
    while (seg.size() > 1 && seg.front() == '0') seg.remove_prefix(1);
    return seg;
  };
  while (!a.empty() || !b.empty()) {
    std::string_view sa = a.empty() ? std::string_view("0") : next_segment(a);
    std::string_view sb = b.empty() ? std::string_view("0") : next_segment(b);
    if (sa.size() != sb.size()) return sa.size() < sb.size() ? -1 : 1;
    if (const int c = sa.compare(sb); c != 0) return Sign(c);
  }
  return 0;
}

// A span of time [begin, end) in epoch milliseconds: what a registeredAt argument names.
struct TimeSpan {
  EpochMs begin = 0;
  EpochMs end = 0;
};

// ParseFixedDigits reads exactly `count` digits at `pos`.
std::optional<int> ParseFixedDigits(std::string_view s, size_t pos, size_t count) {
  if (pos + count > s.size()) return std::nullopt;
  int v = 0;
  for (size_t i = pos; i < pos + count; ++i) {
    if (!IsAsciiDigit(s[i])) return std::nullopt;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

// ParseTimeSpan accepts epoch seconds ("1514764800", "1514764800.5") or ISO-8601: YYYY-MM-DD, optionally
// followed by T (or a space) HH:MM[:SS[.fraction]] and Z or an offset (+HH:MM, +HHMM, -HH:MM...).
std::optional<TimeSpan> ParseTimeSpan(std::string_view s) {
  constexpr EpochMs kSecond = 1000, kMinute = 60 * kSecond, kDay = 24 * 60 * kMinute;
  if (s.empty()) return std::nullopt;
  if (IsAsciiDigit(s.front()) && s.find('-') == std::string_view::npos) {
    const size_t dot = s.find('.');
    const std::string_view whole = s.substr(0, dot);
    if (!AllDigits(whole) || whole.size() > 15) return std::nullopt;
    EpochMs seconds = 0;
    std::from_chars(whole.data(), whole.data() + whole.size(), seconds);
    if (dot == std::string_view::npos) return TimeSpan{seconds * kSecond, seconds * kSecond + kSecond};
    const std::string_view frac = s.substr(dot + 1);
    if (!AllDigits(frac)) return std::nullopt;
    // Milliseconds from the first three digits (more are ignored); ".5" names the 100 ms it rounds from.
    EpochMs ms = 0, width = kSecond;
    for (size_t i = 0; i < 3; ++i) {
      ms = ms * 10 + (i < frac.size() ? frac[i] - '0' : 0);
      if (i < frac.size()) width /= 10;
    }
    const EpochMs begin = seconds * kSecond + ms;
    return TimeSpan{begin, begin + width};
  }

  const auto year = ParseFixedDigits(s, 0, 4);
  const auto month = ParseFixedDigits(s, 5, 2);
  const auto day = ParseFixedDigits(s, 8, 2);
  if (!year || !month || !day || s[4] != '-' || s[7] != '-') return std::nullopt;
  const std::chrono::year_month_day ymd{std::chrono::year{*year}, std::chrono::month{static_cast<unsigned>(*month)},
                                        std::chrono::day{static_cast<unsigned>(*day)}};
  if (!ymd.ok()) return std::nullopt;
  const EpochMs day_start = static_cast<EpochMs>(std::chrono::sys_days{ymd}.time_since_epoch().count()) * kDay;
  if (s.size() == 10) return TimeSpan{day_start, day_start + kDay};

  if (s[10] != 'T' && s[10] != 't' && s[10] != ' ') return std::nullopt;
  const auto hour = ParseFixedDigits(s, 11, 2);
  const auto minute = ParseFixedDigits(s, 14, 2);
  if (!hour || !minute || s[13] != ':' || *hour > 23 || *minute > 59) return std::nullopt;
  EpochMs offset_in_day = *hour * 60 * kMinute + *minute * kMinute;
  EpochMs width = kMinute;
  size_t pos = 16;
  if (pos < s.size() && s[pos] == ':') {
    const auto second = ParseFixedDigits(s, pos + 1, 2);
    if (!second || *second > 59) return std::nullopt;
    offset_in_day += *second * kSecond;
    width = kSecond;
    pos += 3;
    if (pos < s.size() && s[pos] == '.') {
      ++pos;
      size_t digits = 0;
      EpochMs ms = 0;
      while (pos < s.size() && IsAsciiDigit(s[pos])) {
        if (digits < 3) {
          ms = ms * 10 + (s[pos] - '0');
          width /= 10;
        }
        ++digits;
        ++pos;
      }
      if (digits == 0) return std::nullopt;
      for (size_t i = digits; i < 3; ++i) ms *= 10;
      offset_in_day += ms;
    }
  }
  EpochMs zone = 0;  // the argument's offset from UTC
  if (pos < s.size()) {
    const char c = s[pos];
    if (c == 'Z' || c == 'z') {
      ++pos;
    } else if (c == '+' || c == '-') {
      const auto zh = ParseFixedDigits(s, pos + 1, 2);
      size_t mpos = pos + 3;
      if (mpos < s.size() && s[mpos] == ':') ++mpos;
      const auto zm = ParseFixedDigits(s, mpos, 2);
      if (!zh || !zm || *zh > 23 || *zm > 59) return std::nullopt;
      zone = (*zh * 60 + *zm) * kMinute * (c == '-' ? -1 : 1);
      pos = mpos + 2;
    } else {
      return std::nullopt;
    }
  }
  if (pos != s.size()) return std::nullopt;
  const EpochMs begin = day_start + offset_in_day - zone;
  return TimeSpan{begin, begin + width};
}

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

constexpr unsigned Bit(Op op) { return 1u << static_cast<unsigned>(op); }
constexpr unsigned kEqualityOps = Bit(Op::kEq) | Bit(Op::kNe);
constexpr unsigned kOrderOps = Bit(Op::kGt) | Bit(Op::kGe) | Bit(Op::kLt) | Bit(Op::kLe);
constexpr unsigned kSetOps = Bit(Op::kIn) | Bit(Op::kNotIn) | Bit(Op::kMatches) | Bit(Op::kNotMatches);
constexpr unsigned kExistOps = Bit(Op::kExists) | Bit(Op::kNotExists);

struct SubjectInfo {
  std::string_view name;  // as ECS spells it; matched case-insensitively
  Subject subject;
  unsigned ops;           // the operators ECS lists for the subject
  std::string_view ops_text;
};

constexpr std::string_view kSetOpsText = "==, !=, in, !in, =~, !~";
constexpr std::string_view kOrderOpsText = "==, !=, >, >=, <, <=";

constexpr SubjectInfo kSubjects[] = {
    {"agentConnected", Subject::kAgentConnected, kEqualityOps | kSetOps, kSetOpsText},
    {"agentVersion", Subject::kAgentVersion, kEqualityOps | kOrderOps, kOrderOpsText},
    {"ec2InstanceId", Subject::kEc2InstanceId, kEqualityOps | kSetOps, kSetOpsText},
    {"registeredAt", Subject::kRegisteredAt, kEqualityOps | kOrderOps, kOrderOpsText},
    {"runningTasksCount", Subject::kRunningTasksCount, kEqualityOps | kOrderOps, kOrderOpsText},
    {"task:group", Subject::kTaskGroup, kEqualityOps | kSetOps, kSetOpsText},
    {"instanceId", Subject::kInstanceId, kEqualityOps | kSetOps, kSetOpsText},
};
constexpr std::string_view kAttributePrefix = "attribute:";

struct OperatorInfo {
  std::string_view spelling;  // matched case-insensitively
  Op op;
};

constexpr OperatorInfo kOperators[] = {
    {"==", Op::kEq},           {"equals", Op::kEq},
    {"!=", Op::kNe},           {"not_equals", Op::kNe},
    {">", Op::kGt},            {"greater_than", Op::kGt},
    {">=", Op::kGe},           {"greater_than_equal", Op::kGe},
    {"<", Op::kLt},            {"less_than", Op::kLt},
    {"<=", Op::kLe},           {"less_than_equal", Op::kLe},
    {"exists", Op::kExists},   {"!exists", Op::kNotExists},
    {"not_exists", Op::kNotExists},
    {"in", Op::kIn},           {"!in", Op::kNotIn},
    {"not_in", Op::kNotIn},
    {"=~", Op::kMatches},      {"matches", Op::kMatches},
    {"!~", Op::kNotMatches},   {"not_matches", Op::kNotMatches},
};

std::optional<Op> LookUpOperator(std::string_view token) {
  for (const auto& o : kOperators)
    if (EqualsIgnoreCase(token, o.spelling)) return o.op;
  return std::nullopt;
}

// Positive form of an operator and whether the result is negated.
std::pair<Op, bool> Positive(Op op) {
  switch (op) {
    case Op::kNe: return {Op::kEq, true};
    case Op::kNotExists: return {Op::kExists, true};
    case Op::kNotIn: return {Op::kIn, true};
    case Op::kNotMatches: return {Op::kMatches, true};
    default: return {op, false};
  }
}

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

}  // namespace

// ---- The tree ---------------------------------------------------------------------------------------------

class Expression {
 public:
  struct Predicate {
    Subject subject = Subject::kAttribute;
    std::string attribute;  // kAttribute: the attribute name
    Op op = Op::kEq;        // positive form: kEq, kGt, kGe, kLt, kLe, kExists, kIn or kMatches
    bool negated = false;
    std::vector<Operand> operands;
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

namespace {

// ---- Evaluation -------------------------------------------------------------------------------------------

using Predicate = Expression::Predicate;

bool AnyPatternMatches(const Predicate& p, std::string_view value) {
  for (const auto& o : p.operands)
    if (o.pattern.Matches(value)) return true;
  return false;
}

bool OrderHolds(Op op, int cmp) {
  switch (op) {
    case Op::kGt: return cmp > 0;
    case Op::kGe: return cmp >= 0;
    case Op::kLt: return cmp < 0;
    case Op::kLe: return cmp <= 0;
    default: return false;
  }
}

// A string subject (attribute, ec2InstanceId, instanceId): == and =~ match the pattern, in any of them,
// ordering numerically when both sides are numbers.
bool HoldsForString(const Predicate& p, std::string_view value) {
  switch (p.op) {
    case Op::kExists: return true;
    case Op::kEq:
    case Op::kMatches:
    case Op::kIn: return AnyPatternMatches(p, value);
    default: break;
  }
  const Operand& arg = p.operands.front();
  if (arg.number) {
    if (auto n = ParseNumber(value)) return OrderHolds(p.op, CompareNumbers(*n, *arg.number));
  }
  return OrderHolds(p.op, Sign(value.compare(arg.text)));
}

bool HoldsForVersion(const Predicate& p, std::string_view value) {
  const Operand& arg = p.operands.front();
  const bool versions = arg.is_version && IsVersion(value);
  if (p.op == Op::kEq) {
    if (arg.pattern.HasWildcard() || !versions) return arg.pattern.Matches(value);
    return CompareVersions(value, arg.text) == 0;
  }
  return OrderHolds(p.op, versions ? CompareVersions(value, arg.text) : Sign(value.compare(arg.text)));
}

bool HoldsForTime(const Predicate& p, EpochMs t) {
  const TimeSpan& span = p.operands.front().time;
  switch (p.op) {
    case Op::kEq: return t >= span.begin && t < span.end;
    case Op::kLt: return t < span.begin;
    case Op::kGe: return t >= span.begin;
    case Op::kGt: return t >= span.end;
    case Op::kLe: return t < span.end;
    default: return false;
  }
}

bool HoldsForInteger(const Predicate& p, int64_t v) {
  const int64_t arg = p.operands.front().integer;
  if (p.op == Op::kEq) return v == arg;
  return OrderHolds(p.op, v < arg ? -1 : (v > arg ? 1 : 0));
}

bool HoldsForBool(const Predicate& p, bool v) {
  if (p.op == Op::kMatches) return p.operands.front().pattern.Matches(v ? "true" : "false");
  for (const auto& o : p.operands)  // == and in
    if (o.boolean == v) return true;
  return false;
}

bool HoldsForTaskGroup(const Predicate& p, const InstanceLoad& load) {
  for (const auto& o : p.operands) {
    if (!o.pattern.HasWildcard()) {
      auto it = load.group_counts.find(o.text);
      if (it != load.group_counts.end() && it->second > 0) return true;
      continue;
    }
    for (const auto& [group, count] : load.group_counts)
      if (count > 0 && o.pattern.Matches(group)) return true;
  }
  return false;
}

// HoldsPositive evaluates the positive form of the predicate; a missing value makes it false.
bool HoldsPositive(const Predicate& p, const ContainerInstance& instance, const InstanceLoad& load) {
  switch (p.subject) {
    case Subject::kAttribute: {
      const Attribute* attr = instance.FindAttribute(p.attribute);
      if (attr == nullptr) return false;
      return HoldsForString(p, attr->value ? std::string_view(*attr->value) : std::string_view());
    }
    case Subject::kAgentConnected: return HoldsForBool(p, instance.agent_connected);
    case Subject::kAgentVersion:
      return !instance.agent_version.empty() && HoldsForVersion(p, instance.agent_version);
    case Subject::kEc2InstanceId:
      return !instance.ec2_instance_id.empty() && HoldsForString(p, instance.ec2_instance_id);
    case Subject::kInstanceId: return !instance.id.empty() && HoldsForString(p, instance.id);
    case Subject::kRegisteredAt: return instance.registered_at != 0 && HoldsForTime(p, instance.registered_at);
    case Subject::kRunningTasksCount: return HoldsForInteger(p, instance.running_tasks_count);
    case Subject::kTaskGroup: return HoldsForTaskGroup(p, load);
  }
  return false;
}

bool EvaluateNode(const Expression& e, uint32_t index, const ContainerInstance& instance,
                  const InstanceLoad& load) {
  const Expression::Node& node = e.nodes[index];
  switch (node.kind) {
    case Expression::Kind::kAnd:
      for (uint32_t child : node.children)
        if (!EvaluateNode(e, child, instance, load)) return false;
      return true;
    case Expression::Kind::kOr:
      for (uint32_t child : node.children)
        if (EvaluateNode(e, child, instance, load)) return true;
      return false;
    case Expression::Kind::kNot: return !EvaluateNode(e, node.children.front(), instance, load);
    case Expression::Kind::kPredicate: {
      const Predicate& p = e.predicates[node.predicate];
      return HoldsPositive(p, instance, load) != p.negated;
    }
  }
  return false;
}

// ---- Parsing ----------------------------------------------------------------------------------------------

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Characters of subjects and of the keywords and, or, not: attribute names may hold dots, dashes, slashes.
bool IsNameChar(char c) {
  return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '_' || c == '-' || c == '.' || c == '/' || c == '\\' ||
         c == ':' || c == '@';
}

bool IsOperatorChar(char c) {
  return c == '=' || c == '!' || c == '<' || c == '>' || c == '~' || c == '&' || c == '|';
}

// Characters of an unquoted value: anything visible but brackets, commas, quotes and operator characters.
bool IsBareValueChar(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u <= 0x20 || u == 0x7f) return false;
  switch (c) {
    case '(': case ')': case '[': case ']': case ',': case '\'': case '"': return false;
    default: return !IsOperatorChar(c);
  }
}

// Quote renders a piece of the input for an error message: at most 40 characters, printable ASCII only (the
// message reaches JSON and logs).
std::string Quote(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    out += (u >= 0x20 && u < 0x7f) ? s[i] : '?';
  }
  if (s.size() > kMax) out += "...";
  out += "'";
  return out;
}

struct Value {
  std::string text;
  size_t position = 0;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view label, Expression& out)
      : text_(text), label_(label), out_(out) {}

  Status Run() {
    auto root = ParseOr(0);
    if (!root.ok()) return root.status();
    SkipSpaces();
    if (pos_ < text_.size()) {
      if (text_[pos_] == ')') return Error("unexpected ')' without a matching '('", pos_);
      return Error("expected 'and', 'or' or the end of the expression", pos_, TokenAt(pos_));
    }
    out_.root = *root;
    return Status::Ok();
  }

 private:
  using Node = Expression::Node;
  using Kind = Expression::Kind;

  // Error: "<label>: <what> at position <1-based>[, found '<token>'][ (<note>)]".
  Status Error(std::string_view what, size_t position, std::string_view found = {},
               std::string_view note = {}) const {
    std::string m(label_);
    m += ": ";
    m += what;
    m += " at position ";
    m += std::to_string(position + 1);
    if (!found.empty()) {
      m += ", found ";
      m += Quote(found);
    } else if (position >= text_.size()) {
      m += " (the end of the expression)";
    }
    if (!note.empty()) {
      m += " (";
      m += note;
      m += ")";
    }
    return Status::InvalidParameter(std::move(m));
  }

  void SkipSpaces() {
    while (pos_ < text_.size() && IsSpace(text_[pos_])) ++pos_;
  }

  std::string_view NameAt(size_t at) const {
    size_t end = at;
    while (end < text_.size() && IsNameChar(text_[end])) ++end;
    return text_.substr(at, end - at);
  }

  // TokenAt is the piece of input at `at` that an error message shows as "found".
  std::string_view TokenAt(size_t at) const {
    if (at >= text_.size()) return {};
    if (std::string_view name = NameAt(at); !name.empty()) return name;
    size_t end = at;
    while (end < text_.size() && IsOperatorChar(text_[end])) ++end;
    if (end == at) end = at + 1;
    return text_.substr(at, end - at);
  }

  uint32_t AddNode(Node node) {
    out_.nodes.push_back(std::move(node));
    return static_cast<uint32_t>(out_.nodes.size() - 1);
  }

  // Connective: consumes "and"/"&&" (want_or false) or "or"/"||" (want_or true) if it comes next.
  bool TakeConnective(bool want_or) {
    SkipSpaces();
    const std::string_view symbol = want_or ? "||" : "&&";
    if (text_.substr(pos_).starts_with(symbol)) {
      pos_ += 2;
      return true;
    }
    const std::string_view name = NameAt(pos_);
    if (EqualsIgnoreCase(name, want_or ? "or" : "and")) {
      pos_ += name.size();
      return true;
    }
    return false;
  }

  // expression := and-expression { ("or" | "||") and-expression }
  Result<uint32_t> ParseOr(int depth) {
    auto first = ParseAnd(depth);
    if (!first.ok()) return first;
    if (!TakeConnective(/*want_or=*/true)) return first;
    Node node{Kind::kOr, {*first}, 0};
    do {
      auto next = ParseAnd(depth);
      if (!next.ok()) return next;
      node.children.push_back(*next);
    } while (TakeConnective(/*want_or=*/true));
    return AddNode(std::move(node));
  }

  // and-expression := term { ("and" | "&&") term }
  Result<uint32_t> ParseAnd(int depth) {
    auto first = ParseTerm(depth);
    if (!first.ok()) return first;
    if (!TakeConnective(/*want_or=*/false)) return first;
    Node node{Kind::kAnd, {*first}, 0};
    do {
      auto next = ParseTerm(depth);
      if (!next.ok()) return next;
      node.children.push_back(*next);
    } while (TakeConnective(/*want_or=*/false));
    return AddNode(std::move(node));
  }

  // term := ("not" | "!") term | "(" expression ")" | predicate. Each "(" and "not" is one level of depth.
  Result<uint32_t> ParseTerm(int depth) {
    SkipSpaces();
    if (pos_ >= text_.size()) return Error("expected a subject, '(' or 'not'", pos_);
    const size_t start = pos_;
    const char c = text_[pos_];
    const bool bang = c == '!' && (pos_ + 1 >= text_.size() || (text_[pos_ + 1] != '=' && text_[pos_ + 1] != '~'));
    const std::string_view name = NameAt(pos_);
    if (c == '(' || bang || EqualsIgnoreCase(name, "not")) {
      if (depth + 1 > kMaxDepth)
        return Error("nesting is deeper than " + std::to_string(kMaxDepth) + " levels", start);
      if (c != '(') {
        pos_ += bang ? 1 : name.size();
        auto operand = ParseTerm(depth + 1);
        if (!operand.ok()) return operand;
        return AddNode(Node{Kind::kNot, {*operand}, 0});
      }
      ++pos_;
      auto inner = ParseOr(depth + 1);
      if (!inner.ok()) return inner;
      SkipSpaces();
      if (pos_ < text_.size() && text_[pos_] == ')') {
        ++pos_;
        return inner;
      }
      return Error("expected 'and', 'or' or ')' to close the '(' from position " + std::to_string(start + 1), pos_,
                   TokenAt(pos_));
    }
    return ParsePredicate();
  }

  // predicate := subject operator [argument]
  Result<uint32_t> ParsePredicate() {
    const size_t subject_pos = pos_;
    const std::string_view name = NameAt(pos_);
    if (name.empty()) return Error("expected a subject, '(' or 'not'", pos_, TokenAt(pos_));

    Predicate p;
    const SubjectInfo* info = nullptr;
    static constexpr SubjectInfo kAttributeInfo{"attribute", Subject::kAttribute,
                                                kEqualityOps | kOrderOps | kSetOps | kExistOps, ""};
    if (StartsWithIgnoreCase(name, kAttributePrefix)) {
      if (name.size() == kAttributePrefix.size())
        return Error("expected an attribute name after 'attribute:'", subject_pos + name.size());
      info = &kAttributeInfo;
      p.attribute = std::string(name.substr(kAttributePrefix.size()));
    } else {
      for (const auto& s : kSubjects)
        if (EqualsIgnoreCase(name, s.name)) info = &s;
      if (info == nullptr)
        return Error("unknown subject " + Quote(name), subject_pos, {},
                     "expected attribute:NAME, agentConnected, agentVersion, ec2InstanceId, registeredAt, "
                     "runningTasksCount, task:group or instanceId");
    }
    p.subject = info->subject;
    pos_ += name.size();

    // The operator: a run of operator characters ("!" may lead a word: !exists, !in), or a word.
    SkipSpaces();
    const size_t op_pos = pos_;
    size_t end = pos_;
    while (end < text_.size() && IsOperatorChar(text_[end])) ++end;
    if (end == pos_ + 1 && text_[pos_] == '!') {
      while (end < text_.size() && (IsAsciiAlpha(text_[end]) || text_[end] == '_')) ++end;
    } else if (end == pos_) {
      while (end < text_.size() && (IsAsciiAlpha(text_[end]) || text_[end] == '_')) ++end;
    }
    const std::string_view op_text = text_.substr(pos_, end - pos_);
    if (op_text.empty()) return Error("expected an operator after " + Quote(name), op_pos, TokenAt(op_pos));
    const auto op = LookUpOperator(op_text);
    if (!op) return Error("unknown operator " + Quote(op_text) + " after " + Quote(name), op_pos);
    if ((info->ops & Bit(*op)) == 0)
      return Error("operator " + Quote(op_text) + " is not valid for " + std::string(info->name), op_pos, {},
                   "valid: " + std::string(info->ops_text));
    pos_ = end;
    std::tie(p.op, p.negated) = Positive(*op);

    // The argument.
    std::vector<Value> values;
    if (p.op == Op::kIn) {
      if (auto s = ParseList(op_text, values); !s.ok()) return s;
    } else if (p.op != Op::kExists) {
      SkipSpaces();
      auto v = ParseValue();
      if (!v.ok()) return v.status();
      if (!*v) return Error("expected a value after " + Quote(op_text), pos_, TokenAt(pos_));
      values.push_back(std::move(**v));
    }
    for (auto& v : values) {
      auto operand = MakeOperand(p, name, std::move(v));
      if (!operand.ok()) return operand.status();
      p.operands.push_back(std::move(*operand));
    }
    out_.predicates.push_back(std::move(p));
    return AddNode(Node{Kind::kPredicate, {}, static_cast<uint32_t>(out_.predicates.size() - 1)});
  }

  // ParseValue reads a bare or quoted value at pos_; nullopt when none starts there.
  Result<std::optional<Value>> ParseValue() {
    const size_t start = pos_;
    if (pos_ < text_.size() && (text_[pos_] == '\'' || text_[pos_] == '"')) {
      const size_t close = text_.find(text_[pos_], pos_ + 1);
      if (close == std::string_view::npos)
        return Error(std::string("unterminated quoted value, expected a closing ") + text_[pos_] +
                         " for the quote",
                     start);
      pos_ = close + 1;
      return std::optional<Value>(Value{std::string(text_.substr(start + 1, close - start - 1)), start});
    }
    while (pos_ < text_.size() && IsBareValueChar(text_[pos_])) ++pos_;
    if (pos_ == start) return std::optional<Value>();
    return std::optional<Value>(Value{std::string(text_.substr(start, pos_ - start)), start});
  }

  // list := "[" value { "," value } "]" | "(" value { "," value } ")"
  Status ParseList(std::string_view op_text, std::vector<Value>& values) {
    SkipSpaces();
    const size_t open_pos = pos_;
    if (pos_ >= text_.size() || (text_[pos_] != '[' && text_[pos_] != '(')) {
      return Error("expected a list such as [a, b] after " + Quote(op_text), pos_, TokenAt(pos_));
    }
    const char close = text_[pos_] == '[' ? ']' : ')';
    ++pos_;
    while (true) {
      SkipSpaces();
      auto v = ParseValue();
      if (!v.ok()) return v.status();
      if (!*v) return Error("expected a value in the list", pos_, TokenAt(pos_));
      values.push_back(std::move(**v));
      SkipSpaces();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == close) {
        ++pos_;
        return Status::Ok();
      }
      return Error(std::string("expected ',' or '") + close + "' to close the list opened at position " +
                       std::to_string(open_pos + 1),
                   pos_, TokenAt(pos_));
    }
  }

  // MakeOperand converts a value to what the predicate's subject compares it with.
  Result<Operand> MakeOperand(const Predicate& p, std::string_view subject_text, Value v) {
    Operand o;
    o.pattern = WildcardPattern(v.text);
    switch (p.subject) {
      case Subject::kAttribute:
        if (p.op == Op::kGt || p.op == Op::kGe || p.op == Op::kLt || p.op == Op::kLe)
          o.number = ParseNumber(v.text);
        break;
      case Subject::kEc2InstanceId:
      case Subject::kInstanceId:
      case Subject::kTaskGroup: break;
      case Subject::kAgentVersion: o.is_version = IsVersion(v.text); break;
      case Subject::kAgentConnected:
        if (p.op == Op::kMatches) break;
        if (EqualsIgnoreCase(v.text, "true")) {
          o.boolean = true;
        } else if (!EqualsIgnoreCase(v.text, "false")) {
          return Error("expected true or false for agentConnected, got " + Quote(v.text), v.position);
        }
        break;
      case Subject::kRunningTasksCount: {
        const auto n = ParseNumber(v.text);
        if (!n || !n->is_integer)
          return Error("expected an integer for " + Quote(subject_text) + ", got " + Quote(v.text), v.position);
        o.integer = n->integer;
        break;
      }
      case Subject::kRegisteredAt: {
        const auto span = ParseTimeSpan(v.text);
        if (!span)
          return Error("expected a date (2018-06-18), a datetime (2018-06-18T22:28:28Z) or epoch seconds for " +
                           Quote(subject_text) + ", got " + Quote(v.text),
                       v.position);
        o.time = *span;
        break;
      }
    }
    o.text = std::move(v.text);
    return o;
  }

  std::string_view text_;
  std::string_view label_;
  Expression& out_;
  size_t pos_ = 0;
};

Result<ExpressionPtr> ParseChecked(std::string_view text, std::string_view label) {
  if (text.size() > kMaxExpressionLength) {
    return Status::InvalidParameter(std::string(label) + ": the expression is longer than " +
                                    std::to_string(kMaxExpressionLength) + " characters (" +
                                    std::to_string(text.size()) + ")");
  }
  bool blank = true;
  for (char c : text) blank = blank && IsSpace(c);
  if (blank) return Status::InvalidParameter(std::string(label) + ": the expression is empty");

  auto expr = std::make_shared<Expression>();
  Parser parser(text, label, *expr);
  if (Status s = parser.Run(); !s.ok()) return s;
  return ExpressionPtr(std::move(expr));
}

}  // namespace

Result<ExpressionPtr> Parse(std::string_view text) { return Parse(text, "memberOf expression"); }

Result<ExpressionPtr> Parse(std::string_view text, std::string_view label) {
  // Nothing in the parser throws by design; an allocation failure must still not escape to the caller.
  try {
    return ParseChecked(text, label);
  } catch (const std::exception& e) {
    return Status::Server(std::string(label) + ": could not parse the expression: " + e.what());
  }
}

bool Evaluate(const Expression& expr, const ContainerInstance& instance, const InstanceLoad& load) {
  if (expr.nodes.empty()) return false;
  return EvaluateNode(expr, expr.root, instance, load);
}

}  // namespace gpupack::query
