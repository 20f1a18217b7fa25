// An elastic job evicts a rank that stops answering (issue #52): the core keeps the process ids of
// the ranks on this host from the world's start-up exchange, and the ids of the ranks a silence
// report found not answering, so hvd.elastic can kill them and MPI's fault tolerance report them
// lost. One rank here: its own id is the one registered, through any communicator of its world.
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "check.h"
#include "transport/liveness.h"
#include "transport/mpi_context.h"

TEST(the_world_start_registers_the_process_ids_of_the_ranks_on_this_host) {
  relax::MpiContext mpi;
  const relax::Status opened = mpi.open();  // a singleton MPI job of one rank
  CHECK(opened.is_ok());
  if (!opened.is_ok()) return;
  const std::vector<int64_t> own = relax::host_pids_of(mpi.data(), {0});  // data_ derives from the registered world
  CHECK_EQ(own.size(), size_t{1});
  CHECK_EQ(own[0], static_cast<int64_t>(getpid()));
  CHECK_EQ(relax::host_pids_of(mpi.control(), {}).size(), size_t{0});
}

TEST(silent_pids_are_reported_only_while_a_silence_is_noted_and_the_first_report_wins) {
  relax::forget_peer_silence_for_tests();
  relax::note_silent_pids({4242, 0});
  CHECK_EQ(relax::silent_peer_pids().size(), size_t{0});  // no silence noted: nothing to evict
  relax::note_peer_silence("rank 1 did not answer within a test's limit");
  const std::vector<int64_t> silent = relax::silent_peer_pids();
  CHECK_EQ(silent.size(), size_t{2});
  CHECK_EQ(silent[0], int64_t{4242});
  CHECK_EQ(silent[1], int64_t{0});  // a silent rank on another host
  relax::note_silent_pids({7});     // a later report does not replace the first
  CHECK_EQ(relax::silent_peer_pids().size(), size_t{2});
  relax::forget_peer_silence_for_tests();
  CHECK_EQ(relax::silent_peer_pids().size(), size_t{0});
}

TEST(lost_pids_are_those_of_the_last_re_forming_of_the_world) {
  relax::note_lost_pids({});
  CHECK_EQ(relax::lost_peer_pids().size(), size_t{0});
  relax::note_lost_pids({4242, 0});  // one lost rank on this host, one on another
  std::vector<int64_t> lost = relax::lost_peer_pids();
  CHECK_EQ(lost.size(), size_t{2});
  CHECK_EQ(lost[0], int64_t{4242});
  CHECK_EQ(lost[1], int64_t{0});
  relax::note_lost_pids({7});  // a later reset replaces them: those ranks were dealt with
  lost = relax::lost_peer_pids();
  CHECK_EQ(lost.size(), size_t{1});
  CHECK_EQ(lost[0], int64_t{7});
  relax::note_lost_pids({});
}
