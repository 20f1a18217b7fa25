#include "transport/failure_watch.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "transport/liveness.h"
#include "transport/ulfm.h"
#include "util/logging.h"

namespace relax {

FailureWatch::FailureWatch(MPI_Comm comm, std::function<void()> on_failure)
    : comm_(comm), on_failure_(std::move(on_failure)) {
  thread_ = std::thread([this] { run(); });
}

FailureWatch::~FailureWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FailureWatch::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::milliseconds(kPollMs), [this] { return stopping_; })) {
    std::vector<int> lost, lost_in_comm;
    const Status s = failed_world_ranks(comm_, &lost, &lost_in_comm);
    const bool revoked = s.code == RELAX_ERR_PROC_FAILED;
    if (!revoked && lost.empty()) continue;
    // (a revoked communicator names no rank: lost is empty then)
    const std::string message = lost_ranks_text(lost) + " lost its process (reported by MPI's fault tolerance" +
                                (revoked ? ", through another survivor" : "") +
                                "); the survivors can re-form the world (hvd.elastic.run does, from the last commit)";
    RELAX_LOG(Warning, message);
    // Their processes, for end_lost_processes(): one declared failed for not answering lives on.
    if (!lost_in_comm.empty()) note_lost_pids(host_pids_of(comm_, lost_in_comm));
    note_peer_failure(message);
    if (on_failure_) on_failure_();
    return;  // one report per watch: the reset starts a new one for the new world
  }
}

}  // namespace relax
