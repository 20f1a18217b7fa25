// Turns the loss of a peer's process into an error on every wait of this rank, within moments.
// With fault tolerance on (ulfm.h), a thread asks MPI every kPollMs which ranks of the watched
// communicator failed; on the first loss it notes it (liveness.h: every wait that polls the note
// fails RELAX_ERR_PROC_FAILED, shared-memory and TCP rings included) and calls `on_failure`, which
// revokes the job's communicators (so MPI waits that do not involve the dead rank end too, on every
// survivor, even one that has not polled yet). relax_reset() then re-forms the world.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace relax {

class FailureWatch {
 public:
  static constexpr int kPollMs = 50;

  // Starts watching `comm` (which must stay valid until the watch is destroyed).
  FailureWatch(MPI_Comm comm, std::function<void()> on_failure);
  ~FailureWatch();  // stops the thread (within one poll)
  FailureWatch(const FailureWatch&) = delete;
  FailureWatch& operator=(const FailureWatch&) = delete;

 private:
  void run();

  MPI_Comm comm_;
  std::function<void()> on_failure_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace relax
