// One negotiation round on the wire: every rank contributes a fixed-size header (flags, payload
// length, bit vector of cached announcements) through one all-gather; only rounds in which some
// rank announces an uncached request pay a second, variable-size all-gather for the descriptors.
#pragma once

#include <mpi.h>

#include <vector>

#include "coordinator.h"

namespace relax {

// Exchanges `mine` with every rank of `comm`; fills `all` (indexed by rank). `cache_size` must be
// the same on every rank (it is: the cache is replicated). Waits by polling with back-off so an
// idle rank does not burn a core while its peers are busy.
Status exchange_round(MPI_Comm comm, const RankMessage& mine, size_t cache_size, std::vector<RankMessage>& all);

// Waits for a non-blocking MPI request: spins briefly, then sleeps with growing intervals.
int wait_with_backoff(MPI_Request* request);

}  // namespace relax
