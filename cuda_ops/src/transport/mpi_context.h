// MPI lifetime and communicators: initializes MPI unless the application already did, duplicates
// the world communicator for negotiation and data, and derives the node topology.
#pragma once

#include <mpi.h>

#include <vector>

#include "transport/world_growth.h"
#include "util/types.h"

namespace relax {

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  int host_size = 1;  // ranks on this machine (same kernel boot id), whatever MPI calls a node
  // Whether on some host the ranks outnumber its cores; the same on every rank (agreed at open),
  // so a choice of path that depends on it is the same everywhere.
  bool cores_shared_somewhere = false;
};

class MpiContext {
 public:
  MpiContext() = default;
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;
  ~MpiContext();

  // Initializes MPI if needed (MPI_THREAD_MULTIPLE requested) and creates the communicators.
  // Every exchange with the other ranks is bounded by `timeout_s` (<= 0: the default of
  // peer_timeout_seconds()): a rank that does not answer fails open() with RELAX_ERR_STALLED
  // naming it (transport/setup_wait.h); MPI_Init_thread itself cannot be bounded.
  Status open(double timeout_s = 0);
  // Frees the communicators (MPI itself is finalized at process exit if we initialized it).
  void close();
  // The communicator every other one is derived from: MPI_COMM_WORLD until a reset re-formed the
  // world, then the survivors' (it outlives close(), so a later open() keeps the new world).
  MPI_Comm base() const { return base_; }
  // With fault tolerance (ULFM): revokes every communicator of this context, so every live rank's
  // pending and later operations on them fail at once (a rank blocked on one never waits for a
  // dead one). Safe from any thread. A no-op without ULFM.
  void revoke_all();
  // After a lost rank, on every survivor (collective over them): closes this context and makes the
  // base the live ranks of the old one (revoke, MPIX_Comm_shrink); the next open() derives the
  // topology of the new world. `lost_world_ranks`: the MPI_COMM_WORLD ranks that are gone.
  Status shrink_world(std::vector<int>* lost_world_ranks);
  // Adds ranks (collective over the current world): closes this context and makes the base the
  // current world followed by `request.count` new processes (transport/world_growth.h); the next
  // open() derives the topology of the grown world. A process started this way joins its parents'
  // world in its first open().
  Status grow_world(const SpawnRequest& request);
  bool is_open() const { return open_; }

  const Topology& topology() const { return topology_; }
  // World ranks sharing this node, ascending.
  const std::vector<int>& local_world_ranks() const { return local_world_ranks_; }
  MPI_Comm control() const { return control_; }  // negotiation rounds
  MPI_Comm data() const { return data_; }        // collectives
  int thread_level() const { return thread_level_; }

 private:
  Status derive_topology();
  Status split_by_node();
  Status count_host_ranks();
  Status agree_core_sharing();

  bool open_ = false;
  int thread_level_ = MPI_THREAD_SINGLE;
  double timeout_s_ = 0;  // of open(): bounds every exchange it runs
  Topology topology_;
  std::vector<int> local_world_ranks_;
  MPI_Comm base_ = MPI_COMM_WORLD;
  MPI_Comm control_ = MPI_COMM_NULL;
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm local_ = MPI_COMM_NULL;
  MPI_Comm cross_ = MPI_COMM_NULL;
};

// Error text of an MPI return code.
std::string mpi_error_string(int code);

// The status of a failed MPI call `what` (rc != MPI_SUCCESS): RELAX_ERR_MPI naming it, except
// where MPI's fault tolerance reports a lost process or a revoked communicator (ulfm.h): then the
// loss is noted (liveness.h: every other wait of this rank ends too) and RELAX_ERR_PROC_FAILED.
Status mpi_call_failed(int rc, const std::string& what);

// Collective over `comm`, for setups that must succeed on every rank or on none: returns true if
// `local_why` is empty on every rank, else false on every rank with the lowest failed rank's
// reason in `why` ("rank N: ..."). Bounded by `timeout_s` (setup_wait.h): a rank that does not
// answer makes it return false with the silence message (naming that rank and `during`) in `why`.
bool every_rank_succeeded(MPI_Comm comm, const std::string& local_why, std::string& why, double timeout_s,
                          const std::string& during);

}  // namespace relax
