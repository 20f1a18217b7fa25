// neighbor_average (direct): x' = self_weight x + sum_k weights[k] x_{peers[k]}, exchanged with
// the neighbours only; with a codec, CHOCO-gossip on estimates both sides of each link share.
// Runs on the direct lane (relaxed/direct_lane.cc).
#include <algorithm>

#include "codecs/codec.h"
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

// The buffer rule for CHOCO's estimates: this rank's holds the tensor, the peers' one tensor per peer.
Status check_estimates(const relax_neighbor_average_args_t& args, const LocalRequest& local) {
  if (!args.codec) return Status::ok();  // exact averages touch no estimate
  const int64_t count = local.desc.num_elements();
  Status s = Status::ok();
  if (args.estimate_self) {
    s = kinds::require_capacity(local, "estimate of this rank (estimate_self)", kinds::float_bytes(count),
                                args.estimate_self_bytes, std::to_string(count) + " floats, the tensor's");
  }
  if (s.is_ok() && args.estimate_peers) {
    s = kinds::require_capacity(local, "estimates of the peers (estimate_peers)",
                                kinds::float_bytes(kinds::saturating_mul(count, args.npeers)), args.estimate_peers_bytes,
                                std::to_string(args.npeers) + " peers x " + std::to_string(count) + " floats");
  }
  return s;
}

Status parse(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) {
  const relax_neighbor_average_args_t& args = r.args.neighbor_average;
  Status s = kinds::parse_peers(ctx, args.npeers, args.peers, args.weights, args.codec != 0, local);
  if (!s.is_ok()) return s;
  if (args.codec) {
    if (!make_codec(args.codec)) return kinds::fail(local, "unknown codec " + std::to_string(args.codec));
    if (local.desc.num_elements() > 0 && (!args.estimate_self || (args.npeers > 0 && !args.estimate_peers))) {
      return kinds::fail(local, "a compressed neighbour average needs the estimate buffers");
    }
  }
  const std::vector<int>& peers = local.direct.peers;
  if (std::find(peers.begin(), peers.end(), ctx.world_rank) != peers.end()) {
    return kinds::invalid("neighbour average '" + local.desc.name + "': a rank is not its own neighbour (use self_weight)");
  }
  local.desc.codec = args.codec;
  DirectArgs& direct = local.direct;
  direct.self_weight = args.self_weight;
  direct.consensus_step = args.consensus_step;
  direct.codec = args.codec;
  direct.estimate_self = args.estimate_self;
  direct.estimate_peers = args.estimate_peers;
  return check_estimates(args, local);
}

const RequestKindRegistration kNeighborAverage({RELAX_REQ_NEIGHBOR_AVERAGE, "neighbor_average", Lane::kDirect,
                                                /*takes_tensor=*/true, /*global=*/false, /*fuses=*/false, parse, {},
                                                nullptr, nullptr});

}  // namespace
}  // namespace relax
