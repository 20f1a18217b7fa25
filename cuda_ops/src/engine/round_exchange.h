// One negotiation round on the wire: every rank contributes a fixed-size header (flags, payload
// length, bit vector of cached announcements, bit vector of process sets with work) through one
// all-gather; only rounds in which some rank announces an uncached request pay a second,
// variable-size all-gather for the descriptors. Through shared memory a record may also carry
// the data of a small all-reduce, which then needs no other exchange (Engine::run_round).
#pragma once

#include <mpi.h>

#include <vector>

#include "collectives/shm_collectives.h"
#include "engine/coordinator.h"

namespace relax {

// Exchanges `mine` with every rank of `comm`; fills `all` (indexed by rank). `cache_size` and
// `set_count` (ids of process sets that may be flagged active) must be the same on every rank
// (they are: both are replicated state). With `shm` (the segment of a communicator with the same
// ranks, null on every rank or on none) the records travel through shared memory, else through
// MPI. Waits by polling with back-off so an idle rank does not burn a core while its peers are busy.
// `inline_data` (may be null): data of this rank's lone announced request, carried in its record
// through the shared segment when it fits (its message then has kFlagInline set).
// A peer that does not answer within `timeout_s` fails the round with RELAX_ERR_STALLED naming
// it (transport/liveness.h); payloads past 2 GiB in all fail it on every rank alike (MPI counts
// are int) with RELAX_ERR_INVALID_ARGUMENT.
struct InlineData {
  const void* data = nullptr;
  int64_t bytes = 0;
};
Status exchange_round(MPI_Comm comm, ShmCollectives* shm, const RankMessage& mine, size_t cache_size,
                      size_t set_count, const InlineData* inline_data, double timeout_s,
                      std::vector<RankMessage>& all);

}  // namespace relax
