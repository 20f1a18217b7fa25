// broadcast: the root's tensor on every rank. Users name the root by its world rank (as in
// Horovod); it is recorded as its rank in the process set.
#include <algorithm>
#include <cstring>

#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status parse(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) {
  const int32_t root = r.args.broadcast.root_rank;
  const auto it = std::find(ctx.set_world_ranks.begin(), ctx.set_world_ranks.end(), root);
  if (it == ctx.set_world_ranks.end()) {
    return kinds::fail(local, "root rank " + std::to_string(root) +
                          (ctx.process_set == 0 ? " is out of range [0, " + std::to_string(ctx.set_size()) + ")"
                                                : " is not a member of process set " + std::to_string(ctx.process_set)));
  }
  local.desc.root_rank = static_cast<int32_t>(it - ctx.set_world_ranks.begin());
  return kinds::require_output(local);
}

std::string root_of(const Descriptor& d) { return std::to_string(d.root_rank); }

Status check_joined(const ResponseTensor& t, const JoinedContext& ctx) {
  const size_t root = static_cast<size_t>(t.first().root_rank);
  if (ctx.joined[root] && !t.per_rank[root]) {
    return kinds::invalid("broadcast " + ctx.quoted + " has root rank " + std::to_string(root) +
                          ", which has already joined.");
  }
  return kinds::gather_when_joined(t, ctx);
}

Status run(RunContext& ctx, ExecItem& item, std::vector<int64_t>&) {
  const Descriptor& d = item.tensor->first();
  const int64_t bytes = kinds::byte_size(d);
  std::vector<uint8_t> fallback;
  void* buf;
  if (item.local) {
    buf = item.local->output;
    if (ctx.collectives.rank() == d.root_rank && item.local->input != buf && bytes > 0) {
      std::memcpy(buf, item.local->input, static_cast<size_t>(bytes));
    }
  } else {
    fallback.resize(static_cast<size_t>(bytes));
    buf = fallback.data();
  }
  return ctx.collectives.broadcast(buf, bytes, d.root_rank);
}

const RequestKindRegistration kBroadcast({
    RELAX_REQ_BROADCAST, "broadcast", Lane::kNegotiated, /*takes_tensor=*/true, /*global=*/false, /*fuses=*/false,
    parse, {{"shapes", kinds::shape_of}, {"root ranks", root_of}}, check_joined, run});

}  // namespace
}  // namespace relax
