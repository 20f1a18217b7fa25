// The collectives' settings (engine/config.cc fills them from the environment). The defaults of
// the transport thresholds are the transports' own (transport_table.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "collectives/transport_table.h"
#include "transport/liveness.h"

namespace relax {

struct CollectiveConfig {
  int64_t segment_bytes = kRingSegmentBytes;  // ring pipelining granularity
  int64_t receive_window = 2;                 // ring segments received ahead of the reduction
  int64_t mpi_allreduce_max_bytes = kMpiCollectiveMaxBytes;  // use MPI_Allreduce at or below this size
  int64_t mpi_allgather_max_bytes = kMpiCollectiveMaxBytes;  // use MPI_Allgatherv at or below this total size
  bool shm_allowed = true;                    // false: never shared memory or TCP ring, no agreement at construction
  int64_t shm_min_bytes = -1;                 // shared-memory collectives from this size (-1: never)
  int64_t shm_slot_bytes = 1 << 20;           // per rank and round (shm_collectives.h)
  double shm_spin_us = 0;                     // barrier polling before yielding the core
  const std::atomic<int>* shm_spin_gate = nullptr;  // ... only while this is positive (null: always)
  // Point-to-point waits yield the core between their first polls instead of spinning (which
  // starves a rank sharing the core with the waiting one). Set when ranks outnumber cores.
  bool yield_while_waiting = false;
  // The ring's steps over TCP sockets of its own (transport/tcp_ring.h) instead of MPI
  // point-to-point: for ranks on several nodes.
  bool tcp_ring = false;
  // Longest wait for a peer before an operation fails naming it (transport/liveness.h).
  double peer_timeout_s = kDefaultPeerTimeoutSeconds;
};

}  // namespace relax
