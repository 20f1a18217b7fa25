// Growing the world: new ranks started by MPI_Comm_spawn join the running ones (hvd.elastic's
// workers added back). The running ranks spawn and merge (spawn_and_merge, collective over them);
// each new rank merges with its parents as it starts (merge_with_parents). Both sides then hold one
// intracommunicator: the running ranks first, in their order, then the new ones.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "util/types.h"

namespace relax {

struct SpawnRequest {
  std::string command;            // the program every new rank runs (e.g. the Python interpreter)
  std::vector<std::string> argv;  // its arguments, without the program
  int count = 0;                  // how many new ranks
  std::string host;               // where to start them ("" = wherever the launcher places them)
  std::string environment;        // "NAME=value" lines set in the new ranks
};

// Collective over `base`: starts `request.count` processes and merges them with `base` into
// `*merged` (errors returned, not fatal). The spawned job's errors are named per process.
Status spawn_and_merge(MPI_Comm base, const SpawnRequest& request, MPI_Comm* merged);

// In a process started by MPI_Comm_spawn: the intracommunicator of its parents and the processes
// spawned with it (they come last); MPI_COMM_NULL in `*merged` for a process mpirun started.
Status merge_with_parents(MPI_Comm* merged);

// At exit, before MPI_Finalize: disconnects (collectively, each with the processes on its other
// side, in the order they were made) the links spawn_and_merge and merge_with_parents kept. Open
// MPI 5's MPI_Finalize otherwise waits forever for processes of another job (or crashes over them).
void disconnect_spawn_links();

}  // namespace relax
