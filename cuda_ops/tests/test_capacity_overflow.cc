// The buffer rule's needed sizes never wrap: a need that overflows int64 saturates at INT64_MAX,
// which no capacity meets, instead of wrapping negative and passing any capacity (issue #49).
#include <cstdint>
#include <vector>

#include "api/validate.h"
#include "check.h"
#include "codecs/codec.h"
#include "relax/relax.h"

TEST(neighbour_estimates_whose_size_overflows_int64_are_refused) {
  static float data[4];
  static float estimate[4];
  const int64_t shape[1] = {int64_t{1} << 60};  // 2^62 bytes of float32: a valid size on its own
  const int32_t peers[2] = {1, 2};
  const double weights[2] = {1.0 / 3, 1.0 / 3};
  relax_request_t r{};
  r.type = RELAX_REQ_NEIGHBOR_AVERAGE;
  r.name = "huge_estimates";
  r.dtype = RELAX_FLOAT32;
  r.ndim = 1;
  r.shape = shape;
  r.input = data;
  r.output = data;
  r.input_bytes = INT64_MAX;  // the base's own buffers pass: only the estimates are under test
  r.output_bytes = INT64_MAX;
  relax_neighbor_average_args_t& a = r.args.neighbor_average;
  a.npeers = 2;
  a.peers = peers;
  a.weights = weights;
  a.self_weight = 1.0 / 3;
  a.codec = relax::codec_id("uint8");
  a.consensus_step = 0.5;
  a.estimate_self = estimate;
  a.estimate_peers = estimate;
  a.estimate_self_bytes = INT64_MAX;
  a.estimate_peers_bytes = 16;  // 2 peers x 2^60 floats = 2^63 bytes: wrapped to INT64_MIN before
  const std::vector<int> world = {0, 1, 2};
  relax::SubmitContext ctx{0, world, 0, 0, 3, /*has_alloc=*/true};
  relax::LocalRequest local;
  const relax::Status s = relax::make_request(r, ctx, local);
  CHECK(!s.is_ok());
  CHECK(s.message.find("estimate_peers") != std::string::npos);
}
