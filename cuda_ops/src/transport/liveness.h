// Bounded waits for peers: how long a rank waits for a peer that does not answer (frozen with
// SIGSTOP, swapped out, hung in a driver), which ranks did not answer, and the process-wide note
// that one did not, so every lane stops and the process can exit without MPI_Finalize (whose
// fence would wait for the silent rank forever).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "util/types.h"

namespace relax {

// Wait limit when RELAX_OP_TIMEOUT (or RELAX_STALL_SHUTDOWN_TIME) is unset: like
// torch.distributed's default timeout, generous enough for any live peer (an engine answers
// every round within a cycle, whatever its framework thread does), short of forever.
constexpr double kDefaultPeerTimeoutSeconds = 1800.0;

// The wait limit for a configured timeout (<= 0: unset, the default above).
double peer_timeout_seconds(double configured);

// Thrown by waits deep inside a collective whose callers return void; the collective's entry
// point turns it into a Status with peer_silence_message().
struct PeerSilence {
  std::vector<int> ranks;     // world ranks that did not answer
  std::vector<int64_t> pids;  // their processes' ids (host_pids_of)
};

// World ranks (of MPI_COMM_WORLD) of `comm`'s ranks `ranks`.
std::vector<int> world_ranks_of(MPI_Comm comm, const std::vector<int>& ranks);

// The grace report_silence() listens for after a wait of `timeout` seconds: ranks stuck in the same
// wait time out within moments of each other, one stuck in a later wait at most a timeout later.
inline double silence_grace_seconds(double timeout) { return timeout < 1 ? 1 : timeout > 10 ? 10 : timeout; }

// After a wait of `timeout` seconds on `comm` expired: asks every other rank of `comm` whether it
// timed out too and, for the grace, answers the same question from the others (questions and
// answers carry this report's epoch, so a leftover from an earlier report never counts). The ranks
// that did not answer are the silent ones (a live rank stuck in a wait on `comm` answers once it
// times out too; a frozen or hung one cannot, nor can a live one stuck on another communicator,
// which the message says); if every one answered, the wait itself failed and all peers are named.
// Always takes the whole grace (and up to a second more for the answer of a peer that asked but
// has not answered yet): later askers must hear this rank. Records the silence
// (note_peer_silence, and the silent ranks' process ids: note_silent_pids) and returns the
// message, for a RELAX_ERR_STALLED status.
std::string report_silence(MPI_Comm comm, double timeout, const std::string& during);

// "rank 2 did not answer within RELAX_OP_TIMEOUT=5 s during <during>" (several ranks: "ranks
// [1, 2] did not answer ..."), `timeout` as peer_timeout_seconds() returned it.
std::string peer_silence_message(const std::vector<int>& world_ranks, double timeout, const std::string& during);

// Records that a peer's process was lost (MPI's fault tolerance reported it; failure_watch.h):
// a peer silence whose waits fail RELAX_ERR_PROC_FAILED instead of RELAX_ERR_STALLED, and which
// relax_reset() can clear once the survivors re-formed the world. Returns the recorded message.
std::string note_peer_failure(const std::string& message);
// Whether the note above was made (since the last reset).
bool peer_failure_noted();
// The status a wait returns once a silence or failure is noted: RELAX_ERR_PROC_FAILED for a
// lost process, RELAX_ERR_STALLED for a silent one, with the recorded message.
Status peer_silence_status();
// Clears a noted failure after the survivors re-formed the world (relax_reset); remembers that
// one happened, so MPI_Finalize is skipped at exit (it waits for the lost rank: open-mpi/ompi#11404).
void forget_peer_failure_after_reset();
bool peer_failure_survived();

// The process ids of the current world's ranks that run on this host (0 for the others), by rank of
// `world` (MpiContext registers them each time it forms a world; the group of `world` is kept, so
// ranks of any communicator derived from it translate). report_silence() keeps the ids of the
// ranks it found silent: what an elastic job evicts so MPI's fault tolerance reports the rank lost.
void register_host_pids(MPI_Comm world, const std::vector<int64_t>& pids);
// The registered process ids of `comm`'s ranks `ranks`: 0 for each on another host (or outside the
// registered world).
std::vector<int64_t> host_pids_of(MPI_Comm comm, const std::vector<int>& ranks);
// Keeps `pids` (host_pids_of the ranks found silent) for silent_peer_pids(), unless the pids of an
// earlier report are kept already, or a lost process was noted (the first report wins, as its
// message). Called before note_peer_silence(), so whoever learns of the silence finds them.
void note_silent_pids(const std::vector<int64_t>& pids);
// The processes the noted silence found not answering: the id of each on this host, 0 for each on
// another (empty: none noted, or every peer answered and the wait failed for another reason).
std::vector<int64_t> silent_peer_pids();
// Keeps the process ids (host_pids_of) of the ranks that re-forming the world left out, replacing
// those of the previous re-forming. A rank MPI's failure detector declared failed because it stopped
// answering (frozen: no heartbeat) is out of the world but may still exist: an elastic job kills
// those on its host after the reset, so the launcher does not wait for them at the end.
void note_lost_pids(const std::vector<int64_t>& pids);
// What note_lost_pids kept: the id of each lost rank on this host, 0 for each on another.
std::vector<int64_t> lost_peer_pids();

// Records that a peer did not answer (first message wins) and returns the recorded message.
// From then on MPI_Finalize is skipped at exit (mpi_context.cc), so the process can end, and
// mpirun ends the job; lanes that poll peer_silence_noted() stop.
std::string note_peer_silence(const std::string& message);
bool peer_silence_noted();
// Clears the note (C++ unit tests only: a noted silence would fail every later test's requests).
void forget_peer_silence_for_tests();
std::string peer_silence_reason();

}  // namespace relax
