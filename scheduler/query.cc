// The ECS cluster query language's evaluator (Evaluate in scheduler/query.h): walks the tree that the parser
// (query_parser.cc) built, against one container instance and the tasks on it, and compares.
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
#include "scheduler/query.h"

#include <cstdint>
#include <string_view>

#include "scheduler/query_parser.h"

namespace gpupack::query {
namespace {

using detail::CompareNumbers;
using detail::IsVersion;
using detail::Op;
using detail::Operand;
using detail::ParseNumber;
using detail::Sign;
using detail::Subject;
using detail::TimeSpan;

// ---- Values -----------------------------------------------------------------------------------------------

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

}  // namespace

bool Evaluate(const Expression& expr, const ContainerInstance& instance, const InstanceLoad& load) {
  if (expr.nodes.empty()) return false;
  return EvaluateNode(expr, expr.root, instance, load);
}

}  // namespace gpupack::query
