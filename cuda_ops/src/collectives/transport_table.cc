#include "collectives/transport_table.h"

#include "collectives/collective_config.h"

namespace relax {
namespace {

// One rank: a copy (all-reduce; the other collectives' ring code handles one rank itself).
bool local(const CollectiveConfig&, const TransportSet& set, Collective what, int64_t, bool) {
  return set.size == 1 && what == Collective::kAllreduce;
}

bool shared_memory(const CollectiveConfig& config, const TransportSet& set, Collective, int64_t bytes, bool) {
  return set.shared_memory && bytes >= config.shm_min_bytes;
}

bool mpi_collective(const CollectiveConfig& config, const TransportSet& set, Collective what, int64_t bytes,
                    bool mpi_typed) {
  if (!mpi_typed) return false;
  if (what == Collective::kAllreduce) return bytes <= config.mpi_allreduce_max_bytes;
  if (what == Collective::kAllgather) return set.size > 1 && bytes <= config.mpi_allgather_max_bytes;
  return false;
}

bool ring(const CollectiveConfig& config, const TransportSet& set, Collective what, int64_t bytes, bool) {
  // Tensors where they lie: only a link that takes pieces, and only above MPI's own all-reduce
  // (where allreduce() would not take the ring either, so both give the same bits).
  if (what == Collective::kAllreducePieces) return set.ring_takes_pieces && bytes > config.mpi_allreduce_max_bytes;
  return true;
}

}  // namespace

const char* route_name(Route route) {
  switch (route) {
    case Route::kLocal: return "local";
    case Route::kSharedMemory: return "shared memory";
    case Route::kMpiCollective: return "MPI collective";
    case Route::kRing: return "ring";
    case Route::kNone: break;
  }
  return "none";
}

const std::vector<TransportTable::Entry>& TransportTable::entries() {
  static const std::vector<Entry> kEntries = {
      {Route::kLocal, local},
      {Route::kSharedMemory, shared_memory},
      {Route::kMpiCollective, mpi_collective},
      {Route::kRing, ring},
  };
  return kEntries;
}

Route TransportTable::choose(Collective what, int64_t bytes, bool mpi_typed) const {
  if (what == Collective::kAllreducePieces && (set_.size < 2 || bytes <= 0)) return Route::kNone;
  for (const Entry& entry : entries()) {
    if (entry.enabled(*config_, set_, what, bytes, mpi_typed)) return entry.route;
  }
  return Route::kNone;
}

}  // namespace relax
