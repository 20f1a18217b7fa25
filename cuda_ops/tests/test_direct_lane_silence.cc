// The direct lane (neighbour and group averages) must be bounded like every other wait (issue
// #49): its limit is RELAX_OP_TIMEOUT or, when unset, the default peer timeout, never "forever";
// and once any part of the process noted a silent peer, it posts nothing more and fails every
// exchange with the recorded reason (naming the silent rank). One rank here, so the exchange is
// with itself: it completes at once unless the lane refuses it.
#include <string>
#include <vector>

#include "check.h"
#include "engine/config.h"
#include "engine/engine.h"
#include "engine/handles.h"
#include "engine/request.h"
#include "relaxed/direct_lane.h"
#include "transport/liveness.h"
#include "transport/mpi_context.h"

namespace {

// A neighbour average of `x` with this rank itself (weights 1/2 and 1/2) into `out`.
relax::LocalRequest self_average(relax::HandleTable& handles, const std::vector<float>& x, std::vector<float>& out) {
  relax::LocalRequest r;
  r.desc.name = "lane.silence.self";
  r.desc.type = RELAX_REQ_NEIGHBOR_AVERAGE;
  r.desc.dtype = RELAX_FLOAT32;
  r.desc.shape = {static_cast<int64_t>(x.size())};
  r.input = x.data();
  r.output = out.data();
  r.direct.peers = {0};
  r.direct.weights = {0.5};
  r.direct.self_weight = 0.5;
  r.handle = handles.create(false);
  return r;
}

}  // namespace

TEST(the_direct_lane_limit_is_finite_when_no_timeout_is_set) {
  relax::EngineConfig unset;
  unset.stall_shutdown_seconds = 0;  // neither RELAX_OP_TIMEOUT nor RELAX_STALL_SHUTDOWN_TIME
  CHECK_EQ(relax::direct_lane_timeout_seconds(unset), relax::kDefaultPeerTimeoutSeconds);
  relax::EngineConfig set;
  set.stall_shutdown_seconds = 3;
  CHECK_EQ(relax::direct_lane_timeout_seconds(set), 3.0);
}

TEST(the_direct_lane_refuses_exchanges_once_a_silent_peer_was_noted) {
  relax::MpiContext mpi;
  const relax::Status opened = mpi.open();  // a singleton MPI job of one rank
  CHECK(opened.is_ok());
  if (!opened.is_ok() || mpi.thread_level() < MPI_THREAD_MULTIPLE) return;
  relax::HandleTable handles;
  relax::EngineConfig config;  // no timeout configured: the lane must still stop
  config.apply_topology_defaults(true, 1, 4, false);
  relax::DirectLane lane(mpi.data(), handles, config, relax::collective_config(config, nullptr));
  const std::vector<float> x(8, 2.0f);
  std::vector<float> out(8, 0.0f);

  relax::LocalRequest first = self_average(handles, x, out);  // the lane works
  const relax_handle_t ok = first.handle;
  CHECK(lane.submit(std::move(first)).is_ok());
  CHECK_EQ(handles.wait(ok), RELAX_OK);
  CHECK_EQ(out[0], 2.0f);
  handles.release(ok);

  const std::string reason = relax::note_peer_silence("rank 7 did not answer within a test's limit");
  std::vector<float> untouched(8, -1.0f);
  relax::LocalRequest second = self_average(handles, x, untouched);
  const relax_handle_t refused = second.handle;
  CHECK(lane.submit(std::move(second)).is_ok());
  CHECK_EQ(handles.wait(refused), RELAX_ERR_STALLED);
  CHECK_EQ(std::string(handles.message(refused)), reason);
  CHECK_EQ(untouched[0], -1.0f);  // nothing ran
  handles.release(refused);
  lane.stop("test over");
  relax::forget_peer_silence_for_tests();  // later tests (and MPI_Finalize at exit) go on as usual
}
