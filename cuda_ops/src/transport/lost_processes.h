// Ends the processes of lost ranks that still exist on this host. MPI's failure detector declares a
// rank that stops answering (frozen: SIGSTOP, no heartbeat) failed without ending its process: the
// survivors go on without it, but the launcher waits for every process it started, so the job would
// never end. hvd.elastic's eviction ends a silent peer the same way before MPI declared it failed.
// Only a process the same launcher started here (its parent is this process's parent) is killed: a
// lost rank that did die may have had its process id reused since.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace relax {

// The parent process id of `pid` (/proc/<pid>/stat), or -1 when it is gone or cannot be read.
pid_t parent_of(int64_t pid);

// SIGKILL to each of `pids` (process ids of lost ranks on this host; 0 marks a rank on another host)
// that is a sibling of this process (same parent) and not this process, each logged with `why`.
// Returns how many were signalled.
int end_sibling_processes(const std::vector<int64_t>& pids, const char* why);

// end_sibling_processes for the lost ranks noted so far (liveness.h: lost_peer_pids).
int end_lost_processes();

// end_sibling_processes for the silent peers a failed wait named (liveness.h: silent_peer_pids):
// hvd.elastic's eviction, so MPI's fault tolerance reports them lost.
int end_silent_processes();

}  // namespace relax
