// The ECS cluster query language: parsing and evaluation against a container instance.
//
// Used by memberOf placement constraints and by ListContainerInstances' `filter`. Grammar (ECS's):
//   expression := term { ("and" | "&&" | "or" | "||") term }      (and binds tighter than or)
//   term       := "not" term | "!" term | "(" expression ")" | "not(" expression ")" | predicate
//   predicate  := subject operator [argument]
// Subjects: attribute:NAME, agentConnected, agentVersion, ec2InstanceId, registeredAt, runningTasksCount,
// task:group, instanceId (ours: the container instance id). Operators: == != > >= < <= exists !exists in !in
// =~ !~. Pure: no I/O; a parsed Expression is immutable and may be shared between threads.
#pragma once

#include <memory>
#include <string_view>

#include "scheduler/cluster_state.h"
#include "scheduler/model.h"
#include "base/status.h"

namespace gpupack::query {

class Expression;  // opaque AST
using ExpressionPtr = std::shared_ptr<const Expression>;

// Longest expression accepted (ECS: 2000 characters) and deepest nesting of parentheses/not.
inline constexpr size_t kMaxExpressionLength = 2000;
inline constexpr int kMaxDepth = 32;

// Parse returns the AST, or InvalidParameterException with a message that names the position and what was
// expected (e.g. "memberOf expression: expected an operator after 'attribute:gpu' at position 14").
Result<ExpressionPtr> Parse(std::string_view text);
// Parse with another label at the head of error messages, e.g. "filter" for ListContainerInstances.
Result<ExpressionPtr> Parse(std::string_view text, std::string_view label);

// Evaluate answers whether `instance` (with the tasks summarized in `load`) satisfies the expression.
bool Evaluate(const Expression& expr, const ContainerInstance& instance, const InstanceLoad& load);

}  // namespace gpupack::query
