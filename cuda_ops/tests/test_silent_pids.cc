// An elastic job evicts a rank that stops answering (issue #52): the core keeps the process ids of
// the ranks on this host from the world's start-up exchange, and the ids of the ranks a silence
// report found not answering, so hvd.elastic can kill them and MPI's fault tolerance report them
// lost. One rank here: its own id is the one registered, through any communicator of its world.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "check.h"
#include "transport/liveness.h"
#include "transport/lost_processes.h"
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

TEST(the_parent_of_a_process_is_read_from_proc) {
  CHECK_EQ(relax::parent_of(getpid()), getppid());
  CHECK_EQ(relax::parent_of(4194304 + 12345), pid_t{-1});  // above any pid_max: no such process
  CHECK_EQ(relax::parent_of(0), pid_t{-1});
}

namespace {

// Reaps `pid` if it ends within `seconds`: its wait status, or -1 if it is still running.
int reaped_within(pid_t pid, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status;
}

// A child of this process that stands still (SIGSTOP) until killed: a frozen rank.
pid_t stopped_child() {
  const pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  kill(child, SIGSTOP);
  return child;
}

// Checks that `survivor` exited 0 and `frozen` was SIGKILLed, each within 10 s; kills and reaps
// whichever is still there when a check failed, so nothing is left behind.
void check_survivor_and_killed(pid_t survivor, pid_t frozen) {
  const int survivor_status = reaped_within(survivor, 10);
  CHECK(survivor_status != -1 && WIFEXITED(survivor_status) && WEXITSTATUS(survivor_status) == 0);
  const int frozen_status = reaped_within(frozen, 10);
  CHECK(frozen_status != -1 && WIFSIGNALED(frozen_status) && WTERMSIG(frozen_status) == SIGKILL);
  for (const auto& [pid, status] : {std::pair{survivor, survivor_status}, std::pair{frozen, frozen_status}}) {
    if (status == -1) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
}

}  // namespace

TEST(a_lost_rank_still_alive_on_this_host_is_killed_only_where_the_same_launcher_started_it) {
  // This process stands in for the launcher: one child for a survivor, another for the frozen lost
  // rank (stopped), and the survivor's own child for a process that reused a lost rank's id.
  const pid_t frozen = stopped_child();
  const pid_t survivor = fork();
  if (survivor == 0) {
    const pid_t reused = fork();
    if (reused == 0) {
      pause();
      _exit(0);
    }
    const int signalled = relax::end_sibling_processes({frozen, 0, reused, getpid()}, "in a test");
    const bool reused_alive = kill(reused, 0) == 0 && relax::parent_of(reused) == getpid();
    kill(reused, SIGKILL);
    waitpid(reused, nullptr, 0);
    _exit(signalled == 1 && reused_alive ? 0 : 1);
  }
  check_survivor_and_killed(survivor, frozen);
}

TEST(a_silent_peer_is_evicted_by_the_same_rule_as_a_lost_one) {
  const pid_t frozen = stopped_child();
  const pid_t survivor = fork();
  if (survivor == 0) {
    const int before = relax::end_silent_processes();  // no silence noted: nothing to evict
    relax::note_peer_silence("rank 1 did not answer within a test's limit");
    relax::note_silent_pids({frozen, 0});
    _exit(before == 0 && relax::end_silent_processes() == 1 ? 0 : 1);
  }
  check_survivor_and_killed(survivor, frozen);
}
