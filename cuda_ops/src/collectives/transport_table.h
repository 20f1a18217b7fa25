// Which transport serves a collective, decided in one place. A communicator's transports are set
// up once (Collectives::rebind: the shared-memory segment when every rank is on this node, the
// ring's link over the TCP ring or MPI point-to-point); this table then picks, for each
// collective and size, the first of an ordered list that is enabled (as Horovod's operation list
// does): this rank alone, shared memory, MPI's own collective (small messages), the ring over its
// link. Every rank decides alike: the inputs are agreed settings and sizes.
#pragma once

#include <cstdint>
#include <vector>

namespace relax {

struct CollectiveConfig;

// Size thresholds the transports own (engine/config.cc starts from these on one node):
// MPI's own all-reduce / all-gather at or below this many bytes (faster than the ring there).
constexpr int64_t kMpiCollectiveMaxBytes = 16ll << 20;
// The ring's pipelining segment on MPI point-to-point.
constexpr int64_t kRingSegmentBytes = 1ll << 20;

enum class Route { kNone, kLocal, kSharedMemory, kMpiCollective, kRing };
enum class Collective { kAllreduce, kAllreducePieces, kReduceScatter, kAllgather };

// "shared memory", "ring", ...
const char* route_name(Route route);

// What one communicator's set-up produced (the same on every rank).
struct TransportSet {
  int size = 1;                    // ranks
  bool shared_memory = false;      // the shared-memory segment is mapped
  bool ring_takes_pieces = false;  // the ring's link sends from and receives into tensors where they lie (TCP ring)
};

class TransportTable {
 public:
  struct Entry {
    Route route;
    // Whether this transport serves `what` of `bytes` (`mpi_typed`: MPI has a type for the
    // elements and the count fits its int).
    bool (*enabled)(const CollectiveConfig& config, const TransportSet& set, Collective what, int64_t bytes,
                    bool mpi_typed);
  };

  // Reads `config`'s thresholds at each choice (they may be retuned); `config` must outlive it.
  TransportTable(const CollectiveConfig& config, TransportSet set) : config_(&config), set_(set) {}

  // The first enabled entry for `what` of `bytes`, or Route::kNone (only kAllreducePieces has
  // no fallback: tensors where they lie need shared memory or the TCP ring).
  Route choose(Collective what, int64_t bytes, bool mpi_typed = true) const;
  const TransportSet& set() const { return set_; }
  // The ordered list choose() walks.
  static const std::vector<Entry>& entries();

 private:
  const CollectiveConfig* config_;
  TransportSet set_;
};

}  // namespace relax
