// One negotiation round on the wire: every rank contributes a fixed-size header (flags, payload
// length, bit vector of cached announcements, bit vector of process sets with work) through one
// all-gather; only rounds in which some rank announces an uncached request pay a second,
// variable-size all-gather for the descriptors. Through shared memory a record may also carry
// the data of a small all-reduce, which then needs no other exchange (Engine::run_round).
#pragma once

#include <mpi.h>

#include <cstdint>
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

// The payload length a record states when its sender's payload is over 2 GiB (no record can state it).
constexpr uint32_t kPayloadTooLarge = 0xffffffffu;

// Places rank `rank`'s announced payload of `announced` bytes in the round's variable-size
// all-gather, whose MPI counts and displacements are int: sets `length` and `displacement` (=
// `total`) and adds it to `total`; or fails naming the rank when `announced` is the too-large marker
// or would take the round past 2 GiB. Every rank runs it over the same records, so all fail alike.
Status place_payload(int rank, uint32_t announced, int64_t& total, int& length, int& displacement);

}  // namespace relax
