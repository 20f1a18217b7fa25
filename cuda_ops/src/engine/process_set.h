// One process set as the engine sees it: communicators, negotiation state, collectives and the
// requests this rank submitted to it. The global set (id 0) spans every rank and borrows the
// world communicators; other sets own theirs.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/collectives.h"
#include "engine/config.h"
#include "engine/coordinator.h"
#include "engine/executor.h"
#include "engine/handles.h"
#include "engine/timeline.h"

namespace relax {

class ProcessSetState {
 public:
  ProcessSetState(int32_t id, std::vector<int> world_ranks, int rank, MPI_Comm control, MPI_Comm data,
                  bool owns_comms, HandleTable& handles, const EngineConfig& config,
                  const CollectiveConfig& collective_config, Timeline& timeline,
                  std::function<void(const std::string&)> retire);
  ~ProcessSetState();
  ProcessSetState(const ProcessSetState&) = delete;
  ProcessSetState& operator=(const ProcessSetState&) = delete;

  const int32_t id;
  const std::vector<int> world_ranks;  // ascending
  const int rank;                      // this process within the set

  MPI_Comm control() const { return control_; }
  Coordinator coordinator;
  Collectives collectives;
  Executor executor;
  PendingMap pending;                // announced, not completed
  std::vector<LocalRequest> fresh;   // submitted since the last round of this set
  std::unordered_map<std::string, double> last_stall_warning;
  double last_stall_check = 0;

  bool busy() const { return !pending.empty() || !fresh.empty(); }

 private:
  MPI_Comm control_;
  MPI_Comm data_;
  bool owns_comms_;
};

}  // namespace relax
