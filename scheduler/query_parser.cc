// The ECS cluster query language's parser (Parse in scheduler/query.h): a hand-written recursive descent that
// turns the text into the tree of scheduler/query_parser.h. The evaluator is query.cc.
//
// Parse does all the work that does not depend on the instance: it resolves subjects and operators, splits
// wildcard patterns, parses numbers, versions and dates. What it accepts (the tests pin each one):
// - Each subject accepts the operators ECS lists for it; attributes accept all of them.
// - Subject names and keywords are case-insensitive; attribute names and values are case-sensitive.
// - A value is bare (anything visible but brackets, commas, quotes and operator characters) or quoted with ' or ".
// - registeredAt's argument is a date (2018-06-18), a datetime (2018-06-18T22:28:28Z, an offset or none: UTC)
//   or epoch seconds, each naming a span at its own precision (query.cc compares against the span).
// - Errors name the position and what was expected; nothing is longer than kMaxExpressionLength or nested deeper
//   than kMaxDepth.
#include "scheduler/query_parser.h"

#include <chrono>
#include <charconv>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "scheduler/query.h"

namespace gpupack::query {
namespace {

using detail::AllDigits;
using detail::IsAsciiDigit;
using detail::IsVersion;
using detail::Op;
using detail::Operand;
using detail::ParseNumber;
using detail::Subject;
using detail::TimeSpan;
using detail::WildcardPattern;
using Predicate = Expression::Predicate;

// ---- Characters -------------------------------------------------------------------------------------------

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

// ---- Dates ------------------------------------------------------------------------------------------------

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

// ---- Subjects and operators -------------------------------------------------------------------------------

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

  // expression     := and-expression { ("or" | "||") and-expression }
  // and-expression := term { ("and" | "&&") term }
  // ParseOr reads an expression; ParseChain reads either rule (want_or), one node for a chain of two or more.
  Result<uint32_t> ParseOr(int depth) { return ParseChain(depth, /*want_or=*/true); }
  Result<uint32_t> ParseChain(int depth, bool want_or) {
    auto operand = [&] { return want_or ? ParseChain(depth, /*want_or=*/false) : ParseTerm(depth); };
    auto first = operand();
    if (!first.ok()) return first;
    if (!TakeConnective(want_or)) return first;
    Node node{want_or ? Kind::kOr : Kind::kAnd, {*first}, 0};
    do {
      auto next = operand();
      if (!next.ok()) return next;
      node.children.push_back(*next);
    } while (TakeConnective(want_or));
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

}  // namespace gpupack::query
