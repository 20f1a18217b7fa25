// group_average (direct): x' = sum_k weights[k] x_k over a group of world ranks that includes
// this one (Prague's partial all-reduce). Runs on the direct lane (relaxed/direct_lane.cc).
#include <algorithm>

#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status parse(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) {
  const relax_group_average_args_t& args = r.args.group_average;
  Status s = kinds::parse_peers(ctx, args.nmembers, args.members, args.weights, false, local);
  if (!s.is_ok()) return s;
  const std::vector<int>& members = local.direct.peers;
  if (members.empty() || !std::is_sorted(members.begin(), members.end())) {
    return kinds::fail(local, "group members must be given in ascending order");
  }
  if (!std::binary_search(members.begin(), members.end(), ctx.world_rank)) {
    return kinds::invalid("group average '" + local.desc.name + "': rank " + std::to_string(ctx.world_rank) +
                          " is not a member of its group");
  }
  return Status::ok();
}

const RequestKindRegistration kGroupAverage({RELAX_REQ_GROUP_AVERAGE, "group_average", Lane::kDirect,
                                             /*takes_tensor=*/true, /*global=*/false, /*fuses=*/false, parse, {},
                                             nullptr, nullptr});

}  // namespace
}  // namespace relax
