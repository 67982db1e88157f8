// Tests for the cluster query language: every subject and operator, precedence, quoting, wildcards, missing
// values, registeredAt, and refused expressions. Each row says why its answer is what it is.
#include "scheduler/query.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace gpupack {
namespace {

// ---- Fixture builders -------------------------------------------------------------------------------------

// Instance builds a ContainerInstance: Instance().Attr("ecs.os-type", "linux").Running(3).Build().
class Instance {
 public:
  Instance() {
    ci_.id = "f3a1c2e4";
    ci_.arn = "arn:aws:ecs:us-east-1:123456789012:container-instance/prod/f3a1c2e4";
    ci_.cluster = "prod";
  }
  Instance& Id(std::string id) {
    ci_.id = std::move(id);
    return *this;
  }
  Instance& Ec2(std::string id) {
    ci_.ec2_instance_id = std::move(id);
    return *this;
  }
  Instance& Agent(std::string version, bool connected) {
    ci_.agent_version = std::move(version);
    ci_.agent_connected = connected;
    return *this;
  }
  Instance& Attr(std::string name, std::string value) {
    ci_.attributes.push_back({std::move(name), std::move(value)});
    return *this;
  }
  Instance& Flag(std::string name) {  // an attribute without a value
    ci_.attributes.push_back({std::move(name), std::nullopt});
    return *this;
  }
  Instance& RegisteredAt(EpochMs at) {
    ci_.registered_at = at;
    return *this;
  }
  Instance& Running(int count) {
    ci_.running_tasks_count = count;
    return *this;
  }
  ContainerInstance Build() const {
    ContainerInstance ci = ci_;
    std::sort(ci.attributes.begin(), ci.attributes.end(),
              [](const Attribute& a, const Attribute& b) { return a.name < b.name; });
    return ci;
  }

 private:
  ContainerInstance ci_;
};

// Load builds the InstanceLoad of an instance: Load().Group("service:web", 2).Build().
class Load {
 public:
  Load& Group(std::string group, int tasks) {
    load_.group_counts[std::move(group)] = tasks;
    return *this;
  }
  InstanceLoad Build() const { return load_; }

 private:
  InstanceLoad load_;
};

// 2023-06-15T12:34:56.789Z: `date -u -d 2023-06-15T12:34:56Z +%s` = 1686832496, plus 789 ms.
constexpr EpochMs kRegistered = 1686832496789;

// The instance most tables run against: a g5.2xlarge with 3 running tasks.
ContainerInstance G5() {
  return Instance()
      .Ec2("i-0abc1234def567890")
      .Agent("1.57.1", true)
      .RegisteredAt(kRegistered)
      .Running(3)
      .Attr("ecs.instance-type", "g5.2xlarge")
      .Attr("ecs.availability-zone", "us-east-1a")
      .Attr("ecs.os-type", "linux")
      .Attr("gpu.count", "4")
      .Attr("gpu.memory-mib", "24576")
      .Attr("gpu.model", "NVIDIA A10G")
      .Attr("team/owner", "ml-infra")
      .Attr("priority", "-1.5")
      .Attr("rack", "r10")
      .Attr("seq", "9007199254740993")  // 2^53 + 1: not exact as a double
      .Attr("word", "abcabc")
      .Attr("glob", "a*b")
      .Flag("com.amazonaws.ecs.capability.docker-remote-api.1.17")
      .Flag("yes")
      .Build();
}

// Its tasks: two of service:web, one of family:train; service:old's tasks have all stopped.
InstanceLoad G5Load() {
  return Load().Group("service:web", 2).Group("family:train", 1).Group("service:old", 0).Build();
}

// An instance that reports almost nothing: no EC2 id (EXTERNAL), no agent version, never registered, no tasks.
ContainerInstance Bare() { return Instance().Id("").Ec2("").Agent("", false).RegisteredAt(0).Running(0).Build(); }

// ---- Table runners ----------------------------------------------------------------------------------------

struct Case {
  std::string expression;
  bool want;
  const char* why;
};

void ExpectTable(const std::vector<Case>& cases, const ContainerInstance& instance, const InstanceLoad& load) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expression + "    // " + c.why);
    auto expr = query::Parse(c.expression);
    if (!expr.ok()) {
      ADD_FAILURE() << "refused: " << expr.status().message();
      continue;
    }
    EXPECT_EQ(query::Evaluate(**expr, instance, load), c.want);
  }
}

struct Refusal {
  std::string expression;
  std::string message;  // expected substring of the error message
  const char* why;
};

void ExpectRefused(const std::vector<Refusal>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expression.substr(0, 80) + "    // " + c.why);
    auto expr = query::Parse(c.expression);
    if (expr.ok()) {
      ADD_FAILURE() << "accepted";
      continue;
    }
    EXPECT_EQ(expr.status().code(), ErrorCode::kInvalidParameter);
    EXPECT_NE(expr.status().message().find(c.message), std::string::npos) << expr.status().message();
    EXPECT_EQ(expr.status().message().rfind("memberOf expression: ", 0), 0u) << expr.status().message();
  }
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// ---- Attributes -------------------------------------------------------------------------------------------

TEST(QueryTest, AttributeOperators) {
  ExpectTable(
      {
          {"attribute:ecs.instance-type == g5.2xlarge", true, "exact text"},
          {"attribute:ecs.instance-type equals g5.2xlarge", true, "equals is =="},
          {"attribute:ecs.instance-type == g5.xlarge", false, "different text"},
          {"attribute:ecs.instance-type == G5.2XLARGE", false, "values are case-sensitive"},
          {"attribute:ecs.instance-type != g5.xlarge", true, "g5.2xlarge is not g5.xlarge"},
          {"attribute:ecs.instance-type not_equals g5.2xlarge", false, "not_equals is !="},
          {"attribute:gpu.count > 2", true, "4 > 2"},
          {"attribute:gpu.count > 10", false, "numeric: 4 < 10 (as text \"4\" > \"10\")"},
          {"attribute:gpu.count greater_than 3", true, "4 > 3"},
          {"attribute:gpu.count >= 4", true, "4 >= 4"},
          {"attribute:gpu.count greater_than_equal 5", false, "4 < 5"},
          {"attribute:gpu.memory-mib < 40960", true, "24576 < 40960"},
          {"attribute:gpu.memory-mib less_than 24576", false, "24576 is not < 24576"},
          {"attribute:gpu.memory-mib <= 24576", true, "24576 <= 24576"},
          {"attribute:gpu.memory-mib less_than_equal 24575.5", false, "decimal argument: 24576 > 24575.5"},
          {"attribute:gpu.count >= 4.0", true, "ordering is numeric: 4 >= 4.0"},
          {"attribute:gpu.count == 4.0", false, "== compares text, as ECS's string equality"},
          {"attribute:priority < -1", true, "negative decimal: -1.5 < -1"},
          {"attribute:priority > -2", true, "-1.5 > -2"},
          {"attribute:seq > 9007199254740992", true, "integers compare exactly, beyond a double's 2^53"},
          {"attribute:rack > r09", true, "not numbers: byte-wise \"r10\" > \"r09\""},
          {"attribute:rack < r9", true, "byte-wise, no natural sort: \"r10\" < \"r9\""},
          {"attribute:ecs.os-type >= 10", true, "one side is not a number: \"linux\" > \"10\" byte-wise"},
          {"attribute:ecs.os-type exists", true, "the attribute is set"},
          {"attribute:ecs.os-type !exists", false, "the attribute is set"},
          {"attribute:ecs.os-type not_exists", false, "not_exists is !exists"},
          {"attribute:ecs.availability-zone in [us-east-1a, us-east-1b]", true, "us-east-1a is listed"},
          {"attribute:ecs.availability-zone in (us-east-1b, us-east-1c)", false, "a (list) is a list too"},
          {"attribute:ecs.availability-zone !in [us-east-1b]", true, "us-east-1a is not listed"},
          {"attribute:ecs.availability-zone not_in ['us-east-1a']", false, "not_in is !in; quoted item"},
          {"attribute:ecs.availability-zone in [us-east-1a]", true, "one-item list"},
          {"attribute:ecs.instance-type =~ g5.*", true, "ECS's own example shape"},
          {"attribute:ecs.instance-type matches p4*", false, "matches is =~"},
          {"attribute:ecs.instance-type !~ p4*", true, "g5.2xlarge does not match p4*"},
          {"attribute:ecs.instance-type not_matches *.2xlarge", false, "not_matches is !~"},
          {"attribute:team/owner == ml-infra", true, "slash in the attribute name"},
          {"attribute:com.amazonaws.ecs.capability.docker-remote-api.1.17 exists", true, "valueless attribute"},
          {"attribute:com.amazonaws.ecs.capability.docker-remote-api.1.17 == ''", true, "no value compares as \"\""},
          {"attribute:gpu.model == 'NVIDIA A10G'", true, "single quotes keep the space"},
          {"attribute:gpu.model == \"NVIDIA A10G\"", true, "double quotes too"},
          {"attribute:gpu.model == NVIDIA", false, "NVIDIA is not NVIDIA A10G: only quotes keep a space"},
          {"attribute:ecs.os-type == 'linux'", true, "quoting a plain value changes nothing"},
          {"ATTRIBUTE:ecs.os-type EXISTS", true, "keywords and the attribute: prefix are case-insensitive"},
          {"attribute:ECS.OS-TYPE exists", false, "attribute names are case-sensitive"},
          {"attribute:ecs.os-type==linux", true, "no spaces around the operator"},
          {"  attribute:ecs.os-type\t==\nlinux  ", true, "any whitespace between tokens"},
      },
      G5(), G5Load());
}

TEST(QueryTest, MissingAttributeIsFalseExceptNegatives) {
  ExpectTable(
      {
          {"attribute:nope == x", false, "no value to be equal"},
          {"attribute:nope != x", true, "negation of =="},
          {"attribute:nope > 1", false, "no value to order"},
          {"attribute:nope >= 1", false, "no value to order"},
          {"attribute:nope < 1", false, "no value to order"},
          {"attribute:nope <= 1", false, "no value to order"},
          {"attribute:nope exists", false, "missing"},
          {"attribute:nope !exists", true, "missing"},
          {"attribute:nope in [x, y]", false, "no value to be listed"},
          {"attribute:nope !in [x, y]", true, "negation of in"},
          {"attribute:nope =~ *", false, "even * needs a value"},
          {"attribute:nope !~ *", true, "negation of =~"},
          {"attribute:nope == ''", false, "missing is not the empty string"},
          {"not attribute:nope == x", true, "not of a false predicate"},
      },
      G5(), G5Load());
}

TEST(QueryTest, Wildcards) {
  ExpectTable(
      {
          {"attribute:ecs.instance-type =~ *", true, "* matches anything"},
          {"attribute:ecs.instance-type =~ **", true, "consecutive stars are one"},
          {"attribute:ecs.instance-type =~ g5*", true, "prefix"},
          {"attribute:ecs.instance-type =~ *xlarge", true, "suffix"},
          {"attribute:ecs.instance-type =~ *.2x*", true, "inner part"},
          {"attribute:ecs.instance-type =~ g5", false, "anchored: g5 alone is not g5.2xlarge"},
          {"attribute:ecs.instance-type =~ 5.2xlarge", false, "anchored at the start"},
          {"attribute:ecs.instance-type =~ g5.2xlarg", false, "anchored at the end"},
          {"attribute:ecs.instance-type =~ g5.2xlarge*", true, "* matches the empty run"},
          {"attribute:ecs.instance-type =~ *g5.2xlarge*", true, "empty runs on both sides"},
          {"attribute:ecs.instance-type =~ g*5*2*x*e", true, "several inner parts in order"},
          {"attribute:ecs.instance-type =~ g*2*5*", false, "parts out of order"},
          {"attribute:ecs.instance-type =~ g5?2xlarge", false, "? is literal, not a wildcard"},
          {"attribute:ecs.instance-type =~ g5.2xlarge.", false, "one character too many"},
          {"attribute:ecs.availability-zone =~ us-*-1a", true, "star in the middle"},
          {"attribute:word =~ abc*abc", true, "prefix and suffix cover the value exactly"},
          {"attribute:word =~ abc*bcabc", false, "prefix and suffix would overlap: too long"},
          {"attribute:word =~ a*bca*c", true, "a|bca|b|c"},
          {"attribute:word =~ *ca*", true, "abc|ca|bc"},
          {"attribute:word =~ a*cc*", false, "no cc anywhere"},
          {"attribute:ecs.instance-type == g5.*", true, "== accepts wildcards like ECS"},
          {"attribute:ecs.instance-type == *", true, "== * is any value"},
          {"attribute:ecs.instance-type in [p4*, g5.*]", true, "in items are patterns as for =="},
          {"attribute:ecs.instance-type !in [p4*, g4*]", true, "no item matches"},
          {"attribute:glob == 'a*b'", true, "a * also matches a literal star (no escape)"},
          {"attribute:glob =~ a*", true, "value a*b starts with a"},
      },
      G5(), G5Load());
}

// ---- Other subjects ---------------------------------------------------------------------------------------

TEST(QueryTest, InstanceSubjects) {
  ExpectTable(
      {
          // agentConnected: the agent is connected.
          {"agentConnected == true", true, "connected"},
          {"agentConnected equals false", false, "connected"},
          {"agentConnected != false", true, "connected"},
          {"agentConnected == TRUE", true, "true/false are case-insensitive"},
          {"agentConnected in [false]", false, "true is not listed"},
          {"agentConnected !in [false]", true, "true is not listed"},
          {"agentConnected =~ t*", true, "matches the text \"true\""},
          {"agentConnected !~ t*", false, "matches the text \"true\""},
          {"AGENTCONNECTED == true", true, "subjects are case-insensitive"},
          // agentVersion 1.57.1, compared as a dotted version.
          {"agentVersion == 1.57.1", true, "same version"},
          {"agentVersion == 1.57.1.0", true, "a missing segment counts as 0"},
          {"agentVersion != 1.57.0", true, "1.57.1 is not 1.57.0"},
          {"agentVersion > 1.9.0", true, "segment-wise 57 > 9 (as text \"1.5\" < \"1.9\")"},
          {"agentVersion >= 1.57.1", true, "equal"},
          {"agentVersion < 1.100", true, "57 < 100"},
          {"agentVersion <= 1.57.0", false, "1 > 0 in the last segment"},
          {"agentVersion > v1.57.0", true, "a leading v is allowed"},
          {"agentVersion == 1.57.*", true, "== with a wildcard matches the text"},
          {"agentVersion < abc", true, "not a version: byte-wise \"1.57.1\" < \"abc\""},
          // ec2InstanceId i-0abc1234def567890.
          {"ec2InstanceId == i-0abc1234def567890", true, "same id"},
          {"ec2InstanceId != i-0abc1234def567890", false, "same id"},
          {"ec2InstanceId in ['i-0abc1234def567890', 'i-wxyz7890']", true, "ECS's quoted-list example shape"},
          {"ec2InstanceId !in [i-wxyz7890]", true, "not listed"},
          {"ec2InstanceId =~ i-0abc*", true, "prefix"},
          {"ec2InstanceId !~ i-*", false, "every id starts with i-"},
          // instanceId (ours) f3a1c2e4.
          {"instanceId == f3a1c2e4", true, "same id"},
          {"instanceId != f3a1c2e4", false, "same id"},
          {"instanceId in [aaaa, bbbb]", false, "not listed"},
          {"instanceId !in [aaaa]", true, "not listed"},
          {"instanceId =~ f3*", true, "prefix"},
          {"instanceId !~ *e4", false, "suffix matches"},
          // runningTasksCount 3, an integer.
          {"runningTasksCount == 3", true, "3 == 3"},
          {"runningTasksCount == 03", true, "integer compare, not text"},
          {"runningTasksCount != 3", false, "3 == 3"},
          {"runningTasksCount > 2", true, "3 > 2"},
          {"runningTasksCount >= 4", false, "3 < 4"},
          {"runningTasksCount < 4", true, "3 < 4"},
          {"runningTasksCount <= 3", true, "3 <= 3"},
          {"runningTasksCount > -1", true, "a signed argument"},
      },
      G5(), G5Load());
}

TEST(QueryTest, TaskGroup) {
  ExpectTable(
      {
          {"task:group == service:web", true, "two tasks of service:web (ECS's service:production shape)"},
          {"task:group == service:db", false, "no such task"},
          {"task:group == service:old", false, "its tasks are all STOPPED (count 0)"},
          {"task:group != service:db", true, "no task of service:db"},
          {"task:group != service:web", false, "a service:web task is there (not: some task of another group)"},
          {"task:group in [service:db, family:train]", true, "family:train is there"},
          {"task:group !in [service:db, service:old]", true, "neither is running there"},
          {"task:group =~ service:*", true, "service:web"},
          {"task:group =~ *:db", false, "no group ends in :db"},
          {"task:group =~ *:old", false, "stopped groups do not match patterns either"},
          {"task:group !~ family:*", false, "family:train matches"},
          {"task:group == service:*", true, "== with a wildcard"},
          {"TASK:GROUP == family:train", true, "subject case-insensitive"},
          {"not(task:group == service:web)", false, "ECS's anti-affinity example shape"},
      },
      G5(), G5Load());
}

TEST(QueryTest, MissingInstanceValues) {
  // Bare(): no EC2 id, no agent version, registeredAt unset, no id, disconnected agent, no tasks.
  ExpectTable(
      {
          {"ec2InstanceId == i-1", false, "no EC2 id"},
          {"ec2InstanceId != i-1", true, "no EC2 id"},
          {"ec2InstanceId in [i-1]", false, "no EC2 id"},
          {"ec2InstanceId !in [i-1]", true, "no EC2 id"},
          {"ec2InstanceId =~ *", false, "no EC2 id: even * needs a value"},
          {"ec2InstanceId !~ *", true, "no EC2 id"},
          {"agentVersion == 1.0", false, "no version reported"},
          {"agentVersion != 1.0", true, "no version reported"},
          {"agentVersion > 0", false, "no version reported"},
          {"agentVersion < 99", false, "no version reported"},
          {"registeredAt > 2000-01-01", false, "registeredAt unset"},
          {"registeredAt < 2100-01-01", false, "registeredAt unset"},
          {"registeredAt != 2000-01-01", true, "registeredAt unset"},
          {"instanceId == x", false, "no id"},
          {"instanceId != x", true, "no id"},
          {"agentConnected == false", true, "disconnected"},
          {"agentConnected == true", false, "disconnected"},
          {"task:group == web", false, "no tasks"},
          {"task:group != web", true, "no tasks"},
          {"task:group =~ *", false, "no tasks"},
          {"task:group !in [web]", true, "no tasks"},
          {"runningTasksCount == 0", true, "no tasks"},
      },
      Bare(), InstanceLoad{});
}

TEST(QueryTest, RegisteredAt) {
  // The instance registered at 2023-06-15T12:34:56.789Z. An argument names a span at its own precision.
  ExpectTable(
      {
          {"registeredAt == 2023-06-15", true, "inside that UTC day"},
          {"registeredAt == 2023-06-16", false, "another day"},
          {"registeredAt != 2023-06-15", false, "inside that day"},
          {"registeredAt > 2023-06-14", true, "after the whole of the 14th"},
          {"registeredAt > 2023-06-15", false, "> means after the whole day"},
          {"registeredAt >= 2023-06-15", true, "not before the day starts"},
          {"registeredAt < 2023-06-16", true, "before the 16th starts"},
          {"registeredAt < 2023-06-15", false, "not before the 15th starts"},
          {"registeredAt <= 2023-06-15", true, "not after the day ends"},
          {"registeredAt > 2018-01-01", true, "years later"},
          {"registeredAt == 2023-06-15T12:34:56Z", true, "inside that second"},
          {"registeredAt == 2023-06-15T12:34:56", true, "no offset means UTC"},
          {"registeredAt == 2023-06-15T12:34:56+00:00", true, "explicit UTC offset"},
          {"registeredAt == 2023-06-15T14:34:56+02:00", true, "14:34:56 at +02:00 is 12:34:56Z"},
          {"registeredAt == 2023-06-15T08:34:56-0400", true, "08:34:56 at -04:00 is 12:34:56Z"},
          {"registeredAt == 2023-06-15T12:34:57Z", false, "the next second"},
          {"registeredAt == 2023-06-15T12:34:56.789Z", true, "the exact millisecond"},
          {"registeredAt == 2023-06-15T12:34:56.788Z", false, "one millisecond off"},
          {"registeredAt == 2023-06-15T12:34:56.7Z", true, ".7 is 700..799 ms"},
          {"registeredAt == 2023-06-15T12:34", true, "inside that minute"},
          {"registeredAt > 2023-06-15T12:34:55Z", true, "after the second 12:34:55"},
          {"registeredAt < 2023-06-15T12:34:57Z", true, "before 12:34:57"},
          {"registeredAt == '2023-06-15 12:34:56'", true, "a space instead of T, quoted"},
          {"registeredAt == 1686832496", true, "epoch seconds: inside that second"},
          {"registeredAt > 1686832495", true, "after the previous second"},
          {"registeredAt >= 1686832497", false, "before the next second"},
          {"registeredAt == 1686832496.789", true, "epoch seconds with milliseconds"},
          {"registeredAt < 1700000000", true, "2023-11-14 is later"},
          {"registeredat == 2023-06-15", true, "subject case-insensitive"},
      },
      G5(), G5Load());
}

// ---- Compound expressions ---------------------------------------------------------------------------------

TEST(QueryTest, CompoundPrecedenceAndNot) {
  // attribute:yes exists is true; attribute:no exists is false.
  ExpectTable(
      {
          {"attribute:yes exists or attribute:no exists and attribute:no exists", true, "T or (F and F)"},
          {"(attribute:yes exists or attribute:no exists) and attribute:no exists", false, "(T or F) and F"},
          {"attribute:no exists and attribute:no exists or attribute:yes exists", true, "(F and F) or T"},
          {"attribute:no exists and (attribute:no exists or attribute:yes exists)", false, "F and (F or T)"},
          {"not attribute:yes exists", false, "not T"},
          {"not attribute:no exists", true, "not F"},
          {"!attribute:no exists", true, "! is not"},
          {"not(attribute:no exists)", true, "ECS's not(...) form"},
          {"NOT attribute:no exists", true, "keywords are case-insensitive"},
          {"not not attribute:yes exists", true, "double negation"},
          {"!!attribute:yes exists", true, "double !"},
          {"! (attribute:yes exists)", false, "! before parentheses"},
          {"not attribute:yes exists or attribute:yes exists", true, "(not T) or T: not binds tightest"},
          {"not (attribute:yes exists or attribute:yes exists)", false, "not (T or T)"},
          {"not attribute:no exists and attribute:no exists", false, "(not F) and F"},
          {"attribute:yes exists && attribute:yes exists", true, "&& is and"},
          {"attribute:yes exists || attribute:no exists", true, "|| is or"},
          {"attribute:no exists || attribute:no exists", false, "F or F"},
          {"attribute:yes exists AND attribute:no exists", false, "T and F"},
          {"attribute:no exists Or attribute:yes exists", true, "F or T"},
          {"attribute:ecs.os-type==linux&&attribute:rack==r10", true, "no spaces around &&"},
          {"(attribute:yes exists)and(attribute:yes exists)", true, "and between parentheses, no spaces"},
          {"((((attribute:yes exists))))", true, "redundant parentheses"},
          {"attribute:yes exists and attribute:yes exists and attribute:yes exists and attribute:no exists", false,
           "a chain of and with one F"},
          {"attribute:no exists or attribute:no exists or attribute:no exists or attribute:yes exists", true,
           "a chain of or with one T"},
          {"attribute:ecs.instance-type =~ g5.* and attribute:ecs.availability-zone != us-east-1d", true,
           "ECS's compound example shape"},
          {"attribute:yes exists\n\tand\r\nattribute:yes exists", true, "newlines and tabs are spaces"},
          {"(agentConnected == true and runningTasksCount < 5) or task:group == service:db", true,
           "(T and T) or F"},
      },
      G5(), G5Load());
}

// ---- Limits -----------------------------------------------------------------------------------------------

TEST(QueryTest, LimitsAtTheBoundaryAreAccepted) {
  const std::string prefix = "attribute:rack != ";
  const std::string longest = prefix + std::string(query::kMaxExpressionLength - prefix.size(), 'x');
  ASSERT_EQ(longest.size(), query::kMaxExpressionLength);
  ExpectTable(
      {
          {longest, true, "exactly 2000 characters; r10 is not xxx..."},
          {Repeat("(", 32) + "attribute:yes exists" + Repeat(")", 32), true, "32 levels of parentheses"},
          {Repeat("not ", 32) + "attribute:yes exists", true, "32 nots: an even count"},
          {Repeat("attribute:no exists or ", 80) + "attribute:yes exists", true,
           "81 terms in one or: long chains are flat, not deep"},
      },
      G5(), G5Load());
}

// ---- Refused expressions ----------------------------------------------------------------------------------

TEST(QueryTest, RefusedExpressions) {
  ExpectRefused({
      {"", "the expression is empty", "nothing to evaluate"},
      {" \t\n ", "the expression is empty", "only whitespace"},
      {"attribute:a == " + std::string(1990, 'x'), "longer than 2000 characters (2005)", "ECS's length limit"},
      {"attribute:gpu", "expected an operator after 'attribute:gpu' at position 14", "subject alone"},
      {"attribute:gpu 5", "expected an operator after 'attribute:gpu' at position 15, found '5'", "no operator"},
      {"attribute:gpu foo bar", "unknown operator 'foo' after 'attribute:gpu' at position 15", "word operator"},
      {"attribute:gpu === 1", "unknown operator '===' after 'attribute:gpu' at position 15", "three ="},
      {"attribute:gpu => 1", "unknown operator '=>'", "not >="},
      {"attribute:gpu = 1", "unknown operator '='", "single ="},
      {"attribute:gpu ! exists", "unknown operator '!'", "! must touch exists"},
      {"attribute:gpu ==", "expected a value after '==' at position 17 (the end of the expression)", "no value"},
      {"(attribute:gpu == )", "expected a value after '==' at position 19, found ')'", "no value before )"},
      {"color == red", "unknown subject 'color' at position 1", "not a subject"},
      {"task:name == x", "unknown subject 'task:name'", "only task:group"},
      {"attribute: == x", "expected an attribute name after 'attribute:' at position 11", "empty name"},
      {"== x", "expected a subject, '(' or 'not' at position 1, found '=='", "operator first"},
      {"\"attribute:a\" exists", "expected a subject, '(' or 'not' at position 1, found '\"'", "quoted subject"},
      {"and attribute:a exists", "unknown subject 'and'", "connective first"},
      {"not", "expected a subject, '(' or 'not' at position 4 (the end of the expression)", "not of nothing"},
      {"attribute:a exists and", "expected a subject, '(' or 'not' at position 23", "dangling and"},
      {"attribute:a exists ||", "expected a subject, '(' or 'not' at position 22", "dangling ||"},
      {"(attribute:a exists", "expected 'and', 'or' or ')' to close the '(' from position 1 at position 20",
       "unclosed parenthesis"},
      {"((attribute:a exists)", "to close the '(' from position 1 at position 22", "one of two unclosed"},
      {"attribute:a exists)", "unexpected ')' without a matching '(' at position 19", "extra )"},
      {"()", "expected a subject, '(' or 'not' at position 2, found ')'", "empty parentheses"},
      {"attribute:a exists attribute:b exists",
       "expected 'and', 'or' or the end of the expression at position 20, found 'attribute:b'", "missing and"},
      {"attribute:a exists 1", "expected 'and', 'or' or the end of the expression at position 20, found '1'",
       "exists takes no argument"},
      {"attribute:a == b c", "found 'c'", "bare values hold no spaces"},
      {"attribute:a in", "expected a list such as [a, b] after 'in' at position 15", "no list"},
      {"attribute:a in x", "expected a list such as [a, b] after 'in' at position 16, found 'x'", "not a list"},
      {"attribute:a in []", "expected a value in the list at position 17, found ']'", "empty list"},
      {"attribute:a in [x, ]", "expected a value in the list at position 20, found ']'", "trailing comma"},
      {"attribute:a in [x y]", "expected ',' or ']' to close the list opened at position 16 at position 19",
       "missing comma"},
      {"attribute:a in [x, y)", "expected ',' or ']' to close the list opened at position 16", "mismatched"},
      {"attribute:a in [x", "expected ',' or ']'", "unclosed list"},
      {"attribute:a == 'x", "unterminated quoted value, expected a closing ' for the quote at position 16",
       "unclosed quote"},
      {"attribute:a == \"x'", "expected a closing \"", "quotes must pair"},
      {"attribute:a == \x01", "expected a value after '==' at position 16, found '?'",
       "control character, shown as ?"},
      {"runningTasksCount > many", "expected an integer for 'runningTasksCount', got 'many' at position 21",
       "not a number"},
      {"runningTasksCount == 1.5", "expected an integer", "not an integer"},
      {"runningTasksCount == 99999999999999999999", "expected an integer", "overflows int64"},
      {"registeredAt > yesterday", "expected a date (2018-06-18), a datetime (2018-06-18T22:28:28Z) or epoch",
       "not a date"},
      {"registeredAt > 2018-02-30", "got '2018-02-30'", "no such day"},
      {"registeredAt > 2018-01-01T25:00:00Z", "expected a date", "no such hour"},
      {"registeredAt > 2018-01-01T10:00:00+5", "expected a date", "bad offset"},
      {"registeredAt > 2018-1-1", "expected a date", "month and day need two digits"},
      {"agentConnected == yes", "expected true or false for agentConnected, got 'yes'", "not a boolean"},
      {"agentConnected in [true, maybe]", "got 'maybe'", "every list item is checked"},
      {"agentConnected > true",
       "operator '>' is not valid for agentConnected at position 16 (valid: ==, !=, in, !in, =~, !~)",
       "ECS lists no ordering for agentConnected"},
      {"runningTasksCount in [1, 2]", "operator 'in' is not valid for runningTasksCount", "ECS: no in"},
      {"agentVersion =~ 1.*", "operator '=~' is not valid for agentVersion", "ECS: no =~"},
      {"registeredAt exists", "operator 'exists' is not valid for registeredAt", "ECS: no exists"},
      {"task:group exists", "operator 'exists' is not valid for task:group", "ECS: no exists"},
      {"ec2InstanceId >= i-1", "operator '>=' is not valid for ec2InstanceId", "ECS: no ordering"},
      {Repeat("(", 33) + "attribute:a exists" + Repeat(")", 33), "nesting is deeper than 32 levels at position 33",
       "33 levels of parentheses"},
      {Repeat("not ", 33) + "attribute:a exists", "nesting is deeper than 32 levels", "33 nots"},
      {Repeat("(", 1999), "nesting is deeper than 32 levels", "refused long before the stack is at risk"},
      {Repeat("!", 2000), "nesting is deeper than 32 levels", "2000 nots"},
  });
}

TEST(QueryTest, LabelNamesTheCaller) {
  auto expr = query::Parse("attribute:a", "filter");
  ASSERT_FALSE(expr.ok());
  EXPECT_EQ(expr.status().message(), "filter: expected an operator after 'attribute:a' at position 12 (the end of the "
                                     "expression)");
}

TEST(QueryTest, LongTokensAreShortenedInMessages) {
  auto expr = query::Parse(std::string(500, 'z') + " == 1");
  ASSERT_FALSE(expr.ok());
  EXPECT_NE(expr.status().message().find("unknown subject '" + std::string(40, 'z') + "...'"), std::string::npos)
      << expr.status().message();
  EXPECT_LT(expr.status().message().size(), 300u);
}

// ---- One parse, many instances ----------------------------------------------------------------------------

TEST(QueryTest, ParsedOnceEvaluatedPerInstance) {
  auto expr = query::Parse("attribute:ecs.instance-type =~ g5.* and not task:group == service:web");
  ASSERT_TRUE(expr.ok()) << expr.status().message();
  const InstanceLoad web = Load().Group("service:web", 1).Build();
  const InstanceLoad empty;
  struct Row {
    ContainerInstance instance;
    const InstanceLoad* load;
    bool want;
    const char* why;
  };
  const std::vector<Row> rows = {
      {Instance().Attr("ecs.instance-type", "g5.xlarge").Build(), &empty, true, "g5 with no web task"},
      {Instance().Attr("ecs.instance-type", "g5.xlarge").Build(), &web, false, "g5 already runs a web task"},
      {Instance().Attr("ecs.instance-type", "p4d.24xlarge").Build(), &empty, false, "not a g5"},
      {Instance().Build(), &empty, false, "no instance-type attribute"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.why);
    EXPECT_EQ(query::Evaluate(**expr, r.instance, *r.load), r.want);
  }
}

// ---- Robustness -------------------------------------------------------------------------------------------

// Parse must never crash or throw on any input, and whatever it accepts must evaluate. Deterministic: a fixed
// seed, token soup plus random bytes plus mutations of valid expressions.
TEST(QueryTest, ArbitraryInputNeverCrashes) {
  const std::vector<std::string> pieces = {
      "attribute:a", "attribute:", "agentConnected", "agentVersion", "ec2InstanceId", "registeredAt",
      "runningTasksCount", "task:group", "instanceId", "==", "!=", ">", ">=", "<", "<=", "exists", "!exists",
      "in", "!in", "=~", "!~", "and", "or", "not", "&&", "||", "!", "(", ")", "[", "]", ",", "'", "\"", "*",
      "1", "-2.5", "true", "2018-01-01", "2018-01-01T00:00:00Z", "x", " ", "  ", "\t", "\x80", "\xff",
      std::string(1, '\0'),
  };
  const std::vector<std::string> valid = {
      "attribute:ecs.instance-type =~ g5.* and (task:group != web or not runningTasksCount > 2)",
      "ec2InstanceId in ['i-1', \"i-2\"] || registeredAt >= 2018-06-18T22:28:28+00:00",
      "not(agentVersion < 1.2.3) && agentConnected == true",
  };
  std::mt19937 rng(20240601);
  const ContainerInstance g5 = G5();
  const InstanceLoad load = G5Load();
  int accepted = 0;
  for (int i = 0; i < 30000; ++i) {
    std::string text;
    switch (i % 3) {
      case 0: {
        const int n = static_cast<int>(rng() % 12);
        for (int k = 0; k < n; ++k) text += pieces[rng() % pieces.size()] + (rng() % 2 ? " " : "");
        break;
      }
      case 1: {
        const int n = static_cast<int>(rng() % 40);
        for (int k = 0; k < n; ++k) text += static_cast<char>(rng() % 256);
        break;
      }
      default: {
        text = valid[rng() % valid.size()];
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < edits && !text.empty(); ++k) {
          const size_t at = rng() % text.size();
          switch (rng() % 3) {
            case 0: text.erase(at, 1 + rng() % 4); break;
            case 1: text.insert(at, pieces[rng() % pieces.size()]); break;
            default: text[at] = static_cast<char>(rng() % 256); break;
          }
        }
      }
    }
    auto expr = query::Parse(text);
    if (expr.ok()) {
      ++accepted;
      (void)query::Evaluate(**expr, g5, load);
    } else {
      EXPECT_EQ(expr.status().code(), ErrorCode::kInvalidParameter) << text;
      for (unsigned char c : expr.status().message()) ASSERT_TRUE(c >= 0x20 && c < 0x7f) << text;
    }
  }
  EXPECT_GT(accepted, 0);  // the mutations leave some valid expressions
}

}  // namespace
}  // namespace gpupack
