#include "scheduler/arn.h"

#include <algorithm>
#include <cctype>

namespace gpupack {

namespace {

bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

}  // namespace

Result<std::string> ClusterNameFrom(const ArnContext& ctx, const std::string& ref) {
  if (ref.empty()) return std::string("default");
  std::string name = ref;
  if (ref.rfind("arn:", 0) == 0) {
    const std::string prefix = ctx.Prefix() + "cluster/";
    if (ref.rfind(prefix, 0) != 0)
      return Status::InvalidParameter("cluster ARN '" + ref.substr(0, 300) + "' is not of this region and account (" +
                                      ctx.region + ", " + ctx.account + ")");
    name = ref.substr(prefix.size());
  }
  if (name.empty() || name.size() > 255 || !std::all_of(name.begin(), name.end(), IsNameChar))
    return Status::InvalidParameter("cluster name must be 1-255 letters, numbers, hyphens and underscores");
  return name;
}

Result<std::string> ResourceIdFrom(const ArnContext& ctx, const std::string& kind, const std::string& ref,
                                   const std::string& cluster) {
  std::string id = ref;
  if (ref.rfind("arn:", 0) == 0) {
    const std::string prefix = ctx.Prefix() + kind + "/";
    if (ref.rfind(prefix, 0) != 0)
      return Status::InvalidParameter(kind + " ARN '" + ref.substr(0, 300) + "' is not of this region and account");
    const std::string rest = ref.substr(prefix.size());  // "<cluster>/<id>", or "<id>" in old-style ARNs
    const size_t slash = rest.rfind('/');
    id = rest.substr(slash == std::string::npos ? 0 : slash + 1);
    if (!cluster.empty() && slash != std::string::npos && rest.substr(0, slash) != cluster)
      return Status::InvalidParameter(kind + " ARN '" + ref.substr(0, 300) + "' names another cluster than '" +
                                      cluster + "'");
  }
  if (id.empty() || id.size() > 255 || !std::all_of(id.begin(), id.end(), IsNameChar))
    return Status::InvalidParameter("invalid " + kind + " identifier '" + ref.substr(0, 300) + "'");
  return id;
}

Result<TaskDefinitionRef> TaskDefinitionRefFrom(const ArnContext& ctx, const std::string& ref) {
  std::string s = ref;
  if (ref.rfind("arn:", 0) == 0) {
    const std::string prefix = ctx.Prefix() + "task-definition/";
    if (ref.rfind(prefix, 0) != 0)
      return Status::InvalidParameter("task definition ARN '" + ref.substr(0, 300) + "' is not of this region and account");
    s = ref.substr(prefix.size());
  }
  TaskDefinitionRef out;
  size_t colon = s.find(':');
  out.family = s.substr(0, colon);
  if (colon != std::string::npos) {
    std::string rev = s.substr(colon + 1);
    if (rev.empty() || rev.size() > 9 || !std::all_of(rev.begin(), rev.end(), ::isdigit) || std::stoi(rev) < 1)
      return Status::Client("invalid task definition revision in '" + ref.substr(0, 300) + "'");
    out.revision = std::stoi(rev);
  }
  if (out.family.empty() || out.family.size() > 255 ||
      !std::all_of(out.family.begin(), out.family.end(), IsNameChar))
    return Status::Client("invalid task definition family in '" + ref.substr(0, 300) + "'");
  return out;
}

}  // namespace gpupack
