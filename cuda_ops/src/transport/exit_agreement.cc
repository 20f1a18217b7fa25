#include "transport/exit_agreement.h"

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/liveness.h"
#include "transport/lost_processes.h"
#include "transport/ulfm.h"
#include "util/logging.h"

namespace relax {
namespace {

constexpr int kPollMs = 2;
constexpr int kNamePolls = 1000;  // 2 s of asking which ranks failed

std::mutex g_mutex;
MPI_Comm g_world = MPI_COMM_NULL;
bool g_agreed = false;
bool g_answer = true;

}  // namespace

void set_exit_world(MPI_Comm world) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_world = world;
}

bool agree_on_exit() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_agreed) return g_answer;
  g_agreed = true;
  if (g_world == MPI_COMM_NULL || !ulfm_enabled(nullptr)) return g_answer = true;
  MPI_Comm_set_errhandler(g_world, MPI_ERRORS_RETURN);
  // A fault-tolerant agreement, not a barrier: it completes on every live rank whoever fails
  // during it, and says whether one did (an aborted barrier also prints NBC_Progress errors).
  int flag = 1;
  if (agree_comm(g_world, &flag).is_ok()) return g_answer = true;
  // Which ranks failed reaches every survivor within moments (one may have heard of the failure
  // only through a revoked communicator).
  std::vector<int> lost, lost_in_world;
  for (int poll = 0; lost.empty() && poll < kNamePolls; ++poll) {
    failed_world_ranks(g_world, &lost, &lost_in_world);
    if (lost.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
  }
  const std::string message = lost_ranks_text(lost) + " was lost before the job's end (reported by MPI's fault "
                              "tolerance; a frozen rank is declared failed after mpi_ft_detector_timeout): this "
                              "rank leaves without MPI_Finalize, which would wait for it";
  RELAX_LOG(Warning, message);
  if (!lost_in_world.empty()) note_lost_pids(host_pids_of(g_world, lost_in_world));
  note_peer_failure(message);
  end_lost_processes();
  return g_answer = false;
}

}  // namespace relax
