// add_process_set: every rank of the world submits it with the same member ranks; the engine
// creates the set's communicator on every rank in the same round (Engine::apply_membership).
#include <algorithm>

#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status parse(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) {
  const relax_add_process_set_args_t& args = r.args.add_process_set;
  if (args.nranks <= 0 || !args.ranks) return kinds::invalid("a process set needs at least one rank");
  std::vector<int64_t>& ranks = local.desc.splits;  // the members travel as the descriptor's splits
  ranks.assign(args.ranks, args.ranks + args.nranks);
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= ctx.world_size) {
      return kinds::invalid("process set rank " + std::to_string(ranks[i]) + " is out of range [0, " +
                            std::to_string(ctx.world_size) + ")");
    }
    if (i > 0 && ranks[i] == ranks[i - 1]) {
      return kinds::invalid("process set ranks " + shape_string(ranks) + " contain duplicates");
    }
  }
  return Status::ok();
}

std::string members_of(const Descriptor& d) { return shape_string(d.splits); }

const RequestKindRegistration kAddProcessSet({RELAX_REQ_ADD_PROCESS_SET, "add_process_set", Lane::kMembership,
                                              /*takes_tensor=*/false, /*global=*/true, /*fuses=*/false, parse,
                                              {{"process set ranks", members_of}}, nullptr, nullptr});

}  // namespace
}  // namespace relax
