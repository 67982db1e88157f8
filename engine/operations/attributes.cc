// Attributes of container instances: PutAttributes, DeleteAttributes, ListAttributes.
#include <algorithm>
#include <map>

#include "engine/operations/operations.h"
#include "engine/operations/resolve.h"

namespace gpupack::api {

// PutAttributes: every target is resolved before any attribute is applied; a name put twice keeps the last.
Status PutAttributes(const PutAttributesRequest& in, Transaction& txn, AttributesResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(txn.state(), txn.arn(), in.cluster));
  std::map<std::string, std::vector<Attribute>> by_target;
  for (const auto& a : in.attributes) {
    GP_ASSIGN(inst, ResolveInstance(txn.state(), txn.arn(), cluster->name, a.target_id));
    by_target[inst->arn].push_back(a.attribute);
  }
  for (const auto& [arn, attrs] : by_target) {  // every target checked before any is changed
    const ContainerInstance* inst = txn.state().FindInstance(arn);
    std::vector<Attribute> after = inst->attributes;
    after.insert(after.end(), attrs.begin(), attrs.end());
    SortAttributes(after);
    GP_TRY(CheckAttributeCount(after, inst->id));
  }
  for (const auto& [arn, attrs] : by_target) {
    txn.UpdateInstance(arn, [&attrs = attrs](ContainerInstance& inst) {
      for (const auto& a : attrs) inst.attributes.push_back(a);
      SortAttributes(inst.attributes);
    });
    for (const auto& a : attrs) out.attributes.push_back({a.name, a.value, arn});
  }
  return Status::Ok();
}

// DeleteAttributes: every entry is checked before any is applied, so a bad one leaves the others undone too.
Status DeleteAttributes(const DeleteAttributesRequest& in, Transaction& txn, AttributesResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(txn.state(), txn.arn(), in.cluster));
  std::vector<std::pair<std::string, std::string>> deletions;  // (instance ARN, attribute name)
  for (const auto& a : in.attributes) {
    GP_ASSIGN(inst, ResolveInstance(txn.state(), txn.arn(), cluster->name, a.target_id));
    deletions.emplace_back(inst->arn, a.attribute.name);
  }
  for (const auto& [arn, name] : deletions) {
    const std::string attribute = name;
    txn.UpdateInstance(arn, [&attribute](ContainerInstance& inst) {
      std::erase_if(inst.attributes, [&attribute](const Attribute& x) { return x.name == attribute; });
    });
    out.attributes.push_back({attribute, std::nullopt, arn});
  }
  return Status::Ok();
}

Status ListAttributes(const ListAttributesRequest& in, const ReadContext& ctx, AttributesResult& out) {
  GP_ASSIGN(cluster, ActiveCluster(ctx.view, ctx.arn, in.cluster));
  std::vector<AttributeRow> rows;
  for (const InstanceRecord* rec : ctx.view.InstancesOf(cluster->name)) {
    if (rec->instance.status == InstanceStatus::kInactive) continue;
    for (const auto& a : rec->instance.attributes) {
      if (in.attribute_name && a.name != *in.attribute_name) continue;
      if (in.attribute_value && a.value != *in.attribute_value) continue;
      rows.push_back({a.name, a.value, rec->instance.arn});
    }
  }
  // The same paging as the other List calls, over the rows.
  std::vector<std::string> index(rows.size());
  ListPage page = PageOf("attributes", std::move(index), in.page.begin, in.page.limit);
  const size_t begin = std::min(in.page.begin, rows.size());
  out.attributes.assign(rows.begin() + static_cast<std::ptrdiff_t>(begin),
                        rows.begin() + static_cast<std::ptrdiff_t>(begin + page.items.size()));
  out.next_token = page.next_token;
  return Status::Ok();
}

}  // namespace gpupack::api
